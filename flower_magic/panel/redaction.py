"""Keep secrets out of what the panel serves.

Guarantees:
- The value of every environment variable whose name looks like a credential (``*KEY*``,
  ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ``*CREDENTIAL*``), as seen when the ``Redactor`` is
  built, is replaced by ``[redacted]`` wherever it occurs in a served body, even inside transcript
  text that happened to echo it (an agent that ran ``env``).
- Anything shaped like an Anthropic key (``sk-ant-…``) is replaced too, whoever it belongs to.

Not guaranteed:
- Values shorter than ``MIN_SECRET_CHARS`` are left alone: replacing ``"1"`` everywhere would wreck
  the data and protect nothing.
- Secrets that are not in this process's environment and not key-shaped are unknown here.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

# Below this length a value is too likely to be an ordinary word or number to scrub blindly.
MIN_SECRET_CHARS = 8
REDACTED = "[redacted]"

_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", re.IGNORECASE)
_KEY_SHAPED = re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}")


class Redactor:
    """Replaces known secret values and key-shaped strings in text."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        values = {v for k, v in env.items() if _SECRET_NAME.search(k) and len(v) >= MIN_SECRET_CHARS}
        # Bodies are redacted after JSON encoding, where a value with quotes, backslashes or
        # non-ASCII characters appears escaped: look for both spellings.
        values |= {json.dumps(v, ensure_ascii=as_ascii)[1:-1] for v in values for as_ascii in (True, False)}
        # Longest first, so a secret that contains another is replaced whole.
        self._values = sorted(values, key=len, reverse=True)
        self._encoded = [v.encode("utf-8", "surrogatepass") for v in self._values]

    def hits(self, data: bytes) -> bool:
        """Whether UTF-8 ``data`` holds a known secret (in either spelling) or anything key-shaped."""
        return b"sk-ant-" in data or any(v in data for v in self._encoded)

    def __call__(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, REDACTED)
        return _KEY_SHAPED.sub(REDACTED, text)


def _walk(value: Any, scrub: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub(str(k)): _walk(v, scrub) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, scrub) for v in value]
    return value


def dumps_redacted(body: Any, redactor: Redactor) -> bytes:
    """``body`` as UTF-8 JSON with every secret string replaced.

    The common case costs one substring search per secret over the encoded text; only a body that
    holds a secret is walked and re-encoded, so numbers and structure are never touched by a blind
    text replace (which could turn a number that equals a secret into invalid JSON).
    """
    data = _encode(body)
    if not redactor.hits(data):
        return data
    return _encode(_walk(body, redactor))


def _encode(body: Any) -> bytes:
    # orjson (a dependency) encodes a 10K-row manifest several times faster; anything it refuses
    # (integers past 64 bits, non-string keys) goes to the json module (ASCII: its faster path).
    try:
        import orjson

        return orjson.dumps(body)
    except (ImportError, TypeError):
        return json.dumps(body, separators=(",", ":")).encode("ascii")
