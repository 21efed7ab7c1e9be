"""How long `%flower` takes to reach the model, in real kernels against the demo model (issue 12, e).

Measured from the moment the `%flower` cell starts to the moment the first request reaches the fake
Messages API (both clocks are this machine's `time.time()`), in four cases:

- a fresh kernel, `%flower` right after `%load_ext` (the SDK's import, started in the background by
  `%load_ext`, is still running);
- a fresh kernel, `%flower` a few seconds after `%load_ext`, as a person types (target <= 1.5 s);
- a warm kernel: a second `%flower` in the same kernel (target: within 150 ms of the bare spawn);
- the bare spawn: `claude_agent_sdk.query()` called directly in that warm kernel, the floor any
  front end pays (the Claude Code CLI starting).

`%load_ext` itself is timed too (target <= 150 ms). Prints numbers; asserts nothing about time.

    python bench/bench_first_request.py [--repeat 3] [--typing 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flower_magic.testing import FakeAnthropic  # noqa: E402
from flower_magic.testing.demo import demo_model  # noqa: E402
from tests.e2e.kernel import Kernel  # noqa: E402

TASK = "write a short note about CSV cleaning"
LOAD = """
import time as _t
_a = _t.perf_counter()
get_ipython().run_line_magic("load_ext", "flower_magic")
print("LOAD", _t.perf_counter() - _a)
"""
# The cell that starts a run: it prints when it started, then runs (nobody answers the question).
RUN = 'import time as _t\nprint("T0", _t.time())\nget_ipython().run_line_magic("flower", {line!r})'
BARE = """
import time as _t
from claude_agent_sdk import ClaudeAgentOptions, query

async def _first():
    async for _ in query(prompt="say hi", options=ClaudeAgentOptions(cwd={cwd!r}, max_turns=1)):
        pass

print("T0", _t.time())
await _first()  # the kernel runs the cell in its own event loop
"""


def _started(stream: str) -> float:
    return float(next(ln for ln in stream.splitlines() if ln.startswith("T0")).split()[1])


def _to_first_request(api: FakeAnthropic, kernel: Kernel, code: str) -> float:
    """Seconds from the cell's start to the first request it caused."""
    before = len(api.requests)
    res = kernel.run(code, timeout=300)
    assert res.status == "ok", res.text
    return api.requests[before].at - _started(res.stream)


def _ms(samples: list[float]) -> str:
    low, mid, high = (round(f(samples) * 1000) for f in (min, statistics.median, max))
    return f"median {mid:6d} ms (min {low}, max {high})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--typing", type=float, default=3.0, help="seconds a person takes to type %%flower")
    args = parser.parse_args()
    api = FakeAnthropic(default=demo_model).start()
    cases: dict[str, list[float]] = {"load_ext": [], "fresh, at once": [], "fresh, typed": [], "warm": [], "bare": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "CLAUDE"))}
            env.update(api.env(Path(tmp) / "home"), FLOWER_LANG="en", PYTHONUNBUFFERED="1")
            for i in range(args.repeat):
                for pause, label in ((0.0, "fresh, at once"), (args.typing, "fresh, typed")):
                    ws = Path(tmp) / f"ws-{i}-{int(pause)}"
                    ws.mkdir()
                    kernel = Kernel(ws, env)
                    try:
                        kernel.run("import IPython.display, json, sqlite3")  # what any notebook has loaded
                        cases["load_ext"].append(float(kernel.run(LOAD).stream.split("LOAD")[1].split()[0]))
                        time.sleep(pause)
                        cases[label].append(_to_first_request(api, kernel, RUN.format(line=f'"{TASK}"')))
                        if pause:
                            cases["warm"].append(_to_first_request(api, kernel, RUN.format(line=f'--new "{TASK}"')))
                            cases["bare"].append(_to_first_request(api, kernel, BARE.format(cwd=str(ws))))
                    finally:
                        kernel.close()
    finally:
        api.stop()
    gap = [w - b for w, b in zip(cases["warm"], cases["bare"], strict=True)]
    for label, samples, target in (
        ("%load_ext flower_magic", cases["load_ext"], "<= 150 ms"),
        ("%flower right after %load_ext, to the 1st request", cases["fresh, at once"], ""),
        (f"%flower {args.typing:.0f} s after %load_ext, to the 1st request", cases["fresh, typed"], "<= 1500 ms"),
        ("%flower in a warm kernel, to the 1st request", cases["warm"], ""),
        ("bare claude_agent_sdk.query(), to the 1st request", cases["bare"], ""),
        ("warm %flower minus the bare spawn", gap, "<= 150 ms"),
    ):
        print(f"{label:<52} {_ms(samples)}" + (f"  (target {target})" if target else ""))


if __name__ == "__main__":
    main()
