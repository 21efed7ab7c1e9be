"""The stored chain: every entry's parent is an entry of the session, whatever a resume copy added.

A transcript is one ``parentUuid`` chain. The CLI walks it back from the newest entry when it
resumes, and an entry whose parent it cannot find starts the conversation there: everything earlier
is not sent to the model (sdk-notes, "A missing parent is bridged only within 5 s"). The resume view
(``stores/prune.py``) hands the CLI a copy with entries of its own making: a *seal* after a user leaf
and a *heal* answering an orphan tool call. The CLI then writes its next real entry with one of those
as its parent, and the SDK mirrors that entry into sessions.db — where the made-up parent does not
exist. flower_magic 0.1.0 stored such entries (a second resume then lost the first turn), and the
original runtime's heals can leave them too.

Invariant, kept here:
    No stored entry names a made-up entry. A made-up id names what it hangs from
    (``seal-<parent uuid>``, ``heal-<parent uuid>``), so ``to_stored`` rewrites a link to one back to
    the real entry before the entry is stored, with nothing else to consult.

Guarantees:
    - ``to_stored`` changes only links (``parentUuid``, ``logicalParentUuid``, ``leafUuid``) that name
      a made-up id derived from a real one; every other field and every other entry is untouched.
    - ``repair`` makes a loaded session walkable again: a link naming an entry the session does not
      hold is re-pointed to the entry it stood for (by its name when it was derived; otherwise, for the
      random ids of 0.1.0 and of the original runtime, to the nearest earlier chained entry in stored
      order — the entry that was the leaf when the copy was made). The earlier turns come back.
    - Neither function modifies its input; changed entries are shallow copies.
Not guaranteed:
    - A parent lost for another reason (an entry the store never received) is bridged the same way,
      to the nearest earlier chained entry; what the missing entry said is gone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from flower_magic.core.entries import is_made_up, stands_for

Entry = dict[str, Any]

# Links a CLI entry can carry to another entry of the same transcript.
LINK_FIELDS = ("parentUuid", "logicalParentUuid", "leafUuid")


def to_stored(entries: list[Entry]) -> list[Entry]:
    """``entries`` as they may be stored: links to derived made-up ids re-pointed to the real entry."""
    out: list[Entry] | None = None
    for i, entry in enumerate(entries):
        fixed: Entry | None = None
        for name in LINK_FIELDS:
            value = entry.get(name)
            if not is_made_up(value):
                continue
            real = stands_for(value)
            if real is None:
                continue  # an old random id: repair() resolves it on load, from the stored order
            fixed = fixed if fixed is not None else dict(entry)
            fixed[name] = real
        if fixed is not None:
            out = out if out is not None else list(entries)
            out[i] = fixed
    return out if out is not None else entries


@dataclass(frozen=True)
class Relink:
    """One link ``repair`` changed: entry ``index`` (its ``uuid``), field ``name``, from ``old`` to ``new``."""

    index: int
    uuid: str | None
    name: str
    old: str
    new: str | None

    @property
    def was_made_up(self) -> bool:
        return is_made_up(self.old)


def _is_chained(entry: Entry) -> bool:
    return bool(entry.get("uuid")) and "parentUuid" in entry


def repair(entries: list[Entry]) -> tuple[list[Entry], list[Relink]]:
    """Re-point every link to an entry the session lacks; see the module docstring.

    Returns the walkable list (``entries`` itself when nothing dangles) and what was changed.
    """
    known = {uid for e in entries if isinstance(uid := e.get("uuid"), str)}
    out: list[Entry] | None = None
    changes: list[Relink] = []
    # The newest chained entry so far, per chain (a sidechain links only within its own chain).
    last: dict[bool, str] = {}
    for i, entry in enumerate(entries):
        side = bool(entry.get("isSidechain"))
        fixed: Entry | None = None
        for name in LINK_FIELDS:
            value = entry.get(name)
            if not isinstance(value, str) or value in known:
                continue
            if name != "parentUuid" and not is_made_up(value):
                continue  # a stale leaf or logical parent of the CLI's own: not ours to move
            derived = stands_for(value) if is_made_up(value) else None
            new = derived if derived in known else last.get(side)
            if new == entry.get("uuid"):
                new = None
            fixed = fixed if fixed is not None else dict(entry)
            fixed[name] = new
            uid = entry.get("uuid")
            changes.append(Relink(i, uid if isinstance(uid, str) else None, name, value, new))
        if fixed is not None:
            out = out if out is not None else list(entries)
            out[i] = fixed
            entry = fixed
        if _is_chained(entry):
            last[side] = str(entry["uuid"])
    return (out if out is not None else entries), changes


def dangling(entries: Iterable[Entry]) -> list[str]:
    """uuids of entries whose ``parentUuid`` names an entry the list lacks (empty for a walkable chain)."""
    items = list(entries)
    known = {e.get("uuid") for e in items if e.get("uuid")}
    return [str(e.get("uuid")) for e in items if isinstance(e.get("parentUuid"), str) and e["parentUuid"] not in known]
