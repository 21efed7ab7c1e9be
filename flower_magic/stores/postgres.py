"""PostgresSessionStore: every transcript of a run in a PostgreSQL database a team already runs.

The same contract as ``stores.sqlite.SqliteSessionStore`` (the SDK's ``SessionStore`` plus the
engine's synchronous reads, ``core.storage.RunStore``), so ``stores.resume.PruningSessionStore``
wraps either without knowing which. Shaped after the SDK's reference adapter
(``examples/session_stores/postgres_session_store.py``): one table of entries keyed by project key,
session, subpath and order; an append is idempotent on the entry's uuid.

Driver: psycopg 3 (``pip install flower_magic[postgres]``). It speaks both synchronously and
asynchronously, and the engine needs the synchronous side (``load_sync``, ``has_session`` between
steps, the panel's and ``--status``' reads, none of which run in an event loop); the async methods run
it in a worker thread, as the SQLite store does, so both stores have one shape. Its binary wheel
carries libpq, so nothing but pip is needed on a notebook image.

Schema (version ``SCHEMA_VERSION``; every table prefixed ``flower_``)::

    flower_schema(version, applied_at)          one row per migration applied
    flower_entries(project_key, session_id, subpath, seq, uid, payload)   PK (project_key, session_id, subpath, seq)
        unique (project_key, session_id, subpath, uid) where uid is not null
    flower_sessions(project_key, session_id, subpath, mtime, next_seq)    one row per transcript
    flower_summaries(project_key, session_id, mtime, data)                the SDK's summary sidecar

Guarantees:
    - ``payload`` is the entry as ``stores.rows.ENCODER`` writes it (ASCII JSON, ``text``, not
      ``jsonb``): ``load`` returns entries deep-equal to what was appended (integers past 64 bits, NaN,
      lone surrogates and NUL characters included, which ``jsonb`` refuses or reorders).
    - An entry ``uuid`` is stored at most once per key, in a batch or across replays; entries without a
      uuid are always appended. A batch with nothing new changes nothing (not ``mtime``, not the summary).
    - Appends to one key from any number of processes and machines never collide: the transcript's
      ``flower_sessions`` row is locked (``FOR UPDATE``) for the dedupe, the ``seq`` read and the insert,
      in one transaction; ``seq`` runs 0, 1, 2, ... in append order. Once ``append`` returns, its batch
      is committed.
    - ``mtime`` is integer epoch milliseconds, strictly increasing across the appends of one store
      instance and, for one key, across instances, processes and machines.
    - Migrations: opening a writable store brings the schema up to ``SCHEMA_VERSION`` in one
      transaction under an advisory lock (two processes opening at once migrate once). A database
      whose schema is newer than this flower knows is refused (``SchemaTooNew``), never written.
    - ``readonly=True`` never creates, migrates or writes anything (every session it opens is
      ``read only``).
    - The connection URL's password is never in a message, ``repr`` or log line from this module
      (``location.redacted`` is what is shown).
Not guaranteed:
    - ``mtime`` order between different keys written by different instances.
    - Retention: nothing is ever deleted but by ``delete``.
    - The async methods need an asyncio event loop (they use ``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from flower_magic.core.storage import StoreLocation
from flower_magic.stores.rows import ENCODER, ThreadedReads, context_tokens, decode, summary_from_row

if TYPE_CHECKING:
    import psycopg
    from claude_agent_sdk.types import (
        SessionKey,
        SessionListSubkeysKey,
        SessionStoreEntry,
        SessionStoreListEntry,
        SessionSummaryEntry,
    )

    from flower_magic.stores.chain import Relink

# The newest schema this module writes; MIGRATIONS[v - 1] brings a database from v - 1 to v.
SCHEMA_VERSION = 1
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE flower_entries(
        project_key text NOT NULL, session_id text NOT NULL, subpath text NOT NULL DEFAULT '',
        seq bigint NOT NULL, uid text, payload text NOT NULL,
        PRIMARY KEY (project_key, session_id, subpath, seq));
    CREATE UNIQUE INDEX flower_entries_uid ON flower_entries(project_key, session_id, subpath, uid)
        WHERE uid IS NOT NULL;
    CREATE TABLE flower_sessions(
        project_key text NOT NULL, session_id text NOT NULL, subpath text NOT NULL DEFAULT '',
        mtime bigint NOT NULL, next_seq bigint NOT NULL,
        PRIMARY KEY (project_key, session_id, subpath));
    CREATE TABLE flower_summaries(
        project_key text NOT NULL, session_id text NOT NULL, mtime bigint NOT NULL, data text NOT NULL,
        PRIMARY KEY (project_key, session_id));
    """,
)
# Any constant both openers agree on: pg_advisory_xact_lock serialises concurrent migrations.
MIGRATION_LOCK_ID = 0x666C6F776572  # "flower"
# A notebook opens one store per run; the mirror's flushes, the engine's reads between steps and a
# panel page can overlap, and a few connections serve them without queueing on each other.
POOL_MAX_CONNECTIONS = 4
# An unreachable or misconfigured server says so within this long instead of hanging a cell.
CONNECT_TIMEOUT_S = 10.0
# The same window as the SQLite store (stores.sqlite.LAST_CONTEXT_SCAN_ENTRIES).
LAST_CONTEXT_SCAN_ENTRIES = 60


class StoreUnreachable(ConnectionError):
    """The database cannot be reached or refused us. The message names it without credentials.

    Attributes:
        where: the store's location, redacted (``postgresql://user@host:port/db``).
        why: what the driver said (it never carries the password).
    """

    def __init__(self, where: str, why: str) -> None:
        self.where, self.why = where, why
        super().__init__(f"cannot use the session store {where}: {why}")


class SchemaTooNew(StoreUnreachable):
    """The database was migrated by a newer flower; this one would misread it.

    Attributes:
        found: the database's schema version.
    """

    def __init__(self, where: str, found: int) -> None:
        self.found = found
        newer = f"schema version {found}, this flower knows up to {SCHEMA_VERSION}: upgrade flower_magic"
        super().__init__(where, newer)


def _parts(key: SessionKey | SessionListSubkeysKey) -> tuple[str, str, str]:
    return key["project_key"], key["session_id"], cast("str", key.get("subpath") or "")


def _uid(entry: SessionStoreEntry) -> str | None:
    uid = entry.get("uuid")
    return uid if isinstance(uid, str) and uid else None


class PostgresSessionStore(ThreadedReads):
    """A claude-agent-sdk ``SessionStore`` in PostgreSQL.

    Args:
        location: where (``core.storage.StoreLocation.parse("postgresql://...")``); its password, if
            any, is used to connect and shown nowhere. Without one, libpq's own sources apply
            (``PGPASSWORD``, ``~/.pgpass``).
        readonly: read only: no schema is created or migrated, every session is read-only.

    Raises:
        ImportError: psycopg is not installed (the message gives the pip command).
        StoreUnreachable: the server cannot be reached, refuses the login, or (read-only) holds no
            flower schema.
        SchemaTooNew: the database was migrated by a newer flower.
    """

    kind = "postgresql"

    def __init__(self, location: StoreLocation, *, readonly: bool = False) -> None:
        try:
            import psycopg
            from psycopg_pool import ConnectionPool
        except ImportError as exc:
            raise ImportError(
                "the PostgreSQL session store needs psycopg: pip install 'flower_magic[postgres]'"
            ) from exc
        self.location = location
        self.is_readonly = readonly
        self._lock = threading.Lock()
        self._last_mtime = 0

        # One direct connection first: a wrong password or host is said at once, in libpq's words
        # (a pool would only time out), and the schema is checked or migrated before anything is read.
        try:
            with psycopg.connect(location.conninfo(), **_connect_kwargs()) as conn:
                conn.read_only = readonly
                self._prepare(conn)
        except psycopg.Error as exc:
            raise StoreUnreachable(location.redacted, _why(exc)) from None

        def configure(conn: psycopg.Connection[Any]) -> None:
            conn.read_only = readonly

        # The pool's name shows in its log lines: the redacted location, never the URL.
        self._pool: Any = ConnectionPool(
            location.conninfo(),
            min_size=1,
            max_size=POOL_MAX_CONNECTIONS,
            kwargs=_connect_kwargs(),
            configure=configure,
            name=location.redacted,
            open=True,
        )

    @staticmethod
    def _pool_errors() -> tuple[type[BaseException], ...]:
        from psycopg_pool import PoolTimeout

        return (PoolTimeout,)

    # -- plumbing --------------------------------------------------------------------------------

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection inside one transaction (committed on success, rolled back otherwise)."""
        if self._pool is None or self._pool.closed:
            raise ValueError(f"the session store {self.location.redacted} is closed")
        try:
            with self._pool.connection(timeout=CONNECT_TIMEOUT_S) as conn:
                yield conn
        except self._pool_errors() as exc:
            raise StoreUnreachable(self.location.redacted, _why(exc)) from None

    def _prepare(self, conn: psycopg.Connection[Any]) -> None:
        with conn.transaction():
            found = conn.execute("SELECT to_regclass('flower_schema') IS NOT NULL").fetchone()
            has_table = bool(found and found[0])
            if self.is_readonly:
                version = self._version(conn) if has_table else 0
                if version == 0:
                    raise StoreUnreachable(self.location.redacted, "no flower session store in this database")
                if version > SCHEMA_VERSION:
                    raise SchemaTooNew(self.location.redacted, version)
                return
            if has_table and self._version(conn) == SCHEMA_VERSION:
                return  # the usual open: one read, no lock
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_ID,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS flower_schema("
                " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            version = self._version(conn)
            if version > SCHEMA_VERSION:
                raise SchemaTooNew(self.location.redacted, version)
            for number in range(version + 1, SCHEMA_VERSION + 1):
                conn.execute(MIGRATIONS[number - 1])
                conn.execute("INSERT INTO flower_schema(version) VALUES (%s)", (number,))

    @staticmethod
    def _version(conn: psycopg.Connection[Any]) -> int:
        row = conn.execute("SELECT coalesce(max(version), 0) FROM flower_schema").fetchone()
        return int(row[0]) if row else 0

    def _writable(self) -> None:
        if self.is_readonly:
            raise ValueError(f"the session store {self.location.redacted} was opened with readonly=True")

    def _next_mtime(self, after: int = 0) -> int:
        now = time.time_ns() // 1_000_000
        with self._lock:
            floor = max(self._last_mtime, after)
            self._last_mtime = now if now > floor else floor + 1
            return self._last_mtime

    @property
    def schema_version(self) -> int:
        """The database's schema version (``flower_schema``)."""
        with self._conn() as conn:
            return self._version(conn)

    # -- SessionStore protocol -------------------------------------------------------------------

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Mirror one batch of transcript entries, in order, skipping uuids already stored."""
        if entries:
            await asyncio.to_thread(self._append, key, entries)

    def _append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        self._writable()
        batch: list[tuple[str | None, SessionStoreEntry]] = []
        seen: set[str] = set()
        for entry in entries:
            uid = _uid(entry)
            if uid is not None:
                if uid in seen:
                    continue
                seen.add(uid)
            batch.append((uid, entry))
        payloads = [ENCODER.encode(entry) for _, entry in batch]  # a bad entry fails here, holding nothing
        pk, sid, sub = _parts(key)
        fold = None if sub else _summary_fold()
        with self._conn() as conn:
            conn.execute("INSERT INTO flower_sessions VALUES (%s, %s, %s, 0, 0) ON CONFLICT DO NOTHING", (pk, sid, sub))
            next_seq, mtime = cast(
                "tuple[int, int]",
                conn.execute(
                    "SELECT next_seq, mtime FROM flower_sessions"
                    " WHERE project_key = %s AND session_id = %s AND subpath = %s FOR UPDATE",
                    (pk, sid, sub),
                ).fetchone(),
            )
            stored = {
                uid
                for (uid,) in conn.execute(
                    "SELECT uid FROM flower_entries WHERE project_key = %s AND session_id = %s AND subpath = %s"
                    " AND uid = ANY(%s)",
                    (pk, sid, sub, sorted(seen)),
                )
            }
            fresh = [
                (uid, p, e) for (uid, e), p in zip(batch, payloads, strict=True) if uid is None or uid not in stored
            ]
            if not fresh:
                conn.rollback()  # also takes back the row a new key's INSERT made
                return
            with conn.cursor().copy(
                "COPY flower_entries(project_key, session_id, subpath, seq, uid, payload) FROM STDIN"
            ) as copy:
                for i, (uid, payload, _) in enumerate(fresh):
                    copy.write_row((pk, sid, sub, next_seq + i, uid, payload))
            now = self._next_mtime(after=mtime)
            conn.execute(
                "UPDATE flower_sessions SET mtime = %s, next_seq = %s"
                " WHERE project_key = %s AND session_id = %s AND subpath = %s",
                (now, next_seq + len(fresh), pk, sid, sub),
            )
            if fold is not None:
                self._fold_summary(conn, fold, key, [e for _, _, e in fresh], now, first_new_seq=next_seq)

    def _fold_summary(
        self,
        conn: psycopg.Connection[Any],
        fold: Any,
        key: SessionKey,
        new: list[SessionStoreEntry],
        now: int,
        *,
        first_new_seq: int,
    ) -> None:
        pk, sid, _ = _parts(key)
        row = conn.execute(
            "SELECT mtime, data FROM flower_summaries WHERE project_key = %s AND session_id = %s", (pk, sid)
        ).fetchone()
        prev = summary_from_row(sid, row[0], row[1]) if row else None
        if prev is None and first_new_seq > 0:
            earlier = conn.execute(
                "SELECT payload FROM flower_entries WHERE project_key = %s AND session_id = %s AND subpath = ''"
                " AND seq < %s ORDER BY seq",
                (pk, sid, first_new_seq),
            )
            prev = fold(None, key, decode(earlier))
        try:
            folded = fold(prev, key, new)
        except Exception:
            # The transcript matters more than its sidecar (as in stores.sqlite).
            return
        folded["mtime"] = now
        conn.execute(
            "INSERT INTO flower_summaries VALUES (%s, %s, %s, %s) ON CONFLICT (project_key, session_id)"
            " DO UPDATE SET mtime = excluded.mtime, data = excluded.data",
            (pk, sid, now, ENCODER.encode(folded)),
        )

    def _list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT session_id, mtime FROM flower_sessions WHERE project_key = %s AND subpath = ''",
                (project_key,),
            ).fetchall()
        return [{"session_id": sid, "mtime": int(mtime)} for sid, mtime in rows]

    def _list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT session_id, mtime, data FROM flower_summaries WHERE project_key = %s", (project_key,)
            ).fetchall()
        summaries = (summary_from_row(sid, int(mtime), data) for sid, mtime, data in rows)
        return [s for s in summaries if s is not None]

    def _delete(self, key: SessionKey) -> None:
        self._writable()
        pk, sid, sub = _parts(key)
        with self._conn() as conn:
            for table in ("flower_entries", "flower_sessions"):
                if sub:
                    conn.execute(
                        f"DELETE FROM {table} WHERE project_key = %s AND session_id = %s AND subpath = %s",
                        (pk, sid, sub),
                    )
                else:
                    conn.execute(f"DELETE FROM {table} WHERE project_key = %s AND session_id = %s", (pk, sid))
            if not sub:
                conn.execute("DELETE FROM flower_summaries WHERE project_key = %s AND session_id = %s", (pk, sid))

    def _list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT subpath FROM flower_sessions WHERE project_key = %s AND session_id = %s AND subpath <> ''"
                ' ORDER BY subpath COLLATE "C"',
                (key["project_key"], key["session_id"]),
            ).fetchall()
        return [sub for (sub,) in rows]

    # -- synchronous reads -----------------------------------------------------------------------

    def load_sync(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """``load`` for callers without an event loop; blocks while it reads."""
        with self._conn() as conn, conn.cursor(binary=True) as cur:
            # Binary bytea: the UTF-8 bytes straight to orjson, without a str per row first.
            cur.execute(
                "SELECT convert_to(payload, 'UTF8') FROM flower_entries"
                " WHERE project_key = %s AND session_id = %s AND subpath = %s ORDER BY seq",
                _parts(key),
            )
            entries = decode(cur)
        return cast("list[SessionStoreEntry]", entries) if entries else None

    def load_range(self, key: SessionKey, offset: int, limit: int) -> list[SessionStoreEntry]:
        """Entries ``offset`` to ``offset + limit - 1`` of ``key`` in append order.

        Raises:
            ValueError: ``offset`` or ``limit`` is negative.
        """
        if offset < 0 or limit < 0:
            raise ValueError(f"offset and limit must be >= 0, got offset={offset} limit={limit}")
        if limit == 0:
            return []
        with self._conn() as conn, conn.cursor(binary=True) as cur:
            cur.execute(
                "SELECT convert_to(payload, 'UTF8') FROM flower_entries"
                " WHERE project_key = %s AND session_id = %s AND subpath = %s ORDER BY seq OFFSET %s LIMIT %s",
                (*_parts(key), offset, limit),
            )
            return cast("list[SessionStoreEntry]", decode(cur))

    def entry_count(self, key: SessionKey) -> int:
        """How many entries ``key`` holds (0 when unknown)."""
        with self._conn() as conn:
            row = conn.execute(
                "SELECT count(*) FROM flower_entries WHERE project_key = %s AND session_id = %s AND subpath = %s",
                _parts(key),
            ).fetchone()
        return int(row[0]) if row else 0

    def holds_text(self, key: SessionKey, text: str) -> bool:
        """Whether some entry of ``key`` contains ``text`` (as stored: JSON-escaped), searched in the server."""
        needle = ENCODER.encode(text)[1:-1]
        if not needle:
            return True
        with self._conn() as conn:
            row = conn.execute(
                "SELECT 1 FROM flower_entries WHERE project_key = %s AND session_id = %s AND subpath = %s"
                " AND strpos(payload, %s) > 0 LIMIT 1",
                (*_parts(key), needle),
            ).fetchone()
        return row is not None

    def has_session(self, project_key: str, session_id: str) -> bool:
        """Whether the main transcript of ``session_id`` is stored. Reads no payload."""
        with self._conn() as conn:
            row = conn.execute(
                "SELECT 1 FROM flower_sessions WHERE project_key = %s AND session_id = %s AND subpath = ''",
                (project_key, session_id),
            ).fetchone()
        return row is not None

    def last_context(self, project_key: str, session_id: str, scan: int = LAST_CONTEXT_SCAN_ENTRIES) -> int:
        """Tokens the model last saw in a session (as ``SqliteSessionStore.last_context``)."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT payload FROM flower_entries WHERE project_key = %s AND session_id = %s AND subpath = ''"
                " ORDER BY seq DESC LIMIT %s",
                (project_key, session_id, scan),
            ).fetchall()
        return context_tokens(payload for (payload,) in rows)

    def projects(self) -> list[str]:
        """Every project key with at least one stored transcript, sorted."""
        with self._conn() as conn:
            rows = conn.execute("SELECT DISTINCT project_key FROM flower_sessions ORDER BY 1").fetchall()
        return [pk for (pk,) in rows]

    def relink_stored(self, key: SessionKey, relinks: list[Relink]) -> None:
        """Re-point the named link of stored entries (by uuid) where it still holds the old value; the
        only in-place change a store makes (``stores.chain``)."""
        if self.is_readonly:
            return
        pk, sid, sub = _parts(key)
        where = "project_key = %s AND session_id = %s AND subpath = %s AND uid = %s"
        with self._conn() as conn:
            for relink in relinks:
                row = conn.execute(
                    f"SELECT payload FROM flower_entries WHERE {where} FOR UPDATE", (pk, sid, sub, relink.uuid)
                ).fetchone()
                if row is None:
                    continue
                entry = json.loads(row[0])
                if entry.get(relink.name) != relink.old:
                    continue  # changed meanwhile: leave it
                entry[relink.name] = relink.new
                conn.execute(
                    f"UPDATE flower_entries SET payload = %s WHERE {where}",
                    (ENCODER.encode(entry), pk, sid, sub, relink.uuid),
                )

    def close(self) -> None:
        """Close the pool. Safe to call more than once; any later read raises ``ValueError``."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def __repr__(self) -> str:
        mode = ", readonly=True" if self.is_readonly else ""
        return f"PostgresSessionStore({self.location.redacted!r}{mode})"


def _summary_fold() -> Any:
    from claude_agent_sdk import fold_session_summary  # about 1 s to import: keep `import flower_magic` cheap

    return fold_session_summary


def _connect_kwargs() -> dict[str, Any]:
    # client_encoding: text comes back as str even from a SQL_ASCII database (psycopg gives bytes there).
    return {
        "connect_timeout": max(1, int(CONNECT_TIMEOUT_S)),
        "application_name": "flower_magic",
        "client_encoding": "utf8",
    }


def _why(exc: BaseException) -> str:
    # libpq's own message names host, port, user and database, never the password.
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
