"""What a person changed in 需求.md / 目标.md by hand, and how a run takes it in.

The steps that own the notes (clarify, the goal step) read them as their run starts (``core.note``
says whose bytes they are). A person's version is never replaced without a copy; what it says goes to
the model as written; and the person is told in one line, from the phrase table, what was done with it.

Guarantees:
    - Nothing here writes before the workflow runs: notes are judged in a step's ``when`` or gate,
      records are written in gates, after the model answered.
    - A person's version is taken in once: ``hand_over`` lists it in ctx, and ``taken_in`` marks it
      seen only after the worker had a good attempt with it in its prompt. A run that dies first
      leaves it news, so the next run says it and sends it again.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from flower_magic.core.errors import logged
from flower_magic.core.events import Event
from flower_magic.core.note import Note, read_note
from flower_magic.core.words import say, short_path

log = logging.getLogger(__name__)

EDITS_KEY = "_note_edits"  # the notes whose person's version this run hands to the model


def tell(ctx: dict[str, Any], lang: str, key: str, *, path: Path, aside: Path | None = None) -> None:
    """One line to the person (a ``task`` event every front end prints) about their edit of ``path``."""
    sink = ctx.get("_on_event")
    if sink is None:
        return
    fields = {"name": path.name, "path": str(path), "aside": str(aside) if aside else ""}
    shown = {"path": said_path(ctx, path), "aside": said_path(ctx, aside) if aside else ""}
    with logged(log, "tell"):
        text = say(key, lang, name=path.name, path=shown["path"], aside=shown["aside"])
        sink(Event("task", text, payload={"kind": "note_edit", "note": key, **fields}))


def said_path(ctx: dict[str, Any], path: Path) -> str:
    """``path`` as a person reads it in this run's views: relative to its workspace (``short_path``)."""
    return short_path(path, getattr(ctx.get("_runtime"), "workspace", None))


def tell_kept(ctx: dict[str, Any], lang: str, path: Path, aside: Path | None) -> None:
    """Tell the person their version of ``path`` was kept as ``aside`` (nothing when ``aside`` is None)."""
    if aside is not None:
        key = "note_kept" if read_note(aside) is not None else "note_kept_unreadable"
        tell(ctx, lang, key, path=path, aside=aside)


def hand_over(ctx: dict[str, Any], note: Note) -> None:
    """``note``'s person's version goes to the model in this run; mark it seen once that happened."""
    ctx.setdefault(EDITS_KEY, []).append(note)


def taken_in(ctx: dict[str, Any]) -> None:
    """The worker had a good attempt: every version handed over is now seen."""
    for note in ctx.pop(EDITS_KEY, []):
        note.mark_seen()
