"""Which store holds a run dir's transcripts, opened for the runtime or for a reader.

``core.storage.choose_store`` decides (the setting, ``FLOWER_SESSIONS``, the run dir's ``store.json``);
this module opens it: the SQLite file in the run dir, or ``stores.postgres.PostgresSessionStore``.

Guarantees:
    - ``open_store`` (the runtime's) records a store other than sessions.db in ``store.json`` once it
      has connected, so every later reader and run, on any machine, finds the same store.
    - ``open_reader`` creates, migrates and writes nothing; it answers None when the run dir's store
      holds nothing yet (no sessions.db, an empty database) or cannot be read.
    - The PostgreSQL driver is imported only when a run dir uses PostgreSQL.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from flower_magic.core.project import project_key
from flower_magic.core.rundir import RunDir
from flower_magic.core.storage import SESSIONS_DB, StoreLocation, choose_store, record_store, recorded_store
from flower_magic.stores.resume import PruningSessionStore
from flower_magic.stores.sqlite import SqliteSessionStore


def open_base(location: StoreLocation, sessions_db: Path, *, readonly: bool = False) -> Any:
    """The plain store at ``location`` (``sessions_db`` for SQLite)."""
    if location.is_default:
        return SqliteSessionStore(sessions_db, readonly=readonly)
    from flower_magic.stores.postgres import PostgresSessionStore

    return PostgresSessionStore(location, readonly=readonly)


def open_store(sessions_db: str | Path, *, location: StoreLocation | None = None, **kw: Any) -> PruningSessionStore:
    """The runtime's store for the run dir of ``sessions_db``, with the resume view (``kw`` as
    ``PruningSessionStore``'s). ``location``: already chosen (else ``choose_store`` with no setting).

    Raises:
        core.storage.StoreMismatch, ValueError: as ``choose_store``.
        stores.postgres.StoreUnreachable, SchemaTooNew, ImportError: PostgreSQL cannot be used.
    """
    db = Path(sessions_db)
    chosen = location or choose_store(db.parent, None)
    base = open_base(chosen, db)
    if not chosen.is_default:
        db.parent.mkdir(parents=True, exist_ok=True)
        record_store(db.parent, chosen)
    return PruningSessionStore(base, **kw)


def open_reader(run_dir: str | Path, *, sessions: str = "") -> Any | None:
    """A read-only store of ``run_dir``'s transcripts (close it), or None when there is none to read.

    The password of a PostgreSQL store comes from ``sessions`` (a run's ``--sessions``) or
    ``FLOWER_SESSIONS`` when that names the same server, database and user; else libpq finds it
    (``PGPASSWORD``, ``~/.pgpass``).
    """
    path = Path(run_dir)
    db = path / SESSIONS_DB
    recorded = recorded_store(path)
    if recorded is None or recorded.is_default:
        if not db.is_file():
            return None
        try:
            return SqliteSessionStore(db, readonly=True)
        except (OSError, ValueError, sqlite3.DatabaseError):
            return None
    try:
        location = choose_store(path, sessions or None)
    except ValueError:  # FLOWER_SESSIONS names another store: read the recorded one, with libpq's password
        location = recorded
    try:
        return open_base(location, db, readonly=True)
    except (ImportError, ConnectionError, ValueError):
        return None


def last_context_of(rundir: RunDir, session_id: str, *, sessions: str = "") -> int:
    """The last context size (tokens) the run dir's store recorded for a session; 0 if unknown."""
    store = open_reader(rundir.path, sessions=sessions)
    if store is None:
        return 0
    try:
        return int(store.last_context(project_key(rundir.workspace), session_id))
    except Exception:  # a store that fails mid-read (sqlite3.DatabaseError, psycopg.Error) knows nothing
        return 0
    finally:
        store.close()


def has_session(rundir: RunDir, session_id: str, *, sessions: str = "") -> bool:
    """Whether the run dir's store holds the main transcript of ``session_id``. Read-only."""
    store = open_reader(rundir.path, sessions=sessions)
    if store is None:
        return False
    try:
        return bool(store.has_session(project_key(rundir.workspace), session_id))
    except Exception:  # as last_context_of
        return False
    finally:
        store.close()
