"""Decoding a lot of JSON (a big transcript, a long manifest) fast and exactly.

- ``gc_paused``: decoding 100K transcript entries or 10K manifest rows allocates millions of
  containers; the cyclic collector walks the growing heap again and again meanwhile and roughly
  doubles the time. Nothing decoded from JSON forms a cycle, so collecting afterwards loses nothing.
- ``orjson_is_exact``: orjson (several times faster than the json module) silently turns an integer
  literal too big for 64 bits into a float; such text must go to the json module instead.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# Any integer literal past 64 bits has 19 or more digits in a row (so do a few that fit: those
# merely take the slower, exact path).
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGIT_RUN = b"0" * 19


def orjson_is_exact(data: bytes) -> bool:
    """Whether orjson reads ``data`` as the json module would, integers included."""
    return _LONG_DIGIT_RUN not in data.translate(_DIGITS_TO_ZERO)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Collection off for the block, back on after it if it was on (nested and threaded use is safe:
    whoever found it on turns it back on)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
