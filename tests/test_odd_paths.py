"""Issue 16, acceptance d: the paths people have. The demo workflow (``flower_magic.testing.demo``, the
scripted model behind the quickstart) runs, is killed with ``kill -9`` and resumes, with the real
Claude Code CLI, in a workspace named ``数据 清洗 🌻 with spaces`` under a home directory with a space,
and in workspaces whose path is 200 and 201 UTF-16 units long, either side of Claude Code's cut of
its key at 200 characters.

Guards what these names broke: the CLI keys an emoji as two UTF-16 units where the SDK counts one
code point, so the store was searched under the wrong key and a resume found no conversation; the demo
model cut its workspace path at the first space and wrote its file elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from dataclasses import replace
from pathlib import Path

import pytest

from flower_magic.core.project import MAX_KEY_CHARS, project_key
from flower_magic.stores.sqlite import SqliteSessionStore
from flower_magic.testing import FakeAnthropic, Reply, Request
from flower_magic.testing.demo import DEMO_FILE, demo_model
from flower_magic.testing.roles import role_of
from tests.helpers import FlowChild, claude_processes, is_running, wait_until

pytestmark = pytest.mark.slow

NAME = "数据 清洗 🌻 with spaces"
TASK = "把 data/ 里的 CSV 清洗干净 🌻"
PHRASE = "顺便把日期统一成 ISO 格式 🌻"
ARGS = ("--rounds", "1", "--timeout", "0")


class SlowDemo:
    """The demo model; its worker answers ``worker_delay_s`` late (room to kill while it waits)."""

    def __init__(self) -> None:
        self.worker_delay_s = 0.0

    def __call__(self, request: Request) -> Reply:
        reply = demo_model(request)
        return replace(reply, delay_s=self.worker_delay_s) if role_of(request) == "worker" else reply


def _units(path: Path) -> int:
    return len(str(path).encode("utf-16-le")) // 2


def _workspace_for(tmp_path: Path, case: str) -> Path:
    """``NAME``, or ``NAME`` padded so that the workspace's path is 200 UTF-16 units (the longest key
    Claude Code does not cut) or 201 (the shortest it cuts and suffixes with a hash)."""
    if case == "name":
        return tmp_path / NAME
    target = MAX_KEY_CHARS + (1 if case == "cut" else 0)
    padded = NAME + " " + "x" * (target - _units(tmp_path / (NAME + " ")))
    ws = tmp_path / padded
    key = project_key(ws)
    assert _units(ws) == target
    assert len(key) == MAX_KEY_CHARS if case == "uncut" else (len(key) > target and key[MAX_KEY_CHARS] == "-")
    return ws


def _lineage(run_dir: Path) -> dict[str, object]:
    return dict(json.loads((run_dir / "lineage.json").read_text(encoding="utf-8")))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("case", ["name", "uncut", "cut"])
def test_the_demo_runs_is_killed_and_resumes_in_an_odd_workspace(
    fake_api: FakeAnthropic, tmp_path: Path, case: str
) -> None:
    home = tmp_path / "home of Jane Doe"
    home.mkdir()
    ws = _workspace_for(tmp_path, case)
    ws.mkdir()
    run_dir = ws / "runs"
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")},
        **fake_api.env(home),
        "WALK_INTERRUPT_FILE": str(tmp_path / "unused"),
        "PYTHONUNBUFFERED": "1",
    }
    model = SlowDemo()
    fake_api.default = model

    # 1. The whole demo: brief, goals, the worker writes its file into this workspace, the judge passes it.
    with FlowChild(ws, env, *ARGS, TASK) as run:
        assert run.wait() == 0, run.err[-2000:]
    assert (ws / DEMO_FILE).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([home.name, ws.name])  # nothing written beside it
    lineage = _lineage(run_dir)
    assert lineage["workspace"] == str(ws)
    steps = lineage["steps"]
    assert isinstance(steps, dict) and {"确认需求", "设定目标", "干活"} <= set(steps)
    work = str(steps["干活"])
    # The key flower computes is the folder Claude Code made, and the store holds the session under it.
    assert (home / ".claude" / "projects" / project_key(ws)).is_dir()
    store = SqliteSessionStore(run_dir / "sessions.db", readonly=True)
    try:
        assert store.projects() == [project_key(ws)] and store.has_session(project_key(ws), work)
    finally:
        store.close()

    # 2. A phrase said at wake, then kill -9 while the worker waits for its answer: the CLI goes too.
    model.worker_delay_s = 60.0
    n = len(fake_api.requests)
    with FlowChild(ws, env, *ARGS, PHRASE) as run:
        run.wait_for(
            lambda: any(role_of(r) == "worker" for r in fake_api.requests[n:]) and claude_processes(ws),
            "the worker's request in flight",
        )
        agents = claude_processes(ws)
        os.kill(run.pid, signal.SIGKILL)
        wait_until(lambda: not any(is_running(p) for p in agents), "the agent dying with its parent", give_up_s=30)
    model.worker_delay_s = 0.0

    # 3. The next run resumes the same work session, with what was said, and finishes: from sessions.db
    #    alone (Claude Code's own copies are gone, as on another machine).
    shutil.rmtree(home / ".claude" / "projects")
    n = len(fake_api.requests)
    with FlowChild(ws, env, *ARGS) as run:
        assert run.wait() == 0, run.err[-2000:]
    after = _lineage(run_dir)["steps"]
    assert isinstance(after, dict) and after["干活"] == work  # the same session, no new one minted
    resumed = [r for r in fake_api.requests[n:] if role_of(r) == "worker"]
    assert resumed and resumed[0].n_messages > 2, "the work session was not resumed with its history"
    assert TASK in resumed[0].all_text and PHRASE in resumed[-1].all_text
    assert claude_processes(ws) == {}
