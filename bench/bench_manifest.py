"""How long ``manifest.persist`` takes with 10 / 1K / 10K rows already in the file (target: <= 100 ms at 10K).

Rows are realistic: every StepResult field, a ~500-character ``text`` (mixed ASCII and Chinese).
Three situations, each timed around the whole call (lock, fresh read, merge, atomic write, fsyncs):

- ``cold``: the file was written by someone else (the original flower) and this process has never
  seen it: every row is parsed. Measured in a fresh process each time.
- ``own last``: this process wrote the file last (one runtime persisting after each step).
- ``other last``: another process persisted one row in between (parallel runs in one run dir).

Prints numbers; asserts nothing.

    python bench/bench_manifest.py [--sizes 10,1000,10000] [--dir PATH]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from flower_magic.core.manifest import MANIFEST, new_run_id, persist

_WORDS = ["the", "goal", "check", "passed", "file", "wrote", "test", "完成", "目标", "检查", "通过", "代码"]

_TIME_ONE = """
import sys, time
from flower_magic.core.manifest import persist
row = {"step": "干活", "text": "x" * 500}
started = time.perf_counter()
persist(sys.argv[1], sys.argv[2], [row])
print(time.perf_counter() - started)
"""

_WRITE_ONE = """
import sys
from flower_magic.core.manifest import persist
persist(sys.argv[1], sys.argv[2], [{"step": "旁路", "text": "y" * 500}])
"""


def _row(rng: random.Random, n: int, run: str) -> dict[str, Any]:
    text = " ".join(rng.choice(_WORDS) for _ in range(120))[:500]
    started = 1_764_000_000.0 + n * 60
    return {
        "step": rng.choice(["确认需求", "设定目标", "干活", "干活#round2", "干活·判定#1"]),
        "session_id": f"{rng.getrandbits(128):032x}",
        "ok": rng.random() > 0.1,
        "cost_usd": round(rng.uniform(0, 2), 6),
        "num_turns": rng.randrange(1, 80),
        "text": text,
        "error": None,
        "started_at": started,
        "ended_at": started + rng.uniform(1, 600),
        "attempts": rng.choice([1, 1, 1, 2]),
        "errors": [],
        "resumed": rng.random() > 0.5,
        "retired": [],
        "context": rng.randrange(10_000, 200_000),
        "duration_s": 12.34,
        "run": run,
    }


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"median {statistics.median(ordered) * 1000:7.1f} ms   p95 {p95 * 1000:7.1f} ms"


def _seed(run_dir: Path, size: int) -> int:
    rng = random.Random(size)
    rows = [_row(rng, n, f"20260101-000000-{n % 7:06x}") for n in range(size)]
    run_dir.mkdir(parents=True, exist_ok=True)
    data = json.dumps(rows, indent=2, ensure_ascii=False).encode()  # as the original writes it
    (run_dir / MANIFEST).write_bytes(data)
    return len(data)


def _python(script: str, *args: str) -> str:
    return subprocess.run([sys.executable, "-c", script, *args], check=True, capture_output=True, text=True).stdout


def bench(size: int, folder: Path, repeats: int) -> None:
    with tempfile.TemporaryDirectory(dir=folder, prefix=".bench-manifest-") as tmp:
        run_dir = Path(tmp) / "runs"
        nbytes = _seed(run_dir, size)

        cold = [float(_python(_TIME_ONE, str(run_dir), new_run_id())) for _ in range(max(repeats // 4, 3))]

        own, other = [], []
        rng = random.Random(1)
        mine: list[dict[str, Any]] = []
        run_id = new_run_id()
        for n in range(repeats):
            mine.append(_row(rng, n, run_id))
            started = time.perf_counter()
            persist(run_dir, run_id, mine)
            own.append(time.perf_counter() - started)
        for n in range(max(repeats // 2, 3)):
            _python(_WRITE_ONE, str(run_dir), f"other-{n}")
            mine.append(_row(rng, n, run_id))
            started = time.perf_counter()
            persist(run_dir, run_id, mine)
            other.append(time.perf_counter() - started)
        final = (run_dir / MANIFEST).stat().st_size

    print(f"{size:>6} rows ({nbytes / 1e6:5.1f} MB -> {final / 1e6:5.1f} MB)")
    print(f"    cold        {_ms(cold)}")
    print(f"    own last    {_ms(own)}")
    print(f"    other last  {_ms(other)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,1000,10000")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--dir", type=Path, default=Path.cwd())
    args = parser.parse_args()
    print(f"manifest.persist on {args.dir} (target <= 100 ms at 10K rows)")
    for size in (int(s) for s in args.sizes.split(",")):
        bench(size, args.dir, args.repeats)


if __name__ == "__main__":
    main()
