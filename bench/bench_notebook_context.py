"""How long the notebook block takes to build with 10,000 variables and one 2 GB array, and what it
allocates (issue 14, acceptance e; target: <= 50 ms, and no copy of the array).

The block is built the way ``%flower`` builds it: ``NotebookContext(ShellSource(shell)).take()`` on
an in-process IPython shell whose namespace holds the variables (ints, floats, strings, small lists
and dicts, 200 pandas DataFrames when pandas is installed) and ``big``, a float64 array of 2 GiB,
filled (every page resident) when the machine has the memory to spare, else zeros (never touched).
Five cells are in the history, one of which raised.

Reported: the build time (median and worst of ``--repeat`` builds, plus the first one), the peak of
Python-level allocations during one build (``tracemalloc``: numpy reports its buffers there, so a
copy of ``big`` would show as 2 GiB), the process's RSS before and after, and the block's size.

Prints numbers; asserts nothing.

    python bench/bench_notebook_context.py [--vars 10000] [--gib 2] [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from pathlib import Path

import numpy
from IPython.core.interactiveshell import InteractiveShell

from flower_magic.core.notebook import NotebookContext
from flower_magic.kernel import CellErrors, Proposals, ShellSource

GIB = 1024**3


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def namespace(n: int) -> dict[str, object]:
    try:
        import pandas
    except ImportError:
        pandas = None
    ns: dict[str, object] = {}
    for i in range(n):
        kind = i % 50
        if kind == 0 and pandas is not None:
            ns[f"frame_{i:05d}"] = pandas.DataFrame({"a": range(100), "b": [1.5] * 100, "c": ["x"] * 100})
        elif kind < 20:
            ns[f"count_{i:05d}"] = i
        elif kind < 30:
            ns[f"label_{i:05d}"] = f"label number {i}"
        elif kind < 40:
            ns[f"items_{i:05d}"] = list(range(i % 100))
        else:
            ns[f"meta_{i:05d}"] = {"id": i, "name": "n", "tags": ["a"]}
    return ns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vars", type=int, default=10_000)
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    size = int(args.gib * GIB)
    fill = available_bytes() > 3 * size  # leave the machine room: it is shared
    before_array = rss_bytes()
    big = numpy.ones(size // 8) if fill else numpy.zeros(size // 8)
    print(
        f"big: float64, {big.nbytes / GIB:.2f} GiB, {'filled' if fill else 'zeros (untouched)'}; "
        f"RSS {before_array / 2**20:.0f} -> {rss_bytes() / 2**20:.0f} MiB"
    )

    shell = InteractiveShell.instance()
    for code in ("x = 1", "y = [x] * 3", "ratio = 1 / 0", "z = {'k': 1}", "w = 'big'  # named in a cell: listed first"):
        shell.run_cell(code, store_history=True)
    errors = CellErrors()
    shell.events.register("post_run_cell", errors.record)
    shell.run_cell("ratio = 1 / 0", store_history=True)
    shell.user_ns.update(namespace(args.vars))
    shell.user_ns["big"] = big
    listed = sum(1 for k in shell.user_ns if not k.startswith("_") and k not in shell.user_ns_hidden)
    print(f"namespace: {listed:,} variables of the user")

    def build() -> NotebookContext:
        ctx = NotebookContext(ShellSource(shell, errors, Proposals(shell, "zh")))
        ctx.take()
        return ctx

    started = time.perf_counter()
    first = build()
    first_ms = (time.perf_counter() - started) * 1000
    times, cpu = [], []
    for _ in range(args.repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        build()
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)

    rss_before = rss_bytes()
    tracemalloc.start()
    ctx = build()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_after = rss_bytes()

    print(
        f"build: first {first_ms:.1f} ms; median {statistics.median(times):.1f} ms, "
        f"p90 {sorted(times)[int(0.9 * (len(times) - 1))]:.1f} ms, worst {max(times):.1f} ms over {args.repeat} "
        "(target <= 50 ms)"
    )
    print(
        f"CPU time of a build (what other load on the machine does not inflate): median "
        f"{statistics.median(cpu):.1f} ms, worst {max(cpu):.1f} ms"
    )
    print(
        f"allocated during one build (tracemalloc peak): {peak / 2**20:.2f} MiB; "
        f"the array: {big.nbytes / 2**20:,.0f} MiB"
    )
    print(f"RSS around one build: {rss_before / 2**20:.0f} -> {rss_after / 2**20:.0f} MiB")
    line = next((x for x in ctx.block.splitlines() if x.startswith("- big:")), "(not listed)")
    print(f"block: {len(ctx.block):,} characters, the same text every build: {first.block == ctx.block}; {line}")


if __name__ == "__main__":
    main()
