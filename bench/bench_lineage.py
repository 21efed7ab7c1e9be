"""How long ``Lineage.remember`` takes to put a session id durably on disk (target: <= 10 ms).

``remember`` runs the moment the first message carrying a session id arrives; it returns only after
the temp file and the folder are fsynced and the rename is done, so its latency is the time from
"id seen" to "id survives a power cut". Prints numbers; asserts nothing.

    python bench/bench_lineage.py [--calls 200] [--dir PATH]

``--dir`` picks the filesystem to measure (default: a temp folder under the current directory, which
is where a notebook's ``runs/`` lives, rather than /tmp, which may be RAM).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from flower_magic.core.lineage import Lineage


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    median, worst = statistics.median(ordered), ordered[-1]
    return f"median {median * 1000:6.2f} ms   p95 {p95 * 1000:6.2f} ms   max {worst * 1000:6.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--dir", type=Path, default=Path.cwd())
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=args.dir, prefix=".bench-lineage-") as tmp:
        workspace = Path(tmp)
        run_dir = workspace / "runs"
        lin = Lineage.open(run_dir, workspace)
        lin.bump()

        remember: list[float] = []
        for n in range(args.calls):
            sid = str(uuid.uuid4())
            started = time.perf_counter()
            lin.remember(f"step-{n % 3}", sid)
            remember.append(time.perf_counter() - started)
        if lin.last_error is not None:
            raise SystemExit(f"writes failed: {lin.last_error}")

        bump: list[float] = []
        for _ in range(args.calls // 4):
            started = time.perf_counter()
            lin.bump()
            bump.append(time.perf_counter() - started)

        opened: list[float] = []
        for _ in range(args.calls // 4):
            started = time.perf_counter()
            Lineage.open(run_dir, workspace)
            opened.append(time.perf_counter() - started)

    print(f"lineage on {args.dir} ({args.calls} calls)")
    print(f"  remember() to durable  {_ms(remember)}   (target <= 10 ms)")
    print(f"  bump()                 {_ms(bump)}")
    print(f"  Lineage.open()         {_ms(opened)}   (read-only)")


if __name__ == "__main__":
    main()
