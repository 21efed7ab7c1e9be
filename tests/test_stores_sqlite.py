"""SqliteSessionStore: the SDK's conformance suite, our own guarantees, and a real CLI round trip."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flower_magic.stores import SqliteSessionStore
from flower_magic.testing import FakeAnthropic, text

KEY: Any = {"project_key": "proj", "session_id": "sess"}
SUB: Any = {**KEY, "subpath": "subagents/agent-1"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[list[SqliteSessionStore]]:
    """Stores a test opened; all closed at the end."""
    opened: list[SqliteSessionStore] = []
    yield opened
    for store in opened:
        store.close()


@pytest.fixture
def store(tmp_path: Path, stores: list[SqliteSessionStore]) -> SqliteSessionStore:
    opened = SqliteSessionStore(tmp_path / "runs" / "sessions.db")
    stores.append(opened)
    return opened


def entry(uid: str | None, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "x", **fields}
    if uid is not None:
        out["uuid"] = uid
    return out


def assistant(uid: str, input_tokens: int, cache_read: int = 0, cache_creation: int = 0) -> dict[str, Any]:
    usage = {
        "input_tokens": input_tokens,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_creation,
        "output_tokens": 7,
    }
    return {"type": "assistant", "uuid": uid, "message": {"role": "assistant", "usage": usage}}


async def mtime_of(store: SqliteSessionStore, key: Any) -> int:
    listed = {s["session_id"]: s["mtime"] for s in await store.list_sessions(key["project_key"])}
    return listed[key["session_id"]]


# -- the SDK's contract ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_sdk_conformance_suite_with_every_contract(tmp_path: Path, stores: list[SqliteSessionStore]) -> None:
    from claude_agent_sdk.testing import run_session_store_conformance
    from claude_agent_sdk.types import SessionStore

    optional = ("list_sessions", "list_session_summaries", "delete", "list_subkeys")
    # The suite skips an optional contract when the method is the Protocol's default; none may be.
    assert all(getattr(SqliteSessionStore, m) is not getattr(SessionStore, m) for m in optional)

    def make_store() -> SqliteSessionStore:
        fresh = SqliteSessionStore(tmp_path / f"conf-{len(stores)}" / "sessions.db")
        stores.append(fresh)
        return fresh

    await run_session_store_conformance(make_store, skip_optional=frozenset())
    assert len(stores) == 15  # one probe + one store per contract group: nothing was skipped


# -- dedupe ------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_replayed_batch_adds_nothing_and_keeps_mtime_and_summary(store: SqliteSessionStore) -> None:
    """The SDK retries a failed append up to 3 times; a replay must not duplicate rows or bump mtime."""
    batch = [entry("a", n=1, timestamp="2025-01-01T00:00:00.000Z"), entry("b", n=2)]
    await store.append(KEY, batch)
    mtime = await mtime_of(store, KEY)
    summaries = await store.list_session_summaries("proj")

    await store.append(KEY, batch)

    assert await store.load(KEY) == batch
    assert await mtime_of(store, KEY) == mtime
    assert await store.list_session_summaries("proj") == summaries


@pytest.mark.anyio
async def test_partly_replayed_batch_appends_only_the_new_entries(store: SqliteSessionStore) -> None:
    await store.append(KEY, [entry("a", n=1), entry("b", n=2)])
    await store.append(KEY, [entry("b", n=2), entry("c", n=3)])
    assert await store.load(KEY) == [entry("a", n=1), entry("b", n=2), entry("c", n=3)]
    assert store.entry_count(KEY) == 3


@pytest.mark.anyio
async def test_uuid_repeated_within_a_batch_is_stored_once(store: SqliteSessionStore) -> None:
    await store.append(KEY, [entry("a", n=1), entry("b", n=2), entry("a", n=3)])
    assert await store.load(KEY) == [entry("a", n=1), entry("b", n=2)]


@pytest.mark.anyio
async def test_entries_without_uuid_are_never_deduped(store: SqliteSessionStore) -> None:
    same = entry(None, n=1)
    await store.append(KEY, [same, same])
    await store.append(KEY, [same])
    assert await store.load(KEY) == [same, same, same]


@pytest.mark.anyio
async def test_uuid_dedupe_is_per_key(store: SqliteSessionStore) -> None:
    """A subagent transcript may carry an entry whose uuid is also in the main one; both are kept."""
    await store.append(KEY, [entry("a", n=1)])
    await store.append(SUB, [entry("a", n=1)])
    await store.append({"project_key": "other", "session_id": "sess"}, [entry("a", n=1)])
    assert await store.load(SUB) == [entry("a", n=1)]
    assert await store.load({"project_key": "other", "session_id": "sess"}) == [entry("a", n=1)]


@pytest.mark.anyio
async def test_unserialisable_batch_stores_nothing(store: SqliteSessionStore) -> None:
    with pytest.raises(TypeError):
        await store.append(KEY, [entry("a"), entry("b", bad=object())])
    assert await store.load(KEY) is None
    assert not store.has_session("proj", "sess")


# A failing example makes hypothesis import mypy_extensions, whose DeprecationWarning (an error here)
# would turn the failure report into an INTERNALERROR.
@pytest.mark.filterwarnings("ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning")
@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.tuples(st.one_of(st.none(), st.sampled_from("abcdefgh")), st.integers(0, 9)), max_size=6),
        max_size=6,
    )
)
def test_load_matches_a_model_of_dedupe_by_uuid(batches: list[list[tuple[str | None, int]]]) -> None:
    """Any sequence of batches loads back as: call order, first copy of each uuid, every uuid-less entry."""
    expected: list[dict[str, Any]] = []
    seen: set[str] = set()
    for batch in batches:
        for uid, n in batch:
            if uid is None or uid not in seen:
                expected.append(entry(uid, n=n))
            if uid is not None:
                seen.add(uid)

    async def run(store: SqliteSessionStore) -> list[Any] | None:
        for batch in batches:
            await store.append(KEY, [entry(uid, n=n) for uid, n in batch])
        return await store.load(KEY)

    with tempfile.TemporaryDirectory() as tmp, SqliteSessionStore(Path(tmp) / "s.db") as store:
        assert asyncio.run(run(store)) == (expected or None)
        assert store.entry_count(KEY) == len(expected)


# Each group in its own entry: a value the fast decoder refuses sends its whole row to the slow one.
ODD_ENTRIES = [
    {
        "type": "x",
        "uuid": "numbers",
        "big": [2**64, 2**70 + 1, -(2**63) - 1, 1234567890123456789, 10**30],
        "float": [0.1, 1e-300, 1.7976931348623157e308, -0.0],
        "nested": {"a": [{"b": [[], {}, None, True, False]}]},
    },
    {"type": "x", "uuid": "text", "text": ["学习 continues", "emoji 🌸", "nul \x00 byte", '\\ " quotes']},
    {"type": "x", "uuid": "surrogate", "text": "\ud800 lone surrogate"},
    {"type": "x", "uuid": "special", "nan": math.nan, "inf": math.inf},
]


def assert_odd_entries_round_trip(loaded: list[Any] | None) -> None:
    assert loaded is not None
    got = {e["uuid"]: e for e in loaded if e.get("uuid") in {"numbers", "text", "surrogate", "special"}}
    assert got["numbers"] == ODD_ENTRIES[0]
    assert all(type(v) is int for v in got["numbers"]["big"])  # exact ints, never floats
    assert got["text"] == ODD_ENTRIES[1] and got["surrogate"] == ODD_ENTRIES[2]
    assert math.isnan(got["special"]["nan"]) and got["special"]["inf"] == math.inf


@pytest.mark.anyio
async def test_json_edge_values_round_trip_exactly(store: SqliteSessionStore) -> None:
    """Deep-equal is the SDK's contract: big ints, lone surrogates, NaN and the like come back as stored."""
    await store.append(KEY, ODD_ENTRIES)
    assert_odd_entries_round_trip(await store.load(KEY))
    assert_odd_entries_round_trip(store.load_range(KEY, 0, 10))


WITHOUT_ORJSON = textwrap.dedent(
    """
    import asyncio, json, sys
    sys.modules["orjson"] = None  # as on a machine without it
    from flower_magic.stores import SqliteSessionStore

    path, entries = sys.argv[1], json.loads(sys.stdin.read())
    with SqliteSessionStore(path) as store:
        key = {"project_key": "proj", "session_id": "sess"}
        asyncio.run(store.append(key, entries))
        print(json.dumps({"load": store.load_sync(key), "page": store.load_range(key, 1, 5)}))
    """
)


def test_json_edge_values_round_trip_without_orjson(tmp_path: Path) -> None:
    entries = [entry("first"), *ODD_ENTRIES]
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_ORJSON, str(tmp_path / "sessions.db")],
        input=json.dumps(entries),
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert_odd_entries_round_trip(result["load"])
    assert_odd_entries_round_trip(result["page"])
    assert result["load"][0] == entry("first")


# -- mtime -------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_mtime_strictly_increases_over_a_tight_loop_and_summaries_share_it(
    store: SqliteSessionStore,
) -> None:
    keys = [{"project_key": "proj", "session_id": f"s{i:03d}"} for i in range(150)]
    for key in keys:
        await store.append(key, [entry(None, n=1)])
    listed = {s["session_id"]: s["mtime"] for s in await store.list_sessions("proj")}
    mtimes = [listed[k["session_id"]] for k in keys]
    assert all(isinstance(m, int) and m > 1e12 for m in mtimes)
    assert all(later > earlier for earlier, later in itertools.pairwise(mtimes))
    summaries = {s["session_id"]: s["mtime"] for s in await store.list_session_summaries("proj")}
    assert summaries == listed


def test_mtime_clock_never_repeats_or_goes_back(store: SqliteSessionStore) -> None:
    """Thousands of stamps inside the same millisecond must still be distinct and increasing.

    Appends are too slow (each commits to disk) to land in one millisecond reliably, so this drives
    the store's clock directly.
    """
    before = time.time_ns() // 1_000_000
    stamps = [store._next_mtime() for _ in range(5000)]
    assert stamps[0] >= before
    assert all(later > earlier for earlier, later in itertools.pairwise(stamps))


@pytest.mark.anyio
async def test_key_mtime_keeps_rising_after_another_writer_stamped_it_ahead(store: SqliteSessionStore) -> None:
    """Another process (or a clock that has since stepped back) left a later mtime: ours goes past it."""
    await store.append(KEY, [entry("a")])
    ahead = time.time_ns() // 1_000_000 + 86_400_000
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE meta SET mtime = ? WHERE store_key = 'proj/sess'", (ahead,))
    db.close()
    await store.append(KEY, [entry("b")])
    assert await mtime_of(store, KEY) == ahead + 1
    (summary,) = await store.list_session_summaries("proj")
    assert summary["mtime"] == ahead + 1


@pytest.mark.anyio
async def test_subpath_append_leaves_main_mtime_and_summary_alone(store: SqliteSessionStore) -> None:
    await store.append(KEY, [entry("m", timestamp="2025-01-01T00:00:00.000Z")])
    mtime = await mtime_of(store, KEY)
    summaries = await store.list_session_summaries("proj")
    await store.append(SUB, [entry("s", timestamp="2025-02-01T00:00:00.000Z", customTitle="sub")])
    assert await mtime_of(store, KEY) == mtime
    assert await store.list_session_summaries("proj") == summaries


# -- keys, subpaths, delete --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_subpaths_are_isolated_from_main_and_from_each_other(store: SqliteSessionStore) -> None:
    sub2 = {**KEY, "subpath": "subagents/agent-2"}
    await store.append(KEY, [entry("m")])
    await store.append(SUB, [entry("s1")])
    await store.append(sub2, [entry("s2")])

    assert await store.load(KEY) == [entry("m")]
    assert await store.load(SUB) == [entry("s1")]
    assert await store.load(sub2) == [entry("s2")]
    assert await store.load({**KEY, "subpath": "subagents/nope"}) is None
    assert [s["session_id"] for s in await store.list_sessions("proj")] == ["sess"]
    assert await store.list_subkeys(KEY) == ["subagents/agent-1", "subagents/agent-2"]
    assert store.entry_count(SUB) == 1

    await store.delete(SUB)
    assert await store.load(SUB) is None
    assert await store.load(KEY) == [entry("m")]
    assert await store.list_subkeys(KEY) == ["subagents/agent-2"]


@pytest.mark.anyio
async def test_prefix_sharing_and_case_differing_keys_stay_apart(store: SqliteSessionStore) -> None:
    """Key ranges are byte ranges: 'sess' must not reach 'sess2', 'proj' must not reach 'proj-x' or 'PROJ'."""
    neighbours = [
        {"project_key": "proj", "session_id": "sess2"},
        {"project_key": "proj", "session_id": "sess.x"},
        {"project_key": "proj-x", "session_id": "sess"},
        {"project_key": "PROJ", "session_id": "sess"},
        {"project_key": "proj", "session_id": "sess2", "subpath": "subagents/agent-9"},
    ]
    await store.append(KEY, [entry("m")])
    await store.append(SUB, [entry("s")])
    for key in neighbours:
        await store.append(key, [entry("n")])

    assert sorted(s["session_id"] for s in await store.list_sessions("proj")) == ["sess", "sess.x", "sess2"]
    assert await store.list_subkeys(KEY) == ["subagents/agent-1"]
    assert store.projects() == ["PROJ", "proj", "proj-x"]

    await store.delete(KEY)
    assert await store.load(KEY) is None and await store.load(SUB) is None
    for key in neighbours:
        assert await store.load(key) == [entry("n")], key
    assert sorted(s["session_id"] for s in await store.list_session_summaries("proj")) == ["sess.x", "sess2"]


@pytest.mark.anyio
async def test_delete_then_append_starts_the_key_afresh(store: SqliteSessionStore) -> None:
    await store.append(KEY, [entry("a"), entry("b")])
    await store.delete(KEY)
    await store.append(KEY, [entry("a", again=True)])
    assert await store.load(KEY) == [entry("a", again=True)]
    assert store.load_range(KEY, 0, 10) == [entry("a", again=True)]


# -- synchronous helpers -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_has_session_means_a_main_transcript_is_stored(store: SqliteSessionStore) -> None:
    assert not store.has_session("proj", "sess")
    await store.append(SUB, [entry("s")])
    assert not store.has_session("proj", "sess")  # only a subagent's transcript
    await store.append(KEY, [entry("m")])
    assert store.has_session("proj", "sess")
    assert not store.has_session("proj", "other") and not store.has_session("other", "sess")
    await store.delete(KEY)
    assert not store.has_session("proj", "sess")


@pytest.mark.anyio
async def test_last_context_is_the_newest_nonzero_usage(store: SqliteSessionStore) -> None:
    assert store.last_context("proj", "sess") == 0
    await store.append(KEY, [assistant("a1", 100, 1000, 10), entry("u1")])
    assert store.last_context("proj", "sess") == 1110
    await store.append(KEY, [assistant("a2", 5, 2000, 300), entry("u2"), entry("att", message="not a dict")])
    assert store.last_context("proj", "sess") == 2305
    # A synthetic API-error reply has zero usage: it is skipped, the real one before it counts.
    await store.append(KEY, [assistant("synthetic", 0), entry("u3")])
    assert store.last_context("proj", "sess") == 2305
    # Usage of a subagent transcript is not the main session's context.
    await store.append(SUB, [assistant("sub", 99999)])
    assert store.last_context("proj", "sess") == 2305


@pytest.mark.anyio
async def test_last_context_scans_only_the_newest_entries(store: SqliteSessionStore) -> None:
    await store.append(KEY, [assistant("a", 500)])
    await store.append(KEY, [entry(f"filler-{i}") for i in range(59)])
    assert store.last_context("proj", "sess") == 500  # the 60th newest
    await store.append(KEY, [entry("one-more")])
    assert store.last_context("proj", "sess") == 0  # now the 61st
    assert store.last_context("proj", "sess", scan=61) == 500


@pytest.mark.anyio
async def test_load_range_pages_through_in_order(store: SqliteSessionStore) -> None:
    entries = [entry(f"e{i}", n=i) for i in range(1000)]
    for i in range(0, 1000, 37):
        await store.append(KEY, entries[i : i + 37])

    pages = [store.load_range(KEY, offset, 64) for offset in range(0, 1000, 64)]
    assert [e for page in pages for e in page] == entries
    assert store.load_range(KEY, 990, 64) == entries[990:]
    assert store.load_range(KEY, 1000, 64) == []
    assert store.load_range(KEY, 5, 0) == []
    assert store.load_range({"project_key": "proj", "session_id": "nope"}, 0, 10) == []
    assert store.entry_count(KEY) == 1000
    assert store.entry_count({"project_key": "proj", "session_id": "nope"}) == 0
    with pytest.raises(ValueError, match="offset"):
        store.load_range(KEY, -1, 10)


@pytest.mark.anyio
async def test_load_range_counts_rows_not_seq_numbers(store: SqliteSessionStore) -> None:
    """A file edited by another tool may have holes in seq; pages are by position, not by seq value."""
    await store.append(KEY, [entry(f"e{i}", n=i) for i in range(10)])
    with sqlite3.connect(store.path) as db:
        db.execute("DELETE FROM entries WHERE store_key = 'proj/sess' AND seq IN (0, 3, 4)")
    db.close()
    left = [entry(f"e{i}", n=i) for i in (1, 2, 5, 6, 7, 8, 9)]
    assert store.load_range(KEY, 0, 3) == left[:3]
    assert store.load_range(KEY, 3, 3) == left[3:6]
    assert store.load_range(KEY, 6, 3) == left[6:]
    await store.append(KEY, [entry("new")])  # and appends still go after the last row
    assert store.load_sync(KEY) == [*left, entry("new")]


@pytest.mark.anyio
async def test_projects_lists_each_project_once(store: SqliteSessionStore) -> None:
    assert store.projects() == []
    await store.append({"project_key": "-b", "session_id": "1"}, [entry("x")])
    await store.append({"project_key": "-a", "session_id": "1"}, [entry("x")])
    await store.append({"project_key": "-a", "session_id": "2", "subpath": "subagents/agent-1"}, [entry("x")])
    assert store.projects() == ["-a", "-b"]


@pytest.mark.anyio
async def test_load_does_not_block_the_event_loop(store: SqliteSessionStore) -> None:
    """A 100K-entry resume must not freeze a Jupyter kernel: load() runs SQLite off the loop."""
    await store.append(KEY, [entry(f"e{i}", text="x" * 200) for i in range(20_000)])
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = ticks
    loaded = await store.load(KEY)
    during = ticks - before
    done.set()
    await task
    assert loaded is not None and len(loaded) == 20_000
    assert during > 1  # the loop kept turning while the entries were read and decoded


# -- files, reopening, compatibility -----------------------------------------------------------------


@pytest.mark.anyio
async def test_reopened_store_continues_and_dedupes_against_the_first(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    with SqliteSessionStore(path) as first:
        await first.append(KEY, [entry("a", n=1), entry("b", n=2)])
        await first.append(SUB, [entry("s")])
        first_mtime = await mtime_of(first, KEY)
    with SqliteSessionStore(path) as second:
        assert await second.load(KEY) == [entry("a", n=1), entry("b", n=2)]
        await second.append(KEY, [entry("b", n=2), entry("c", n=3)])
        assert await second.load(KEY) == [entry("a", n=1), entry("b", n=2), entry("c", n=3)]
        assert await mtime_of(second, KEY) > first_mtime
        assert await second.list_subkeys(KEY) == ["subagents/agent-1"]
        with sqlite3.connect(path) as raw:
            seqs = [s for (s,) in raw.execute("SELECT seq FROM entries WHERE store_key = 'proj/sess' ORDER BY seq")]
        raw.close()
        assert seqs == [0, 1, 2]


ORIGINAL_SCHEMA = """
CREATE TABLE entries (store_key TEXT NOT NULL, seq INTEGER NOT NULL, uid TEXT, payload TEXT NOT NULL,
                      PRIMARY KEY (store_key, seq));
CREATE UNIQUE INDEX entries_uid ON entries (store_key, uid) WHERE uid IS NOT NULL;
CREATE TABLE meta (store_key TEXT PRIMARY KEY, mtime INTEGER NOT NULL, next_seq INTEGER NOT NULL);
CREATE TABLE summaries (project_key TEXT NOT NULL, session_id TEXT NOT NULL, mtime INTEGER NOT NULL,
                        data TEXT NOT NULL, PRIMARY KEY (project_key, session_id));
"""


def write_like_the_original(path: Path, entries: list[dict[str, Any]], *, with_summary: bool) -> None:
    """A sessions.db as flower writes it (reference §1.4): default json.dumps, summary = whole entry."""
    from claude_agent_sdk import fold_session_summary

    db = sqlite3.connect(path)
    db.executescript(ORIGINAL_SCHEMA)
    db.executemany(
        "INSERT INTO entries VALUES (?, ?, ?, ?)",
        [("proj/sess", i, e.get("uuid"), json.dumps(e)) for i, e in enumerate(entries)],
    )
    db.execute("INSERT INTO meta VALUES ('proj/sess', 1700000000000, ?)", (len(entries),))
    if with_summary:
        summary = fold_session_summary(None, KEY, entries)  # type: ignore[arg-type]
        summary["mtime"] = 1700000000000
        db.execute("INSERT INTO summaries VALUES ('proj', 'sess', 1700000000000, ?)", (json.dumps(summary),))
    db.commit()
    db.close()


OLD = [
    entry("o1", timestamp="2024-05-01T10:00:00.000Z", cwd="/w", message={"role": "user", "content": "你好"}),
    assistant("o2", 40, 900),
]


# Sync tests driving asyncio.run: pytest-jupyter's collection hook (loaded for the server tests)
# drops the parameters of parametrized async tests.
@pytest.mark.parametrize("with_summary", [True, False], ids=["with-summary", "no-summary"])
def test_opens_a_db_written_by_the_original(tmp_path: Path, with_summary: bool) -> None:
    asyncio.run(_opens_a_db_written_by_the_original(tmp_path, with_summary))


async def _opens_a_db_written_by_the_original(tmp_path: Path, with_summary: bool) -> None:
    path = tmp_path / "sessions.db"
    write_like_the_original(path, OLD, with_summary=with_summary)
    with SqliteSessionStore(path) as store:
        assert await store.load(KEY) == OLD
        assert store.has_session("proj", "sess") and store.last_context("proj", "sess") == 940
        await store.append(KEY, [OLD[1], entry("n1", timestamp="2024-05-02T10:00:00.000Z")])
        assert await store.load(KEY) == [*OLD, entry("n1", timestamp="2024-05-02T10:00:00.000Z")]
        (summary,) = await store.list_session_summaries("proj")
    # Whether the original left a sidecar or not, it still starts at the first old entry.
    assert summary["session_id"] == "sess"
    assert summary["data"]["created_at"] == 1714557600000
    assert summary["data"]["cwd"] == "/w"


@pytest.mark.anyio
async def test_unreadable_summary_rows_are_rebuilt_or_skipped(store: SqliteSessionStore) -> None:
    other = {"project_key": "proj", "session_id": "other"}
    await store.append(KEY, [entry("a", timestamp="2024-05-01T10:00:00.000Z")])
    await store.append(other, [entry("o")])
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE summaries SET data = '{not json'")
    db.close()
    assert await store.list_session_summaries("proj") == []  # skipped, not an exception

    await store.append(KEY, [entry("b", timestamp="2024-06-01T10:00:00.000Z")])
    (summary,) = await store.list_session_summaries("proj")
    assert summary["session_id"] == "sess"
    assert summary["data"]["created_at"] == 1714557600000  # folded again from the first entry


@pytest.mark.anyio
async def test_writes_a_db_the_original_can_read(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    with SqliteSessionStore(path) as store:
        await store.append(KEY, OLD)
        await store.append(SUB, [entry("s")])
    db = sqlite3.connect(path)
    try:
        columns = {
            table: [(r[1], r[2], r[3], r[5]) for r in db.execute(f"PRAGMA table_info({table})")]
            for table in ("entries", "meta", "summaries")
        }
        assert columns == {
            "entries": [
                ("store_key", "TEXT", 1, 1),
                ("seq", "INTEGER", 1, 2),
                ("uid", "TEXT", 0, 0),
                ("payload", "TEXT", 1, 0),
            ],
            "meta": [("store_key", "TEXT", 0, 1), ("mtime", "INTEGER", 1, 0), ("next_seq", "INTEGER", 1, 0)],
            "summaries": [
                ("project_key", "TEXT", 1, 1),
                ("session_id", "TEXT", 1, 2),
                ("mtime", "INTEGER", 1, 0),
                ("data", "TEXT", 1, 0),
            ],
        }
        (index_sql,) = db.execute("SELECT sql FROM sqlite_master WHERE name = 'entries_uid'").fetchone()
        assert "UNIQUE" in index_sql and "WHERE uid IS NOT NULL" in index_sql
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        # What the original reads: payloads by seq, next_seq, and a summary it can fold again.
        payloads = db.execute("SELECT payload FROM entries WHERE store_key = 'proj/sess' ORDER BY seq").fetchall()
        assert [json.loads(p) for (p,) in payloads] == OLD
        next_seq, mtime = db.execute("SELECT next_seq, mtime FROM meta WHERE store_key = 'proj/sess'").fetchone()
        assert next_seq == 2
        (data,) = db.execute("SELECT data FROM summaries WHERE session_id = 'sess'").fetchone()
    finally:
        db.close()
    from claude_agent_sdk import fold_session_summary

    # The original returns the data column as is: the whole summary entry, stamped on the shared clock.
    assert json.loads(data)["session_id"] == "sess" and json.loads(data)["mtime"] == mtime
    refolded = fold_session_summary(json.loads(data), KEY, [entry("later")])
    assert refolded["session_id"] == "sess" and refolded["data"]["created_at"] == 1714557600000


def test_unwritable_folder_is_named_in_the_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    target = blocker / "runs" / "sessions.db"
    with pytest.raises(OSError, match=str(blocker / "runs")):
        SqliteSessionStore(target)


def test_path_that_is_a_folder_is_named_in_the_error(tmp_path: Path) -> None:
    folder = tmp_path / "sessions.db"
    folder.mkdir()
    with pytest.raises(OSError, match=str(folder)):
        SqliteSessionStore(folder)


@pytest.mark.anyio
async def test_unreadable_file_is_set_aside_and_a_fresh_store_starts(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    junk = b"this is not an sqlite database\x00" * 200
    path.write_bytes(junk)
    with SqliteSessionStore(path) as store:
        assert store.recovered_from is not None and store.recovered_from.read_bytes() == junk
        assert store.recovered_from.parent == tmp_path and "corrupt" in store.recovered_from.name
        await store.append(KEY, [entry("a")])
        assert await store.load(KEY) == [entry("a")]


# -- readonly ----------------------------------------------------------------------------------------


def test_readonly_on_a_missing_file_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "sessions.db"
    with pytest.raises(FileNotFoundError, match=str(path)):
        SqliteSessionStore(path, readonly=True)
    assert not path.parent.exists()


def test_readonly_on_a_foreign_database_says_so(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t(x)")
    db.close()
    with pytest.raises(ValueError, match="not a session store"):
        SqliteSessionStore(path, readonly=True)
    with sqlite3.connect(path) as db:
        assert [n for (n,) in db.execute("SELECT name FROM sqlite_master")] == ["t"]
    db.close()


@pytest.mark.anyio
async def test_readonly_reads_live_data_and_refuses_to_write(store: SqliteSessionStore) -> None:
    await store.append(KEY, [assistant("a", 10, 20)])
    with SqliteSessionStore(store.path, readonly=True) as reader:
        assert reader.is_readonly
        assert reader.has_session("proj", "sess") and reader.last_context("proj", "sess") == 30
        await store.append(KEY, [entry("b")])  # the writer keeps going; the reader sees commits
        assert await reader.load(KEY) == [assistant("a", 10, 20), entry("b")]
        assert reader.load_range(KEY, 1, 5) == [entry("b")]
        assert [s["session_id"] for s in await reader.list_sessions("proj")] == ["sess"]
        with pytest.raises(ValueError, match="readonly"):
            await reader.append(KEY, [entry("c")])
        with pytest.raises(ValueError, match="readonly"):
            await reader.delete(KEY)
    assert store.entry_count(KEY) == 2


@pytest.mark.anyio
async def test_readonly_opens_paths_that_need_uri_quoting(tmp_path: Path) -> None:
    path = tmp_path / "my run #1 %20?x" / "sessions.db"
    with SqliteSessionStore(path) as writer:
        await writer.append(KEY, [entry("a")])
        with SqliteSessionStore(path, readonly=True) as reader:
            assert reader.load_sync(KEY) == [entry("a")]


def test_close_is_idempotent_and_later_use_is_a_clear_error(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "sessions.db")
    store.close()
    store.close()
    with pytest.raises(ValueError, match="closed"):
        store.has_session("proj", "sess")


# -- several processes -------------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from flower_magic.stores import SqliteSessionStore

    db, tag, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    while not go.exists():
        time.sleep(0.002)

    async def main():
        store = SqliteSessionStore(db)  # both processes may create the file and schema at once
        key = {"project_key": "proj", "session_id": "shared"}
        for i in range(0, count, 5):
            await store.append(key, [{"type": "x", "uuid": f"{tag}-{j}", "tag": tag, "i": j}
                                     for j in range(i, min(i + 5, count))])
            if i % 100 == 0:  # the same replayed batch from both processes is stored once
                await store.append(key, [{"type": "x", "uuid": f"both-{i}", "tag": "both"}])
        store.close()

    asyncio.run(main())
    """
)


def test_two_processes_appending_to_one_db_lose_nothing(tmp_path: Path) -> None:
    """Parallel runs share one sessions.db: seq must never collide and no batch may be lost."""
    path = tmp_path / "runs" / "sessions.db"
    go = tmp_path / "go"
    children = [
        subprocess.Popen([sys.executable, "-c", CHILD, str(path), tag, "500", str(go)], stderr=subprocess.PIPE)
        for tag in ("p1", "p2")
    ]
    go.touch()
    for child in children:
        _, err = child.communicate(timeout=240)
        assert child.returncode == 0, err.decode()

    with SqliteSessionStore(path) as store:
        loaded = store.load_sync({"project_key": "proj", "session_id": "shared"})
    assert loaded is not None
    for tag in ("p1", "p2"):
        mine = [e["i"] for e in loaded if e["tag"] == tag]
        assert mine == list(range(500))  # all there, in each writer's own order
    assert sorted(e["uuid"] for e in loaded if e["tag"] == "both") == sorted(f"both-{i}" for i in range(0, 500, 100))
    assert len(loaded) == 1000 + 5
    with sqlite3.connect(path) as db:
        seqs = [s for (s,) in db.execute("SELECT seq FROM entries WHERE store_key = 'proj/shared' ORDER BY seq")]
        (next_seq,) = db.execute("SELECT next_seq FROM meta WHERE store_key = 'proj/shared'").fetchone()
    db.close()
    assert seqs == list(range(1005)) and next_seq == 1005


# -- imports -----------------------------------------------------------------------------------------

IMPORT_PROBE = textwrap.dedent(
    """
    import asyncio, sqlite3, sys
    from flower_magic.stores import SqliteSessionStore

    db, seen = sys.argv[1], []

    class Probe:  # sees the moment claude_agent_sdk is first imported, and tries the write lock then
        def find_spec(self, name, path=None, target=None):
            if name == "claude_agent_sdk" and not seen:
                other = sqlite3.connect(db, timeout=0, isolation_level=None)
                try:
                    other.execute("BEGIN IMMEDIATE")
                    other.execute("ROLLBACK")
                    seen.append("free")
                except sqlite3.OperationalError:
                    seen.append("locked")
                other.close()
            return None

    store = SqliteSessionStore(db)
    sys.meta_path.insert(0, Probe())
    asyncio.run(store.append({"project_key": "p", "session_id": "s"}, [{"type": "x"}]))
    store.close()
    print(seen)
    """
)


def test_first_append_imports_the_sdk_before_taking_the_write_lock(tmp_path: Path) -> None:
    """The SDK import takes seconds on a busy machine; under the lock it stalled other processes past 10 s."""
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE, str(tmp_path / "sessions.db")], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['free']"


def test_importing_the_stores_package_does_not_import_the_sdk() -> None:
    code = "import sys, flower_magic.stores; print('claude_agent_sdk' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- the real CLI ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.anyio
async def test_real_cli_mirrors_into_the_store_and_resumes_from_it_alone(
    fake_api: FakeAnthropic, tmp_path: Path, store: SqliteSessionStore
) -> None:
    from claude_agent_sdk import (
        ClaudeAgentOptions,
        ClaudeSDKClient,
        ResultMessage,
        SystemMessage,
        project_key_for_directory,
    )

    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    options = ClaudeAgentOptions(
        cwd=str(ws),
        setting_sources=[],
        env=fake_api.env(home),
        session_store=store,
        session_store_flush="eager",
    )

    async def turn(opts: ClaudeAgentOptions, prompt: str) -> tuple[str, ResultMessage]:
        session_id, result = "", None
        async with ClaudeSDKClient(opts) as client:
            await client.query(prompt)
            async for message in client.receive_response():
                if isinstance(message, SystemMessage) and message.subtype == "init":
                    session_id = message.data["session_id"]
                if isinstance(message, ResultMessage):
                    result = message
        assert result is not None and not result.is_error, result
        return session_id, result

    fake_api.add(text("noted: the word is pelican"))
    sid, _ = await turn(options, "remember the word pelican")
    pk = project_key_for_directory(str(ws))
    assert store.has_session(pk, sid)
    stored = store.load_sync({"project_key": pk, "session_id": sid})
    assert stored is not None and any("pelican" in json.dumps(e) for e in stored)
    assert store.last_context(pk, sid) > 0

    shutil.rmtree(home / ".claude" / "projects")  # the CLI's own copy is gone; only the store has it
    fake_api.add(text("the word was pelican"))
    options.resume = sid
    resumed_sid, _ = await turn(options, "which word did I ask you to remember?")

    assert resumed_sid == sid
    assert "remember the word pelican" in fake_api.requests[-1].all_text
    after = store.load_sync({"project_key": pk, "session_id": sid})
    assert after is not None and len(after) > len(stored)
    assert any("which word did I ask" in json.dumps(e) for e in after)


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_emoji_workspace_resumes_from_the_store_alone(fake_api: FakeAnthropic, tmp_path: Path) -> None:
    """Guards issue 16: Claude Code files a workspace named with an emoji under another key than the
    SDK asks the store for on resume (UTF-16 units against code points); the resume found nothing and
    the conversation was lost wherever the CLI's own copy was gone."""
    from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, ResultMessage, SystemMessage

    from flower_magic.core.project import project_key, sdk_project_key
    from flower_magic.stores import PruningSessionStore

    home, ws = tmp_path / "home dir", tmp_path / "数据 清洗 🌻 with spaces"
    home.mkdir()
    ws.mkdir()
    assert project_key(ws) != sdk_project_key(ws)
    store = PruningSessionStore(tmp_path / "sessions.db", workspace=ws)
    options = ClaudeAgentOptions(
        cwd=str(ws), setting_sources=[], env=fake_api.env(home), session_store=store, session_store_flush="eager"
    )

    async def turn(prompt: str) -> str:
        session_id, result = "", None
        async with ClaudeSDKClient(options) as client:
            await client.query(prompt)
            async for message in client.receive_response():
                if isinstance(message, SystemMessage) and message.subtype == "init":
                    session_id = message.data["session_id"]
                if isinstance(message, ResultMessage):
                    result = message
        assert result is not None and not result.is_error, result
        return session_id

    try:
        fake_api.add(text("noted: the word is pelican"))
        sid = await turn("remember the word pelican")
        assert store.has_session(project_key(ws), sid)  # where the CLI filed it, and where we look
        shutil.rmtree(home / ".claude" / "projects")  # only the store has it now
        fake_api.add(text("the word was pelican"))
        options.resume = sid
        assert await turn("which word did I ask you to remember?") == sid
        assert "remember the word pelican" in fake_api.requests[-1].all_text
        assert store.last_report  # the resume went through the store's load
        assert store.projects() == [project_key(ws)]  # one workspace, one key
    finally:
        store.close()


@pytest.mark.slow
def test_on_a_network_filesystem_the_store_keeps_a_rollback_journal(tmp_path: Path) -> None:
    """Issue 16, build item 3: WAL's shared memory does not work on a network filesystem. A store made
    on a local disk (WAL) and then moved there is switched to a rollback journal when opened, and
    works as before; locally it stays WAL."""
    from tests.netfs import loopback_sshfs

    key = {"project_key": "p", "session_id": "s"}
    local = SqliteSessionStore(tmp_path / "local" / "sessions.db")
    try:
        assert (local.journal_mode, local.on_network_fs) == ("wal", False)
        asyncio.run(local.append(key, [{"type": "user", "uuid": "u1"}]))  # type: ignore[arg-type,list-item]
    finally:
        local.close()
    assert (tmp_path / "local" / "sessions.db").read_bytes()[18:20] == b"\x02\x02"  # WAL in the file header
    with loopback_sshfs(tmp_path / "net") as mnt:
        (mnt / "runs").mkdir()
        shutil.copy(tmp_path / "local" / "sessions.db", mnt / "runs" / "sessions.db")
        store = SqliteSessionStore(mnt / "runs" / "sessions.db")
        try:
            assert store.on_network_fs and store.mount is not None and store.mount.fstype == "fuse.sshfs"
            assert store.journal_mode == "delete"
            asyncio.run(store.append(key, [{"type": "user", "uuid": "u2"}]))  # type: ignore[arg-type,list-item]
            assert [e["uuid"] for e in store.load_sync(key) or []] == ["u1", "u2"]  # type: ignore[arg-type,typeddict-item]
        finally:
            store.close()
        assert (mnt / "runs" / "sessions.db").read_bytes()[18:20] == b"\x01\x01"
        assert sorted(p.name for p in (mnt / "runs").iterdir()) == ["sessions.db"]  # no -wal, no -shm
        reader = SqliteSessionStore(mnt / "runs" / "sessions.db", readonly=True)
        try:
            assert reader.has_session("p", "s")
        finally:
            reader.close()


def test_holds_text_finds_what_was_said_as_stored(tmp_path: Path) -> None:
    """Non-ASCII, quotes and newlines are stored escaped; the search escapes the same way."""
    store = SqliteSessionStore(tmp_path / "s.db")
    key = {"project_key": "p", "session_id": "s"}
    said = '顺便 "支持" Y\n第二行'
    try:
        store._append(key, [{"type": "user", "uuid": "u1", "message": {"role": "user", "content": said}}])  # type: ignore[arg-type,list-item]
        assert store.holds_text(key, said)  # type: ignore[arg-type]
        assert store.holds_text(key, "支持")  # type: ignore[arg-type]
        assert not store.holds_text(key, "没说过")  # type: ignore[arg-type]
        assert not store.holds_text({"project_key": "p", "session_id": "other"}, "支持")  # type: ignore[arg-type]
    finally:
        store.close()
