"""SqliteSessionStore: every transcript of a run directory in one SQLite file (``runs/sessions.db``).

It implements claude-agent-sdk's ``SessionStore`` protocol (``append``, ``load``, ``list_sessions``,
``list_session_summaries``, ``delete``, ``list_subkeys``) on the original flower schema, and adds the
synchronous reads the runtime, the wake banner and the read-only panel need.

Guarantees:
    - The schema is the original flower's (tables ``entries``, ``meta``, ``summaries`` and the partial
      unique index ``entries_uid``), so a file written by either opens and works in the other.
    - Once ``append`` returns, its batch is committed (WAL, or a rollback journal on a network
      filesystem; ``synchronous=FULL``): it survives the process being killed and, where fsync is
      honoured, a power cut.
    - ``load`` returns entries deep-equal to what was appended (integers past 64 bits, NaN and lone
      surrogates included), whether or not the optional ``orjson`` speeds the decoding.
    - An entry ``uuid`` is stored at most once per key, whether it repeats within a batch or arrives
      again in a replayed batch. Entries without a uuid are always appended.
    - A batch with nothing new changes nothing: not the entries, not ``mtime``, not the summary.
    - Appends from several processes to one file never collide: the dedupe, the ``next_seq`` read and
      the insert run in one ``BEGIN IMMEDIATE`` transaction. Within a key, ``seq`` runs 0, 1, 2, ... in
      append order.
    - ``mtime`` is integer epoch milliseconds, strictly increasing across the appends of one store
      instance, and for any one key also across instances and processes; ``list_sessions`` and the
      summaries report the same clock.
    - The async methods run SQLite in a worker thread, so a 100K-entry ``load`` never blocks the
      event loop (a Jupyter kernel stays responsive).
    - ``readonly=True`` never creates, writes or migrates anything.
    - A file that is not a database (or fails as corrupt when opened) is moved aside under a
      timestamped name and a fresh store starts in its place; ``recovered_from`` names the old file.
Not guaranteed:
    - ``mtime`` order between different keys written by different instances or processes.
    - A fresh summary when ``fold_session_summary`` raises: the batch is still stored, and the summary
      is left older than the session's mtime, so the SDK reads the transcript instead.
    - Corruption first met after the store is open raises ``sqlite3.DatabaseError``.
    - On a network filesystem (``mount``, from ``core.mount``): WAL needs shared memory, so the file is
      kept with a rollback journal there (``journal_mode`` says which): slower writes, and readers
      wait while a write commits. Locks on such a filesystem may not reach other hosts: two
      machines writing one sessions.db at once are not kept apart.
    - The async methods need an asyncio event loop (they use ``asyncio.to_thread``).
    - Project keys containing ``/`` (the SDK's sanitized keys never do).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, cast

from flower_magic.core.mount import Mount, run_dir_mount
from flower_magic.core.project import project_key
from flower_magic.core.rundir import RunDir
from flower_magic.stores.rows import ENCODER, PAYLOAD_SQL, ThreadedReads, context_tokens, decode, summary_from_row
from flower_magic.stores.schema import open_readonly, open_writable

if TYPE_CHECKING:
    from claude_agent_sdk.types import (
        SessionKey,
        SessionListSubkeysKey,
        SessionStoreEntry,
        SessionStoreListEntry,
        SessionSummaryEntry,
    )

    from flower_magic.stores.chain import Relink

log = logging.getLogger(__name__)

# The original's window: usage sits on assistant entries, and 60 entries reach back past the
# attachments, tool results and bookkeeping lines a single turn writes after its last reply.
LAST_CONTEXT_SCAN_ENTRIES = 60
# Stays under the 999 bound variables older SQLite builds allow per statement.
UID_CHUNK_SIZE = 500
# SQLite result codes (sqlite3 names them only from Python 3.11).


def store_key(key: SessionKey) -> str:
    """The row key of ``key``: ``project_key/session_id``, plus ``/subpath`` when it has one."""
    base = f"{key['project_key']}/{key['session_id']}"
    subpath = key.get("subpath")
    return f"{base}/{subpath}" if subpath else base


def _under(prefix: str) -> tuple[str, str]:
    # Every key starting with ``prefix/`` sorts in [prefix/, prefix0): '0' follows '/' in binary
    # collation. A range keeps the primary-key index in use, and unlike LIKE it is case-sensitive.
    return f"{prefix}/", f"{prefix}0"


def _uid(entry: SessionStoreEntry) -> str | None:
    uid = entry.get("uuid")
    return uid if isinstance(uid, str) and uid else None


_Fold = Callable[["SessionSummaryEntry | None", "SessionKey", "list[SessionStoreEntry]"], "SessionSummaryEntry"]


def _summary_fold() -> _Fold:
    from claude_agent_sdk import fold_session_summary  # about 1 s to import: keep `import flower_magic` cheap

    return fold_session_summary


class SqliteSessionStore(ThreadedReads):
    """A claude-agent-sdk ``SessionStore`` in one SQLite file.

    Args:
        path: the database file, usually ``<run_dir>/sessions.db``. Its folder is created.
        readonly: open an existing file for reading only (the panel, the wake banner).

    Raises:
        OSError: the folder or the file cannot be created or opened (the message names the path);
            with ``readonly=True``, ``FileNotFoundError`` when the file does not exist.
        ValueError: with ``readonly=True``, the file is not a session store.

    Attributes:
        path: the database file.
        is_readonly: opened with ``readonly=True``.
        recovered_from: where an unreadable file found at ``path`` was moved, else ``None``.
        mount: the filesystem the file is on (None when it cannot be told, and for ``readonly=True``).
        journal_mode: ``wal``, or ``delete`` on a network filesystem (as SQLite reports it).
    """

    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.is_readonly = readonly
        self.recovered_from: Path | None = None
        self._lock = threading.Lock()
        self._last_mtime = 0
        self.mount: Mount | None = None
        if readonly:
            self._db: sqlite3.Connection | None = open_readonly(self.path)
        else:
            self.mount = run_dir_mount(self.path.parent)
            journal = "DELETE" if self.mount is not None and self.mount.is_network else "WAL"
            self._db, self.recovered_from = open_writable(self.path, journal=journal)
        (mode,) = self._db.execute("PRAGMA journal_mode").fetchone()
        self.journal_mode = str(mode).lower()

    @property
    def on_network_fs(self) -> bool:
        """The file is on a network filesystem (and so kept with a rollback journal)."""
        return self.mount is not None and self.mount.is_network

    # -- plumbing --------------------------------------------------------------------------------

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._db is None:
                raise ValueError(f"the session store {self.path} is closed")
            yield self._db

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        if self.is_readonly:
            raise ValueError(f"the session store {self.path} was opened with readonly=True; it cannot write")
        with self._reading() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    def _next_mtime(self, after: int = 0) -> int:
        # ``after``: the key's stored mtime, so a key's own mtime also keeps rising across store
        # instances and processes, and after the wall clock steps back.
        now = time.time_ns() // 1_000_000
        floor = max(self._last_mtime, after)
        self._last_mtime = now if now > floor else floor + 1
        return self._last_mtime

    # -- SessionStore protocol -------------------------------------------------------------------

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Mirror one batch of transcript entries, in order, skipping uuids already stored.

        Args:
            key: the transcript (main, or a subagent's with ``subpath``).
            entries: JSON-serialisable transcript lines.
        """
        if entries:
            await asyncio.to_thread(self._append, key, entries)

    def _append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        batch: list[tuple[str | None, SessionStoreEntry]] = []
        seen: set[str] = set()
        for entry in entries:
            uid = _uid(entry)
            if uid is not None:
                if uid in seen:
                    continue
                seen.add(uid)
            batch.append((uid, entry))
        # Serialise before taking the write lock: a bad entry fails here, holding nothing.
        payloads = [ENCODER.encode(entry) for _, entry in batch]
        sk = store_key(key)
        # Import before the lock too: the first import takes a second or more, and every other process
        # would wait that long for its own appends (seen: over 10 s with six importing at once).
        fold = None if key.get("subpath") else _summary_fold()
        with self._writing() as db:
            stored = self._stored_uids(db, sk, sorted(seen))
            fresh = [
                (uid, p, e) for (uid, e), p in zip(batch, payloads, strict=True) if uid is None or uid not in stored
            ]
            if not fresh:
                return
            meta = db.execute("SELECT next_seq, mtime FROM meta WHERE store_key = ?", (sk,)).fetchone()
            (past_last,) = db.execute(
                "SELECT coalesce(max(seq) + 1, 0) FROM entries WHERE store_key = ?", (sk,)
            ).fetchone()
            # next_seq alone would do for files this class wrote; max(seq) guards files other tools edited.
            start = max(meta[0] if meta else 0, past_last)
            db.executemany(
                "INSERT INTO entries(store_key, seq, uid, payload) VALUES (?, ?, ?, ?)",
                [(sk, start + i, uid, payload) for i, (uid, payload, _) in enumerate(fresh)],
            )
            now = self._next_mtime(after=meta[1] if meta else 0)
            db.execute(
                "INSERT INTO meta(store_key, mtime, next_seq) VALUES (?, ?, ?) ON CONFLICT(store_key)"
                " DO UPDATE SET mtime = excluded.mtime, next_seq = excluded.next_seq",
                (sk, now, start + len(fresh)),
            )
            if fold is not None:
                self._fold_summary(db, fold, key, [e for _, _, e in fresh], now, first_new_seq=start)

    @staticmethod
    def _stored_uids(db: sqlite3.Connection, sk: str, uids: list[str]) -> set[str]:
        found: set[str] = set()
        for i in range(0, len(uids), UID_CHUNK_SIZE):
            chunk = uids[i : i + UID_CHUNK_SIZE]
            marks = ",".join("?" * len(chunk))
            rows = db.execute(
                f"SELECT uid FROM entries WHERE store_key = ? AND uid IS NOT NULL AND uid IN ({marks})",
                (sk, *chunk),
            )
            found.update(uid for (uid,) in rows)
        return found

    @staticmethod
    def _fold_summary(
        db: sqlite3.Connection,
        fold_session_summary: _Fold,
        key: SessionKey,
        new: list[SessionStoreEntry],
        now: int,
        *,
        first_new_seq: int,
    ) -> None:
        pk, sid = key["project_key"], key["session_id"]
        row = db.execute(
            "SELECT mtime, data FROM summaries WHERE project_key = ? AND session_id = ?", (pk, sid)
        ).fetchone()
        prev = summary_from_row(sid, row[0], row[1]) if row else None
        if prev is None and first_new_seq > 0:
            # No usable sidecar for a transcript that already has rows (a db from an older writer, or
            # an unreadable row): rebuild it from the stored entries so the summary stays whole.
            earlier = db.execute(
                f"SELECT {PAYLOAD_SQL} FROM entries WHERE store_key = ? AND seq < ? ORDER BY seq",
                (store_key(key), first_new_seq),
            )
            prev = fold_session_summary(None, key, decode(earlier))
        try:
            folded = fold_session_summary(prev, key, new)
        except Exception:
            # The transcript matters more than its sidecar: keep the batch, leave the summary older
            # than the session's mtime (the SDK then reads the transcript instead), say why.
            log.warning("sessions.db: could not fold the summary of %s/%s", pk, sid, exc_info=True)
            return
        folded["mtime"] = now
        db.execute(
            "INSERT INTO summaries(project_key, session_id, mtime, data) VALUES (?, ?, ?, ?)"
            " ON CONFLICT(project_key, session_id)"
            " DO UPDATE SET mtime = excluded.mtime, data = excluded.data",
            (pk, sid, now, ENCODER.encode(folded)),
        )

    def _list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        low, high = _under(project_key)
        with self._reading() as db:
            rows = db.execute(
                "SELECT store_key, mtime FROM meta WHERE store_key >= ? AND store_key < ?", (low, high)
            ).fetchall()
        return [{"session_id": sk[len(low) :], "mtime": mtime} for sk, mtime in rows if "/" not in sk[len(low) :]]

    def _list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        with self._reading() as db:
            rows = db.execute(
                "SELECT session_id, mtime, data FROM summaries WHERE project_key = ?", (project_key,)
            ).fetchall()
        summaries = (summary_from_row(sid, mtime, data) for sid, mtime, data in rows)
        return [s for s in summaries if s is not None]

    def _delete(self, key: SessionKey) -> None:
        sk = store_key(key)
        with self._writing() as db:
            for table in ("entries", "meta"):
                db.execute(f"DELETE FROM {table} WHERE store_key = ?", (sk,))
            if not key.get("subpath"):
                low, high = _under(sk)
                for table in ("entries", "meta"):
                    db.execute(f"DELETE FROM {table} WHERE store_key >= ? AND store_key < ?", (low, high))
                db.execute(
                    "DELETE FROM summaries WHERE project_key = ? AND session_id = ?",
                    (key["project_key"], key["session_id"]),
                )

    def _list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        low, high = _under(f"{key['project_key']}/{key['session_id']}")
        with self._reading() as db:
            rows = db.execute(
                "SELECT store_key FROM meta WHERE store_key >= ? AND store_key < ? ORDER BY store_key",
                (low, high),
            ).fetchall()
        return [sk[len(low) :] for (sk,) in rows]

    # -- synchronous reads -----------------------------------------------------------------------

    def load_sync(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """``load`` for callers without an event loop; blocks while it reads."""
        with self._reading() as db:
            # Decoding each row as SQLite hands it over, under the lock, keeps the payload hot in cache
            # and frees it at once: markedly faster for 100K entries than fetching them all first.
            # Appends from this instance wait meanwhile; other processes and readers do not.
            rows = db.execute(f"SELECT {PAYLOAD_SQL} FROM entries WHERE store_key = ? ORDER BY seq", (store_key(key),))
            entries = decode(rows)
        return cast("list[SessionStoreEntry]", entries) if entries else None

    def load_range(self, key: SessionKey, offset: int, limit: int) -> list[SessionStoreEntry]:
        """Entries ``offset`` to ``offset + limit - 1`` of ``key`` in append order (a transcript page).

        Raises:
            ValueError: ``offset`` or ``limit`` is negative.
        """
        if offset < 0 or limit < 0:
            raise ValueError(f"offset and limit must be >= 0, got offset={offset} limit={limit}")
        sk = store_key(key)
        with self._reading() as db:
            # Find the page's first seq on the (store_key, seq) index alone, then read one seq range:
            # the skipped rows' payloads are never touched, whatever the offset.
            first = db.execute(
                "SELECT seq FROM entries WHERE store_key = ? ORDER BY seq LIMIT 1 OFFSET ?", (sk, offset)
            ).fetchone()
            if first is None or limit == 0:
                return []
            rows = db.execute(
                f"SELECT {PAYLOAD_SQL} FROM entries WHERE store_key = ? AND seq >= ? ORDER BY seq LIMIT ?",
                (sk, first[0], limit),
            )
            return cast("list[SessionStoreEntry]", decode(rows))

    def entry_count(self, key: SessionKey) -> int:
        """How many entries ``key`` holds (0 when unknown)."""
        with self._reading() as db:
            (count,) = db.execute("SELECT count(*) FROM entries WHERE store_key = ?", (store_key(key),)).fetchone()
        return int(count)

    def holds_text(self, key: SessionKey, text: str) -> bool:
        """Whether some entry of ``key`` contains ``text`` (as stored: JSON-escaped). Reads in SQLite,
        without decoding a payload."""
        needle = ENCODER.encode(text)[1:-1]
        if not needle:
            return True
        with self._reading() as db:
            row = db.execute(
                "SELECT 1 FROM entries WHERE store_key = ? AND instr(payload, ?) > 0 LIMIT 1", (store_key(key), needle)
            ).fetchone()
        return row is not None

    def has_session(self, project_key: str, session_id: str) -> bool:
        """Whether the main transcript of ``session_id`` is stored. Reads no payload."""
        with self._reading() as db:
            row = db.execute("SELECT 1 FROM meta WHERE store_key = ?", (f"{project_key}/{session_id}",)).fetchone()
        return row is not None

    def last_context(self, project_key: str, session_id: str, scan: int = LAST_CONTEXT_SCAN_ENTRIES) -> int:
        """Tokens the model last saw in a session: the newest non-zero usage in its last ``scan`` entries.

        Returns:
            ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens`` of the newest entry
            whose sum is non-zero, else 0.
        """
        with self._reading() as db:
            rows = db.execute(
                "SELECT payload FROM entries WHERE store_key = ? ORDER BY seq DESC LIMIT ?",
                (f"{project_key}/{session_id}", scan),
            ).fetchall()
        return context_tokens(payload for (payload,) in rows)

    def relink_stored(self, key: SessionKey, relinks: list[Relink]) -> None:
        """Re-point the named link of stored entries (by uuid) where it still holds the old value; the
        only in-place change a store makes (``stores.chain``)."""
        if self.is_readonly:
            return
        sk = store_key(key)
        with self._writing() as db:
            for relink in relinks:
                row = db.execute(
                    "SELECT payload FROM entries WHERE store_key = ? AND uid = ?", (sk, relink.uuid)
                ).fetchone()
                if row is None:
                    continue
                entry = json.loads(row[0])
                if entry.get(relink.name) != relink.old:
                    continue  # changed meanwhile: leave it
                entry[relink.name] = relink.new
                db.execute(
                    "UPDATE entries SET payload = ? WHERE store_key = ? AND uid = ?",
                    (ENCODER.encode(entry), sk, relink.uuid),
                )

    def projects(self) -> list[str]:
        """Every project key with at least one stored transcript, sorted."""
        with self._reading() as db:
            rows = db.execute(
                "SELECT DISTINCT substr(store_key, 1, instr(store_key, '/') - 1) FROM meta"
                " WHERE instr(store_key, '/') > 0 ORDER BY 1"
            ).fetchall()
        return [pk for (pk,) in rows]

    def close(self) -> None:
        """Close the database. Safe to call more than once; any later call raises ``ValueError``."""
        with self._lock:
            db, self._db = self._db, None
        if db is not None:
            db.close()

    def __repr__(self) -> str:
        mode = ", readonly=True" if self.is_readonly else ""
        return f"SqliteSessionStore({str(self.path)!r}{mode})"


def last_context_of(rundir: RunDir, session_id: str) -> int:
    """The last context size (tokens) a run dir's sessions.db recorded for a session; 0 if unknown.
    Read-only: never creates the file."""
    if not rundir.sessions_db.is_file():
        return 0
    try:
        store = SqliteSessionStore(rundir.sessions_db, readonly=True)
    except (OSError, ValueError, sqlite3.DatabaseError):
        return 0
    try:
        return store.last_context(project_key(rundir.workspace), session_id)
    except sqlite3.DatabaseError:
        return 0
    finally:
        store.close()
