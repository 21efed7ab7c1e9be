"""Benchmark SqliteSessionStore: append throughput, load() latency, load_range() page latency.

Run ``python bench/bench_store.py`` (``--quick`` for a smaller run, ``--no-orjson`` to measure the json-module
decoder a machine without orjson uses). Prints a table; asserts nothing.
Entries are shaped like the CLI's transcript lines (about 1.2 KB of JSON each, a uuid on every one): half
assistant replies with usage, half tool results.
Target from issue 2 (acceptance h): ``load()`` of a 100K-entry session in at most 1.5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __name__ == "__main__" and "--no-orjson" in sys.argv:
    sys.modules["orjson"] = None  # type: ignore[assignment]  # as on a machine without orjson

from flower_magic.stores import SqliteSessionStore  # after the switch above

PROJECT = "-bench-ws"
LOAD_TARGET_S = 1.5  # acceptance h: a 100K-entry load
# Assistant text mixes in CJK (flower's users often write Chinese); tool results are ASCII, like code and logs.
REPLY_TEXT = "The quick brown fox jumps over the lazy dog; 学习 continues. "
TOOL_OUTPUT = "drwxr-xr-x  2 user user 4096 Jan  1 00:00 src/main.py: def run(): return 42\n"


def make_entry(i: int, session_id: str, parent: str | None) -> dict[str, Any]:
    """An assistant- or user-shaped transcript line of about 1 KB."""
    common = {
        "parentUuid": parent,
        "isSidechain": False,
        "uuid": str(uuid.uuid4()),
        "timestamp": f"2025-01-01T00:{(i // 60) % 60:02d}:{i % 60:02d}.000Z",
        "sessionId": session_id,
        "cwd": "/home/user/projects/bench-ws",
        "version": "2.1.332",
        "gitBranch": "main",
        "userType": "external",
        "entrypoint": "sdk-py",
    }
    if i % 2:
        return {
            **common,
            "type": "assistant",
            "requestId": f"req_{i:012d}",
            "message": {
                "id": f"msg_{i:012d}",
                "type": "message",
                "role": "assistant",
                "model": "claude-opus-5-5",
                "content": [{"type": "text", "text": (REPLY_TEXT * 9)[:520]}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 12 + i,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 4000 + i,
                    "output_tokens": 80,
                },
            },
        }
    return {
        **common,
        "type": "user",
        "promptId": str(uuid.uuid4()),
        "message": {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": f"toolu_{i:016d}",
                    "content": (TOOL_OUTPUT * 9)[:620],
                    "is_error": False,
                }
            ],
        },
    }


def make_entries(n: int, session_id: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    parent = None
    for i in range(n):
        entry = make_entry(i, session_id, parent)
        parent = entry["uuid"]
        out.append(entry)
    return out


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median wall seconds and median CPU seconds (this process) of ``repeat`` calls.

    CPU time is printed beside wall time because a shared machine's load inflates wall time alone.
    """
    wall, cpu = [], []
    for _ in range(repeat):
        gc.collect()  # start each sample from the same heap, not from the last sample's garbage
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def bench_append(folder: Path, batch: int, total: int) -> tuple[float, float]:
    """Entries per second (wall, CPU) appending ``total`` fresh entries to one session in batches."""
    store = SqliteSessionStore(folder / f"append-{batch}.db")
    key: Any = {"project_key": PROJECT, "session_id": str(uuid.uuid4())}
    entries = make_entries(total, key["session_id"])

    async def run() -> None:
        for i in range(0, total, batch):
            await store.append(key, entries[i : i + batch])

    wall, cpu = timed(lambda: asyncio.run(run()), 1)
    store.close()
    return total / wall, total / cpu


def filled_store(folder: Path, n: int) -> tuple[SqliteSessionStore, Any]:
    store = SqliteSessionStore(folder / f"load-{n}.db")
    key: Any = {"project_key": PROJECT, "session_id": str(uuid.uuid4())}
    entries = make_entries(n, key["session_id"])

    async def fill() -> None:
        for i in range(0, n, 500):  # the SDK's batched-flush size
            await store.append(key, entries[i : i + 500])

    asyncio.run(fill())
    return store, key


def row(label: str, wall_s: float, cpu_s: float, note: str = "") -> None:
    print(f"  {label:<38}{wall_s * 1000:>11.2f}{cpu_s * 1000:>11.2f}{note}")


# One load in a fresh process: what a kernel resuming a session pays (its heap has to grow for the
# entries), unlike a repeat in this process, which reuses memory the last sample freed.
COLD_LOAD = """
import asyncio, json, sys, time
if sys.argv[4] == "1":
    sys.modules["orjson"] = None
from flower_magic.stores import SqliteSessionStore
store = SqliteSessionStore(sys.argv[1], readonly=True)
key = {"project_key": sys.argv[2], "session_id": sys.argv[3]}
c0, t0 = time.process_time(), time.perf_counter()
entries = asyncio.run(store.load(key))
print(json.dumps([time.perf_counter() - t0, time.process_time() - c0, len(entries or [])]))
"""


def cold_load(store: SqliteSessionStore, key: Any, n: int, repeat: int, *, no_orjson: bool) -> tuple[float, float]:
    wall, cpu = [], []
    for _ in range(repeat):
        args = [str(store.path), key["project_key"], key["session_id"], "1" if no_orjson else "0"]
        out = subprocess.run([sys.executable, "-c", COLD_LOAD, *args], capture_output=True, text=True, check=True)
        w, c, count = json.loads(out.stdout)
        if count != n:  # a broken fixture, not a timing
            raise SystemExit(f"load() returned {count} entries, expected {n}")
        wall.append(w)
        cpu.append(c)
    return statistics.median(wall), statistics.median(cpu)


def bench_reads(folder: Path, n: int, repeat: int, *, pages: bool, no_orjson: bool) -> None:
    store, key = filled_store(folder, n)
    wall, cpu = cold_load(store, key, n, repeat, no_orjson=no_orjson)
    note = ""
    if n == 100_000:
        note = f"   target <= {LOAD_TARGET_S * 1000:.0f} ms: " + ("met" if wall <= LOAD_TARGET_S else "MISSED")
    row(f"load() {n:,}, fresh process", wall, cpu, note)
    row(f"load() {n:,}, again in one process", *timed(lambda: asyncio.run(store.load(key)), repeat))
    if pages:
        for offset in (0, n // 2, n - 100):
            wall, cpu = timed(lambda o=offset: store.load_range(key, o, 100), repeat)  # type: ignore[misc]
            row(f"load_range({offset:,}, 100) of {n:,}", wall, cpu)
        row(f"entry_count() of {n:,}", *timed(lambda: store.entry_count(key), repeat))
        sid = key["session_id"]
        row(f"last_context() of {n:,}", *timed(lambda: store.last_context(PROJECT, sid), repeat))
        row(f"has_session() of {n:,}", *timed(lambda: store.has_session(PROJECT, sid), repeat))
    store.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the databases (default: a temp dir)")
    parser.add_argument("--no-orjson", action="store_true", help="decode with the json module even if orjson is there")
    args = parser.parse_args(argv)
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    repeat = 3 if args.quick else 5
    appends = [(1, 2_000), (4, 4_000), (15, 15_000), (100, 30_000), (500, 50_000)]

    # The first append of a process imports claude_agent_sdk (about a second); keep that out of the numbers.
    import claude_agent_sdk  # noqa: F401

    with tempfile.TemporaryDirectory(prefix="bench-store-", dir=args.dir) as tmp:
        folder = Path(tmp)
        payload = len(json.dumps(make_entry(1, str(uuid.uuid4()), None), separators=(",", ":")))
        print(f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs")
        decoder = "orjson" if sys.modules.get("orjson") is not None else "json module"
        print(f"entries of about {payload} bytes of JSON; one fresh database file per row; decoding with {decoder}")
        print()
        print(f"  {'append (batch x appends)':<38}{'entries/s':>11}{'(CPU)':>11}")
        for batch, total in appends:
            total = total // 4 if args.quick else total
            per_wall, per_cpu = bench_append(folder, batch, total)
            print(f"  {f'batch {batch} x {total // batch}':<38}{per_wall:>11,.0f}{per_cpu:>11,.0f}")
        print()
        print(f"  {f'read (median of {repeat})':<38}{'wall ms':>11}{'CPU ms':>11}")
        for n in sizes:
            bench_reads(folder, n, repeat, pages=n == sizes[-1], no_orjson=args.no_orjson)


if __name__ == "__main__":
    main()
