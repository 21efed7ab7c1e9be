"""From the message that carries the session id to lineage.json durable on disk (target ≤ 10 ms).

Runs real one-step workflows (the bundled CLI against the fake API) and times the lineage hook the
runtime calls the moment the id arrives: the hook writes lineage.json (temp file, fsync, rename,
fsync of the folder) before it returns. Also prints how long before the first model request the id
was on disk. Usage: ``python bench/bench_session_to_disk.py [runs]``.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from flower_magic import AgentSpec, Lineage, Runtime
from flower_magic.testing import FakeAnthropic, text


async def one(api: FakeAnthropic, ws: Path) -> tuple[float, int]:
    """One real step with the same hook a continuous Workflow attaches (``Lineage.remember``)."""
    rt = Runtime(workspace=ws, run_dir=ws / "runs", resilience=False)
    lineage = Lineage.open(rt.run_dir, rt.workspace)
    timings: list[float] = []
    requests_before: list[int] = []
    base = len(api.requests)  # the fake API is shared by every run of the bench

    def hook(sid: str) -> None:
        t0 = time.perf_counter()
        lineage.remember("取词", sid)
        timings.append(time.perf_counter() - t0)
        requests_before.append(len(api.requests) - base)

    rt.on_session = hook
    try:
        await rt.run(AgentSpec(name="a", instructions="", allowed_tools=[]), "hi")
    finally:
        rt.close()
    assert json.loads((ws / "runs" / "lineage.json").read_text())["steps"]["取词"]
    return timings[0], requests_before[0]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    home = Path(tempfile.mkdtemp(prefix="bench-s2d-"))
    with FakeAnthropic(default=text("ok")) as api:
        os.environ.update(api.env(home))
        results = []
        for i in range(n):
            ws = home / f"ws{i}"
            ws.mkdir()
            results.append(asyncio.run(one(api, ws)))
    ms = sorted(t * 1000 for t, _ in results)
    print(f"session id -> lineage.json durable, {n} real CLI runs")
    print(f"  median {statistics.median(ms):.2f} ms   p90 {ms[int(0.9 * (n - 1))]:.2f} ms   max {ms[-1]:.2f} ms")
    print(f"  on disk before the first model request in {sum(1 for _, r in results if r == 0)}/{n} runs")


if __name__ == "__main__":
    main()
