"""Background runs (issue 15, f): how fast an attached cell sees what a runner writes, and what running
in the background costs over running in the foreground. Prints numbers; asserts nothing about time.

1. **Event latency**: a process that holds a run dir's lock writes events through ``core.live.LiveRun``
   (as the runner does), one every ``--gap`` seconds, each carrying a marker; a real kernel has
   attached to it with ``%flower`` (widget view). Latency is the time from the writer's ``time.time()``
   just before the write to the moment this process reads, on the kernel's iopub channel, the first
   message (a widget update or a display update) that carries the marker. Target: median <= 250 ms.
2. **Runner overhead**: the whole demo workflow (``--demo --timeout 0``), ``flower "task"`` in the
   foreground against ``flower --detach "task"`` followed by ``flower --attach`` until it ends, each in
   a fresh folder, alternated. Target: background <= 5 % slower.

    python bench/bench_live.py [--events 40] [--gap 0.25] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from queue import Empty

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.kernel import Kernel  # noqa: E402

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from flower_magic.core import runlock
    from flower_magic.core.events import Event
    from flower_magic.core.live import LiveRun

    run_dir, n, gap = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    lock = runlock.acquire(run_dir, front_end="background")
    live = LiveRun(run_dir, front_end="background", start={"lang": "en", "rounds": 0, "verbose": False})
    live.sink(Event("step", "干活", payload={"index": 1, "total": 1}))
    print("READY", flush=True)
    sys.stdin.readline()
    for i in range(n):
        t = time.time()
        live.sink(Event("text", f"marker-{i:04d} " + "words " * 20))
        print("W", i, t, flush=True)
        time.sleep(gap)
    live.end({}, 0.0, "")
    lock.release()
    """
)


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ, HOME=str(home), FLOWER_LANG="en", PYTHONPATH=str(ROOT))
    env.pop("ANTHROPIC_API_KEY", None)
    return env


def latency(events: int, gap: float) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        ws, home = Path(tmp) / "ws", Path(tmp) / "home"
        (ws / "runs").mkdir(parents=True)
        home.mkdir()
        env = _env(home)
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(ws / "runs"), str(events), str(gap)],
            cwd=ws,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdin is not None and writer.stdout is not None
        assert writer.stdout.readline().strip() == "READY"
        kernel = Kernel(ws, env)
        try:
            kernel.run("%load_ext flower_magic")
            # Attaches: returns at once, then follows in the background. Stdin allowed, as in
            # JupyterLab: a front end that can answer gets the widget view.
            done = kernel.run("%flower", answer=lambda _prompt: "")
            if done.errors:
                raise SystemExit(f"%flower did not attach: {done.errors}")
            while True:  # drain what attaching said
                try:
                    kernel.kc.get_iopub_msg(timeout=0.5)
                except Empty:
                    break
            writer.stdin.write("go\n")
            writer.stdin.flush()
            written: dict[int, float] = {}
            seen: dict[int, float] = {}
            deadline = time.monotonic() + events * gap + 30
            while len(seen) < events and time.monotonic() < deadline:
                try:
                    msg = kernel.kc.get_iopub_msg(timeout=0.2)
                except Empty:
                    continue
                now = time.time()
                body = json.dumps(msg.get("content", {}), ensure_ascii=False)
                for i in range(events):
                    if i not in seen and f"marker-{i:04d}" in body:
                        seen[i] = now
            for line in writer.stdout:
                if line.startswith("W "):
                    _, i, t = line.split()
                    written[int(i)] = float(t)
            writer.wait(timeout=30)
        finally:
            kernel.close()
            if writer.poll() is None:
                writer.kill()
    missing = sorted(set(written) - set(seen))
    if missing:
        print(f"  {len(missing)} events never reached the cell: {missing[:10]}")
    return [(seen[i] - written[i]) * 1000 for i in sorted(seen) if i in written]


def _one(background: bool, home: Path) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        env = _env(home)
        base = ["flower", "--demo", "--timeout", "0"]
        start = time.perf_counter()
        if background:
            subprocess.run([*base, "--detach", "write a note"], cwd=ws, env=env, check=True, capture_output=True)
            done = subprocess.run(
                ["flower", "--attach"], cwd=ws, env=env, capture_output=True, stdin=subprocess.DEVNULL
            )
        else:
            done = subprocess.run(
                [*base, "write a note"], cwd=ws, env=env, capture_output=True, stdin=subprocess.DEVNULL
            )
        took = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"the run failed: {done.stderr.decode()[-500:]}")
        return took


def overhead(runs: int) -> tuple[list[float], list[float]]:
    fg: list[float] = []
    bg: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        _one(False, home)  # the launcher script and caches, once
        for _ in range(runs):
            fg.append(_one(False, home))
            bg.append(_one(True, home))
    return fg, bg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=40)
    parser.add_argument("--gap", type=float, default=0.25)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    ms = sorted(latency(args.events, args.gap)) if args.events else []
    if ms:
        p90 = ms[int(len(ms) * 0.9) - 1] if len(ms) >= 10 else ms[-1]
        print(
            f"event latency, runner write -> attached cell's update ({len(ms)} events): "
            f"median {statistics.median(ms):.0f} ms, p90 {p90:.0f} ms, max {ms[-1]:.0f} ms (target: median <= 250 ms)"
        )
    if not args.runs:
        return
    fg, bg = overhead(args.runs)
    f, b = statistics.median(fg), statistics.median(bg)
    print(f"demo workflow, foreground: median {f:.2f} s ({', '.join(f'{x:.2f}' for x in fg)})")
    print(f"demo workflow, background + attach: median {b:.2f} s ({', '.join(f'{x:.2f}' for x in bg)})")
    print(f"runner overhead: {(b - f) / f * 100:+.1f} % (target <= 5 %)")


if __name__ == "__main__":
    main()
