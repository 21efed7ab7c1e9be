"""One session's transcript from ``<run_dir>/sessions.db``, a page at a time, raw or as resumed; or
from the PostgreSQL the run dir's ``store.json`` names (``has_store``, ``core.storage``).

Guarantees:
- The database is opened read-only (``mode=ro``); nothing is created, migrated or written, and a
  run writing to it at the same time is neither blocked nor disturbed (WAL readers do not lock out
  writers).
- Session ids are accepted only in canonical UUID form, so a key can never reach another project's
  rows or a subagent's subpath.
- The raw view reads only the requested page (an index range scan), whatever the session's size.
- The as-resumed view never presents raw entries as resumed ones: it exists only when the pruning
  layer (``flower_magic.stores.prune``) is installed, and otherwise answers ``ViewUnavailable``.

- A run dir on PostgreSQL is read through a read-only store (``stores.open_reader``): nothing is
  created or written there either, and its password (from the server's own ``FLOWER_SESSIONS``,
  ``PGPASSWORD`` or ``~/.pgpass``) is in no answer: an unreachable store answers with the error's
  type name only.

Not guaranteed:
- On PostgreSQL, the conversation view reads the whole session for each page (no kept index).
- The as-resumed view reads the whole session (pruning is a whole-transcript pass): its first page
  costs as much as the session is long. The last one built is kept, so paging through it is cheap
  until the store changes.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flower_magic.core.project import project_key
from flower_magic.core.storage import SESSIONS_DB
from flower_magic.panel.errors import PanelError

__all__ = [
    "DB_NAME",
    "MAX_PAGE_ENTRIES",
    "Page",
    "TranscriptError",
    "conversation_page",
    "has_store",
    "is_conversation",
    "is_session_id",
    "merge_marks",
    "project_key",
    "raw_page",
    "resumed_page",
]

DB_NAME = SESSIONS_DB  # the run dir's own store (core.storage names it)
# Pages larger than this are refused: a panel shows a screenful at a time.
MAX_PAGE_ENTRIES = 500
# Seconds to wait for a writer's lock before giving up on a page (the panel retries on its own).
BUSY_TIMEOUT_S = 2.0
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


class TranscriptError(PanelError):
    """A page cannot be served; ``status`` is the HTTP status to answer with."""


def is_session_id(value: str) -> bool:
    return bool(_UUID.match(value))


@dataclass(frozen=True)
class Page:
    total: int
    entries: list[dict[str, Any]]  # {"seq", "mark", "entry"}
    hidden: int = 0  # the CLI's own records left out (``everything=False``)


# What a person reads as the conversation: prompts, answers, tool calls and their results, hand-off
# summaries. The rest is the Claude Code CLI's own bookkeeping (queue operations that repeat the
# prompt, attachments, last-prompt, mode and latch records, meta messages).
CONVERSATION_TYPES = ("user", "assistant", "summary")
# The same test in SQL, on the stored text (CASE keeps json_extract off malformed payloads).
_SQL_CONVERSATION = (
    "CASE WHEN json_valid(payload) THEN json_extract(payload, '$.type') IN ('user', 'assistant', 'summary')"
    " AND coalesce(json_extract(payload, '$.isMeta'), 0) = 0 ELSE 0 END"
)


def is_conversation(entry: Any) -> bool:
    """``entry`` is part of the conversation rather than the CLI's bookkeeping."""
    return isinstance(entry, dict) and entry.get("type") in CONVERSATION_TYPES and not entry.get("isMeta")


def has_store(run_dir: Path) -> bool:
    """The run dir has transcripts to read: its sessions.db, or the store its ``store.json`` names."""
    from flower_magic.core.storage import recorded_store

    recorded = recorded_store(run_dir)
    return (recorded is not None and not recorded.is_default) or (run_dir / DB_NAME).is_file()


def _elsewhere(db: Path) -> Any | None:
    """A read-only store of ``db``'s run dir when its transcripts are not in ``db`` (PostgreSQL), else None.

    Raises:
        TranscriptError: 503 when that store cannot be opened.
    """
    from flower_magic.core.storage import recorded_store

    recorded = recorded_store(db.parent)
    if recorded is None or recorded.is_default:
        return None
    from flower_magic.stores.backend import open_reader

    store = open_reader(db.parent)
    if store is None:
        raise TranscriptError(503, "StoreUnreadable", "lab_store_unreadable", why="ConnectionError")
    return store


def _session_key(key: str) -> dict[str, str]:
    project, _, session = key.partition("/")
    return {"project_key": project, "session_id": session}


def _from_store(store: Any, read: Any) -> Any:
    try:
        return read(store)
    except TranscriptError:
        raise
    except Exception as exc:  # the driver's errors (psycopg.Error) name the server, never the password
        raise TranscriptError(503, "StoreUnreadable", "lab_store_read_failed", why=type(exc).__name__) from None
    finally:
        store.close()


def _connect(db: Path) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(db.as_uri() + "?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
        conn.execute("SELECT 1 FROM entries LIMIT 0")
        return conn
    except sqlite3.Error as exc:
        raise TranscriptError(503, "StoreUnreadable", "lab_store_unreadable", why=type(exc).__name__) from exc


def _decode(payload: str) -> Any:
    try:
        return json.loads(payload)
    except ValueError:
        return {"type": "unreadable", "raw": payload[:2000]}


@dataclass
class _Index:
    last_seq: int  # the highest seq read
    total: int  # entries up to last_seq
    kept: list[tuple[int, int]]  # (position, seq) of each conversation entry
    built: float  # time.monotonic() of the last whole read


# The store only appends (and relinks entries in place, which never changes what they are), so an
# index is extended; an entry a person rewrote under the same seq is caught by reading it whole again
# at most this often while the session changes.
FULL_READ_S = 60.0


_index_lock = threading.Lock()
# (db, store key) -> its index; a few sessions open in panels is the usual case.
_indexes: OrderedDict[tuple[str, str], _Index] = OrderedDict()
INDEXES_KEPT = 8


def _conversation_index(db: Path, key: str) -> tuple[list[tuple[int, int]], int]:
    """((position, seq) of each conversation entry, count of all entries) of one session.

    A session grows at its end while a run writes it, so the index is extended with the entries after
    the last one read (one indexed count checks nothing before them went away); anything else
    rebuilds it. Viewing a live 100,000-entry session costs the new entries, not all of them.
    """
    with _index_lock:
        known = _indexes.get((str(db), key))
    conn = _connect(db)
    try:
        if known is not None:
            (still,) = conn.execute(
                "SELECT count(*) FROM entries WHERE store_key = ? AND seq <= ?", (key, known.last_seq)
            ).fetchone()
            if still != known.total or time.monotonic() - known.built > FULL_READ_S:
                known = None
        base = known or _Index(-1, 0, [], time.monotonic())
        flags = conn.execute(
            f"SELECT seq, {_SQL_CONVERSATION} FROM entries WHERE store_key = ? AND seq > ? ORDER BY seq",
            (key, base.last_seq),
        ).fetchall()
    except sqlite3.Error as exc:
        raise TranscriptError(503, "StoreUnreadable", "lab_store_read_failed", why=type(exc).__name__) from exc
    finally:
        conn.close()
    kept = base.kept + [(base.total + i, seq) for i, (seq, keep) in enumerate(flags) if keep]
    index = _Index(flags[-1][0] if flags else base.last_seq, base.total + len(flags), kept, base.built)
    if index.total == 0:
        raise TranscriptError(404, "NoSuchSession", "lab_no_session")
    with _index_lock:
        _indexes[(str(db), key)] = index
        _indexes.move_to_end((str(db), key))
        while len(_indexes) > INDEXES_KEPT:
            _indexes.popitem(last=False)
    return index.kept, index.total


def conversation_page(db: Path, key: str, offset: int, limit: int) -> Page:
    """Conversation entries ``offset`` .. ``offset+limit-1`` of store key ``key`` (``is_conversation``),
    each with its position among all entries; ``hidden`` counts the CLI's records left out.

    Raises:
        TranscriptError: as ``raw_page``.
    """
    store = _elsewhere(db)
    if store is not None:
        entries = _from_store(store, lambda s: s.load_sync(_session_key(key)) or [])
        if not entries:
            raise TranscriptError(404, "NoSuchSession", "lab_no_session")
        shown = [(i, e) for i, e in enumerate(entries) if is_conversation(e)]
        page = [{"seq": i, "mark": None, "entry": e} for i, e in shown[offset : offset + limit]]
        return Page(len(shown), page, hidden=len(entries) - len(shown))
    kept, total = _conversation_index(db, key)
    wanted = kept[offset : offset + limit]
    payloads: dict[int, str] = {}
    if wanted:
        conn = _connect(db)
        try:
            marks = ",".join("?" * len(wanted))
            payloads = dict(
                conn.execute(
                    f"SELECT seq, payload FROM entries WHERE store_key = ? AND seq IN ({marks})",
                    (key, *(seq for _, seq in wanted)),
                ).fetchall()
            )
        except sqlite3.Error as exc:
            raise TranscriptError(503, "StoreUnreadable", "lab_store_read_failed", why=type(exc).__name__) from exc
        finally:
            conn.close()
    entries = [
        {"seq": position, "mark": None, "entry": _decode(payloads[seq])} for position, seq in wanted if seq in payloads
    ]
    return Page(len(kept), entries, hidden=total - len(kept))


def raw_page(db: Path, key: str, offset: int, limit: int) -> Page:
    """Entries ``offset`` .. ``offset+limit-1`` of store key ``key`` as stored.

    Raises:
        TranscriptError: the store is unreadable (503) or holds no such session (404).
    """
    store = _elsewhere(db)
    if store is not None:
        sk = _session_key(key)
        total, rows = _from_store(store, lambda s: (s.entry_count(sk), s.load_range(sk, offset, limit)))
        if total == 0:
            raise TranscriptError(404, "NoSuchSession", "lab_no_session")
        return Page(total, [{"seq": offset + i, "mark": None, "entry": e} for i, e in enumerate(rows)])
    conn = _connect(db)
    try:
        (total,) = conn.execute("SELECT count(*) FROM entries WHERE store_key = ?", (key,)).fetchone()
        if total == 0:
            raise TranscriptError(404, "NoSuchSession", "lab_no_session")
        # Find the page's first seq on the (store_key, seq) index alone, then read one seq range, so
        # the payloads of skipped rows are never touched, whatever the offset.
        first = conn.execute(
            "SELECT seq FROM entries WHERE store_key = ? ORDER BY seq LIMIT 1 OFFSET ?", (key, offset)
        ).fetchone()
        rows = (
            []
            if first is None or limit == 0
            else conn.execute(
                "SELECT seq, payload FROM entries WHERE store_key = ? AND seq >= ? ORDER BY seq LIMIT ?",
                (key, first[0], limit),
            ).fetchall()
        )
    except sqlite3.Error as exc:
        raise TranscriptError(503, "StoreUnreadable", "lab_store_read_failed", why=type(exc).__name__) from exc
    finally:
        conn.close()
    return Page(total, [{"seq": offset + i, "mark": None, "entry": _decode(p)} for i, (_, p) in enumerate(rows)])


def all_entries(db: Path, key: str) -> list[Any]:
    store = _elsewhere(db)
    if store is not None:
        entries = _from_store(store, lambda s: s.load_sync(_session_key(key)) or [])
        if not entries:
            raise TranscriptError(404, "NoSuchSession", "lab_no_session")
        return list(entries)
    conn = _connect(db)
    try:
        rows = conn.execute("SELECT payload FROM entries WHERE store_key = ? ORDER BY seq", (key,)).fetchall()
    except sqlite3.Error as exc:
        raise TranscriptError(503, "StoreUnreadable", "lab_store_read_failed", why=type(exc).__name__) from exc
    finally:
        conn.close()
    if not rows:
        raise TranscriptError(404, "NoSuchSession", "lab_no_session")
    return [_decode(p) for (p,) in rows]


def _uid(entry: Any) -> str | None:
    uid = entry.get("uuid") if isinstance(entry, dict) else None
    return uid if isinstance(uid, str) else None


def merge_marks(
    raw: list[Any], resumed: list[Any], *, dropped: Iterable[str], rewritten: Iterable[str], added: Iterable[str]
) -> list[dict[str, Any]]:
    """Interleave what pruning removed with what the model is sent, each entry marked.

    The result follows the resumed order; an entry pruning dropped appears at its raw position with
    mark ``"dropped"``, a rewritten one shows its rewritten form with mark ``"rewritten"``, one the
    pruning layer added has mark ``"added"``; unchanged entries have mark ``None``. ``seq`` is the raw
    position, or ``None`` for an added entry.
    """
    dropped, rewritten, added = set(dropped), set(rewritten), set(added)
    position = {uid: i for i, e in enumerate(raw) if (uid := _uid(e)) is not None}
    out: list[dict[str, Any]] = []
    r = 0  # next raw entry not yet emitted

    def flush_dropped_until(stop: int) -> None:
        nonlocal r
        while r < stop:
            if _uid(raw[r]) in dropped:
                out.append({"seq": r, "mark": "dropped", "entry": raw[r]})
            r += 1

    for entry in resumed:
        uid = _uid(entry)
        if uid is not None and uid in added:
            out.append({"seq": None, "mark": "added", "entry": entry})
            continue
        at = position.get(uid) if uid is not None else None
        if at is None or at < r:
            # Entries without a uuid are matched by position with the next raw entry.
            at = r
            while at < len(raw) and _uid(raw[at]) in dropped:
                at += 1
        flush_dropped_until(at)
        out.append(
            {
                "seq": at if at < len(raw) else None,
                "mark": "rewritten" if uid is not None and uid in rewritten else None,
                "entry": entry,
            }
        )
        r = max(r, at + 1)
    flush_dropped_until(len(raw))
    return out


_resumed_lock = threading.Lock()
_resumed_last: tuple[tuple[Any, ...], list[dict[str, Any]]] | None = None


def _store_stamp(db: Path, key: str) -> tuple[Any, ...]:
    store = _elsewhere(db)
    if store is not None:  # the store only appends: its count says whether the view is stale
        return ("count", _from_store(store, lambda s: s.entry_count(_session_key(key))))
    out: list[Any] = []
    for suffix in ("", "-wal"):
        try:
            st = os.stat(f"{db}{suffix}")
        except OSError:
            out.append(None)
        else:
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def resumed_page(db: Path, key: str, workspace: Path, offset: int, limit: int, *, everything: bool = True) -> Page:
    """The session as a resume would send it to the model, with pruning's removals marked; without
    ``everything``, only its conversation (``is_conversation``).

    Raises:
        TranscriptError: as ``raw_page``.
    """
    global _resumed_last
    from flower_magic.stores.resume import resume_view  # only this view needs the pruning layer

    cache_key = (str(db), key, str(workspace), _store_stamp(db, key))
    with _resumed_lock:
        marked = _resumed_last[1] if _resumed_last and _resumed_last[0] == cache_key else None
    if marked is None:
        raw = all_entries(db, key)
        # write=False: a viewer never spills files; trim=True shows what a default resume sends.
        view = resume_view(raw, workspace=workspace, trim=True, write=False)
        marked = merge_marks(raw, list(view.entries), dropped=view.dropped, rewritten=view.rewritten, added=view.added)
        with _resumed_lock:
            _resumed_last = (cache_key, marked)
    if everything:
        return Page(len(marked), marked[offset : offset + limit])
    shown = [m for m in marked if is_conversation(m["entry"])]
    return Page(len(shown), shown[offset : offset + limit], hidden=len(marked) - len(shown))
