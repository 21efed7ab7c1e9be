"""``front.launch.Launch``: one owner of a run's life (issue 23). Plan writes nothing; apply and run end
every run once, in one typed ``Outcome`` that the event log, ``live.json`` and the manifest agree with.

The fast tests drive the phases on files; the slow ones run the real Claude Code CLI against the
scripted fake API in this process (``fake_api_env``), as a front end would.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from flower_magic.core import live, manifest
from flower_magic.core.brief import Brief
from flower_magic.core.errors import UserError
from flower_magic.core.goal import Goal
from flower_magic.core.lineage import Lineage
from flower_magic.core.resilience import Resilience
from flower_magic.core.result import INTERRUPTED, KILLED
from flower_magic.core.rundir import RunDir
from flower_magic.core.runlock import acquire
from flower_magic.core.storage import StoreLocation
from flower_magic.front.launch import Launch, found_outcome, record_found
from flower_magic.front.options import GoOptions
from flower_magic.front.outcome import Ending, Outcome
from flower_magic.testing import FakeAnthropic, text, tool_use
from flower_magic.testing.roles import as_role, role_of
from flower_magic.workflow.starter import NoTaskError
from tests.helpers import snapshot, wait_until

BRIEF = """好的。

## 目标
写一个 hello.py。

## 验收标准
- python hello.py 打印 hello

## 边界
不做别的。

## 未知与假设
打印到标准输出(人选的)。
"""
GOAL = "## 目标\nhello.py 打印 hello\n\n## 判定清单\n- python hello.py 打印 hello\n"
ACHIEVED = "## 结论\n达成\n\n## 理由\n看过了。\n\n## 未通过\n(无)\n"
NOT_YET = "## 结论\n未达成\n\n## 理由\n还没写。\n\n## 未通过\n- python hello.py 打印 hello\n"
QUESTION = "输出到哪里?"


def _opts(ws: Path, task: str = "", **kw: Any) -> GoOptions:
    return GoOptions(task=task, workspace=ws, lang="en", timeout=600, **kw).check()


def _waking(ws: Path, goal: bool = True) -> None:
    notes = ws / ".flower" / "notes"
    notes.mkdir(parents=True)
    Brief.parse(BRIEF).write(notes / "需求.md")
    if goal:
        Goal.parse(GOAL).write(notes / "目标.md")


def _ends(run_dir: Path) -> list[dict[str, Any]]:
    return [r for r in live.read_log(run_dir) if r["type"] == "end"]


def _live_json(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "live.json").read_text(encoding="utf-8"))
    return data


# -- plan: nothing written -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("waking", "task", "new"),
    [(False, "写个 hello", False), (True, "顺便支持 Y", False), (True, "另一件事", True), (True, "", False)],
)
def test_plan_decides_everything_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, waking: bool, task: str, new: bool
) -> None:
    """Issue 23 (c): the plan reads and decides (archive? amend with which words?); the directory
    stays byte-identical until ``apply``."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-real-000000")
    ws = tmp_path / "ws"
    ws.mkdir()
    if waking:
        _waking(ws)
    before = snapshot(ws)
    launch = Launch(_opts(ws, task, new=new), front_end="terminal")
    plan = launch.plan()
    assert snapshot(ws) == before
    assert plan.waking is (waking and not new)
    assert plan.amend is bool(waking and task and not new)
    assert plan.new is new
    assert plan.save_task is bool(task and (new or not waking))
    launch.abandon()
    assert snapshot(ws) == before


def test_nothing_to_do_is_said_by_the_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-real-000000")
    ws = tmp_path / "ws"
    ws.mkdir()
    launch = Launch(_opts(ws), front_end="terminal")
    assert not launch.look().resumable
    with pytest.raises(NoTaskError):
        launch.plan()
    assert list(ws.iterdir()) == []


def test_a_server_store_that_cannot_be_reached_is_said_by_the_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run dir whose sessions live in PostgreSQL, the database gone: one line from ``plan``, the
    directory (its 需求.md, its live.json) byte-identical. Before issue 23 the store was opened after
    the wake phrase had been appended to 需求.md."""
    pytest.importorskip("psycopg")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-real-000000")
    ws = tmp_path / "ws"
    ws.mkdir()
    _waking(ws)
    runs = ws / "runs"
    runs.mkdir()
    url = "postgresql://flower@127.0.0.1:9/flower"  # nothing listens on the discard port
    location = StoreLocation.parse(url)
    (runs / "store.json").write_text(json.dumps(location.record()), encoding="utf-8")
    (runs / "live.json").write_text(json.dumps({"pid": 1, "state": "ended"}), encoding="utf-8")
    before = snapshot(ws)
    launch = Launch(_opts(ws, "also support a config file", sessions=url), front_end="terminal")
    with pytest.raises(UserError) as told:
        launch.plan()
    assert "\n" not in str(told.value) and "127.0.0.1" in str(told.value)
    assert snapshot(ws) == before


# -- the outcome on disk -----------------------------------------------------------------------------


def test_an_outcome_survives_its_record_and_reads_older_ones() -> None:
    out = Outcome(Ending.NOT_REACHED, step="干活", why="x", cost_usd=0.25, rows=3, manifest="m", demo=True)
    assert Outcome.from_record(out.to_record()) == out
    assert Outcome.from_record({"failed_at": "干活", "aborted": "why"}).ending is Ending.FAILED
    assert Outcome.from_record({"failed_at": "", "stopped": True}).ending is Ending.STOPPED
    assert Outcome.from_record({}).ending is Ending.DONE
    assert Outcome.from_record({"ending": "from-the-future"}).ending is Ending.UNKNOWN
    assert Outcome.from_record({"ending": "done", "total_cost": "x"}).cost_usd == 0.0
    assert out.next_step("en", "%flower").startswith("%flower --demo --rounds 3")


def _killed_log(run_dir: Path, *, step: str = "干活") -> str:
    run = live.LiveRun(run_dir, front_end="terminal", start={"lang": "en"})
    from flower_magic.core.events import Event

    run.sink(Event("step", step, payload={"index": 3, "total": 3}))
    run.log.close()  # kill -9: no end record, and nobody holds the lock
    return run.log.run_id


def test_a_run_killed_without_a_word_is_found_and_recorded_once(tmp_path: Path) -> None:
    """Issue 23 (2): kill -9 is found by the next start, not guessed: its step attempt gets one manifest
    row (killed-by-signal, its session) and its log an end record, once however often it is found."""
    ws = tmp_path / "ws"
    rd = RunDir.at(ws)
    rd.path.mkdir(parents=True)
    Lineage.open(rd.path, rd.workspace).remember("干活", "11111111-1111-4111-8111-111111111111")
    run_id = _killed_log(rd.path)
    found = found_outcome(rd.path)
    assert found is not None and (found.ending, found.step) == (Ending.KILLED, "干活")
    with acquire(rd.path, front_end="terminal"):
        assert found_outcome(rd.path, held=True) == found
        record_found(rd, found)
        record_found(rd, found)
    rows = manifest.read_rows(rd.path)
    assert [(r["step"], r["error"], r["run"], r["session_id"]) for r in rows] == [
        ("干活", KILLED, run_id, "11111111-1111-4111-8111-111111111111")
    ]
    assert [e["ending"] for e in _ends(rd.path)] == ["killed"]
    assert found_outcome(rd.path) is None  # its log has an end now


def test_a_live_run_is_not_found_killed(tmp_path: Path) -> None:
    rd = RunDir.at(tmp_path / "ws")
    rd.path.mkdir(parents=True)
    _killed_log(rd.path)
    run = live.LiveRun(rd.path, front_end="terminal", start={"lang": "en"})
    with acquire(rd.path, front_end="terminal"):
        assert found_outcome(rd.path) is None  # its process holds the lock: it runs, it was not killed
    run.log.close()
    assert found_outcome(rd.path) is not None


def test_a_held_launch_is_live_before_its_sdk_and_abandoning_it_ends_it_once(tmp_path: Path) -> None:
    """``hold`` (what a cell's header and the runner's ``ready`` wait for) takes the lock and begins the
    log without the SDK; a launch abandoned there (an Interrupt while the SDK imports) ends its log
    ``interrupted`` before any step and lets the lock go, instead of leaving a live run nobody runs
    (issue 24, 8: the header now comes before the SDK's import)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    launch = Launch(_opts(ws, "写个 hello", demo=True), front_end="notebook")
    launch.plan()
    launch.hold()
    run_dir = launch.rundir.path
    state = live.live_state(run_dir)
    assert state is not None and state.live and launch.rt is None
    assert [r["type"] for r in live.read_log(run_dir)] == ["start"]
    launch.hold()  # a second call does nothing
    launch.abandon()
    assert [e["ending"] for e in _ends(run_dir)] == [Ending.INTERRUPTED.value]
    assert launch.outcome is not None and launch.outcome.headline("en") == Outcome(Ending.INTERRUPTED).headline("en")
    assert not live.live_state(run_dir).live  # type: ignore[union-attr]
    with acquire(run_dir, front_end="terminal"):  # the lock went
        pass


# -- runs with the real CLI ---------------------------------------------------------------------------


def _assert_ended_once(rd: RunDir, ending: Ending, launch: Launch) -> None:
    """One end record with ``ending``, live.json ended, one manifest row per attempt the runtime made."""
    assert launch.outcome is not None and launch.outcome.ending is ending
    assert [e["ending"] for e in _ends(rd.path)] == [ending.value]
    assert _live_json(rd.path)["state"] == live.ENDED
    rows = [r for r in manifest.read_rows(rd.path) if r["run"] == launch.rt.run_id]
    assert len(rows) == launch.outcome.rows == len(launch.rt.results)
    assert len({(r["step"], r["started_at"]) for r in rows}) == len(rows)  # no attempt twice
    assert not live.live_state(rd.path).live  # type: ignore[union-attr]


def _run_in_thread(launch: Launch) -> threading.Thread:
    thread = threading.Thread(target=launch.run, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_done_then_a_wake_continues_the_same_session(
    tmp_path: Path, fake_api: FakeAnthropic, fake_api_env: Any
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    fake_api.add(
        as_role("clarifier", text(BRIEF)),
        as_role("goal", text(GOAL, times=None)),
        as_role("worker", text("写好了", times=None)),
        as_role("judge", text(ACHIEVED, times=None)),
    )
    launch = Launch(_opts(ws, "写个 hello", rounds=1), front_end="terminal")
    launch.plan()
    launch.apply()
    outcome = launch.run()
    rd = launch.rundir
    assert outcome.ok and outcome.exit_code == 0 and outcome.step == ""
    _assert_ended_once(rd, Ending.DONE, launch)
    work = Lineage.open(rd.path, rd.workspace).steps["干活"]

    again = Launch(_opts(ws, "顺便打印 world", rounds=1), front_end="terminal")
    assert again.plan().waking
    again.apply()
    assert again.run().ok
    worker = [r for r in fake_api.requests if role_of(r) == "worker"]
    assert json.dumps(worker[-1].body, ensure_ascii=False).count("顺便打印 world") == 1
    assert Lineage.open(rd.path, rd.workspace).steps["干活"] == work


@pytest.mark.slow
def test_goals_not_reached_is_its_own_ending(tmp_path: Path, fake_api: FakeAnthropic, fake_api_env: Any) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    _waking(ws)
    fake_api.add(as_role("worker", text("改了一点", times=None)), as_role("judge", text(NOT_YET, times=None)))
    launch = Launch(_opts(ws, rounds=1), front_end="terminal")
    launch.plan()
    launch.apply()
    outcome = launch.run()
    assert (outcome.ending, outcome.step, outcome.exit_code) == (Ending.NOT_REACHED, "干活", 1)
    assert "还没写" in outcome.why
    _assert_ended_once(launch.rundir, Ending.NOT_REACHED, launch)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["interrupt", "close"])
def test_an_ending_with_a_question_open_is_recorded_once(
    tmp_path: Path, fake_api: FakeAnthropic, fake_api_env: Any, how: str
) -> None:
    """Issue 23: the kernel's ■ while the agent waits for an answer ended as 'done' with an empty step;
    a kernel closed then wrote the step to the manifest twice. Now: ``interrupted`` / ``closed``, the
    question settled, one row per attempt, one end record, and the next start resumes the session."""
    ws = tmp_path / "ws"
    ws.mkdir()
    fake_api.add(as_role("clarifier", tool_use("mcp__human__ask", {"question": QUESTION, "options": ["a", "b"]})))
    launch = Launch(_opts(ws, "写个 hello"), front_end="notebook")
    launch.plan()
    launch.apply()
    thread = _run_in_thread(launch)
    wait_until(lambda: launch.live is not None and launch.live.state.asks, "the question to be open")
    if how == "interrupt":
        launch.interrupt(cause=Ending.INTERRUPTED)
    else:
        launch.end_now(Ending.CLOSED)  # what a kernel's shutdown does, from its control thread
    thread.join(120)
    assert not thread.is_alive()
    ending = Ending.INTERRUPTED if how == "interrupt" else Ending.CLOSED
    assert launch.outcome is not None and launch.outcome.asked and launch.outcome.step == "确认需求"
    rd = launch.rundir
    _assert_ended_once(rd, ending, launch)
    rows = manifest.read_rows(rd.path)
    assert [r["step"] for r in rows] == ["确认需求"]
    assert rows[0]["error"] in (INTERRUPTED, KILLED)
    clarifier = Lineage.open(rd.path, rd.workspace).steps["确认需求"]

    fake_api.add(as_role("clarifier", text(BRIEF)), as_role("goal", text(GOAL)))
    again = Launch(_opts(ws, "用 b", clarify_only=True), front_end="notebook")
    again.plan()
    again.apply()
    assert again.run().ok
    assert Lineage.open(rd.path, rd.workspace).steps["确认需求"] == clarifier  # the same conversation
    last = [r for r in fake_api.requests if role_of(r) == "clarifier"][-1]
    assert json.dumps(last.body, ensure_ascii=False).count("用 b") == 1


@pytest.mark.slow
def test_the_model_gone_past_the_outage_budget_is_its_own_ending(
    tmp_path: Path, fake_api: FakeAnthropic, fake_api_env: Any
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    _waking(ws)
    fake_api.stop()  # nothing answers at the API's address any more
    quick = Resilience(base_delay=0.1, max_delay=0.2, probe_interval=0.1, probe_timeout=0.2, max_offline_wait=1.0)
    launch = Launch(_opts(ws, rounds=1), front_end="terminal", resilience=quick)
    launch.plan()
    launch.apply()
    outcome = launch.run()  # the suite's per-test timeout keeps a wait that never gives up from hanging it
    assert (outcome.ending, outcome.step) == (Ending.MODEL_UNREACHABLE, "干活"), outcome
    _assert_ended_once(launch.rundir, Ending.MODEL_UNREACHABLE, launch)
