"""Secrets, as flower recognises them: the values of credential-named environment variables and
anything shaped like an Anthropic key. The panel scrubs what it serves with it (``panel.redaction``),
the notebook context what it gives the agent (``core.notebook``).

Guarantees:
- The value of every environment variable whose name looks like a credential (``*KEY*``,
  ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ``*CREDENTIAL*``), as seen when the ``Redactor`` is
  built, and every extra value it is given, is replaced by ``[redacted]`` wherever it occurs, even
  inside transcript text that happened to echo it (an agent that ran ``env``).
- Anything shaped like an Anthropic key (``sk-ant-…``) is replaced too, whoever it belongs to.

Not guaranteed:
- Values shorter than ``MIN_SECRET_CHARS`` are left alone: replacing ``"1"`` everywhere would wreck
  the data and protect nothing.
- Secrets that are not in this process's environment, not given and not key-shaped are unknown here.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping

# Below this length a value is too likely to be an ordinary word or number to scrub blindly.
MIN_SECRET_CHARS = 8
REDACTED = "[redacted]"

_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", re.IGNORECASE)
_KEY_SHAPED = re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}")


def secret_env_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential (``ANTHROPIC_API_KEY``)."""
    return _SECRET_NAME.search(name) is not None


class Redactor:
    """Replaces known secret values and key-shaped strings in text.

    Args:
        environ: the environment whose credential-named values are secret (default ``os.environ``).
        values: more secret values (a notebook variable that holds a password).
    """

    def __init__(self, environ: Mapping[str, str] | None = None, *, values: Iterable[str] = ()) -> None:
        env = os.environ if environ is None else environ
        found = {v for k, v in env.items() if secret_env_name(k) and len(v) >= MIN_SECRET_CHARS}
        found |= {v for v in values if len(v) >= MIN_SECRET_CHARS}
        # Bodies are redacted after JSON encoding, where a value with quotes, backslashes or
        # non-ASCII characters appears escaped: look for both spellings.
        found |= {json.dumps(v, ensure_ascii=as_ascii)[1:-1] for v in found for as_ascii in (True, False)}
        # Longest first, so a secret that contains another is replaced whole.
        self._values = sorted(found, key=len, reverse=True)
        self._encoded = [v.encode("utf-8", "surrogatepass") for v in self._values]

    def hits(self, data: bytes) -> bool:
        """Whether UTF-8 ``data`` holds a known secret (in either spelling) or anything key-shaped."""
        return b"sk-ant-" in data or any(v in data for v in self._encoded)

    def holds(self, text: str) -> bool:
        """Whether ``text`` holds a known secret or anything key-shaped (what ``__call__`` would change)."""
        return ("sk-ant-" in text and _KEY_SHAPED.search(text) is not None) or any(v in text for v in self._values)

    def __call__(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, REDACTED)
        return _KEY_SHAPED.sub(REDACTED, text)
