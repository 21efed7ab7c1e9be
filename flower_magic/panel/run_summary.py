"""Everything the panel shows about one run directory, in one JSON-ready dict.

Guarantees:
- Read-only: nothing under the workspace is created, moved or written.
- Every file read is first resolved and checked to be under the server root (``confinement.inside``),
  so a ``manifest.json`` or ``.flower/notes`` symlinked out of the root is not read; it is reported in
  ``problems`` instead.
- Only ``ManifestUnreadable`` escapes (the table itself cannot be shown). A bad lineage.json or
  unreadable notes become a line in ``problems`` and the rest is still served.
- No absolute path is returned: paths are relative to the server root.
- ``RunCache`` answers from memory while none of the files a summary reads has changed (same
  inode, size and mtime), so a panel polling every few seconds costs a few ``stat`` calls.
- The run's live state (``live``, from ``core.live.live_state``: ``live.json`` and the run lock) is
  read on every poll, not cached: a process killed with ``kill -9`` changes no file, yet the next poll
  says it is not live. It is part of the fingerprint (``stamp``), so its change answers 200, not 304.
- The summary is said in the run's language (``lang``: its event log's start record, read once per
  change of the log), else in the panel's: its ``problems``, its ``ending``.
- How the last run ended (``ending``, ``panel.ending``: its event log's end record, or the ending found
  for a run that left none) is asked on every poll too, read only when the log changed, and is part of
  the fingerprint: a new end record, or a run killed under the panel, answers 200. The log is not one
  of the files the cached summary is made of (``_inputs``): a live run appends to it many times a
  second, which must not re-read the manifest on every poll.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flower_magic.core import live as live_files
from flower_magic.core.brief import Brief
from flower_magic.core.durable import read_capped
from flower_magic.core.goal import Goal
from flower_magic.core.lineage import ARCHIVE_NAME, MAX_LINEAGE_BYTES, Lineage
from flower_magic.core.lineage import FILENAME as LINEAGE_NAME
from flower_magic.core.rundir import (
    ARCHIVE_DIRNAME,
    BRIEF_NAME,
    DEFAULT_RUN_DIR,
    GOAL_NAME,
    NOTES_DIRNAME,
    WORKBENCH_DIRNAME,
)
from flower_magic.core.storage import SESSIONS_DB, STORE_RECORD
from flower_magic.core.words import say
from flower_magic.panel import manifest_rows
from flower_magic.panel.confinement import Refused, inside
from flower_magic.panel.ending import Endings, log_identity
from flower_magic.panel.transcript import has_store as transcript_store

NOTES_DIR = (WORKBENCH_DIRNAME, NOTES_DIRNAME)


def _rel(root: Path, path: Path) -> str:
    rel = path.relative_to(root).as_posix()
    return "" if rel == "." else rel


def _lineage(run_dir: Path, workspace: Path, lang: str) -> tuple[dict[str, Any], str | None]:
    lin = Lineage.open(run_dir, workspace)  # read-only; never raises for content
    problem = lin.problem
    if problem is not None:
        # Lineage's own wording names the other workspace's absolute path: not served.
        problem = (
            say("lab_lineage_moved", lang)
            if problem.startswith("other workspace")
            else say("lab_lineage_bad", lang, why=problem)
        )
    return {"woke": lin.woke, "steps": dict(lin.steps)}, problem


def _wake(root: Path, workspace: Path, problems: list[str], lang: str) -> dict[str, Any]:
    notes_rel = _rel(root, workspace.joinpath(*NOTES_DIR))
    facts = {"brief_complete": False, "goal_checks": 0, "has_brief": False, "has_goal": False}
    for name, key in ((BRIEF_NAME, "brief"), (GOAL_NAME, "goal")):
        path = workspace.joinpath(*NOTES_DIR, name)
        if not os.path.lexists(path):
            continue
        try:
            real = inside(root, path, hidden_ok=(notes_rel,))
        except Refused:
            problems.append(say("lab_note_outside", lang, name=name))
            continue
        if real != path:
            # A symlink to another file under the root is still not the run's own note.
            problems.append(say("lab_note_link", lang, name=name))
            continue
        facts[f"has_{key}"] = True
        if key == "brief":
            brief = Brief.load(real)
            facts["brief_complete"] = brief is not None and brief.complete()
        else:
            goal = Goal.load(real)
            facts["goal_checks"] = len(goal.checks) if goal is not None else 0
    return facts


# Where a folder's run dirs are looked for: this deep; at most this many entries read in any one folder
# (a data folder of 100,000 files must not hide the run dirs beside it) and this many folders read.
FIND_DEPTH = 3
FIND_PER_FOLDER = 1000
FIND_FOLDERS = 500
FIND_KEEP = 20
_RUN_FILES = (LINEAGE_NAME, manifest_rows.FILENAME)


def _is_run_dir(path: Path) -> bool:
    return any(os.path.isfile(path / name) for name in _RUN_FILES)


def find_run_dirs(root: Path, workspace: Path) -> list[str]:
    """The run dirs under ``workspace`` (relative ``/`` paths, ``runs`` first, then shallow before
    deep, then by name): folders holding a lineage.json or a manifest.json, at most ``FIND_DEPTH``
    deep, hidden folders and links skipped, reading at most ``FIND_PER_FOLDER`` entries of any one
    folder and ``FIND_FOLDERS`` folders in all."""
    found: list[str] = []
    if _is_run_dir(workspace / DEFAULT_RUN_DIR) and not (workspace / DEFAULT_RUN_DIR).is_symlink():
        found.append(DEFAULT_RUN_DIR)  # the default, whatever else is there
    level, read = [workspace], 0
    for _ in range(FIND_DEPTH):
        below: list[Path] = []
        for folder in level:
            if read >= FIND_FOLDERS:
                break
            read += 1
            try:
                with os.scandir(folder) as entries:
                    for count, entry in enumerate(entries):
                        if count >= FIND_PER_FOLDER:
                            break
                        if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                            continue
                        path = Path(entry.path)
                        rel = path.relative_to(workspace).as_posix()
                        if rel != DEFAULT_RUN_DIR and _is_run_dir(path):
                            found.append(rel)
                        below.append(path)
            except OSError:
                continue
        level = sorted(below)
    found.sort(key=lambda rel: (rel != DEFAULT_RUN_DIR, rel.count("/"), rel))
    return found[:FIND_KEEP]


# lineage.json's recorded workspace by the file's identity: every poll asks (for its fingerprint),
# and an unchanged file must cost one stat, not a read and a parse.
_recorded: OrderedDict[Path, tuple[tuple[int, int, int, int], str | None]] = OrderedDict()
_recorded_lock = threading.Lock()


def _recorded_workspace(run_dir: Path) -> str | None:
    path = run_dir / LINEAGE_NAME
    try:
        st = os.stat(path)
    except OSError:
        return None
    identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    with _recorded_lock:
        hit = _recorded.get(path)
    if hit is not None and hit[0] == identity:
        return hit[1]
    try:
        doc = json.loads(read_capped(path, MAX_LINEAGE_BYTES))
    except (OSError, ValueError, RecursionError):
        doc = None
    named = doc.get("workspace") if isinstance(doc, dict) else None
    recorded = named if isinstance(named, str) and named else None
    with _recorded_lock:
        _recorded[path] = (identity, recorded)
        _recorded.move_to_end(path)
        while len(_recorded) > CACHE_ENTRIES:
            _recorded.popitem(last=False)
    return recorded


def owner(root: Path, workspace: Path, run_dir: Path | None) -> Path:
    """The workspace a run dir belongs to: the folder being viewed, unless lineage.json names another
    folder under the root that holds the run dir (a run made in a sub-folder, viewed from above).
    A run dir that lies outside the folder its lineage names was copied or moved: that is reported."""
    recorded = _recorded_workspace(run_dir) if run_dir is not None else None
    if run_dir is None or recorded is None:
        return workspace
    try:
        named = Path(os.path.realpath(recorded))
        if named == workspace or not run_dir.is_relative_to(named) or not named.is_dir():
            return workspace
        return inside(root, named)
    except (Refused, OSError, ValueError):
        return workspace


def starts_over(root: Path, workspace: Path) -> list[float]:
    """When ``--new`` started this workspace over (epoch seconds, oldest first): the archive folders'
    own times (their names are in the local time of whoever ran ``--new``, which need not be this
    server's). Only folders named as ``--new`` names them, under the root, count."""
    folder = workspace.joinpath(*NOTES_DIR, ARCHIVE_DIRNAME)
    notes_rel = _rel(root, workspace.joinpath(*NOTES_DIR))
    try:
        if inside(root, folder, hidden_ok=(notes_rel,)) != folder:
            return []  # a link: not this workspace's own archive
        entries = list(os.scandir(folder))
    except (Refused, OSError):
        return []
    times = []
    for entry in entries:
        try:
            if ARCHIVE_NAME.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                times.append(entry.stat(follow_symlinks=False).st_mtime)
        except OSError:
            continue
    return sorted(times)


def summarize(root: Path, workspace: Path, run_dir: Path | None, lang: str = "zh") -> dict[str, Any]:
    """The run in ``run_dir`` (``None``: there is none) of ``workspace``, both resolved under ``root``;
    ``problems`` are said in ``lang``.

    Raises:
        ManifestUnreadable: manifest.json exists but cannot be turned into rows.
    """
    return _summarize(root, workspace, run_dir, lang)[0]


def _summarize(
    root: Path, workspace: Path, run_dir: Path | None, lang: str
) -> tuple[dict[str, Any], list[bytes] | None]:
    """``summarize``, with the manifest's row bytes when it has flower's layout (for ``rows_mark``)."""
    pieces: list[bytes] | None = None
    problems: list[str] = []
    workspace = owner(root, workspace, run_dir)
    body: dict[str, Any] = {
        "workspace": _rel(root, workspace),
        "run_dir": _rel(root, run_dir) if run_dir is not None else None,
        "has_run": run_dir is not None,
        "lineage": {"woke": 0, "steps": {}},
        "rows": [],
        "totals": manifest_rows.totals([], []),
        "problems": problems,
        "lang": lang,
    }
    body["wake"] = _wake(root, workspace, problems, lang)
    body["starts_over"] = starts_over(root, workspace)
    if run_dir is None:
        return body, pieces
    for name, handle in ((LINEAGE_NAME, "lineage"), (manifest_rows.FILENAME, "manifest")):
        path = run_dir / name
        if os.path.lexists(path):
            try:
                inside(root, path)
            except Refused:
                problems.append(say("lab_file_outside", lang, name=name))
                continue
        if handle == "lineage":
            body["lineage"], problem = _lineage(run_dir, workspace, lang)
            if problem:
                problems.append(problem)
        else:
            manifest = manifest_rows.read(path)
            if manifest is not None:
                body["rows"] = manifest.rows
                body["totals"] = manifest.totals
                pieces = manifest.pieces
                if pieces is not None:
                    body["rows_mark"] = manifest_rows.prefix_mark(pieces, len(pieces))
                if manifest.skipped:
                    problems.append(say("lab_rows_skipped", lang, n=manifest.skipped))
    body["has_sessions"] = transcript_store(run_dir)
    return body, pieces


def _inputs(root: Path, workspace: Path, run_dir: Path | None) -> list[Path]:
    notes_dir = owner(root, workspace, run_dir).joinpath(*NOTES_DIR)
    files = [notes_dir / BRIEF_NAME, notes_dir / GOAL_NAME, notes_dir / ARCHIVE_DIRNAME]
    if run_dir is not None:
        files += [
            run_dir / LINEAGE_NAME,
            run_dir / manifest_rows.FILENAME,
            run_dir / SESSIONS_DB,
            run_dir / STORE_RECORD,
        ]
    return files


def stamp(root: Path, workspace: Path, run_dir: Path | None) -> str:
    """A short fingerprint of every file ``summarize`` reads; it changes whenever one of them does."""
    parts = [str(workspace), str(run_dir)]
    for path in _inputs(root, workspace, run_dir):
        try:
            st = os.stat(path)
        except OSError:
            parts.append("-")
        else:
            parts.append(f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha1("|".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:24]


# What the panel's live strip is given of ``live.json`` (``LiveState``): not ``n`` or ``run``, which
# only followers of the event log use.
LIVE_FIELDS = ("state", "live", "step", "round", "asks", "pid", "front_end", "since", "updated")


def live_now(run_dir: Path | None) -> dict[str, Any] | None:
    """The run's live state as the panel shows it, or None when there is none (no run dir, no
    ``live.json``, or one that cannot be read or is linked out of the root). ``live`` is True only
    while the process that wrote it holds the run lock. Costs one small read and the lock's."""
    if run_dir is None:
        return None
    try:
        st = os.lstat(run_dir / live_files.LIVE_NAME)
    except OSError:
        return None
    # ``run_dir`` is resolved under the root already: a regular file in it is under the root too. A
    # link (even to a file under the root), a folder or a fifo is not this run's own state.
    if not stat.S_ISREG(st.st_mode):
        return None
    state = live_files.live_state(run_dir)
    if state is None:
        return None
    return {name: getattr(state, name) for name in LIVE_FIELDS}


def live_mark(live: dict[str, Any] | None, ending: dict[str, Any] | None = None) -> str:
    """A short fingerprint of ``live_now``'s answer and the ending's, for the poll's ``ETag``."""
    text = json.dumps([live, ending], sort_keys=True, default=str)
    return hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()[:8]


# Run dirs whose encoded summaries are kept; a few open panels is the usual case.
CACHE_ENTRIES = 8


class RunCache:
    """Run summaries keyed by their inputs' fingerprint (see ``stamp``), encoded; thread-safe.

    A client that holds the rows of an earlier summary sends their ``rows_mark``; while those rows are
    unchanged (the usual case: a run appends), it gets only the rows after them (``rows_from``), so a
    poll of a 10,000-row run costs the new rows, not the whole table.
    """

    def __init__(self, encode: Callable[[dict[str, Any]], bytes], lang: str = "zh") -> None:
        self._encode = encode
        self._lang = lang
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[Path, Path | None], _Entry] = OrderedDict()
        self._endings = Endings(lang)
        self._langs: OrderedDict[Path, tuple[Any, str | None]] = OrderedDict()

    def run_lang(self, run_dir: Path | None) -> str | None:
        """The language the run dir's last run spoke (``core.live.run_lang``: its log's start record),
        read once per change of its log; None without a log of its own (none, a link, not a file)."""
        if run_dir is None:
            return None
        identity = log_identity(run_dir)
        if identity is None:
            return None
        with self._lock:
            hit = self._langs.get(run_dir)
        if hit is not None and hit[0] == identity:
            return hit[1]
        lang = live_files.run_lang(run_dir)
        with self._lock:
            self._langs[run_dir] = (identity, lang)
            self._langs.move_to_end(run_dir)
            while len(self._langs) > CACHE_ENTRIES:
                self._langs.popitem(last=False)
        return lang

    def get(
        self, root: Path, workspace: Path, run_dir: Path | None, *, known: str = "", have: str = "", lang: str = ""
    ) -> tuple[str, bytes | None]:
        """(fingerprint, encoded summary); the summary is ``None`` when ``known`` is still current, and
        holds only the rows after the first ``n`` when ``have`` is their current ``rows_mark``. The
        summary's ``live`` is read now (``live_now``), its ``ending`` asked now (``Endings.now``); the
        fingerprint covers both. It is said in the run's language (``run_lang``), else ``lang`` (the
        panel's), else the one given when made; ``lang`` in the summary says which.

        Raises:
            ManifestUnreadable: as ``summarize``; nothing is cached then.
        """
        lang = self.run_lang(run_dir) or lang or self._lang
        files = f"{stamp(root, workspace, run_dir)}:{lang}"
        live = live_now(run_dir)
        ending = self._endings.now(run_dir, live=bool(live and live["live"]), lang=lang)
        tag = f"{files}-{live_mark(live, ending)}"
        if tag == known:
            return tag, None
        key = (workspace, run_dir)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None and hit.tag == tag:
                self._entries.move_to_end(key)
        if hit is None or hit.tag != files:
            body, pieces = _summarize(root, workspace, run_dir, lang)
            hit = _Entry(files, self._encode(body), body, pieces)
            with self._lock:
                self._entries[key] = hit
                self._entries.move_to_end(key)
                while len(self._entries) > CACHE_ENTRIES:
                    self._entries.popitem(last=False)
        return tag, hit.tail(have, self._encode, {"live": live, "ending": ending, "stamp": tag})


@dataclass(frozen=True)
class _Entry:
    tag: str
    encoded: bytes  # the summary without ``live``, ``ending`` and ``stamp``, which change without its files
    body: dict[str, Any]
    pieces: list[bytes] | None

    def tail(self, have: str, encode: Callable[[dict[str, Any]], bytes], extra: dict[str, Any]) -> bytes:
        """The whole summary, or only the rows after the ``n`` that ``have`` (a ``rows_mark``) names
        when those are unchanged; with ``extra``'s fields either way."""
        count_text, _, _ = have.partition(":")
        count = int(count_text) if count_text.isdigit() and len(count_text) <= 9 else 0
        pieces = self.pieces
        if pieces is not None and 0 < count <= len(pieces) and manifest_rows.prefix_mark(pieces, count) == have:
            return encode({**self.body, **extra, "rows": self.body["rows"][count:], "rows_from": count})
        # The cached encoding with the extra fields spliced in: a poll whose only news is the live
        # state must not re-encode a 10,000-row table. Both are compact JSON objects (``{...}``).
        return self.encoded[:-1] + b"," + encode(extra)[1:]
