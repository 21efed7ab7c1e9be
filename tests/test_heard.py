"""What is said is heard, once (issue 22, item 1; acceptance a): words given when a run continues reach
the model in the next request of the step that is running, exactly once, whatever ended the process
before, and a session that already holds them is not sent them again.

The failure these guard: ``flower`` (or its background runner) was killed while the clarifier's first
request was in flight, or while its question waited for an answer; ``flower "还要一个 bye.txt"`` then
appended the words to ``诉求.md`` and exited 0, and no request to the model ever carried them: the
resumed clarifier got "我们接着刚才没问完的需求确认往下做…" alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from flower_magic.core import live
from flower_magic.core.brief import Brief
from flower_magic.core.human import ASK_TOOL
from flower_magic.testing import FakeAnthropic, Reply, Request, text, tool_use
from flower_magic.testing.roles import role_of
from flower_magic.workflow.heard import paragraphs, unheard
from tests.helpers import is_running, stored_session, wait_until

TASK = "写一个 hello.txt 任务-H1"
WORDS = "还要一个 bye.txt-W7"
ANSWER = "use csv and also write bye.txt-A3"
QUESTION = "要输出成什么格式?"
BRIEF = (
    "确认书。\n\n## 目标\n写 hello.txt。\n\n## 验收标准\n- hello.txt 存在\n\n## 边界\n不联网。\n\n## 未知与假设\n无\n"
)
GOAL = "## 目标\nhello.txt 存在\n\n## 判定清单\n- hello.txt 存在\n"
ACHIEVED = "## 结论\n达成\n\n## 理由\n看过了。\n\n## 未通过\n(无)\n"
CLARIFY = "确认需求"
GIVE_UP_S = 180.0


# -- which paragraphs of a request a session holds (no processes) -------------------------------------


def _session(*messages: str) -> Any:
    """``holds`` over a transcript of ``messages`` (substring search, as the stores do)."""
    return lambda text: any(text in m for m in messages)


def test_paragraphs_keep_their_place() -> None:
    text = "a\n\nb b\n \n\nc"
    assert [text[s:e] for s, e in paragraphs(text)] == ["a", "b b", "c"]


def test_words_the_first_prompt_carried_are_heard() -> None:
    assert unheard("task\n\nmore", _session("task\n\nmore"), head="H:") == ""
    assert unheard("task", _session("task"), head="H:") == ""


def test_words_said_after_the_first_prompt_are_unheard_until_sent_after_the_head() -> None:
    request = "task line\n\nsecond para\n\nwords one"
    assert unheard(request, _session("task line\n\nsecond para"), head="H:") == "words one"
    assert unheard(request, _session("task line\n\nsecond para", "resume H:words one\n"), head="H:") == ""
    # Two later additions, neither sent: both, in order, as they stand.
    request += "\n\nwords two\n\n\nand its tail"
    assert unheard(request, _session("task line\n\nsecond para"), head="H:") == (
        "words one\n\nwords two\n\n\nand its tail"
    )
    # The first was sent (a run killed after storing it), the second never was.
    assert unheard(request, _session("task line\n\nsecond para", "H:words one"), head="H:") == (
        "words two\n\n\nand its tail"
    )


def test_an_answer_the_model_wrote_itself_is_not_taken_as_heard() -> None:
    """A short answer ("csv") is in the transcript already, in the question's options: it was still never
    said to the model, so it is sent."""
    holds = _session("task", '{"question": "format?", "options": ["csv", "json"]}')
    assert unheard("task\n\ncsv", holds, head="H:") == "csv"


# -- the real thing: `flower` and `flower --detach`, killed, then words -------------------------------


def _answered(request: Request) -> bool:
    last = request.messages[-1] if request.messages else {}
    content = last.get("content")
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


class Model:
    """The fake model. The clarifier asks ``QUESTION`` first when ``asks``; its brief waits on ``gate``
    (a request in flight, for as long as a test needs one); the other roles answer at once."""

    def __init__(self, *, asks: bool) -> None:
        self.asks = asks
        self.gate = threading.Event()

    def __call__(self, request: Request) -> Reply:
        role = role_of(request)
        if role == "clarifier":
            if self.asks and QUESTION not in request.all_text:
                return tool_use(ASK_TOOL, {"question": QUESTION, "options": ["csv", "json"]})
            return text(BRIEF, hold=self.gate)
        if role == "goal":
            return text(GOAL)
        if role == "judge":
            return text(ACHIEVED)
        return text("做完了。")


class Flower:
    """``flower`` in the foreground (stdin open, nobody typing: a question waits) or ``--detach``ed;
    ``pid`` is the process that runs the workflow (the command itself, or its background runner)."""

    def __init__(self, ws: Path, env: dict[str, str], *args: str, detach: bool, logs: Path) -> None:
        self.ws, self.detach = ws, detach
        self.proc: subprocess.Popen[str] | None = None
        self._files: list[IO[str]] = []
        if detach:
            out = subprocess.run(
                ["flower", "--detach", *args], cwd=ws, env=env, capture_output=True, text=True, timeout=GIVE_UP_S
            )
            assert out.returncode == 0, out.stderr
            self.pid = int(re.findall(r"\d+", out.stdout)[0])  # "started in the background (pid N) …"
            return
        logs.mkdir(exist_ok=True)
        n = len(list(logs.iterdir()))
        self._files = [(logs / f"{n}.out").open("w"), (logs / f"{n}.err").open("w")]
        self.proc = subprocess.Popen(
            ["flower", *args],
            cwd=ws,
            env=env,
            stdin=subprocess.PIPE,
            stdout=self._files[0],
            stderr=self._files[1],
            text=True,
        )
        self.pid = self.proc.pid

    def type(self, line: str) -> None:
        """A line typed on the foreground run's stdin."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=GIVE_UP_S)
        wait_until(lambda: not is_running(self.pid), "the killed run to be gone")
        self.close()

    def finish(self) -> None:
        """Wait for the run to end; it must have ended well."""
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            rc = self.proc.wait(timeout=GIVE_UP_S)
            self.close()
            err = (self.ws.parent / "logs").glob("*.err")
            assert rc == 0, "\n".join(p.read_text() for p in err)
            return
        wait_until(lambda: not is_running(self.pid), "the background run to end", give_up_s=GIVE_UP_S)
        end = live.read_log(self.ws / "runs")[-1]
        assert end["type"] == "end" and end["ending"] == "done", end

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.__exit__(None, None, None)
        for f in self._files:
            f.close()
        self._files = []


@contextlib.contextmanager
def _flower(ws: Path, env: dict[str, str], *args: str, detach: bool) -> Iterator[Flower]:
    run = Flower(ws, env, *args, detach=detach, logs=ws.parent / "logs")
    try:
        yield run
    finally:
        run.close()


def _clarifier_sid(ws: Path) -> str:
    """The clarifier's session as lineage names it ("" before it does)."""
    path = ws / "runs" / "lineage.json"
    return str(json.loads(path.read_text(encoding="utf-8"))["steps"].get(CLARIFY, "")) if path.exists() else ""


def _stored(ws: Path, needle: str) -> bool:
    """The clarifier's session, as the store holds it, contains ``needle``."""
    sid = _clarifier_sid(ws)
    entries = (stored_session(ws / "runs", sid, ws) or []) if sid else []
    return needle in json.dumps(entries, ensure_ascii=False)


def _next_clarifier(api: FakeAnthropic, after: int) -> Request:
    """The first clarifier request the fake API received after request number ``after``."""
    wait_until(
        lambda: any(role_of(r) == "clarifier" for r in api.requests[after:]),
        "the clarifier's next request",
        give_up_s=GIVE_UP_S,
    )
    return next(r for r in api.requests[after:] if role_of(r) == "clarifier")


def _count(request: Request, words: str) -> int:
    return json.dumps(request.messages, ensure_ascii=False).count(words)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("detach", [False, True], ids=["foreground", "detach"])
def test_words_after_a_kill_mid_request_are_heard_once(
    detach: bool, fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """Killed while the clarifier's first request is in flight, then ``flower "words"``: the next
    clarifier request carries them once. Words given to a run killed before it sent them reach the
    next run; words a killed run did send are not sent again."""
    model = Model(asks=False)
    fake_api.default = model
    ws, env = workspace, dict(child_env, FLOWER_LANG="en")

    # 1. The task; killed while the clarifier's first request waits for its answer (the prompt stored).
    with _flower(ws, env, TASK, detach=detach) as run:
        _next_clarifier(fake_api, 0)
        wait_until(lambda: _stored(ws, TASK), "the task reaching the store")
        run.kill()
    sid = _clarifier_sid(ws)

    # 2. Words, and a kill before the run sent anything (it has only written them down).
    n = len(fake_api.requests)
    with _flower(ws, env, WORDS, detach=detach) as run:
        wait_until(lambda: WORDS in (ws / ".flower" / "notes" / "诉求.md").read_text(encoding="utf-8"), "诉求.md")
        run.kill()
    assert len(fake_api.requests) == n, "the kill came too late: the words were already sent"

    # 3. Nothing more said: the words the last run never sent go now, once; killed once they are stored.
    with _flower(ws, env, detach=detach) as run:
        heard = _next_clarifier(fake_api, n)
        assert heard.headers.get("x-claude-code-session-id") == sid
        assert _count(heard, WORDS) == 1, heard.last_user_text
        assert _count(heard, TASK) == 1
        wait_until(lambda: _stored(ws, WORDS), "the words reaching the store")
        run.kill()

    # 4. Once more: the session holds the words, so they are not sent again; the run ends well.
    n = len(fake_api.requests)
    model.gate.set()
    with _flower(ws, env, detach=detach) as run:
        again = _next_clarifier(fake_api, n)
        assert _count(again, WORDS) == 1, again.last_user_text
        run.finish()


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("detach", [False, True], ids=["foreground", "detach"])
def test_words_after_a_kill_while_a_question_waits_are_heard_once(
    detach: bool, fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """Killed while the clarifier's question waits for an answer, then ``flower "use csv and …"``: the
    next clarifier request carries the words once (the question's answer, as it died with its process);
    killed again after they are stored, the next run does not send them again."""
    model = Model(asks=True)
    fake_api.default = model
    ws, env = workspace, dict(child_env, FLOWER_LANG="en")

    with _flower(ws, env, TASK, detach=detach) as run:
        wait_until(lambda: _stored(ws, QUESTION), "the question reaching the store", give_up_s=GIVE_UP_S)
        run.kill()
    sid = _clarifier_sid(ws)

    n = len(fake_api.requests)
    with _flower(ws, env, ANSWER, detach=detach) as run:
        heard = _next_clarifier(fake_api, n)
        assert heard.headers.get("x-claude-code-session-id") == sid
        assert QUESTION in heard.all_text  # the question is in the history it continues from
        assert _count(heard, ANSWER) == 1, heard.last_user_text
        wait_until(lambda: _stored(ws, ANSWER), "the answer reaching the store")
        run.kill()

    n = len(fake_api.requests)
    model.gate.set()
    with _flower(ws, env, detach=detach) as run:
        again = _next_clarifier(fake_api, n)
        assert _count(again, ANSWER) == 1, again.last_user_text
        run.finish()


# -- the other ways of continuing: a goal step cut short, a live run's remark, the judge ------------


def _sid(ws: Path, step: str) -> str:
    path = ws / "runs" / "lineage.json"
    return str(json.loads(path.read_text(encoding="utf-8"))["steps"].get(step, "")) if path.exists() else ""


def _holds(ws: Path, step: str, needle: str) -> bool:
    """The session lineage names for ``step``, as the store holds it, contains ``needle``."""
    sid = _sid(ws, step)
    return bool(sid) and needle in json.dumps(stored_session(ws / "runs", sid, ws) or [], ensure_ascii=False)


class Held:
    """The fake model: every role answers at once except the one ``held`` names, which waits on ``gate``."""

    def __init__(self, held: str) -> None:
        self.held = held
        self.gate = threading.Event()

    def __call__(self, request: Request) -> Reply:
        role = role_of(request)
        said = {"clarifier": BRIEF, "goal": GOAL, "judge": ACHIEVED}.get(role, "做完了。")
        return text(said, hold=self.gate if role == self.held else None)


def _by_role(api: FakeAnthropic, after: int, words: str) -> list[tuple[str, int]]:
    """Each request after number ``after``: its role and how many times it carries ``words``."""
    return [(role_of(r), _count(r, words)) for r in api.requests[after:]]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("detach", [False, True], ids=["foreground", "detach"])
def test_words_at_wake_after_a_cut_short_goal_step_are_heard_once(
    detach: bool, fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """Killed while the goal setter's request is in flight, then ``flower "words"``: its next request
    carries them once; killed again once it holds them, the run after does not send them a second
    time (it sent the whole brief again, words and all, before), and the worker gets them once."""
    model = Held("goal")
    fake_api.default = model
    ws, env = workspace, dict(child_env, FLOWER_LANG="en")
    with _flower(ws, env, TASK, detach=detach) as run:
        wait_until(lambda: _holds(ws, "设定目标", "写 hello.txt"), "the goal setter's prompt reaching the store")
        run.kill()

    n = len(fake_api.requests)
    with _flower(ws, env, WORDS, detach=detach) as run:
        wait_until(lambda: _holds(ws, "设定目标", WORDS), "the words reaching the goal setter's store")
        run.kill()
    assert _by_role(fake_api, n, WORDS) == [("goal", 1)]

    n = len(fake_api.requests)
    model.gate.set()
    with _flower(ws, env, detach=detach) as run:
        run.finish()
    assert _by_role(fake_api, n, WORDS) == [("goal", 1), ("worker", 1), ("judge", 0)]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_remark_the_killed_runner_took_reaches_the_next_run_once(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """``flower "words"`` on a live background run, and the runner killed after it took them but before
    they reached the model: the next run's first worker request carries them, once."""
    model = Held("worker")
    fake_api.default = model
    ws, env = workspace, dict(child_env, FLOWER_LANG="en")
    with _flower(ws, env, TASK, detach=True) as run:
        wait_until(lambda: any(role_of(r) == "worker" for r in fake_api.requests), "the worker's request")
        said = subprocess.run(["flower", "--detach", WORDS], cwd=ws, env=env, capture_output=True, text=True)
        assert said.returncode == 0, said.stderr
        wait_until(lambda: any(r["type"] == "heard" for r in live.read_log(ws / "runs")), "the remark taken")
        run.kill()
    assert not _holds(ws, "干活", WORDS)  # the kill came before the words reached the store

    n = len(fake_api.requests)
    model.gate.set()
    with _flower(ws, env, detach=True) as run:
        run.finish()
    got = _by_role(fake_api, n, WORDS)
    assert ("worker", 1) in got and all(c == 1 for role, c in got if role == "worker"), got


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_remark_while_the_judge_rules_goes_to_the_worker_once(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """Words said to a live run while the judge rules are for the worker: the judge is not cut, the
    worker's next request carries them once (in the same run, in its own session), and the next wake
    does not send them again."""
    model = Held("judge")
    fake_api.default = model
    ws, env = workspace, dict(child_env, FLOWER_LANG="en")
    with _flower(ws, env, "--rounds", "1", TASK, detach=True) as run:
        wait_until(lambda: any(role_of(r) == "judge" for r in fake_api.requests), "the judge's request")
        n = len(fake_api.requests) - 1
        said = subprocess.run(["flower", "--detach", WORDS], cwd=ws, env=env, capture_output=True, text=True)
        assert said.returncode == 0, said.stderr
        wait_until(lambda: any(r["type"] == "heard" for r in live.read_log(ws / "runs")), "the remark taken")
        model.gate.set()
        run.finish()
    assert _by_role(fake_api, n, WORDS) == [("judge", 0), ("worker", 1), ("judge", 0)]
    worker = next(r for r in fake_api.requests[n:] if role_of(r) == "worker")
    assert worker.headers.get("x-claude-code-session-id") == _sid(ws, "干活")

    n = len(fake_api.requests)
    with _flower(ws, env, detach=True) as run:
        run.finish()
    assert [c for role, c in _by_role(fake_api, n, WORDS) if role == "worker"] == [1]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_words_at_wake_to_a_work_session_stored_without_its_prompt_are_said_once(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """The work session's first process died after the CLI stored its first lines (its two queue
    records) but before its prompt: the next run sends the work prompt (the brief, with the words
    appended to it) ahead of the wake's, in every attempt, also the fresh one the CLI falls back to when
    it cannot resume such a session. The words said at that wake were in each request twice."""
    from flower_magic.core.goal import Goal
    from flower_magic.core.lineage import Lineage
    from flower_magic.core.project import project_key
    from flower_magic.stores.sqlite import SqliteSessionStore

    sid = "11111111-2222-4333-8444-555555555555"
    notes = workspace / ".flower" / "notes"
    Brief.parse(BRIEF).write(notes / "需求.md")
    Goal.parse(GOAL).write(notes / "目标.md")
    (workspace / "runs").mkdir()
    Lineage.open(workspace / "runs", workspace).remember("干活", sid)
    store = SqliteSessionStore(workspace / "runs" / "sessions.db")
    queued = [
        {"type": "queue-operation", "operation": op, "timestamp": "2025-01-01T00:00:00Z", "sessionId": sid}
        for op in ("enqueue", "dequeue")
    ]
    asyncio.run(store.append({"project_key": project_key(workspace), "session_id": sid}, queued))  # type: ignore[arg-type]
    store.close()
    fake_api.default = Held("nobody")

    n = len(fake_api.requests)
    with _flower(workspace, dict(child_env, FLOWER_LANG="en"), WORDS, detach=False) as run:
        run.finish()
    workers = [r for r in fake_api.requests[n:] if role_of(r) == "worker"]
    assert workers and all("写 hello.txt" in r.all_text for r in workers)  # the work prompt went first
    assert [_count(r, WORDS) for r in workers] == [1] * len(workers), workers[-1].last_user_text


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_line_typed_while_the_worker_runs_reaches_it_before_the_step_ends(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """A line typed into a foreground ``flower`` with no question open is mail: it waited for the worker
    to look at its inbox, and a worker that never did ended the step, and the run, without it. The step
    now ends only after one more turn that carries it, once."""
    model = Held("worker")
    fake_api.default = model
    ws, env = workspace, dict(child_env, FLOWER_LANG="en")
    with _flower(ws, env, "--rounds", "1", TASK, detach=False) as run:
        wait_until(lambda: any(role_of(r) == "worker" for r in fake_api.requests), "the worker's request")
        n = len(fake_api.requests)
        run.type(WORDS)
        wait_until(lambda: WORDS in (ws / ".flower" / "notes" / "需求.md").read_text(encoding="utf-8"), "mail")
        model.gate.set()
        run.finish()
    got = _by_role(fake_api, n, WORDS)
    assert got == [("judge", 0), ("worker", 1), ("judge", 0)], got
