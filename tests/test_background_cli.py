"""Background runs from a terminal, as one sequence of failures (issue 15: acceptance c's terminal leg
and d; build 1, 2, 3 and 5 through ``flower``).

One workspace goes through: ``flower --detach`` → a question answered by ``flower --attach`` from
another process → the worker's model holds its reply → ``kill -9`` of the runner (its Claude Code
process must die with it; the log must read up to the kill) → ``flower --detach`` again resumes the
same session → ``flower "words"`` on the live run (a remark: the same session goes on with the words)
→ ``flower --stop`` (recorded ``interrupted-by-human``) → ``flower --detach "more words"`` (the same
session once more) → the run ends, and a terminal that followed it all the way says how.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from flower_magic.core import live
from flower_magic.core.human import ASK_TOOL
from flower_magic.core.words import say
from flower_magic.testing import FakeAnthropic, Reply, Request, text, tool_use
from flower_magic.testing.roles import role_of
from tests.helpers import claude_processes, is_running, wait_until

pytestmark = pytest.mark.slow

TASK = "清洗 CSV 任务-K7"
BRIEF = "确认书。\n\n## 目标\n清洗 CSV。\n\n## 验收标准\n- clean.py 能运行\n\n## 边界\n不联网。\n\n## 未知与假设\n无\n"
GOAL = "## 目标\nclean.py 能用\n\n## 判定清单\n- clean.py 能运行\n"
ACHIEVED = "## 结论\n达成\n\n## 理由\n看过了。\n\n## 未通过\n(无)\n"
QUESTION = "要输出成什么格式?"
REMARK = "改用 pandas-R1"
WAKE = "再加一列-W2"


def _answered(request: Request) -> bool:
    last = request.messages[-1] if request.messages else {}
    content = last.get("content")
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


class Model:
    """The fake model: the clarifier asks one question first; the worker holds its reply on ``gate``
    until the test lets it go, except once it has been given the wake words."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def __call__(self, request: Request) -> Reply:
        role = role_of(request)
        if role == "clarifier":
            if not _answered(request):
                return tool_use(ASK_TOOL, {"question": QUESTION, "options": ["csv", "parquet"]})
            return text(BRIEF)
        if role == "goal":
            return text(GOAL)
        if role == "judge":
            return text(ACHIEVED)
        if WAKE in json.dumps(request.messages, ensure_ascii=False):
            return text("做完了,clean.py 已写好。")
        return text("还在写。", hold=self.gate)


def _flower(ws: Path, env: dict[str, str], *args: str, stdin: Any = subprocess.DEVNULL) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["flower", *args], cwd=ws, env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _done(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def _worker_requests(api: FakeAnthropic) -> list[Request]:
    return [r for r in api.requests if role_of(r) == "worker"]


def _prompt_of(request: Request) -> str:
    """The work step's own words in its first request (not the CLI's reminders), as JSON would quote them."""
    blocks = request.messages[0]["content"]
    said = [b["text"] for b in blocks if b.get("type") == "text" and "<system-reminder>" not in b["text"]]
    return json.dumps(said[-1], ensure_ascii=False)[1:-1][:150]


def _work_sessions(ws: Path) -> set[str]:
    rows = json.loads((ws / "runs" / "manifest.json").read_text(encoding="utf-8"))
    return {r["session_id"] for r in rows if r["step"] == "干活" and r.get("session_id")}


@pytest.mark.timeout(600)
def test_a_background_run_through_a_sequence_of_failures(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    model = Model()
    fake_api.default = model
    env = dict(child_env, FLOWER_LANG="en")
    run_dir = workspace / "runs"

    # 1. Start in the background: the command returns at once with the runner's pid.
    rc, out, err = _done(_flower(workspace, env, "--detach", "--rounds", "1", TASK))
    assert rc == 0, err
    runner = int(out.split("pid ")[1].split(")")[0])
    state = live.live_state(run_dir)
    assert state is not None and state.live and state.pid == runner and state.front_end == "background"

    # 2. Another process attaches and answers the question with a number (an option).
    wait_until(lambda: (live.live_state(run_dir) or live.LiveState()).asks, "the question to be open")
    attached = _flower(workspace, env, "--attach", stdin=subprocess.PIPE)
    assert attached.stdin is not None
    attached.stdin.write("2\n")
    attached.stdin.flush()
    wait_until(lambda: _worker_requests(fake_api), "the worker to be asked (the model holds its reply)")
    wait_until(lambda: claude_processes(workspace), "the worker's Claude Code process")
    records = live.read_log(run_dir)
    heard = [r for r in records if r["type"] == "heard"]
    assert [(h["op"], h["from"], h["took"]) for h in heard] == [("answer", "terminal", True)]
    asks = [r["event"] for r in records if r["type"] == "event" and r["event"]["kind"] == "ask"]
    assert asks[-1]["payload"]["state"] == "answered" and asks[-1]["payload"]["answer"] == "parquet"
    assert live.live_state(run_dir).step == "干活"  # type: ignore[union-attr]

    # 3. kill -9 of the runner: its Claude Code process goes with it (within 5 s), the lock with it,
    # the attached terminal says the runner is gone, and the log reads up to the kill.
    cli_pids = set(claude_processes(workspace))
    os.kill(runner, signal.SIGKILL)
    wait_until(lambda: not any(is_running(p) for p in cli_pids), "the CLI to die with its runner", give_up_s=5)
    # Liveness is the lock (issue 23), which the OS frees once the runner's last thread has exited: its
    # main thread shows dead a moment before.
    wait_until(lambda: not live.live_state(run_dir).live, "the lock to go with the runner", give_up_s=5)  # type: ignore[union-attr]

    rc, out, err = _done(attached)
    # The follower says the ending the next start will record (issue 23), on stderr: it did not end well.
    assert rc == 1 and say("end_killed", "en", step="干活") in err and "parquet" in out
    after_kill = live.read_log(run_dir)
    assert after_kill[: len(records)] == records and after_kill[-1]["type"] != "end"
    first_session = json.loads((run_dir / "lineage.json").read_text(encoding="utf-8"))["steps"]["干活"]

    # 4. flower --detach again: the same work session resumes (the model is held once more).
    seen = len(_worker_requests(fake_api))
    rc, out, err = _done(_flower(workspace, env, "--detach"))
    assert rc == 0, err
    wait_until(lambda: len(_worker_requests(fake_api)) > seen, "the resumed worker's request")

    # 5. Words on the live run: a remark. The CLI is interrupted and the same session goes on with them.
    follower = _flower(workspace, env, REMARK)
    wait_until(
        lambda: any(REMARK in json.dumps(r.messages, ensure_ascii=False) for r in _worker_requests(fake_api)),
        "the remark to reach the model",
    )
    with_remark = next(r for r in _worker_requests(fake_api) if REMARK in json.dumps(r.messages, ensure_ascii=False))
    assert _prompt_of(_worker_requests(fake_api)[0]) in json.dumps(with_remark.messages, ensure_ascii=False)

    # 6. flower --stop: the step ends as interrupted-by-human, the session kept; the follower sees it.
    rc, out, err = _done(_flower(workspace, env, "--stop"))
    assert rc == 0 and "asked it to stop" in out, err
    rc, out, err = _done(follower)
    assert rc == 1 and "← stop (from the terminal)" in out and REMARK in out
    rows = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert rows[-1]["step"] == "干活" and rows[-1]["error"] == "interrupted-by-human"
    assert not live.live_state(run_dir).live  # type: ignore[union-attr]

    # 7. Words after the stop: a wake remark, the same session once more; the run ends this time.
    rc, out, err = _done(_flower(workspace, env, "--detach", "--rounds", "1", WAKE))
    assert rc == 0, err
    rc, out, err = _done(_flower(workspace, env, "--attach"), timeout=240)
    assert rc == 0, (out, err)
    assert "total $" in out
    final = next(r for r in _worker_requests(fake_api) if WAKE in json.dumps(r.messages, ensure_ascii=False))
    history = json.dumps(final.messages, ensure_ascii=False)
    assert REMARK in history and _prompt_of(_worker_requests(fake_api)[0]) in history  # the earlier turns
    assert json.loads((run_dir / "lineage.json").read_text(encoding="utf-8"))["steps"]["干活"] == first_session
    assert _work_sessions(workspace) == {first_session}
    assert live.read_log(run_dir)[-1]["type"] == "end"
    assert not claude_processes(workspace)
    rc, out, err = _done(_flower(workspace, env, "--stop"))  # nothing left to stop
    assert (rc, out) == (1, "") and "no flower is running in" in err
    model.gate.set()
