"""Background runs from a notebook (issue 15, acceptance a, b, c's notebook leg and d): ``%flower --bg``
in a real kernel starts the real runner process, which runs the real Claude Code CLI against the fake
API living in this test process; cells in the kernel follow it, answer it, give it words and stop it;
the kernel restarts under it; the runner is killed with -9.

One run dir, four runs, one kernel (restarted once), to stay inside the slow tier's time."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flower_magic.core.human import ASK_TOOL
from flower_magic.core.live import live_state, read_log
from flower_magic.core.words import say
from flower_magic.testing import FakeAnthropic, Request, text, tool_use
from flower_magic.testing.roles import as_role, role_of
from tests.e2e.kernel import Kernel
from tests.helpers import claude_processes, command_line, running_in, wait_until

pytestmark = pytest.mark.slow

QUESTION = "输出写到哪里?"
OPTIONS = ["stdout", "同名文件 clean.csv"]
BRIEF = "## 目标\n清洗 CSV\n\n## 验收标准\n- clean.py 存在\n\n## 边界\n只处理 data/\n\n## 未知与假设\n- UTF-8"
GOAL = "## 目标\nclean.py 可用\n\n## 判定清单\n- clean.py 存在\n- 跑完没有空行"
PASS = "## 结论\n达成\n\n## 理由\n都在。\n\n## 未通过\n(无)"
WORDS = "顺便把重复行也去掉"
# The closing line's first words: a first run's total, or a wake's (this wake, what the manifest totals).
TOTALS = tuple(say(key, "zh", cost=0.0, run=0.0, manifest="").split("$")[0] for key in ("total", "total_wake"))


def _ended(text: str) -> bool:
    return any(total in text for total in TOTALS)


NOTEBOOK = say("front_notebook", "zh")
CLICK = {"method": "custom", "content": {"event": "click"}}


def _sleep(seconds: int) -> Any:
    """A work step's tool call that runs for ``seconds``: time to talk to the run, restart or kill."""
    return tool_use("Bash", {"command": f"python3 -c 'import time; time.sleep({seconds})'"})


def _by(api: FakeAnthropic, role: str) -> list[Request]:
    return [r for r in api.requests if role_of(r) == role]


def _rows(ws: Path) -> list[dict[str, Any]]:
    return list(json.loads((ws / "runs" / "manifest.json").read_text(encoding="utf-8")))


def _work_session(ws: Path) -> str:
    return str(json.loads((ws / "runs" / "lineage.json").read_text(encoding="utf-8"))["steps"]["干活"])


def _session_of(request: Request) -> str:
    return request.headers.get("x-claude-code-session-id", "")


def _clis_of(ws: Path, parent: int) -> set[int]:
    return {pid for pid, ppid in claude_processes(ws).items() if ppid == parent}


def _shown(kernel: Kernel, display_id: str, *, since: int = 0) -> str:
    """The newest text/plain of a display, among the messages read from ``since`` on."""
    kept, kernel.seen = kernel.seen, kernel.seen[since:]
    try:
        found = kernel.displays_of(display_id)
    finally:
        kernel.seen = kept
    return str(found[-1].get("text/plain", "")) if found else ""


def _opened(kernel: Kernel, model: str, **state: Any) -> list[str]:
    """The comm ids of the widgets of ``model`` the kernel opened whose state has ``state``."""
    found = []
    for m in kernel.seen:
        if m["msg_type"] == "comm_open":
            has = (m["content"].get("data") or {}).get("state") or {}
            if has.get("_model_name") == model and all(has.get(k) == v for k, v in state.items()):
                found.append(str(m["content"]["comm_id"]))
    return found


def _holders(kernel: Kernel, child: str) -> list[str]:
    """The comm ids of the boxes that were opened, or later set, with ``child`` among their children."""
    out = []
    for m in kernel.seen:
        data = (m["content"].get("data") or {}) if m["msg_type"] in ("comm_open", "comm_msg") else {}
        if f"IPY_MODEL_{child}" in json.dumps((data.get("state") or {}).get("children") or []):
            out.append(str(m["content"]["comm_id"]))
    return out


def _button_on_page(kernel: Kernel, label: str) -> str:
    """The comm id of the option ``label`` of the question, once the question's box is in the view
    (it is put there only after its buttons listen: a click before that would be a click on nothing)."""
    for button in _opened(kernel, "ButtonModel", description=label):
        for row in _holders(kernel, button):
            for box in _holders(kernel, row):
                if _holders(kernel, box):  # the question's box, placed in a section of the view
                    return button
    return ""


@pytest.fixture
def runners(workspace: Path) -> Iterator[None]:
    """Whatever a failed test leaves running in the workspace (a runner, a tool's sleep) is ended."""
    yield
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if Path(os.readlink(entry / "cwd")) != workspace:
                continue
            line = command_line(int(entry.name))
            if "flower_magic.runner" in line or "time.sleep(" in line:
                os.kill(int(entry.name), signal.SIGKILL)


def test_a_background_run_outlives_the_kernel_and_takes_answers_words_and_a_stop(
    fake_api: FakeAnthropic, workspace: Path, kernel: Kernel, runners: None
) -> None:
    runs = workspace / "runs"
    assert kernel.run("%load_ext flower_magic").status == "ok"

    # -- a: the cell returns while the model thinks; another cell runs; the view goes on to the end --
    thinking = threading.Event()
    fake_api.add(
        as_role("clarifier", tool_use(ASK_TOOL, {"question": QUESTION, "options": OPTIONS}, hold=thinking)),
        as_role("clarifier", text(BRIEF)),
        as_role("goal", text(GOAL)),
        as_role("worker", text("做完了")),
        as_role("judge", text(PASS)),
    )
    bg = kernel.run('%flower --bg "清洗 data/ 里的 CSV"')
    assert bg.status == "ok", bg.text
    assert say("runner_started", "zh", pid=live_state(runs).pid, follow="") in bg.text  # type: ignore[union-attr]
    wait_until(lambda: _by(fake_api, "clarifier"), "the clarifier's request")
    assert kernel.run("1+1").text.strip().endswith("2")
    assert _by(fake_api, "clarifier")[0].reply_kind == ""  # the model is still thinking: no reply yet
    view = kernel.display_id(bg)

    # c (the answer): a second cell follows the same run, with widgets, and answers by a click.
    second = kernel.run("%flower", answer=lambda _prompt: "")
    assert second.status == "ok", second.text
    front = say("front_background", "zh")
    assert say("live_attached", "zh", pid=live_state(runs).pid, front=front) in second.text  # type: ignore[union-attr]
    released = len(kernel.seen)
    thinking.set()
    kernel.pump(lambda: _button_on_page(kernel, OPTIONS[1]), "the question's buttons in the second cell")
    kernel.comm_send(_button_on_page(kernel, OPTIONS[1]), CLICK)
    kernel.pump(lambda: _ended(_shown(kernel, view, since=released)), "the background cell's view to the end")
    final = _shown(kernel, view, since=released)
    assert say("live_heard_answer", "zh", source=NOTEBOOK, text=OPTIONS[1]) in final
    assert "设定目标" in final and "干活" in final  # steps that ran after the release
    answered = _by(fake_api, "clarifier")[1]
    assert OPTIONS[1] in answered.all_text  # the click reached the agent
    assert [r["step"] for r in _rows(workspace)] == ["确认需求", "设定目标", "干活", "干活·判定#1"]
    sid = _work_session(workspace)

    # -- b: a kernel restart mid-step leaves the runner and its CLI alone; the new kernel follows --
    working = threading.Event()
    fake_api.add(as_role("worker", text("接着做完了", hold=working)), as_role("judge", text(PASS)))
    n = len(_by(fake_api, "worker"))
    assert kernel.run("%flower --bg").status == "ok"
    wait_until(lambda: len(_by(fake_api, "worker")) > n, "the resumed work step's request")
    runner = live_state(runs).pid  # type: ignore[union-attr]
    clis = _clis_of(workspace, runner)
    assert clis, "no Claude Code process under the runner"
    kernel.restart()
    assert _clis_of(workspace, runner) == clis  # the same process, still the runner's
    kernel.run("%load_ext flower_magic")
    again = kernel.run("%flower")
    assert again.status == "ok", again.text
    assert say("live_attached", "zh", pid=runner, front=front) in again.text
    assert "干活" in again.text  # the earlier events: the work step began before the restart
    followed = kernel.display_id(again)
    working.set()
    kernel.pump(lambda: _ended(_shown(kernel, followed)), "the run followed to its end after the restart")
    assert "接着做完了" in _shown(kernel, followed)
    rows = _rows(workspace)[4:]
    assert [(r["step"], r["ok"], r.get("error")) for r in rows] == [("干活", True, None), ("干活·判定#1", True, None)]
    assert _session_of(_by(fake_api, "worker")[n]) in ("", sid) and _work_session(workspace) == sid
    assert {r["session_id"] for r in _rows(workspace) if r["step"] == "干活"} == {sid}

    # -- c: words to a live run resume its session with them; --stop ends the step, session kept --
    after_words = _sleep(121)
    after_words.match = lambda r: role_of(r) == "worker" and WORDS in r.all_text
    fake_api.add(as_role("worker", _sleep(120)), after_words)
    n = len(_by(fake_api, "worker"))
    third = kernel.run("%flower --bg")
    assert third.status == "ok", third.text
    wait_until(lambda: running_in(workspace, "time.sleep(120)"), "the work step's tool")
    said = kernel.run(f'%flower "{WORDS}"')
    assert say("live_remark_sent", "zh") in said.text, said.text
    wait_until(lambda: any(WORDS in r.all_text for r in _by(fake_api, "worker")[n:]), "the words in a request")
    told = next(r for r in _by(fake_api, "worker")[n:] if WORDS in r.all_text)
    assert "接着做完了" in told.all_text and told.n_messages > 2  # the earlier turns came with the words
    assert _session_of(told) in ("", sid)
    wait_until(lambda: running_in(workspace, "time.sleep(121)"), "the tool after the words")
    stop = kernel.run("%flower --stop")
    assert stop.status == "ok" and say("live_stop_sent", "zh", cmd="%flower") in stop.text, stop.text
    wait_until(lambda: _rows(workspace)[-1].get("error") == "interrupted-by-human", "the interrupted row")
    assert _rows(workspace)[-1]["session_id"] == sid and _work_session(workspace) == sid
    shown = kernel.display_id(third)
    kernel.pump(lambda: _ended(_shown(kernel, shown)), "the stopped run's view to its end")
    assert say("live_heard_stop", "zh", source=NOTEBOOK) in _shown(kernel, shown)

    # -- d: kill -9 of the runner: its CLI goes with it; the log reads to the kill; the next run resumes --
    # The words are in 需求.md now (issue 22: written down before the run heard them), so the goals
    # are derived again from the brief that holds them.
    fake_api.add(as_role("goal", text(GOAL)), as_role("worker", _sleep(122)))
    n_goal = len(_by(fake_api, "goal"))
    fourth = kernel.run("%flower --bg")
    assert fourth.status == "ok", fourth.text
    wait_until(lambda: running_in(workspace, "time.sleep(122)"), "the work step's tool")
    assert [WORDS in r.all_text for r in _by(fake_api, "goal")[n_goal:]] == [True]
    runner = live_state(runs).pid  # type: ignore[union-attr]
    clis = _clis_of(workspace, runner)
    assert clis and "flower_magic.runner" in command_line(runner)
    logged = read_log(runs)
    os.kill(runner, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while claude_processes(workspace).keys() & clis and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not claude_processes(workspace).keys() & clis, "a Claude Code process outlived its runner"
    after = read_log(runs)
    assert after[: len(logged)] == logged and after[0]["type"] == "start"
    assert not any(r["type"] == "end" for r in after)
    assert any("sleep(122)" in json.dumps(r, ensure_ascii=False) for r in after)  # up to the kill
    gone = kernel.display_id(fourth)
    killed = say("end_killed", "zh", step="干活")  # the ending the next start records, said as every view says it
    kernel.pump(lambda: killed in _shown(kernel, gone), "the follower's killed ending")
    fake_api.add(as_role("worker", text("被杀之后接着做完了")), as_role("judge", text(PASS)))
    n = len(_by(fake_api, "worker"))
    last = kernel.run("%flower")
    assert last.status == "ok", last.text
    resumed = _by(fake_api, "worker")[n]
    assert WORDS in resumed.all_text and _session_of(resumed) in ("", sid)  # the same conversation
    assert _work_session(workspace) == sid
    # That last run was the cell's own (foreground): it kept the event log too, for others to follow.
    told = read_log(runs)
    assert (told[0]["type"], told[0]["front_end"], told[-1]["type"]) == ("start", "notebook", "end")
    assert any("被杀之后接着做完了" in json.dumps(r, ensure_ascii=False) for r in told)
