"""SqliteSessionStore: every transcript of a run directory in one SQLite file (``runs/sessions.db``).

It implements claude-agent-sdk's ``SessionStore`` protocol (``append``, ``load``, ``list_sessions``,
``list_session_summaries``, ``delete``, ``list_subkeys``) on the original flower schema, and adds the
synchronous reads the runtime, the wake banner and the read-only panel need.

Guarantees:
    - The schema is the original flower's (tables ``entries``, ``meta``, ``summaries`` and the partial
      unique index ``entries_uid``), so a file written by either opens and works in the other.
    - Once ``append`` returns, its batch is committed (WAL, ``synchronous=FULL``): it survives the
      process being killed and, where fsync is honoured, a power cut.
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
    - Network filesystems: WAL needs shared memory and working locks on one host.
    - The async methods need an asyncio event loop (they use ``asyncio.to_thread``).
    - Project keys containing ``/`` (the SDK's sanitized keys never do).
"""

from __future__ import annotations

import asyncio
import errno
import gc
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from flower_magic.core.durable import set_aside

if TYPE_CHECKING:
    from claude_agent_sdk.types import (
        SessionKey,
        SessionListSubkeysKey,
        SessionStoreEntry,
        SessionStoreListEntry,
        SessionSummaryEntry,
    )

log = logging.getLogger(__name__)

# Another process's append holds the write lock for milliseconds (a 100K-entry batch for about a
# second); 10 s rides out both before an append fails and the SDK has to retry it.
BUSY_TIMEOUT_S = 10.0
# The original's window: usage sits on assistant entries, and 60 entries reach back past the
# attachments, tool results and bookkeeping lines a single turn writes after its last reply.
LAST_CONTEXT_SCAN_ENTRIES = 60
# Stays under the 999 bound variables older SQLite builds allow per statement.
UID_CHUNK_SIZE = 500
# SQLite result codes (sqlite3 names them only from Python 3.11).
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26

_SCHEMA = """
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
_TABLES = frozenset({"entries", "meta", "summaries"})
# ASCII with \u escapes, as the original wrote: a lone surrogate (the CLI's JavaScript strings can
# carry one) would make raw UTF-8 text unstorable. Compact separators keep rows small.
_ENCODER = json.JSONEncoder(separators=(",", ":"))


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


@contextmanager
def _gc_paused() -> Iterator[None]:
    # Decoding 100K entries allocates millions of containers; the cyclic collector would walk the
    # growing heap again and again and roughly double the time of a big load. Nothing decoded here
    # forms a cycle, so collecting afterwards loses nothing.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _orjson_loads() -> Callable[[bytes | str], Any] | None:
    try:
        import orjson
    except ImportError:
        return None
    return orjson.loads


# Optional: orjson parses a big session 2-3 times faster than the json module, most of it by reading
# the UTF-8 bytes SQLite holds without making a str of each row first (bench/bench_store.py).
_FAST_LOADS = _orjson_loads()
# What the reads select: UTF-8 bytes for orjson, text for the json module.
_PAYLOAD = "CAST(payload AS BLOB)" if _FAST_LOADS else "payload"
# orjson turns an integer literal too big for 64 bits into a float; any such literal has 19 or more
# digits in a row, so rows with such a run go to the json module, which keeps integers exact.
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGIT_RUN = b"0" * 19


def _decode(payloads: Iterable[tuple[str | bytes]]) -> list[Any]:
    out: list[Any] = []
    append, fast = out.append, _FAST_LOADS
    with _gc_paused():
        for (payload,) in payloads:
            if (
                fast is not None
                and isinstance(payload, bytes)
                and _LONG_DIGIT_RUN not in payload.translate(_DIGITS_TO_ZERO)
            ):
                try:
                    append(fast(payload))
                    continue
                except ValueError:
                    pass  # NaN, Infinity, lone surrogates: the json module reads them
            try:
                append(json.loads(payload))
            except (ValueError, TypeError):
                log.warning("sessions.db: skipped an entry that is not valid JSON: %.80r", payload)
    return out


_Fold = Callable[["SessionSummaryEntry | None", "SessionKey", "list[SessionStoreEntry]"], "SessionSummaryEntry"]


def _summary_fold() -> _Fold:
    from claude_agent_sdk import fold_session_summary  # about 1 s to import: keep `import flower_magic` cheap

    return fold_session_summary


def _is_corrupt(exc: sqlite3.DatabaseError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    text = str(exc)
    return "file is not a database" in text or "malformed" in text


class SqliteSessionStore:
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
    """

    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.is_readonly = readonly
        self.recovered_from: Path | None = None
        self._lock = threading.Lock()
        self._last_mtime = 0
        self._db: sqlite3.Connection | None = self._open_readonly() if readonly else self._open()

    # -- opening ---------------------------------------------------------------------------------

    def _connect(self, target: str, *, uri: bool) -> sqlite3.Connection:
        try:
            # isolation_level=None: we issue BEGIN IMMEDIATE ourselves; sqlite3's implicit deferred
            # transactions could fail to upgrade to a write lock without waiting.
            return sqlite3.connect(
                target, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None, uri=uri
            )
        except sqlite3.OperationalError as exc:
            message = f"cannot open the session store {self.path}: {exc}"
            raise OSError(errno.EIO, message, str(self.path)) from exc

    def _open(self) -> sqlite3.Connection:
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise type(exc)(
                exc.errno,
                f"cannot create the folder for the session store {self.path}: {exc.strerror}; pick a writable run dir",
                str(folder),
            ) from exc
        try:
            return self._prepare(self._connect(str(self.path), uri=False))
        except sqlite3.DatabaseError as exc:
            if not _is_corrupt(exc):
                raise
            self.recovered_from = set_aside(self.path, "corrupt")
            if self.recovered_from is None:
                raise OSError(
                    errno.EIO,
                    f"the session store {self.path} is unreadable ({exc}) and could not be moved aside; "
                    "move or delete it, then run again",
                    str(self.path),
                ) from exc
            for suffix in ("-wal", "-shm"):
                side = self.path.with_name(self.path.name + suffix)
                if side.exists():
                    set_aside(side, "corrupt")
            log.warning(
                "%s was not a readable SQLite database (%s); moved it to %s and started a fresh store",
                self.path,
                exc,
                self.recovered_from,
            )
            return self._prepare(self._connect(str(self.path), uri=False))

    def _prepare(self, db: sqlite3.Connection) -> sqlite3.Connection:
        try:
            db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            db.execute("PRAGMA journal_mode = WAL").fetchone()
            db.execute("PRAGMA synchronous = FULL")
            db.executescript(_SCHEMA)
        except BaseException:
            db.close()
            raise
        return db

    def _open_readonly(self) -> sqlite3.Connection:
        if not self.path.is_file():
            raise FileNotFoundError(
                errno.ENOENT,
                f"no session store at {self.path}; readonly=True never creates one (run a step first, "
                "or check the run dir)",
                str(self.path),
            )
        db = self._connect(self.path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as exc:
            db.close()
            raise ValueError(f"{self.path} is not a readable session store: {exc}") from exc
        if not tables >= _TABLES:
            db.close()
            raise ValueError(f"{self.path} is not a session store (it lacks {sorted(_TABLES - tables)})")
        return db

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
        payloads = [_ENCODER.encode(entry) for _, entry in batch]
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
        prev = _summary_from_row(sid, row[0], row[1]) if row else None
        if prev is None and first_new_seq > 0:
            # No usable sidecar for a transcript that already has rows (a db from an older writer, or
            # an unreadable row): rebuild it from the stored entries so the summary stays whole.
            earlier = db.execute(
                f"SELECT {_PAYLOAD} FROM entries WHERE store_key = ? AND seq < ? ORDER BY seq",
                (store_key(key), first_new_seq),
            )
            prev = fold_session_summary(None, key, _decode(earlier))
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
            (pk, sid, now, _ENCODER.encode(folded)),
        )

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """Every entry of ``key`` in append order, or ``None`` if nothing was ever stored under it."""
        return await asyncio.to_thread(self.load_sync, key)

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """Main transcripts of ``project_key`` (subagent transcripts excluded), with their mtime."""
        return await asyncio.to_thread(self._list_sessions, project_key)

    def _list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        low, high = _under(project_key)
        with self._reading() as db:
            rows = db.execute(
                "SELECT store_key, mtime FROM meta WHERE store_key >= ? AND store_key < ?", (low, high)
            ).fetchall()
        return [{"session_id": sk[len(low) :], "mtime": mtime} for sk, mtime in rows if "/" not in sk[len(low) :]]

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """Summary sidecars of ``project_key``'s main transcripts, as ``fold_session_summary`` left them."""
        return await asyncio.to_thread(self._list_session_summaries, project_key)

    def _list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        with self._reading() as db:
            rows = db.execute(
                "SELECT session_id, mtime, data FROM summaries WHERE project_key = ?", (project_key,)
            ).fetchall()
        summaries = (_summary_from_row(sid, mtime, data) for sid, mtime, data in rows)
        return [s for s in summaries if s is not None]

    async def delete(self, key: SessionKey) -> None:
        """Remove ``key``; a main key takes its subagent transcripts and its summary with it."""
        await asyncio.to_thread(self._delete, key)

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

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """Subpaths stored under a session (its subagent transcripts), sorted."""
        return await asyncio.to_thread(self._list_subkeys, key)

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
            rows = db.execute(f"SELECT {_PAYLOAD} FROM entries WHERE store_key = ? ORDER BY seq", (store_key(key),))
            entries = _decode(rows)
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
                f"SELECT {_PAYLOAD} FROM entries WHERE store_key = ? AND seq >= ? ORDER BY seq LIMIT ?",
                (sk, first[0], limit),
            )
            return cast("list[SessionStoreEntry]", _decode(rows))

    def entry_count(self, key: SessionKey) -> int:
        """How many entries ``key`` holds (0 when unknown)."""
        with self._reading() as db:
            (count,) = db.execute("SELECT count(*) FROM entries WHERE store_key = ?", (store_key(key),)).fetchone()
        return int(count)

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
        for (payload,) in rows:
            if '"usage"' not in payload:
                continue
            try:
                usage = json.loads(payload).get("message", {}).get("usage", {})
            except (ValueError, AttributeError):
                continue
            if not isinstance(usage, dict):
                continue
            total = sum(
                value
                for name in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
                if isinstance(value := usage.get(name), int) and not isinstance(value, bool)
            )
            if total:
                return total
        return 0

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

    def __enter__(self) -> SqliteSessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = ", readonly=True" if self.is_readonly else ""
        return f"SqliteSessionStore({str(self.path)!r}{mode})"


def _summary_from_row(session_id: str, mtime: int, data: str) -> SessionSummaryEntry | None:
    try:
        decoded = json.loads(data)
    except ValueError:
        return None
    if not isinstance(decoded, dict):
        return None
    # A sidecar may hold the whole summary entry (as written here) or only its ``data`` dict.
    inner = decoded["data"] if isinstance(decoded.get("data"), dict) else decoded
    return {"session_id": session_id, "mtime": mtime, "data": inner}
