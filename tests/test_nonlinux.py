"""Issue 16, acceptance a: flower on a platform without ``fcntl`` and without ``PR_SET_PDEATHSIG``,
simulated on Linux with the real parts.

Every process of the run (the workflow, its locks, the store) runs with ``fcntl`` and the other
POSIX-only modules taken away from flower_magic's code (``tests/no_posix``: what the package meets on
Windows), and ``FLOWER_WATCHDOG=portable`` replaces the parent-death signal with the watchdog that
macOS gets. The real Claude Code CLI talks to the scripted fake API; the workflow is what ``flower``
runs (``tests/walk_child.py``); the kill is a real ``kill -9``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from flower_magic.core import manifest, runlock
from flower_magic.testing import FakeAnthropic, Reply, Request, text, tool_use
from flower_magic.testing.roles import role_of
from tests.helpers import (
    FlowChild,
    claude_processes,
    command_line,
    is_running,
    other_process_tries,
    wait_until,
    without_posix,
)
from tests.walk import ACHIEVED, BRIEF, GOAL

pytestmark = pytest.mark.slow

TASK = "清洗 data/ 里的 CSV(无 fcntl 的平台)"
ARGS = ("--rounds", "1", "--timeout", "0")
DEATH_GIVE_UP_S = 5.0  # acceptance a: the agent is gone within 5 s of its parent's kill -9


class Scripted:
    """The fake model by role (tests/walk.py's texts); the worker runs one short shell command, then says
    it is done, each answer ``worker_delay_s`` late. A CLI whose parent dies while it waits for a slow
    answer finishes that request first: without a watchdog it outlives the kill by the whole wait
    (measured: 31.8 s for a 30 s answer, against 3.2 s when it dies inside a tool call)."""

    def __init__(self) -> None:
        self.worker_delay_s = 0.0

    def __call__(self, request: Request) -> Reply:
        role = role_of(request)
        if role == "clarifier":
            return text(BRIEF.format(marker="无 fcntl"))
        if role == "goal":
            return text(GOAL.format(marker="无 fcntl"))
        if role == "judge":
            return text(ACHIEVED)
        last = request.messages[-1] if request.messages else {}
        content = last.get("content")
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            return text("做完了。", delay_s=self.worker_delay_s)  # the command came back
        return tool_use("Bash", {"command": "sleep 1; echo ok"}, delay_s=self.worker_delay_s)


def _work_session(run_dir: Path) -> str:
    return str(json.loads((run_dir / "lineage.json").read_text(encoding="utf-8"))["steps"]["干活"])


@pytest.mark.timeout(900)
def test_a_run_a_kill_and_a_resume_without_fcntl_or_pdeathsig(
    fake_api: FakeAnthropic, child_env: dict[str, str], tmp_path: Path
) -> None:
    ws, log = tmp_path / "ws", tmp_path / "refused.log"
    ws.mkdir()
    run_dir = ws / "runs"
    env = {
        **without_posix(child_env, log),
        "FLOWER_WATCHDOG": "portable",
        "WALK_INTERRUPT_FILE": str(tmp_path / "unused"),
    }
    model = Scripted()
    fake_api.default = model

    # 1. A whole run. While the worker's CLI runs: it is under the watchdog, and the run lock (taken
    #    without fcntl) keeps another process out.
    with FlowChild(ws, env, *ARGS, TASK) as run:
        run.wait_for(lambda: run.in_step("干活", "tool_call") and claude_processes(ws), "the worker's tool call")
        parents = set(claude_processes(ws).values())
        assert parents and all("core/watchdog.py" in command_line(p) for p in parents), parents
        assert other_process_tries(run_dir).startswith(f"REFUSED {run.pid} ")
        assert run.wait() == 0, run.err[-2000:]
    steps = [row["step"] for row in manifest.read_rows(run_dir)]
    assert {"确认需求", "设定目标", "干活"} <= set(steps) and any(s.startswith("干活·判定") for s in steps)
    refused = log.read_text(encoding="utf-8").splitlines()
    assert "flower_magic.core.oslock fcntl" in refused  # the locks really went without fcntl
    assert not any(line.startswith("flower_magic.core.launcher") for line in refused)

    # 2. kill -9 of the run while its worker's CLI waits for a minute-long answer: the CLI goes with it.
    model.worker_delay_s = 60.0
    n = len(fake_api.requests)
    with FlowChild(ws, env, *ARGS) as run:
        run.wait_for(
            lambda: any(role_of(r) == "worker" for r in fake_api.requests[n:]) and claude_processes(ws),
            "the worker's request in flight",
        )
        agents = claude_processes(ws)
        watchdogs = set(agents.values())
        work = _work_session(run_dir)
        killed_at = time.monotonic()
        os.kill(run.pid, signal.SIGKILL)
        wait_until(
            lambda: not any(is_running(p) for p in agents),
            "the agent dying with its parent",
            give_up_s=DEATH_GIVE_UP_S,
        )
        died_after_s = time.monotonic() - killed_at
        wait_until(lambda: not any(is_running(p) for p in watchdogs), "the watchdog exiting", give_up_s=30)
        print(f"the agent died {died_after_s * 1000:.0f} ms after its parent's kill -9")
    assert runlock.holder(run_dir) is None and other_process_tries(run_dir) == "GOT"  # never a stale lock
    model.worker_delay_s = 0.0

    # 3. The next run resumes the same work session and finishes; nothing is left running.
    with FlowChild(ws, env, *ARGS) as run:
        assert run.wait() == 0, run.err[-2000:]
    assert _work_session(run_dir) == work
    assert claude_processes(ws) == {}
