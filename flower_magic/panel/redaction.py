"""Keep secrets out of what the panel serves: every body is scrubbed with ``core.redaction.Redactor``
— the one redaction the notebook context and the event log use too: the server's own credentials by
value, tokens and URL passwords by shape, values given to credential names in text (an ``env`` the
agent ran: ``ANTHROPIC_AUTH_TOKEN=gw-…``), and every string under a credential-named key — before
it is sent.
"""

from __future__ import annotations

import json
from typing import Any

from flower_magic.core.redaction import MIN_SECRET_CHARS, REDACTED, Redactor

__all__ = ["MIN_SECRET_CHARS", "REDACTED", "Redactor", "dumps_redacted"]


def dumps_redacted(body: Any, redactor: Redactor) -> bytes:
    """``body`` as UTF-8 JSON with every secret string replaced.

    The common case costs one pass of ``Redactor.hits`` over the encoded text; only a body that may
    hold a secret is walked and re-encoded, so numbers and structure are never touched by a blind
    text replace (which could turn a number that equals a secret into invalid JSON).
    """
    data = _encode(body)
    if not redactor.hits(data):
        return data
    return _encode(redactor.walk(body))


def _encode(body: Any) -> bytes:
    # orjson (a dependency) encodes a 10K-row manifest several times faster; anything it refuses
    # (integers past 64 bits, non-string keys) goes to the json module (ASCII: its faster path).
    try:
        import orjson

        return orjson.dumps(body)
    except (ImportError, TypeError):
        return json.dumps(body, separators=(",", ":")).encode("ascii")
