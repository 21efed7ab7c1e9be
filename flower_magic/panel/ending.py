"""How the last run of a run dir ended, as the panel's run answer carries it (``ending``): in the words
the cell, the terminal and ``--status`` say it (``front.phrases.ending_words``), with how to continue
as a notebook's magic line (``%flower``; ``%flower --demo`` after a demo run).

The answer, or None::

    {"ending": "interrupted", "step": "干活", "style": "warn", "pill": "已打断", "headline": "…",
     "why": "", "next": "…", "next_parts": [["", "…"], ["code", "%flower"], …], "found": false}

``next_parts`` is ``next`` cut into prose and the commands in it (``code``: the magic line with the
flags and the quoted words that follow it), so the panel can show each command as one to copy; the
parts joined are ``next``.

Guarantees:
- Read-only; never raises for what is on disk (no log, a torn line, a record it cannot read: no ending,
  or what the rest of the log says).
- None while the run is live (the live strip says what is going on), and when there is no log.
- The ending is the last run's ``end`` record (the first one in its log, as ``--status`` reads it);
  a log without one is a run that went without a word: the ending ``front.launch.found_outcome``
  finds (``killed``, ``found``: true), as the next start records it. Either only while nobody holds
  the run lock (tried, ``core.runlock.held``): a run starting, or winding down, has not ended yet.
- A log part that is a symbolic link or not a regular file is not read: nothing outside the run dir
  (and so outside the server's root) is.
- The log is read once per change of its files (device, inode, size, mtime): polling an ended run
  costs two ``lstat`` calls; a live run's log is not read at all.
Not guaranteed:
- That a run ended a moment ago is seen before the next poll; the fingerprint (``RunCache``) covers
  the answer, so the poll after it answers 200, not 304.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from flower_magic.core.words import say
from flower_magic.front.outcome import Outcome
from flower_magic.front.phrases import ending_words

# The panel sits beside notebooks: the way to continue it shows is a notebook's magic line.
NOTEBOOK_CMD = "%flower"
# Run dirs whose ending is kept: a few open panels is the usual case.
CACHE_ENTRIES = 8

Identity = tuple[tuple[int, int, int, int] | None, ...]


def describe(outcome: Outcome, lang: str, *, found: bool = False) -> dict[str, Any]:
    """The panel's answer for ``outcome``, said in ``lang``.

    Args:
        found: the run left no end record of its own; the ending was found afterwards.
    """
    why, headline, next_step = ending_words(outcome, lang, NOTEBOOK_CMD)
    return {
        "ending": outcome.ending.value,
        "step": outcome.step,
        "style": outcome.style,
        "pill": say(f"pill_{outcome.ending.value}", lang),
        "headline": headline,
        "why": why,
        "next": next_step,
        "next_parts": command_parts(next_step, outcome.typed(NOTEBOOK_CMD)),
        "found": found,
    }


def command_parts(text: str, cmd: str) -> list[list[str]]:
    """``text`` as ``[kind, text]`` parts: ``code`` for each ``cmd`` in it with the flags (``--rounds 3``)
    and quoted words (``"a sentence"``) that follow it, ``""`` for the prose between. The parts joined
    are ``text``."""
    command = re.compile(re.escape(cmd) + r'(?: (?:--[A-Za-z][\w-]*(?: \d+)?|"[^"\n]*"))*')
    parts: list[list[str]] = []
    at = 0
    for found in command.finditer(text):
        if found.start() > at:
            parts.append(["", text[at : found.start()]])
        parts.append(["code", found.group()])
        at = found.end()
    if at < len(text):
        parts.append(["", text[at:]])
    return parts


def log_identity(run_dir: Path) -> Identity | None:
    """The log parts' (device, inode, size, mtime), None for a part that is not there; None in all
    when there is no log or a part is not a regular file of its own (a link, a fifo, a folder)."""
    from flower_magic.core.live import log_paths

    out: list[tuple[int, int, int, int] | None] = []
    for path in log_paths(run_dir):
        try:
            st = os.lstat(path)
        except OSError:
            out.append(None)
            continue
        if not stat.S_ISREG(st.st_mode):
            return None
        out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out) if out[-1] is not None else None  # the current part is the log


class Endings:
    """The endings of the run dirs the panel shows, each read once per change of its log and language;
    thread-safe."""

    def __init__(self, lang: str) -> None:
        self._lang = lang
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[Path, str], tuple[Identity, dict[str, Any] | None]] = OrderedDict()

    def now(self, run_dir: Path | None, *, live: bool, lang: str = "") -> dict[str, Any] | None:
        """How the last run in ``run_dir`` ended (``describe``, in ``lang``, else the language given
        when made), or None: there is none, no log, or the run is ``live`` (``live_now``'s ``live``)."""
        if run_dir is None or live:
            return None
        identity = log_identity(run_dir)
        if identity is None:
            return None
        lang = lang or self._lang
        key = (run_dir, lang)
        with self._lock:
            hit = self._kept.get(key)
        if hit is not None and hit[0] == identity:
            return hit[1]
        answer, lasting = self._read(run_dir, lang)
        if lasting:
            with self._lock:
                self._kept[key] = (identity, answer)
                self._kept.move_to_end(key)
                while len(self._kept) > CACHE_ENTRIES:
                    self._kept.popitem(last=False)
        return answer

    def _read(self, run_dir: Path, lang: str) -> tuple[dict[str, Any] | None, bool]:
        """(the answer, whether it lasts as long as the log is unchanged)."""
        from flower_magic.core import runlock
        from flower_magic.core.live import read_log
        from flower_magic.front.launch import found_outcome

        if runlock.held(run_dir):
            # A start between taking the lock and writing its first live state, a run winding down
            # after its end record, or one whose live.json cannot be read: nothing has ended yet (and
            # a log that grows on every poll is not read on every poll). Asked again next poll.
            return None, False
        records = read_log(run_dir)
        end = next((r for r in records if r["type"] == "end"), None)
        if end is not None:
            return describe(Outcome.from_record(end), lang, found=bool(end.get("found"))), True
        found = found_outcome(run_dir)
        return (describe(found, lang, found=True) if found is not None else None), True
