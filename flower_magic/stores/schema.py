"""Opening sessions.db: the original flower schema, WAL, a busy timeout, recovery from a corrupt file.

Guarantees:
    - WAL on a local disk; a rollback journal (``journal_mode=DELETE``) when the caller says the file
      is on a network filesystem, where WAL's shared memory does not work (``core.mount``).
    - The schema is the original flower's (tables ``entries``, ``meta``, ``summaries`` and the partial
      unique index ``entries_uid``), created if missing; a file written by either opens in the other.
    - A writable open of a file that is not a database moves it (and its ``-wal``/``-shm``) aside under
      a timestamped name and starts a fresh store; a read-only open never creates or changes anything.
    - A writable open refuses (``durable.IsALink``) a store, ``-wal``, ``-shm`` or ``-journal`` that is
      a symbolic link: SQLite would write through it.
"""

from __future__ import annotations

import errno
import logging
import sqlite3
from pathlib import Path

from flower_magic.core.durable import refuse_link, set_aside
from flower_magic.core.rundir import SQLITE_SIDE_SUFFIXES as SIDE_SUFFIXES

log = logging.getLogger("flower_magic.stores.sqlite")

# Another process's append holds the write lock for milliseconds (a 100K-entry batch for about a
# second); 10 s rides out both before an append fails and the SDK has to retry it.
BUSY_TIMEOUT_S = 10.0

_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries(
    store_key TEXT NOT NULL, seq INTEGER NOT NULL, uid TEXT, payload TEXT NOT NULL,
    PRIMARY KEY(store_key, seq));
CREATE UNIQUE INDEX IF NOT EXISTS entries_uid ON entries(store_key, uid) WHERE uid IS NOT NULL;
CREATE TABLE IF NOT EXISTS meta(
    store_key TEXT PRIMARY KEY, mtime INTEGER NOT NULL, next_seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS summaries(
    project_key TEXT NOT NULL, session_id TEXT NOT NULL, mtime INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY(project_key, session_id));
"""
TABLES = frozenset({"entries", "meta", "summaries"})
JOURNAL_MODES = ("WAL", "DELETE")


def _is_corrupt(exc: sqlite3.DatabaseError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    text = str(exc)
    return "file is not a database" in text or "malformed" in text


def _connect(path: Path, target: str, *, uri: bool) -> sqlite3.Connection:
    try:
        # isolation_level=None: we issue BEGIN IMMEDIATE ourselves; sqlite3's implicit deferred
        # transactions could fail to upgrade to a write lock without waiting.
        return sqlite3.connect(target, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None, uri=uri)
    except sqlite3.OperationalError as exc:
        message = f"cannot open the session store {path}: {exc}"
        raise OSError(errno.EIO, message, str(path)) from exc


def open_writable(path: Path, *, journal: str = "WAL") -> tuple[sqlite3.Connection, Path | None]:
    """Open (creating, migrating, or recovering from a corrupt file) a store for writing.

    Args:
        journal: ``WAL``, or ``DELETE`` (a rollback journal) for a file on a network filesystem.

    Returns the connection and where a corrupt file was moved (or None).
    """
    if journal not in JOURNAL_MODES:
        raise ValueError(f"journal must be one of {JOURNAL_MODES}, not {journal!r}")
    # SQLite opens the store and the files beside it by name, following links: a linked -wal would
    # take the store's pages into whatever it points to. Preflight refuses these; this is the writer's own check.
    for name in (path, *(path.with_name(path.name + side) for side in SIDE_SUFFIXES)):
        refuse_link(name)
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise type(exc)(
            exc.errno,
            f"cannot create the folder for the session store {path}: {exc.strerror}; pick a writable run dir",
            str(folder),
        ) from exc
    try:
        return _prepare(_connect(path, str(path), uri=False), journal), None
    except sqlite3.DatabaseError as exc:
        if not _is_corrupt(exc):
            raise
        recovered_from = set_aside(path, "corrupt")
        if recovered_from is None:
            raise OSError(
                errno.EIO,
                f"the session store {path} is unreadable ({exc}) and could not be moved aside; "
                "move or delete it, then run again",
                str(path),
            ) from exc
        for suffix in ("-wal", "-shm"):
            side = path.with_name(path.name + suffix)
            if side.exists():
                set_aside(side, "corrupt")
        log.warning(
            "%s was not a readable SQLite database (%s); moved it to %s and started a fresh store",
            path,
            exc,
            recovered_from,
        )
        return _prepare(_connect(path, str(path), uri=False), journal), recovered_from


def _prepare(db: sqlite3.Connection, journal: str) -> sqlite3.Connection:
    try:
        db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        # Persistent in the file: a store made in WAL on a local disk and then moved to a network one
        # is switched back to a rollback journal here (and the other way round).
        db.execute(f"PRAGMA journal_mode = {journal}").fetchone()
        db.execute("PRAGMA synchronous = FULL")
        db.executescript(SCHEMA)
    except BaseException:
        db.close()
        raise
    return db


def open_readonly(path: Path) -> sqlite3.Connection:
    """Open an existing store read-only; never creates or changes anything."""
    if not path.is_file():
        raise FileNotFoundError(
            errno.ENOENT,
            f"no session store at {path}; readonly=True never creates one (run a step first, or check the run dir)",
            str(path),
        )
    db = _connect(path, path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        db.close()
        raise ValueError(f"{path} is not a readable session store: {exc}") from exc
    if not tables >= TABLES:
        db.close()
        raise ValueError(f"{path} is not a session store (it lacks {sorted(TABLES - tables)})")
    return db
