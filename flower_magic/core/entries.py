"""Facts about transcript entries that the engine and the stores share.

A resume copy may hold entries of flower's own making: a *seal* after a user leaf and a *heal*
answering an orphan tool call (stores/prune.py). Each is named after the real entry it hangs from
(``seal-<parent uuid>``), so anything that meets such an id can tell what it stands for
(stores/chain.py keeps the stored chain free of them; core/local_copy.py never copies them back).
"""

from __future__ import annotations

import re
from typing import TypeGuard

SEAL, HEAL = "seal", "heal"
MADE_UP_PREFIXES = (f"{SEAL}-", f"{HEAL}-")
PREFIX_CHARS = 5  # len("seal-") == len("heal-")
# 0.1.0 and the original runtime named made-up entries with 12 random hex characters.
_RANDOM_SUFFIX = re.compile(r"[0-9a-f]{12}")


def made_up_id(kind: str, parent: str) -> str:
    """The id of a seal or heal hanging from ``parent`` (stable: the same copy twice gets the same id)."""
    return f"{kind}-{parent}"


def is_made_up(uid: object) -> TypeGuard[str]:
    return isinstance(uid, str) and uid.startswith(MADE_UP_PREFIXES)


def stands_for(uid: str) -> str | None:
    """The real entry a made-up id hangs from, read from the id alone; None for a random (old) id."""
    while is_made_up(uid):
        rest = uid[PREFIX_CHARS:]
        if _RANDOM_SUFFIX.fullmatch(rest):
            return None
        uid = rest
    return uid or None


_SESSION_ID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def is_session_id(value: object) -> bool:
    """A session id the Claude Code CLI accepts (a UUID); it refuses anything else to resume or start."""
    return isinstance(value, str) and _SESSION_ID.fullmatch(value) is not None
