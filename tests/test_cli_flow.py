"""The ``flower`` command end to end: real ``flower`` processes, the real Claude Code CLI, the scripted
fake API as the witness (issue 4, acceptance a-h).

Each role of the default workflow (clarifier, goal setter, worker, judge) is scripted on its own, by
its system prompt (``flower_magic.testing.roles``), so the order of requests never matters.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import re
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flower_magic.core import manifest
from flower_magic.core.brief import Brief
from flower_magic.core.goal import Goal
from flower_magic.core.human import TIMEOUT_TEXT
from flower_magic.core.project import project_key
from flower_magic.core.words import say, short_path
from flower_magic.front.outcome import Ending, Outcome
from flower_magic.stores.sqlite import SqliteSessionStore
from flower_magic.testing import FakeAnthropic, Request, hang, text, tool_use
from flower_magic.testing.roles import as_role, role_of
from flower_magic.workflow.clarify import CLARIFY_CUT, CLARIFY_RESUME
from flower_magic.workflow.starter import WAKE_NOTHING_SAID
from tests.helpers import wait_until

pytestmark = pytest.mark.slow

PROMPT = "  > "  # the line the terminal view prints under a question
PROC_TIMEOUT_S = 180  # a hung run fails the test instead of the suite's 300 s guard

TASK = "写个 md 转 html 的脚本"
QUESTION = "输出写到哪里?"
BRIEF = """好的,确认书如下。

## 目标
写一个 md2html.py,把 Markdown 转成 HTML。

## 验收标准
- python md2html.py a.md 生成 a.html

## 边界
不做 GUI。

## 未知与假设
输出写到同名 .html 文件(人选的)。
"""
GOAL = """## 目标
md2html.py 能把 Markdown 转成 HTML

## 判定清单
- 运行 python md2html.py a.md 生成 a.html
- a.html 里的一级标题是 <h1>
"""
PHRASE = "顺便支持 Y"
NEW_CHECK = "a.md 里的 Y 语法被正确渲染"
GOAL_Y = GOAL + f"- {NEW_CHECK}\n"
NOT_YET = "## 结论\n未达成\n\n## 理由\n标题没有渲染成 <h1>。\n\n## 未通过\n- a.html 里的一级标题是 <h1>\n"
ACHIEVED = "## 结论\n达成\n\n## 理由\n逐条看过,都在。\n\n## 未通过\n(无)\n"
JUDGE_STEP = "·判定"


# -- driving a `flower` process -------------------------------------------------------------------


@dataclass
class Done:
    rc: int
    out: str
    err: str


class Flower:
    """One ``flower`` process. stdout is read on a thread, so a test can wait for a question's prompt
    and answer it on stdin, or kill the process while it waits."""

    def __init__(self, ws: Path, env: dict[str, str], *args: str, stdin: Any = subprocess.PIPE) -> None:
        self.proc = subprocess.Popen(
            ["flower", *args],
            cwd=ws,
            env=env,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def _next(self) -> str | None:
        try:
            line = self._queue.get(timeout=PROC_TIMEOUT_S)
        except queue.Empty:
            raise AssertionError("flower printed nothing for too long:\n" + "".join(self.lines)) from None
        if line is not None:
            self.lines.append(line)
        return line

    def wait_prompt(self) -> None:
        """Read until the next question's ``  > `` line."""
        while True:
            line = self._next()
            if line is None:
                raise AssertionError("flower ended before asking:\n" + "".join(self.lines))
            if line.rstrip("\n") == PROMPT:
                return

    def answer(self, said: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(said + "\n")
        self.proc.stdin.flush()

    def finish(self) -> Done:
        """Close stdin (nobody answers from now on) and collect the rest."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        while self._next() is not None:
            pass
        assert self.proc.stderr is not None
        err = self.proc.stderr.read()
        return Done(self.proc.wait(timeout=PROC_TIMEOUT_S), "".join(self.lines), err)

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=PROC_TIMEOUT_S)
        self._reader.join(timeout=PROC_TIMEOUT_S)

    def __enter__(self) -> Flower:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.__exit__(None, None, None)
        self._reader.join(timeout=PROC_TIMEOUT_S)


def flower(ws: Path, env: dict[str, str], *args: str, answers: tuple[str, ...] = (), devnull: bool = False) -> Done:
    """Run ``flower``; answer each question in turn with ``answers``, then close stdin."""
    with Flower(ws, env, *args, stdin=subprocess.DEVNULL if devnull else subprocess.PIPE) as run:
        for said in answers:
            run.wait_prompt()
            run.answer(said)
        return run.finish()


# -- reading what happened ------------------------------------------------------------------------


def sid_of(request: Request) -> str:
    return request.headers.get("x-claude-code-session-id", "")


def lineage(ws: Path) -> dict[str, Any]:
    return dict(json.loads((ws / "runs" / "lineage.json").read_text(encoding="utf-8")))


def notes(ws: Path) -> Path:
    return ws / ".flower" / "notes"


def rows_by_run(ws: Path) -> list[list[dict[str, Any]]]:
    """Manifest rows grouped by process, in order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in manifest.read_rows(ws / "runs"):
        groups.setdefault(row["run"], []).append(row)
    return list(groups.values())


def steps_of(rows: list[dict[str, Any]]) -> list[str]:
    return [r["step"] for r in rows]


def stored_sessions(ws: Path) -> set[str]:
    store = SqliteSessionStore(ws / "runs" / "sessions.db", readonly=True)
    try:
        return {e["session_id"] for e in asyncio.run(store.list_sessions(project_key(ws)))}
    finally:
        store.close()


def assert_judges_fresh(requests: list[Request], ws: Path) -> int:
    """Acceptance f: every judge request opens a new conversation (the prompt and nothing before it),
    every judge round has its own session, and no judge session is in lineage. Returns the count."""
    judged = [r for r in requests if role_of(r) == "judge"]
    assert judged
    assert [r.n_messages for r in judged] == [2] * len(judged)
    assert len({sid_of(r) for r in judged}) == len(judged)
    judge_sids = {r["session_id"] for r in manifest.read_rows(ws / "runs") if JUDGE_STEP in r["step"]}
    assert judge_sids >= {sid_of(r) for r in judged}
    assert not judge_sids & set(lineage(ws)["steps"].values())
    assert not any(JUDGE_STEP in step for step in lineage(ws)["steps"])
    return len(judged)


def assert_clean_exit(done: Done) -> None:
    assert done.rc == 0, f"rc={done.rc}\nstdout:\n{done.out}\nstderr:\n{done.err}"
    assert "Traceback" not in done.err


# -- a -> b -> c -> d, then f, in one directory ---------------------------------------------------


def test_start_wake_phrase_and_new(fake_api: FakeAnthropic, child_env: dict[str, str]) -> None:
    """a: a fresh start with one question, two judged rounds; b: a wake with nothing said; c: a wake
    phrase reaches its three places; d: --new archives and starts fresh; f: across all four
    processes (four wakes' worth of judging) the judge is always a fresh pair of eyes."""
    ws = Path(child_env["HOME"]) / "proj"  # under $HOME, so the banner shortens it to ~/proj
    ws.mkdir()

    # a. fresh directory: clarify (one question) -> goals -> work -> 未达成 -> round 2 -> 达成
    fake_api.add(
        as_role("clarifier", tool_use("mcp__human__ask", {"question": QUESTION, "options": ["stdout", "同名文件"]})),
        as_role("clarifier", text(BRIEF)),
        as_role("goal", text(GOAL)),
        as_role("worker", text("写好了 md2html.py")),
        as_role("judge", text(NOT_YET)),
        as_role("worker", text("标题改成 <h1> 了")),
        as_role("judge", text(ACHIEVED)),
    )
    done = flower(ws, child_env, TASK, answers=("2",))
    assert_clean_exit(done)
    reqs = fake_api.requests
    assert [role_of(r) for r in reqs] == ["clarifier", "clarifier", "goal", "worker", "judge", "worker", "judge"]
    assert reqs[0].last_user_text.strip().endswith(TASK)
    assert reqs[1].tool_results() and "同名文件" in str(reqs[1].tool_results()[-1]["content"])  # "2" picked option 2
    brief_text = (notes(ws) / "需求.md").read_text(encoding="utf-8")
    brief = Brief.load(notes(ws) / "需求.md")
    assert brief is not None and brief.complete()
    assert [line for line in brief_text.splitlines() if line.startswith("## ")] == [
        "## 目标",
        "## 验收标准",
        "## 边界",
        "## 未知与假设",
    ]
    goal_text = (notes(ws) / "目标.md").read_text(encoding="utf-8")
    assert Goal.load(notes(ws) / "目标.md") == Goal.parse(GOAL)
    work1, judge1, work2 = reqs[3], reqs[4], reqs[5]
    assert "照这份需求做" in work1.last_user_text and "a.html 里的一级标题是 <h1>" in work1.last_user_text
    assert "写好了 md2html.py" in judge1.last_user_text and "a.html 里的一级标题是 <h1>" in judge1.last_user_text
    # round 2 continues the SAME work session, with the judge's feedback as the prompt
    assert sid_of(work2) == sid_of(work1) and work2.n_messages > work1.n_messages
    assert "标题没有渲染成 <h1>" in work2.last_user_text and "没通过的判定项" in work2.last_user_text
    assert "写好了 md2html.py" in work2.all_text
    (run_a,) = rows_by_run(ws)
    assert steps_of(run_a) == ["确认需求", "设定目标", "干活", "干活·判定#1", "干活#round2", "干活·判定#2"]
    lin = lineage(ws)
    assert lin["woke"] == 1 and set(lin["steps"]) == {"确认需求", "设定目标", "干活"}
    work_sid = lin["steps"]["干活"]
    assert work_sid == sid_of(work1)
    assert_judges_fresh(fake_api.requests, ws)

    # b. `flower` with nothing said (stdin not a tty): banner, frozen steps skipped, work resumed
    store = SqliteSessionStore(ws / "runs" / "sessions.db", readonly=True)
    try:
        ctx_tokens = store.last_context(project_key(ws), work_sid)
    finally:
        store.close()
    assert ctx_tokens >= 1000
    n0 = len(fake_api.requests)
    fake_api.add(as_role("worker", text("又检查了一遍")), as_role("judge", text(ACHIEVED)))
    done = flower(ws, child_env)
    assert_clean_exit(done)
    banner = f"<- 在 ~/proj 接上上次 需求已确认 · 目标 2 条 · 干活上下文 {ctx_tokens / 1000:.1f}K · 第 2 次唤醒"
    assert done.out.splitlines()[0] == banner
    reqs = fake_api.requests[n0:]
    assert [role_of(r) for r in reqs] == ["worker", "judge"]  # no clarifier, no goal setter
    assert sid_of(reqs[0]) == work_sid and reqs[0].n_messages > 2
    assert reqs[0].last_user_text.strip().endswith(WAKE_NOTHING_SAID)
    assert "标题改成 <h1> 了" in reqs[0].all_text
    # nothing said: nothing appended, nothing re-derived
    assert (notes(ws) / "需求.md").read_text(encoding="utf-8") == brief_text
    assert (notes(ws) / "目标.md").read_text(encoding="utf-8") == goal_text
    assert steps_of(rows_by_run(ws)[1]) == ["干活", "干活·判定#1"]
    assert lineage(ws)["woke"] == 2
    assert_judges_fresh(fake_api.requests, ws)

    # c. `flower "顺便支持 Y"`: appended to 需求.md, goals re-derived, sent to the resumed work session
    n0 = len(fake_api.requests)
    fake_api.add(
        as_role("goal", text(GOAL_Y)),
        as_role("worker", text("Y 也支持了")),
        as_role("judge", text(ACHIEVED)),
    )
    done = flower(ws, child_env, PHRASE)
    assert_clean_exit(done)
    assert "第 3 次唤醒" in done.out.splitlines()[0]
    appended = (notes(ws) / "需求.md").read_text(encoding="utf-8")
    assert appended.startswith(brief_text)
    assert re.fullmatch(r"\n## 唤醒时追加\(\d\d:\d\d:\d\d\)\n" + PHRASE + r"\n", appended[len(brief_text) :])
    assert Brief.load(notes(ws) / "需求.md") == brief  # the four sections are undisturbed
    reqs = fake_api.requests[n0:]
    assert [role_of(r) for r in reqs] == ["goal", "worker", "judge"]
    regoal, work, judge = reqs
    assert PHRASE in regoal.last_user_text  # the goal setter re-derives from what was said now
    assert Goal.load(notes(ws) / "目标.md") == Goal.parse(GOAL_Y)
    assert sid_of(work) == work_sid and work.n_messages > 2
    assert PHRASE in work.last_user_text and NEW_CHECK in work.last_user_text
    assert NEW_CHECK in judge.last_user_text
    assert steps_of(rows_by_run(ws)[2]) == ["设定目标", "干活", "干活·判定#1"]
    assert_judges_fresh(fake_api.requests, ws)

    # d. `flower --new "Z"`: archive lineage, brief and goal together; sessions.db keeps everything
    before = stored_sessions(ws)
    assert work_sid in before and len(before) == 3 + 4  # the three steps' sessions and four judges'
    old_lineage = lineage(ws)
    n0 = len(fake_api.requests)
    fake_api.add(
        as_role("clarifier", text(BRIEF.replace("md2html.py", "z.py"))),
        as_role("goal", text(GOAL.replace("md2html.py", "z.py"))),
        as_role("worker", text("z.py 写好了")),
        as_role("judge", text(ACHIEVED)),
    )
    done = flower(ws, child_env, "--new", "Z")
    assert_clean_exit(done)
    assert "接上上次" not in done.out and "接上次" not in done.out
    (archive,) = (notes(ws) / "archive").iterdir()
    assert sorted(p.name for p in archive.iterdir()) == sorted(["lineage.json", "诉求.md", "需求.md", "目标.md"])
    assert json.loads((archive / "lineage.json").read_text(encoding="utf-8")) == old_lineage
    assert (archive / "需求.md").read_text(encoding="utf-8") == appended
    assert Goal.load(archive / "目标.md") == Goal.parse(GOAL_Y)
    store = SqliteSessionStore(ws / "runs" / "sessions.db", readonly=True)
    try:
        assert all(store.has_session(project_key(ws), sid) for sid in before)
    finally:
        store.close()
    reqs = fake_api.requests[n0:]
    assert [role_of(r) for r in reqs] == ["clarifier", "goal", "worker", "judge"]
    assert all(r.n_messages == 2 and sid_of(r) not in before for r in reqs)
    assert reqs[0].last_user_text.strip().endswith("Z")
    new = lineage(ws)
    assert new["woke"] == 1
    assert set(new["steps"]) == {"确认需求", "设定目标", "干活"}
    assert not set(new["steps"].values()) & before
    assert "z.py" in (notes(ws) / "需求.md").read_text(encoding="utf-8")
    assert assert_judges_fresh(fake_api.requests, ws) == 5


# -- e. kill -9 in the middle of clarifying -------------------------------------------------------


def _stored_question(ws: Path, sid: str, question: str) -> bool:
    """The clarifier's call asking ``question`` reached sessions.db (the SDK mirrors a moment later)."""
    db = ws / "runs" / "sessions.db"
    if not db.is_file():
        return False
    store = SqliteSessionStore(db, readonly=True)
    try:
        entries = store.load_sync({"project_key": project_key(ws), "session_id": sid}) or []
    finally:
        store.close()
    for entry in entries:
        content = (entry.get("message") or {}).get("content") if isinstance(entry, dict) else None
        for block in content if isinstance(content, list) else []:
            is_call = isinstance(block, dict) and block.get("type") == "tool_use"
            if is_call and (block.get("input") or {}).get("question") == question:
                return True
    return False


def test_kill_during_clarify_then_continue(fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path) -> None:
    """e: the process dies (kill -9) while the second question waits; a bare ``flower`` continues the
    clarifier's own session with CLARIFY_RESUME, and the answered question is in its history."""
    second = "要支持表格吗?"
    fake_api.add(
        as_role("clarifier", tool_use("mcp__human__ask", {"question": QUESTION, "options": ["stdout", "同名文件"]})),
        as_role("clarifier", tool_use("mcp__human__ask", {"question": second})),
    )
    with Flower(workspace, child_env, TASK) as run:
        run.wait_prompt()
        run.answer("2")
        run.wait_prompt()  # the second question waits for a person
        sid = lineage(workspace)["steps"]["确认需求"]
        wait_until(
            lambda: _stored_question(workspace, sid, second),
            "the clarifier's second question reaching sessions.db",
            give_up_s=PROC_TIMEOUT_S,
        )
        run.kill()
    assert run.proc.returncode == -signal.SIGKILL
    assert not (notes(workspace) / "需求.md").exists()
    first_run = fake_api.requests
    assert {sid_of(r) for r in first_run} == {sid}

    fake_api.add(
        as_role("clarifier", text(BRIEF)),
        as_role("goal", text(GOAL)),
        as_role("worker", text("写好了")),
        as_role("judge", text(ACHIEVED)),
    )
    done = flower(workspace, child_env, devnull=True)
    assert_clean_exit(done)
    reqs = fake_api.requests[len(first_run) :]
    assert [role_of(r) for r in reqs] == ["clarifier", "goal", "worker", "judge"]
    resumed = reqs[0]
    assert sid_of(resumed) == sid
    assert CLARIFY_RESUME.strip() in resumed.last_user_text
    assert CLARIFY_CUT.strip() in resumed.last_user_text  # the process really was killed
    # what was asked and answered is in the history the clarifier continues from
    assert QUESTION in resumed.all_text and "同名文件" in resumed.all_text
    assert resumed.n_messages > first_run[-1].n_messages
    assert f"? {QUESTION}" not in done.out
    assert Brief.load(notes(workspace) / "需求.md") is not None
    assert steps_of(rows_by_run(workspace)[-1]) == ["确认需求", "设定目标", "干活", "干活·判定#1"]
    assert lineage(workspace)["steps"]["确认需求"] == sid


def test_a_stop_says_why_and_a_normal_exit_is_not_called_a_kill(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """Issue 12: with a model that does not answer with a brief (the echo model of ``python -m
    flower_magic.testing``) the run stopped in 确认需求 with exit 1 and no reason, and the next run
    told the clarifier its last process "may have been killed". The stop now says why; the next run
    continues the clarification in the same session without claiming a kill."""
    fake_api.add(as_role("clarifier", text("(fake model) you said: 写个脚本")))
    first = flower(workspace, child_env, TASK, devnull=True)
    assert first.rc == 1 and "Traceback" not in first.err
    stopped = Outcome(Ending.FAILED, step="确认需求")
    told = ["! " + say("brief_incomplete", "zh", n=4), stopped.headline("zh"), stopped.next_step("zh", "flower")]
    assert first.err.splitlines() == told
    sid = lineage(workspace)["steps"]["确认需求"]

    fake_api.add(
        as_role("clarifier", text(BRIEF)),
        as_role("goal", text(GOAL)),
        as_role("worker", text("写好了")),
        as_role("judge", text(ACHIEVED)),
    )
    n0 = len(fake_api.requests)
    done = flower(workspace, child_env, devnull=True)
    assert_clean_exit(done)
    resumed = fake_api.requests[n0]
    assert role_of(resumed) == "clarifier" and sid_of(resumed) == sid
    assert CLARIFY_RESUME.strip() in resumed.last_user_text
    assert CLARIFY_CUT.strip() not in resumed.all_text


# -- g (and f again): a wake after three failed rounds gets three new rounds ----------------------


def test_a_wake_gets_its_own_rounds(fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path) -> None:
    Brief.parse(BRIEF).write(notes(workspace) / "需求.md")
    Goal.parse(GOAL).write(notes(workspace) / "目标.md")
    fake_api.add(as_role("worker", text("又改了一点", times=None)), as_role("judge", text(NOT_YET, times=None)))
    three_rounds = ["干活", "干活·判定#1", "干活#round2", "干活·判定#2", "干活#round3", "干活·判定#3"]

    first = flower(workspace, child_env, "--rounds", "3", devnull=True)
    assert first.rc == 1 and "Traceback" not in first.err
    assert Outcome(Ending.NOT_REACHED, step="干活").headline("zh") in first.err
    # and why: the rounds are used up, with the judge's last word
    assert "3 轮用完了,判定者最后的结论是「未达成」:标题没有渲染成 <h1>。" in first.err
    assert steps_of(rows_by_run(workspace)[0]) == three_rounds
    n0 = len(fake_api.requests)
    work_sid = lineage(workspace)["steps"]["干活"]

    second = flower(workspace, child_env, "--rounds", "3", devnull=True)
    assert second.rc == 1 and Outcome(Ending.NOT_REACHED, step="干活").headline("zh") in second.err
    runs = rows_by_run(workspace)
    assert len(runs) == 2 and steps_of(runs[1]) == three_rounds
    reqs = fake_api.requests[n0:]
    assert [role_of(r) for r in reqs] == ["worker", "judge"] * 3
    assert all(sid_of(r) == work_sid for r in reqs[::2])  # the same work session, woken once more
    # Wake 1 ended on a failing verdict: wake 2 opens with it, not with a bare "carry on" (issue 13).
    assert "标题没有渲染成 <h1>" in reqs[0].last_user_text and WAKE_NOTHING_SAID not in reqs[0].last_user_text
    assert assert_judges_fresh(fake_api.requests, workspace) == 6
    assert lineage(workspace)["woke"] == 2


def test_the_verdict_a_wake_ends_on_reaches_the_next_wake(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """Issue 13, acceptance d: ``--rounds 1`` ends wake 1 on a failing verdict that no round received;
    wake 2's first worker request carries its reasons and failed checks, once, and a wake after a
    verdict the worker did receive says only "carry on"."""
    Brief.parse(BRIEF).write(notes(workspace) / "需求.md")
    Goal.parse(GOAL).write(notes(workspace) / "目标.md")
    reason = "依据-R7Q:a.html 的标题还是 <p>"
    failing = f"## 结论\n未达成\n\n## 理由\n{reason}\n\n## 未通过\n- a.html 里的一级标题是 <h1>\n"
    fake_api.add(as_role("worker", text("改了一点", times=None)), as_role("judge", text(failing, times=1)))
    fake_api.add(as_role("judge", text(ACHIEVED, times=None)))

    first = flower(workspace, child_env, "--rounds", "1", "--timeout", "0", devnull=True)
    assert first.rc == 1 and steps_of(rows_by_run(workspace)[0]) == ["干活", "干活·判定#1"]
    n0 = len(fake_api.requests)
    second = flower(workspace, child_env, "--rounds", "1", "--timeout", "0", devnull=True)
    assert_clean_exit(second)
    opening = next(r for r in fake_api.requests[n0:] if role_of(r) == "worker")
    assert reason in opening.last_user_text and "a.html 里的一级标题是 <h1>" in opening.last_user_text
    assert opening.all_text.count(reason) == 1
    n1 = len(fake_api.requests)
    third = flower(workspace, child_env, "--rounds", "1", "--timeout", "0", devnull=True)
    assert_clean_exit(third)
    again = next(r for r in fake_api.requests[n1:] if role_of(r) == "worker")
    assert again.last_user_text.strip().endswith(WAKE_NOTHING_SAID) and again.all_text.count(reason) == 1


def test_a_carried_verdict_is_sent_once_even_when_its_wake_was_killed(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """Wake 2 sends the verdict and is killed (-9) before any row of its own is written, so the
    manifest still ends on that verdict: wake 3 finds it in the session and does not send it again."""
    Brief.parse(BRIEF).write(notes(workspace) / "需求.md")
    Goal.parse(GOAL).write(notes(workspace) / "目标.md")
    reason = "依据-K9W:a.html 的标题还是 <p>"
    failing = f"## 结论\n未达成\n\n## 理由\n{reason}\n\n## 未通过\n- a.html 里的一级标题是 <h1>\n"
    fake_api.add(as_role("worker", text("改了一点")), as_role("judge", text(failing)))
    fake_api.add(as_role("worker", hang(120)))
    fake_api.add(as_role("worker", text("又改了", times=None)), as_role("judge", text(ACHIEVED, times=None)))

    first = flower(workspace, child_env, "--rounds", "1", "--timeout", "0", devnull=True)
    assert first.rc == 1
    n0 = len(fake_api.requests)
    with Flower(workspace, child_env, "--rounds", "1", "--timeout", "0", stdin=subprocess.DEVNULL) as second:
        wait_until(lambda: len(fake_api.requests) > n0, "wake 2's worker request", give_up_s=PROC_TIMEOUT_S)
        assert reason in fake_api.requests[n0].last_user_text
        second.kill()
    assert steps_of(manifest.read_rows(workspace / "runs"))[-1] == "干活·判定#1"
    n1 = len(fake_api.requests)
    third = flower(workspace, child_env, "--rounds", "1", "--timeout", "0", devnull=True)
    assert_clean_exit(third)
    opening = next(r for r in fake_api.requests[n1:] if role_of(r) == "worker")
    assert opening.all_text.count(reason) == 1, opening.last_user_text


def test_the_timeout_hint_is_said_once_and_only_where_it_applies(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """Issue 13: "add --timeout 0" was printed even when --timeout 0 was given. It is said once, and
    only when the person did not choose a timeout on the command line (0 or any other)."""
    Brief.parse(BRIEF).write(notes(workspace) / "需求.md")
    Goal.parse(GOAL).write(notes(workspace) / "目标.md")
    fake_api.add(as_role("worker", text("改了一点", times=None)), as_role("judge", text(ACHIEVED, times=None)))
    hint = say("no_tty", "zh")
    waiting = flower(workspace, child_env, "--rounds", "2", devnull=True)
    deciding = flower(workspace, child_env, "--rounds", "2", "--timeout", "0", devnull=True)
    chosen = flower(workspace, child_env, "--rounds", "2", "--timeout", "600", devnull=True)
    for done in (waiting, deciding, chosen):
        assert_clean_exit(done)
    assert waiting.out.count(hint) == 1
    assert hint not in deciding.out and hint not in chosen.out


# -- h. bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "lang_env", "message"),
    [
        ((), None, '要给一句诉求,例如 flower "帮我做一个 X"'),
        (("--lang", "en"), None, 'Say what to do, e.g. flower "build me an X"'),
        ((), "en", 'Say what to do, e.g. flower "build me an X"'),
    ],
)
def test_no_task_in_a_fresh_directory(
    fake_api: FakeAnthropic,
    child_env: dict[str, str],
    workspace: Path,
    args: tuple[str, ...],
    lang_env: str | None,
    message: str,
) -> None:
    env = dict(child_env, FLOWER_LANG=lang_env) if lang_env else child_env
    done = flower(workspace, env, *args, devnull=True)
    assert done.rc == 1
    assert done.err.splitlines() == [message]
    assert done.out == ""
    assert list(workspace.iterdir()) == []
    assert fake_api.requests == []


def test_unknown_flag_prints_usage(fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path) -> None:
    done = flower(workspace, child_env, "--bogus", "写个脚本", devnull=True)
    assert done.rc == 2
    # One line, as every mistake of the command's: what is wrong, and where the flags are listed.
    assert done.err.splitlines() == [f"flower: error: unrecognized arguments: --bogus ({say('see_help', 'zh')})"]
    assert list(workspace.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "offending"),
    [
        (("--rounds", "-1"), "-1"),
        (("--window", "0"), "0"),
        (("--window", "-5"), "-5"),
        (("--lang", "xx"), "'xx'"),
    ],
)
def test_bad_values_touch_nothing(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path, args: tuple[str, ...], offending: str
) -> None:
    (workspace / "a-file").write_text("not a folder", encoding="utf-8")
    done = flower(workspace, child_env, *args, "写个脚本", devnull=True)
    assert done.rc == 2
    assert "Traceback" not in done.err
    (error,) = done.err.splitlines()  # one line, no usage block
    assert error.startswith("flower: error:") and offending in error
    assert [p.name for p in workspace.iterdir()] == ["a-file"]
    assert fake_api.requests == []


@pytest.mark.parametrize(("flag", "role"), [("-r", "运行目录"), ("-w", "工作区")])
def test_a_file_where_a_folder_belongs_touches_nothing(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path, flag: str, role: str
) -> None:
    """The flags parse; the directory named is a file. One line names it and its role, exit 1, nothing written."""
    (workspace / "a-file").write_text("not a folder", encoding="utf-8")
    done = flower(workspace, child_env, flag, "a-file", "写个脚本", devnull=True)
    assert done.rc == 1 and done.out == ""
    [line] = done.err.splitlines()
    assert line.startswith("flower: ") and "a-file" in line and role in line and "Traceback" not in line
    assert [p.name for p in workspace.iterdir()] == ["a-file"]
    assert (workspace / "a-file").read_text(encoding="utf-8") == "not a folder"
    assert fake_api.requests == []


@pytest.mark.parametrize(
    ("garbled", "devnull"),
    [
        (b"\xff\xfe## \xe7\x9b\xae\n\x00\x00", True),  # not UTF-8
        ("## 目标\n写个脚本\n\n```\n## 验收标准\n藏在代码块里\n".encode(), False),  # half a brief, an open fence
    ],
)
def test_garbled_brief_and_nobody_to_answer(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path, garbled: bytes, devnull: bool
) -> None:
    """A garbled 需求.md is no brief: clarify runs. stdin is /dev/null or closed, so the clarifier's
    question times out at once and it is told to decide itself and record its assumption."""
    notes(workspace).mkdir(parents=True)
    (notes(workspace) / "需求.md").write_bytes(garbled)
    fake_api.add(
        as_role("clarifier", tool_use("mcp__human__ask", {"question": QUESTION})),
        as_role("clarifier", text(BRIEF)),
    )
    done = flower(workspace, child_env, "--clarify-only", TASK, devnull=devnull)
    assert_clean_exit(done)
    assert "接上上次" not in done.out
    asked, decided = fake_api.requests
    assert role_of(asked) == role_of(decided) == "clarifier"
    assert asked.last_user_text.strip().endswith(TASK)
    (result,) = decided.tool_results()
    assert TIMEOUT_TEXT in str(result["content"]) and "未知与假设" in TIMEOUT_TEXT
    assert say("ask_timeout", "zh") in done.out
    assert "[timeout]" in (notes(workspace) / "问答记录.md").read_text(encoding="utf-8")
    brief = Brief.load(notes(workspace) / "需求.md")
    assert brief is not None and brief.complete()


def test_clarify_only_on_a_clarified_directory_costs_nothing(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """trial_offline: ``flower "…" --clarify-only`` with a complete brief runs no step at all."""
    Brief.parse(BRIEF).write(notes(workspace) / "需求.md")
    done = flower(workspace, child_env, "--clarify-only", "再确认一下", devnull=True)
    assert_clean_exit(done)
    assert "总花费 $0" in done.out
    assert fake_api.requests == []
    assert not (workspace / "runs" / "manifest.json").exists()


# -- issue 10, h (first half): a person's own edit of 需求.md / 目标.md is never lost ----------------

MINE = "a.html 用 UTF-8 编码,标题带锚点"  # words a person adds by hand


def _edit_renamed_heading(text: str) -> str:
    return text.replace("## 验收标准", "## Acceptance criteria")


def _edit_removed_section(text: str) -> str:
    return text.replace("## 边界\n\n不做 GUI。\n\n", "").replace("生成 a.html", f"生成 a.html;{MINE}")


def _edit_added_words(text: str) -> str:
    return text.replace("生成 a.html", f"生成 a.html;{MINE}")


def _edit_goal_heading(text: str) -> str:
    return text.replace("# 判定清单", "# 怎么算做完") + f"- {MINE}\n"


@pytest.mark.parametrize(
    ("note", "edit", "encoding", "kept", "takers"),
    [
        # read as written, file untouched: the goals follow it, the resumed worker is given it
        ("需求.md", _edit_renamed_heading, "utf-8", False, ["goal", "worker"]),
        # no longer four sections: the clarifier rebuilds the brief from it, the file is kept aside
        ("需求.md", _edit_removed_section, "utf-8", True, ["clarifier"]),
        # re-saved by an editor set to GBK / to "Unicode": read as written, untouched
        ("需求.md", _edit_added_words, "gb18030", False, ["goal", "worker"]),
        ("需求.md", _edit_added_words, "utf-16", False, ["goal", "worker"]),
        # an unknown checklist heading: the goal setter derives the goal again from it, kept aside
        ("目标.md", _edit_goal_heading, "utf-8", True, ["goal"]),
    ],
    ids=["renamed-heading", "removed-section", "gb18030", "utf-16", "goal-heading"],
)
def test_a_person_edit_survives_is_told_and_reaches_the_model(
    fake_api: FakeAnthropic,
    child_env: dict[str, str],
    workspace: Path,
    note: str,
    edit: Any,
    encoding: str,
    kept: bool,
    takers: list[str],
) -> None:
    """After a complete run the person edits a note by hand and runs ``flower`` again: their bytes stay
    on disk (the file untouched, or a byte-identical copy beside it), one line tells them, and the
    model's request carries their text as they wrote it. The run after that says and resends nothing."""
    fake_api.add(
        as_role("clarifier", text(BRIEF)),
        as_role("goal", text(GOAL)),
        as_role("worker", text("写好了 md2html.py")),
        as_role("judge", text(ACHIEVED)),
    )
    assert_clean_exit(flower(workspace, child_env, TASK, devnull=True))
    path = notes(workspace) / note
    edited = edit(path.read_text(encoding="utf-8"))
    data = edited.encode(encoding)
    path.write_bytes(data)

    n0 = len(fake_api.requests)
    fixed = BRIEF.replace("生成 a.html", f"生成 a.html;{MINE}").replace("不做 GUI。", "(人删掉了这一段)")
    fake_api.add(
        as_role("clarifier", text(fixed)),
        as_role("goal", text(GOAL + f"- {MINE}\n")),
        as_role("worker", text("照改过的做了")),
        as_role("judge", text(ACHIEVED)),
    )
    done = flower(workspace, child_env, devnull=True)
    assert_clean_exit(done)

    # the edit survives on disk
    asides = list(path.parent.glob(f"{note}.edited-*"))
    if kept:
        (aside,) = asides
        assert aside.read_bytes() == data
        told = say("note_kept", "zh", name=note, aside=short_path(aside, workspace))
    else:
        assert asides == [] and path.read_bytes() == data
        told = say("note_edited", "zh", name=note)
    # the person is told, in one line
    assert [line for line in done.out.splitlines() if note in line and line.startswith("! ")] == [f"! {told}"]
    # the model gets the person's text as they wrote it
    reqs = fake_api.requests[n0:]
    assert [role_of(r) for r in reqs if edited.strip() in r.last_user_text] == takers
    worker = next(r for r in reqs if role_of(r) == "worker")
    assert worker.n_messages > 2  # the same work session, resumed
    if kept:  # it is given what was rebuilt from the person's text
        assert MINE in worker.last_user_text
        assert MINE in path.read_text(encoding="utf-8")

    # taken in once: the next run says nothing and resends nothing
    n1 = len(fake_api.requests)
    fake_api.add(as_role("worker", text("又看了一遍")), as_role("judge", text(ACHIEVED)))
    again = flower(workspace, child_env, devnull=True)
    assert_clean_exit(again)
    assert not [line for line in again.out.splitlines() if note in line and line.startswith("! ")]
    assert [role_of(r) for r in fake_api.requests[n1:]] == ["worker", "judge"]
    assert fake_api.requests[n1].last_user_text.strip().endswith(WAKE_NOTHING_SAID)
