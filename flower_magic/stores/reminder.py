"""Repeated CLI reminders: the gentle nudges Claude Code adds every few turns, collapsed to the newest.

Claude Code (2.1.332) stores each nudge as an ``attachment`` entry and sends it back, as a
``system`` message of its own, in every later request of the session — every copy, forever:

    {"type": "attachment", "attachment": {"type": "task_reminder", "content": [], "itemCount": 0},
     "rendered": [{"content": "<system-reminder>\\nThe task tools haven't been used recently. ..."}],
     "renderedRole": "system", "uuid": ..., "parentUuid": ...}

``task_reminder`` comes every 10 requests in which the task tools were not used, ``silent_turn_reminder``
("The user hasn't heard from you in a while") every 5 tool turns without text, ``todo_reminder`` is the
older CLIs' task nudge (measured with the real CLI; tests/test_reminder.py). Each says "now" — an older
copy says nothing the newest does not, and a ten-hour run piles up hundreds of them.

Guarantees:
    - In the resume view, only the newest entry of each kind in ``REPEATING`` is left; the others are
      removed with ``prune.relink``, so the chain stays whole (their children hang from their parents).
    - The newest copy stays, so the CLI's own count of turns since its last nudge is unchanged.
    - sessions.db keeps every copy: this runs on the copy a resume gets, never on what is stored.
"""

from __future__ import annotations

from typing import Any

from flower_magic.stores.prune import relink

Entry = dict[str, Any]

REPEATING = frozenset({"task_reminder", "todo_reminder", "silent_turn_reminder"})


def reminder_kind(entry: Entry) -> str | None:
    """The kind of a repeating reminder entry, or None for any other entry."""
    if entry.get("type") != "attachment" or entry.get("isSidechain"):
        return None
    attachment = entry.get("attachment")
    kind = attachment.get("type") if isinstance(attachment, dict) else None
    return kind if kind in REPEATING else None


def collapse(entries: list[Entry]) -> tuple[list[Entry], list[str]]:
    """All but the newest copy of each repeating reminder removed; ``entries`` is not modified.

    Returns:
        The new list and the uuids removed, oldest first.
    """
    newest: dict[str, int] = {}
    for i, entry in enumerate(entries):
        kind = reminder_kind(entry)
        if kind is not None and entry.get("uuid"):
            newest[kind] = i
    drop = [
        str(entry["uuid"])
        for i, entry in enumerate(entries)
        if entry.get("uuid") and (kind := reminder_kind(entry)) is not None and newest[kind] != i
    ]
    if not drop:
        return entries, []
    return relink(entries, set(drop)), drop
