"""What one ``core.live.live_state`` call costs (issue 23, build 5: liveness is a try of the run lock,
not its record and a live pid believed). The panel polls it; ``Watch`` asks it while a log is quiet.
Prints numbers; asserts nothing about time.

Cases, each ``--calls`` calls in a row, this process asking:

- **held elsewhere**: another process holds the lock and its ``live.json`` says it runs (a panel or an
  attached terminal during a run);
- **killed, pid reused**: the holder was killed with ``kill -9`` and its pid now names a live ``sleep``
  (the lock is free: the try gets it and lets go);
- **held here**: this process holds the lock (the run asking about itself: no try);
- **ended**: ``live.json`` says the run ended (answered before the lock is looked at).

    python bench/bench_liveness.py [--calls 20000]

Run it against another checkout with ``PYTHONPATH=<checkout>`` to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import flower_magic
from flower_magic.core import live, runlock

HOLDER = """
import sys
from flower_magic.core import runlock
lock = runlock.acquire(sys.argv[1], front_end="background", step="干活")
print("HELD", flush=True)
sys.stdin.read()
"""


def _live_json(run_dir: Path, pid: int, state: str = live.RUNNING) -> None:
    data = {"pid": pid, "front_end": "background", "state": state, "step": "干活", "boot": live.boot_id()}
    (run_dir / live.LIVE_NAME).write_text(json.dumps(data), encoding="utf-8")


def _holder(run_dir: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "HELD"
    return proc


def _plant(run_dir: Path, pid: int) -> None:
    """run.lock's record and live.json naming ``pid`` (what a reused pid leaves after kill -9)."""
    path = run_dir / runlock.LOCK_NAME
    record = json.loads(path.read_bytes().split(b"\n", 1)[0])
    record.pop("check", None)
    holder = runlock.Holder(**dict(record, pid=pid))
    with open(path, "r+b") as f:
        f.write(runlock._encode(holder))
        f.truncate()
    _live_json(run_dir, pid)


def _time(calls: int, expect: bool, run_dir: Path) -> tuple[float, float]:
    """(median, p95) of one call in microseconds; checks every answer is ``expect``."""
    samples = []
    for _ in range(calls):
        t = time.perf_counter()
        state = live.live_state(run_dir)
        samples.append((time.perf_counter() - t) * 1e6)
        assert state is not None and state.live is expect, state
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    print(f"flower_magic from {Path(flower_magic.__file__).parent}")
    cases: list[tuple[str, Callable[[Path], Callable[[], None]], bool]] = []

    def held_elsewhere(run_dir: Path) -> Callable[[], None]:
        proc = _holder(run_dir)
        _live_json(run_dir, proc.pid)

        def done() -> None:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.close()
            proc.stdout.close()
            proc.wait()

        return done

    def reused(run_dir: Path) -> Callable[[], None]:
        proc = _holder(run_dir)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        proc.stdout.close()
        sleeper = subprocess.Popen(["sleep", "600"])
        _plant(run_dir, sleeper.pid)

        def done() -> None:
            sleeper.kill()
            sleeper.wait()

        return done

    def held_here(run_dir: Path) -> Callable[[], None]:
        lock = runlock.acquire(run_dir, front_end="terminal")
        _live_json(run_dir, os.getpid())
        return lock.release

    def ended(run_dir: Path) -> Callable[[], None]:
        proc_done = held_elsewhere(run_dir)
        data = json.loads((run_dir / live.LIVE_NAME).read_text(encoding="utf-8"))
        _live_json(run_dir, data["pid"], live.ENDED)
        return proc_done

    cases = [
        ("held elsewhere", held_elsewhere, True),
        ("killed, pid reused", reused, False),
        ("held here", held_here, True),
        ("ended", ended, False),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, setup, expect) in enumerate(cases):
            run_dir = Path(tmp) / f"runs{i}"
            run_dir.mkdir()
            done = setup(run_dir)
            try:
                _time(min(args.calls, 500), expect, run_dir)  # warm up
                median, p95 = _time(args.calls, expect, run_dir)
            except AssertionError as exc:
                print(f"{name:>20}: answered wrongly ({exc})")
                continue
            finally:
                done()
            print(f"{name:>20}: median {median:6.1f} µs  p95 {p95:6.1f} µs  (live={expect})")


if __name__ == "__main__":
    main()
