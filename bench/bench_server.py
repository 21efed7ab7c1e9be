"""Benchmark the Flower panel's REST API on a real jupyter_server: big manifest, big session.

Targets (issue 6): the run endpoint on a 10K-row manifest in <= 100 ms; a transcript page from a
100K-entry session in <= 200 ms. Prints numbers; asserts nothing about time.

    python bench/bench_server.py [--rows 10000] [--entries 100000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from flower_magic.core import manifest
from flower_magic.panel.transcript import project_key
from flower_magic.stores.schema import SCHEMA

SID = "5a1e7c2b-9d3f-4e6a-8b0c-1d2e3f4a5b6c"
SERVER_START_S = 60


def write_manifest(path: Path, rows: int, tag: str = "") -> None:
    data = [
        {
            "step": f"干活#round{i}" if i % 7 else f"干活·判定#{i}",
            "session_id": SID,
            "ok": i % 5 != 0,
            "cost_usd": 0.013 * (i % 17),
            "num_turns": i % 40,
            "text": f"step {i}{tag} finished; wrote files and ran the tests. " * 3,
            "error": None if i % 5 else "overloaded_error (529)",
            "started_at": 1_767_000_000.0 + i * 60,
            "ended_at": 1_767_000_000.0 + i * 60 + 42.5,
            "attempts": 1 + (i % 3 == 0),
            "errors": [] if i % 5 else ["overloaded_error (529)"],
            "resumed": i % 4 == 0,
            "retired": [SID] if i % 50 == 0 else [],
            "context": 10_000 + 37 * i,
            "duration_s": 42.5,
            "run": "20260101-000000-abcdef",
        }
        for i in range(rows)
    ]
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")


def write_session(db_path: Path, key: str, entries: int) -> None:
    db = sqlite3.connect(db_path)
    db.executescript("PRAGMA journal_mode=WAL;" + SCHEMA)  # the store's own tables

    def rows():
        for i in range(entries):
            role = "user" if i % 2 == 0 else "assistant"
            entry = {
                "type": role,
                "uuid": f"{i:08d}-0000-4000-8000-000000000000",
                "parentUuid": f"{i - 1:08d}-0000-4000-8000-000000000000" if i else None,
                "sessionId": SID,
                "message": {"role": role, "content": [{"type": "text", "text": f"entry {i} " + "x" * 300}]},
            }
            yield key, i, entry["uuid"], json.dumps(entry)

    db.executemany("INSERT INTO entries VALUES (?, ?, ?, ?)", rows())
    db.execute("INSERT INTO meta VALUES (?, ?, ?)", (key, 1, entries))
    db.commit()
    db.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed_get(url: str, token: str) -> tuple[float, int, int]:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as response:
        body = response.read()
        status = response.status
    return (time.perf_counter() - start) * 1000, status, len(body)


def poll(url: str, token: str, etag: str = "") -> tuple[int, int, str, dict]:
    """One panel poll: (status, body bytes, ETag, body) — 304 reads as no body."""
    headers = {"Authorization": f"token {token}"}
    if etag:
        headers["If-None-Match"] = etag
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as response:
            body = response.read()
            return response.status, len(body), response.headers.get("Etag", ""), json.loads(body)
    except urllib.error.HTTPError as exc:
        if exc.code != 304:
            raise
        return 304, len(exc.read()), etag, {}


def report(name: str, samples: list[float], size: int, target_ms: float) -> None:
    samples = sorted(samples)
    p95 = samples[max(0, round(0.95 * len(samples)) - 1)]
    print(
        f"{name:<46} median {statistics.median(samples):7.1f} ms  p95 {p95:7.1f} ms  "
        f"max {samples[-1]:7.1f} ms  body {size / 1024:8.0f} KiB  (target <= {target_ms:.0f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        ws = tmp_path / "root" / "bench"
        runs = ws / "runs"
        runs.mkdir(parents=True)
        t0 = time.perf_counter()
        write_manifest(runs / "manifest.json", args.rows)
        write_session(runs / "sessions.db", f"{project_key(ws)}/{SID}", args.entries)
        manifest_mib = (runs / "manifest.json").stat().st_size / 2**20
        db_mib = (runs / "sessions.db").stat().st_size / 2**20
        print(
            f"data: {args.rows} rows ({manifest_mib:.1f} MiB manifest), {args.entries} entries "
            f"({db_mib:.0f} MiB sessions.db), written in {time.perf_counter() - t0:.1f} s"
        )

        config = tmp_path / "config"
        config.mkdir()
        (config / "jupyter_server_config.json").write_text(
            json.dumps({"ServerApp": {"jpserver_extensions": {"flower_magic": True}}})
        )
        port, token = free_port(), os.urandom(16).hex()
        env = dict(os.environ, JUPYTER_CONFIG_DIR=str(config), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
        log = (tmp_path / "server.log").open("wb")
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter_server",
                "--no-browser",
                "--allow-root",
                "--ip=127.0.0.1",
                f"--port={port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={tmp_path / 'root'}",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + SERVER_START_S
            while True:
                try:
                    timed_get(f"{base}/api/status", token)
                    break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        sys.exit("jupyter_server did not start; see its log")
                    time.sleep(0.3)

            run_url = f"{base}/flower/api/run?" + urllib.parse.urlencode({"path": "bench"})
            manifest_path = runs / "manifest.json"
            rewritten, appended, warm, size = [], [], [], 0
            run_id, own_rows = manifest.new_run_id(), []
            for i in range(args.repeat):
                # Every row new (another tool rewrote the file): the server parses all of it.
                write_manifest(manifest_path, args.rows, tag=f"r{i}")
                ms, status, size = timed_get(run_url, token)
                assert status == 200, status
                rewritten.append(ms)
            for i in range(args.repeat):
                # A step ended: the run's writer adds its row, as during a run.
                own_rows.append(
                    {
                        "step": f"干活#round{i + 2}",
                        "session_id": SID,
                        "ok": True,
                        "cost_usd": 0.01,
                        "num_turns": 3,
                        "started_at": time.time() - 5,
                        "ended_at": time.time(),
                    }
                )
                manifest.persist(runs, run_id, own_rows)
                ms, status, size = timed_get(run_url, token)
                assert status == 200, status
                appended.append(ms)
                warm.append(timed_get(run_url, token)[0])
            report(f"run, {args.rows} rows, every row new", rewritten, size, 100)
            report(f"run, {args.rows} rows, a step's row added", appended, size, 100)
            report(f"run, {args.rows} rows, manifest unchanged", warm, size, 100)

            # What a polling panel transfers (issue 12): the whole table once, then nothing while the
            # run is unchanged, then only the rows a step adds.
            status, first, etag, held = poll(run_url, token)
            unchanged = poll(run_url, token, etag)
            own_rows.append({"step": "干活#round-poll", "session_id": SID, "ok": True, "cost_usd": 0.01})
            manifest.persist(runs, run_id, own_rows)
            have = urllib.parse.urlencode({"have": held.get("rows_mark", "")})
            status, added, _, tail = poll(f"{run_url}&{have}", token, etag)
            print(
                f"bytes per poll, {args.rows} rows: first {first:,}; unchanged HTTP {unchanged[0]} "
                f"{unchanged[1]:,}; one row added {added:,} (rows sent {len(tail.get('rows', []))}, "
                f"{added / first:.2%} of the whole)"
            )

            for where, offset in (("first", 0), ("middle", args.entries // 2), ("last", args.entries - 200)):
                url = f"{base}/flower/api/transcript?" + urllib.parse.urlencode(
                    {"path": "bench", "session": SID, "offset": offset, "limit": 200}
                )
                samples = []
                for _ in range(args.repeat):
                    ms, status, size = timed_get(url, token)
                    assert status == 200, status
                    samples.append(ms)
                report(f"transcript, {args.entries} entries, {where} page", samples, size, 200)

            url = f"{base}/flower/api/transcript?" + urllib.parse.urlencode(
                {"path": "bench", "session": SID, "view": "resumed", "offset": 0, "limit": 200}
            )
            try:
                samples = []
                for _ in range(max(3, args.repeat // 5)):
                    ms, status, size = timed_get(url, token)
                    samples.append(ms)
                report(f"transcript resumed, {args.entries} entries (info)", samples, size, 200)
            except urllib.error.HTTPError as exc:
                print(f"transcript resumed: HTTP {exc.code} (pruning layer unavailable?)")
        finally:
            server.terminate()
            server.wait(timeout=20)
            log.close()


if __name__ == "__main__":
    main()
