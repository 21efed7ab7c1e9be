"""Manifest rows as ``json.dumps(indent=2, ensure_ascii=False)`` writes them, one row at a time.

json.dumps with an indent runs in pure Python (~30 µs a row) and only encodes whole documents.
``encode_row`` writes the same text for a row nested one level in the array, so ``core.manifest``
encodes only this run's rows and copies every other run's rows from the file as bytes. Non-finite
floats become ``null`` (NaN is not JSON).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from json.encoder import encode_basestring
from typing import Any

_enc_str = encode_basestring


def _key_text(key: object) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, int, float)):
        return _json(key, "")
    return str(key)


def _json(value: Any, indent: str) -> str:
    if isinstance(value, str):
        return _enc_str(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return float.__repr__(value) if math.isfinite(value) else "null"
    inner = indent + "  "
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = (f"{inner}{_enc_str(_key_text(k))}: {_json(v, inner)}" for k, v in value.items())
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        return "[\n" + ",\n".join(inner + _json(v, inner) for v in value) + f"\n{indent}]"
    return _enc_str(str(value))


def encode_row(row: Mapping[str, Any]) -> bytes:
    """One manifest row as the original writes it inside the array (indent 2, keys in order), as UTF-8."""
    # backslashreplace turns a lone surrogate into the JSON escape for the same code unit.
    return _json(dict(row), "  ").encode("utf-8", "backslashreplace")
