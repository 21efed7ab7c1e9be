"""Keep secrets out of what the panel serves: every body is scrubbed with ``core.redaction.Redactor``
(credential-named environment values and key-shaped strings) before it is sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from flower_magic.core.redaction import MIN_SECRET_CHARS, REDACTED, Redactor

__all__ = ["MIN_SECRET_CHARS", "REDACTED", "Redactor", "dumps_redacted"]


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
