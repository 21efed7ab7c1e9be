"""Benchmark ``load()`` of a 10K- and a 100K-entry session: PostgreSQL on loopback vs SQLite, side by side.

Run ``python bench/bench_pg_load.py`` (``--quick``: 10K only, ``--url postgresql://...``: an existing
server instead of a throw-away one started like the tests' (``tests/pg.py``: initdb in a temp dir;
as root it runs as the ``postgres`` user)). Prints a table; asserts nothing.

The entries are ``bench/bench_store.py``'s (about 1.2 KB of JSON each, CLI-shaped). Each store gets
the same session; ``load()`` is timed through the async method the SDK calls on resume, and
``load_sync`` beside it. Wall time and this process's CPU time are printed: on PostgreSQL part of the
work (the server's reading and sending) is in another process, so its CPU column is the client's share.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_store import PROJECT, make_entries, timed
from flower_magic.core.storage import StoreLocation
from flower_magic.stores import PostgresSessionStore, SqliteSessionStore

APPEND_BATCH = 5_000  # large batches: filling the stores is not what is measured


def fill(store: Any, key: Any, entries: list[dict[str, Any]]) -> None:
    async def go() -> None:
        for i in range(0, len(entries), APPEND_BATCH):
            await store.append(key, entries[i : i + APPEND_BATCH])

    asyncio.run(go())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10K entries only, fewer repeats")
    parser.add_argument("--url", default="", help="an existing PostgreSQL (a fresh, empty database)")
    args = parser.parse_args()
    sizes = [10_000] if args.quick else [10_000, 100_000]
    repeat = 3 if args.quick else 5

    server = None
    if args.url:
        url = args.url
    else:
        from tests.pg import PgServer

        server = PgServer()
        url = server.fresh_url()
    location = StoreLocation.parse(url)
    rows: list[tuple[str, ...]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sqlite = SqliteSessionStore(Path(tmp) / "sessions.db")
            pg = PostgresSessionStore(location)
            try:
                for n in sizes:
                    key: Any = {"project_key": PROJECT, "session_id": f"bench-{n}"}
                    entries = make_entries(n, key["session_id"])
                    for store in (sqlite, pg):
                        fill(store, key, entries)
                    for name, store in (("SQLite", sqlite), ("PostgreSQL", pg)):
                        assert len(store.load_sync(key) or []) == n
                        wall, cpu = timed(lambda s=store, k=key: asyncio.run(s.load(k)), repeat)
                        swall, scpu = timed(lambda s=store, k=key: s.load_sync(k), repeat)
                        rows.append((f"{n:,}", name, f"{wall:.3f}", f"{cpu:.3f}", f"{swall:.3f}", f"{scpu:.3f}"))
            finally:
                sqlite.close()
                pg.close()
    finally:
        if server is not None:
            server.stop()
    print(f"load() of one session, median of {repeat} (seconds; PostgreSQL on 127.0.0.1: {location.redacted})")
    head = ("entries", "store", "load() wall", "load() cpu", "load_sync wall", "load_sync cpu")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    for line in [head, *rows]:
        print("  ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True)))


if __name__ == "__main__":
    main()
