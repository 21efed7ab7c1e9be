"""Building many small objects at once (a big transcript, a long manifest) without the cyclic GC.

Decoding 100K transcript entries or 10K manifest rows allocates millions of containers; the cyclic
collector walks the growing heap again and again meanwhile and roughly doubles the time. Nothing
decoded from JSON forms a cycle, so collecting afterwards loses nothing.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


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
