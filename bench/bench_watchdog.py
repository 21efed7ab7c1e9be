"""How long the Claude Code CLI outlives its parent's ``kill -9``, for each ``FLOWER_WATCHDOG``.

Each trial starts a small parent process that runs one real step (the bundled CLI against the fake
API, whose answer takes a minute), kills the parent with SIGKILL while the CLI waits for that answer,
and times until the CLI process is gone from /proc (Linux). ``auto`` is PR_SET_PDEATHSIG here,
``portable`` the pipe watchdog macOS gets, ``off`` nothing (the CLI ends only when its request does).
Usage: ``python bench/bench_watchdog.py [trials] [modes...]`` (default: 10 trials of auto and portable).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flower_magic.testing import FakeAnthropic, text

ANSWER_S = 60.0  # the answer the CLI waits for; a CLI nobody kills lives at least this long
GIVE_UP_S = 90.0

PARENT = """
import asyncio, sys
from flower_magic import AgentSpec, Runtime
rt = Runtime(workspace=sys.argv[1], run_dir=sys.argv[1] + "/runs", resilience=False)
asyncio.run(rt.run(AgentSpec(name="a", instructions="", allowed_tools=[]), "hi"))
"""


def _cli_of(ws: Path) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if Path(os.readlink(entry / "cwd")) == ws and (entry / "cmdline").read_bytes().split(b"\0")[0].endswith(
                b"/claude"
            ):
                return int(entry.name)
        except OSError:
            continue
    return None


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def trial(api: FakeAnthropic, home: Path, ws: Path, mode: str) -> float:
    """Seconds from the parent's SIGKILL to the CLI's end."""
    ws.mkdir()
    env = {**os.environ, **api.env(home), "FLOWER_WATCHDOG": mode}
    n = len(api.requests)
    with subprocess.Popen([sys.executable, "-c", PARENT, str(ws)], env=env, stderr=subprocess.DEVNULL) as parent:
        give_up = time.monotonic() + GIVE_UP_S
        cli = None
        while (cli is None or len(api.requests) == n) and time.monotonic() < give_up:
            cli = _cli_of(ws)
            time.sleep(0.01)
        assert cli is not None and len(api.requests) > n, "the CLI never asked"
        killed = time.monotonic()
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        while _running(cli) and time.monotonic() < killed + GIVE_UP_S:
            time.sleep(0.002)
        return time.monotonic() - killed


def main() -> None:
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    modes = sys.argv[2:] or ["auto", "portable"]
    home = Path(tempfile.mkdtemp(prefix="bench-watchdog-"))
    with FakeAnthropic(default=text("ok", delay_s=ANSWER_S)) as api:
        for mode in modes:
            times = sorted(trial(api, home, home / f"{mode}-{i}", mode) * 1000 for i in range(trials))
            print(
                f"FLOWER_WATCHDOG={mode}: the CLI ended {statistics.median(times):.0f} ms (median) after its "
                f"parent's kill -9; min {times[0]:.0f}, max {times[-1]:.0f} ms, {trials} trials"
            )


if __name__ == "__main__":
    main()
