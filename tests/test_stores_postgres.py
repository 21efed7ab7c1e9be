"""PostgresSessionStore on a real throw-away server (tests/pg.py): the SDK's conformance suite, the
guarantees it shares with the SQLite store, the schema's version table, and the resume view over it."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flower_magic.core.storage import StoreLocation
from flower_magic.stores import PostgresSessionStore, PruningSessionStore, SqliteSessionStore
from flower_magic.stores.postgres import SCHEMA_VERSION, SchemaTooNew, StoreUnreachable
from tests.pg import PgServer

KEY: Any = {"project_key": "proj", "session_id": "sess"}
SUB: Any = {**KEY, "subpath": "subagents/agent-1"}


@pytest.fixture
def opened() -> Iterator[list[Any]]:
    """Stores a test opened; all closed at the end."""
    stores: list[Any] = []
    yield stores
    for store in stores:
        store.close()


@pytest.fixture
def store(pg_url: str, opened: list[Any]) -> PostgresSessionStore:
    fresh = PostgresSessionStore(StoreLocation.parse(pg_url))
    opened.append(fresh)
    return fresh


def entry(uid: str | None, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "x", **fields}
    if uid is not None:
        out["uuid"] = uid
    return out


def _sql(url: str, statement: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement)
        return list(cur.fetchall()) if cur.description else []


@pytest.mark.anyio
async def test_sdk_conformance_suite_with_every_contract(pg_server: PgServer, opened: list[Any]) -> None:
    """Acceptance a: the SDK's suite, no contract skipped, each group on a fresh database."""
    from claude_agent_sdk.testing import run_session_store_conformance
    from claude_agent_sdk.types import SessionStore

    optional = ("list_sessions", "list_session_summaries", "delete", "list_subkeys")
    assert all(getattr(PostgresSessionStore, m) is not getattr(SessionStore, m) for m in optional)

    def make_store() -> PostgresSessionStore:
        fresh = PostgresSessionStore(StoreLocation.parse(pg_server.fresh_url()))
        opened.append(fresh)
        return fresh

    await run_session_store_conformance(make_store, skip_optional=frozenset())
    assert len(opened) == 15  # one probe + one store per contract group: nothing was skipped


@pytest.mark.anyio
async def test_replays_add_nothing_and_keep_mtime(store: PostgresSessionStore) -> None:
    """The SDK retries a failed append; a replay (whole or partial) must not duplicate rows or bump mtime."""
    await store.append(KEY, [entry("a", n=1), entry("b", n=2), entry("b", n=3)])
    (listed,) = await store.list_sessions("proj")
    await store.append(KEY, [entry("a", n=1), entry("b", n=2)])
    assert await store.list_sessions("proj") == [listed]
    await store.append(KEY, [entry("b", n=2), entry("c", n=4), entry(None, n=5), entry(None, n=5)])
    assert [e["n"] for e in store.load_sync(KEY) or []] == [1, 2, 4, 5, 5]
    assert store.entry_count(KEY) == 5


@pytest.mark.anyio
async def test_edge_values_round_trip_exactly(store: PostgresSessionStore) -> None:
    """Text, not jsonb: big integers, NaN, lone surrogates and NUL come back as appended."""
    odd = entry("e", big=2**70, neg=-(2**64), nan=math.nan, inf=math.inf, s="\ud800 \x00 ☃", nested=[{"k": None}])
    await store.append(KEY, [odd])
    (back,) = store.load_sync(KEY) or []
    assert math.isnan(back.pop("nan")) and math.isnan(odd.pop("nan"))
    assert back == odd
    assert store.holds_text(KEY, "\x00 ☃") and not store.holds_text(KEY, "absent")


@pytest.mark.anyio
async def test_subpaths_stay_apart_and_delete_cascades(store: PostgresSessionStore) -> None:
    await store.append(KEY, [entry("m")])
    await store.append(SUB, [entry("s")])
    await store.append({**KEY, "session_id": "sess2"}, [entry("o")])
    assert store.has_session("proj", "sess") and not store.has_session("proj", "subagents")
    assert [s["session_id"] for s in await store.list_sessions("proj")] == ["sess", "sess2"] or sorted(
        s["session_id"] for s in await store.list_sessions("proj")
    ) == ["sess", "sess2"]
    assert await store.list_subkeys(KEY) == ["subagents/agent-1"]
    await store.delete(KEY)
    assert store.load_sync(SUB) is None and await store.list_subkeys(KEY) == []
    assert store.has_session("proj", "sess2")
    assert store.projects() == ["proj"]


@pytest.mark.anyio
async def test_load_range_and_last_context(store: PostgresSessionStore) -> None:
    usage = {"input_tokens": 10, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 1}
    older = {"type": "assistant", "uuid": "a0", "message": {"usage": {"input_tokens": 100}}}
    await store.append(KEY, [older] + [entry(f"u{i}", i=i) for i in range(9)])
    await store.append(KEY, [{"type": "assistant", "uuid": "a1", "message": {"usage": usage}}, entry("z")])
    assert [e["i"] for e in store.load_range(KEY, 3, 4)] == [2, 3, 4, 5]
    assert store.load_range(KEY, 50, 4) == [] and store.load_range(KEY, 0, 0) == []
    with pytest.raises(ValueError):
        store.load_range(KEY, -1, 2)
    assert store.last_context("proj", "sess") == 16  # the newest usage, not the first
    assert store.last_context("proj", "nope") == 0


def test_appends_from_many_threads_and_processes_lose_nothing(pg_url: str, store: PostgresSessionStore) -> None:
    """Appends to one key from several writers at once: every entry once, seq gap-free in append order.
    (A subagent's key: no summary to fold, so the children need not import the SDK.)"""
    child = (
        "import asyncio, sys\n"
        "from flower_magic.core.storage import StoreLocation\n"
        "from flower_magic.stores.postgres import PostgresSessionStore\n"
        "s = PostgresSessionStore(StoreLocation.parse(sys.argv[1]))\n"
        "key = {'project_key': 'proj', 'session_id': 'sess', 'subpath': 'subagents/agent-1'}\n"
        "for i in range(15):\n"
        "    batch = [{'type': 'x', 'uuid': f'{sys.argv[2]}-{i}'}, {'type': 'x', 'uuid': 'shared'}]\n"
        "    asyncio.run(s.append(key, batch))\n"
        "s.close()\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", child, pg_url, f"p{n}"]) for n in range(2)]

    def thread_writer(n: int) -> None:
        for i in range(15):
            asyncio.run(store.append(SUB, [entry(f"t{n}-{i}"), entry("shared")]))

    threads = [threading.Thread(target=thread_writer, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    uids = [e["uuid"] for e in store.load_sync(SUB) or []]
    assert len(uids) == len(set(uids)) == 4 * 15 + 1
    seqs = _sql(pg_url, "SELECT seq FROM flower_entries ORDER BY seq")
    assert [s for (s,) in seqs] == list(range(len(uids)))


def test_schema_version_table_and_a_newer_schema_is_refused(pg_url: str, opened: list[Any]) -> None:
    """The first release writes version 1; a database a newer flower migrated is never written."""
    first = PostgresSessionStore(StoreLocation.parse(pg_url))
    opened.append(first)
    assert first.schema_version == SCHEMA_VERSION == 1
    assert _sql(pg_url, "SELECT version FROM flower_schema") == [(1,)]
    second = PostgresSessionStore(StoreLocation.parse(pg_url))  # opening again migrates nothing
    opened.append(second)
    assert _sql(pg_url, "SELECT version FROM flower_schema") == [(1,)]
    _sql(pg_url, "INSERT INTO flower_schema(version) VALUES (2)")
    for readonly in (False, True):
        with pytest.raises(SchemaTooNew) as caught:
            PostgresSessionStore(StoreLocation.parse(pg_url), readonly=readonly)
        assert caught.value.found == 2
    assert _sql(pg_url, "SELECT count(*) FROM flower_entries") == [(0,)]


def test_concurrent_first_opens_migrate_once(pg_url: str, opened: list[Any]) -> None:
    """Pods starting at once on an empty database: one migrates, the others wait for it and find it done."""
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def open_one() -> None:
        start.wait()
        try:
            opened.append(PostgresSessionStore(StoreLocation.parse(pg_url)))
        except BaseException as exc:  # collected: a thread's exception would be lost
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert _sql(pg_url, "SELECT version FROM flower_schema") == [(1,)]


def test_readonly_creates_nothing_and_refuses_to_write(pg_url: str, opened: list[Any]) -> None:
    with pytest.raises(StoreUnreachable, match="no flower session store"):
        PostgresSessionStore(StoreLocation.parse(pg_url), readonly=True)
    assert _sql(pg_url, "SELECT to_regclass('flower_schema') IS NULL") == [(True,)]
    writer = PostgresSessionStore(StoreLocation.parse(pg_url))
    opened.append(writer)
    asyncio.run(writer.append(KEY, [entry("a")]))
    reader = PostgresSessionStore(StoreLocation.parse(pg_url), readonly=True)
    opened.append(reader)
    assert reader.load_sync(KEY) == [entry("a")]
    with pytest.raises(ValueError, match="readonly"):
        asyncio.run(reader.append(KEY, [entry("b")]))


def test_a_wrong_password_is_said_at_once_without_it(pg_server: PgServer) -> None:
    wrong = "wrong-" + pg_server.password
    with pytest.raises(StoreUnreachable) as caught:
        PostgresSessionStore(StoreLocation.parse(pg_server.url("postgres", password=wrong)))
    said = str(caught.value) + repr(caught.value) + str(caught.value.__cause__ or "")
    assert "password authentication failed" in said
    assert wrong not in said and pg_server.password not in said


def test_close_is_idempotent_and_later_use_is_a_clear_error(store: PostgresSessionStore) -> None:
    store.close()
    store.close()
    with pytest.raises(ValueError, match="closed"):
        store.load_sync(KEY)


@pytest.mark.anyio
async def test_the_resume_view_is_the_same_over_postgres_as_over_sqlite(
    store: PostgresSessionStore, tmp_path: Path
) -> None:
    """PruningSessionStore wraps either store without knowing which: the same stored entries, the same
    view on load (outage debris pruned, made-up links re-pointed in the store)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    user = {"type": "user", "uuid": "u1", "parentUuid": None, "message": {"role": "user", "content": "hi"}}
    error = {
        "type": "assistant",
        "uuid": "e1",
        "parentUuid": "u1",
        "isApiErrorMessage": True,
        "message": {"role": "assistant", "content": [{"type": "text", "text": "API Error: Connection refused"}]},
    }
    reply = {
        "type": "assistant",
        "uuid": "a1",
        "parentUuid": "e1",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
    }
    views = []
    for base in (SqliteSessionStore(tmp_path / "sessions.db"), store):
        pruning = PruningSessionStore(base, workspace=ws)
        await pruning.append(KEY, [user, error, reply])
        views.append(await pruning.load(KEY))
        assert pruning.load_sync(KEY) == [user, error, reply]  # stored verbatim
        if isinstance(base, SqliteSessionStore):
            base.close()
    assert views[0] == views[1]
    assert [e.get("uuid") for e in views[1] or []] != ["u1", "e1", "a1"]  # the debris was pruned


@pytest.mark.anyio
async def test_a_sql_ascii_database_works_like_any_other(pg_server: PgServer, opened: list[Any]) -> None:
    """A database created with ``ENCODING 'SQL_ASCII'`` (an old cluster's default): psycopg hands back
    bytes for its text unless the store asks for UTF-8, and a replayed uuid then looked new (seen:
    a duplicate-key error on the second append)."""
    name = f"ascii_{uuid.uuid4().hex[:12]}"
    _sql(pg_server.url(), f"CREATE DATABASE {name} ENCODING SQL_ASCII LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    store = PostgresSessionStore(StoreLocation.parse(pg_server.url(name)))
    opened.append(store)
    await store.append(KEY, [entry("a", s="向日葵")])
    await store.append(KEY, [entry("a", s="向日葵"), entry("b")])
    assert store.load_sync(KEY) == [entry("a", s="向日葵"), entry("b")]
    assert [s["session_id"] for s in await store.list_sessions("proj")] == ["sess"]
    assert store.last_context("proj", "sess") == 0
