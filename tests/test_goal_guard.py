"""The goal guard and the default workflow's assembly, in process with the real Runtime and the real
CLI (issue 4, acceptance i): the reference's goal_offline [2]-[9], the flow_offline cases not covered
by test_workflow_lineage, lineage_offline [8]-[9] and trial_offline's starter_flow checks.

goal_offline [1] (parsing) lives in test_goal.py and test_verdict.py; [7] with three rounds is
test_cli_flow.py's wake-gets-its-own-rounds case.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from flower_magic import AgentSpec, Runtime, Step, Workflow
from flower_magic.core import manifest
from flower_magic.core.brief import Brief
from flower_magic.core.events import Event
from flower_magic.core.goal import Goal
from flower_magic.core.handoff import HandoffPolicy
from flower_magic.core.human import HumanChannel
from flower_magic.core.lineage import Lineage
from flower_magic.core.resilience import CLI_MAX_RETRIES
from flower_magic.core.result import INTERRUPT_NOTE, INTERRUPTED
from flower_magic.core.rundir import wake_state
from flower_magic.core.words import short_path
from flower_magic.testing import FakeAnthropic, Request, error, text, tool_use
from flower_magic.testing.roles import as_role, role_of
from flower_magic.workflow.base import StepAbort
from flower_magic.workflow.judge import ACCEPT, AMEND, MISJUDGED, UNCLEAR, goal_step, unheard_verdict, with_goal
from flower_magic.workflow.starter import NoTaskError, starter_flow
from flower_magic.workflow.verdict import ACHIEVED, NOT_YET

WORKER = AgentSpec(name="worker", instructions="照做,简短回答。", allowed_tools=[])
GOAL = "## 目标\n写出 hello.txt\n\n## 判定清单\n- hello.txt 存在\n- 内容是 hello\n"
BRIEF = "## 目标\n写出 hello.txt\n\n## 验收标准\n- 内容是 hello\n\n## 边界\n不碰别的文件\n\n## 未知与假设\n无\n"
PASS = "## 结论\n达成\n\n## 理由\n都在。\n\n## 未通过\n(无)"
FAIL = "## 结论\n未达成\n\n## 理由\n内容是 hullo。\n\n## 未通过\n- 内容是 hello"
UNREACHABLE = "## 结论\n无法达成\n\n## 理由\n这个环境没有 hello 这个词的授权。\n\n## 未通过\n- 内容是 hello"
VAGUE = "我看了看,差不多吧。"


def worker(reply: str, **kw: Any) -> Any:
    return as_role("worker", text(reply, **kw))


def judge(reply: str, **kw: Any) -> Any:
    return as_role("judge", text(reply, **kw))


def sid_of(request: Request) -> str:
    return request.headers.get("x-claude-code-session-id", "")


def goal_path(ws: Path) -> Path:
    return ws / ".flower" / "notes" / "目标.md"


def guarded(ws: Path, *, rounds: int, channel: HumanChannel | None = None) -> Workflow:
    """A work step with the real judge after every round, against a frozen 目标.md."""
    Goal.parse(GOAL).write(goal_path(ws))
    ch = channel or HumanChannel(timeout_s=60)
    work = with_goal(Step("干活", WORKER, "照需求做:写出 hello.txt。"), ch, goal_path=goal_path(ws), rounds=rounds)
    return Workflow([work], channel=ch, continuous=False)


async def run(wf: Workflow, ws: Path, **kw: Any) -> dict[str, Any]:
    rt = Runtime(workspace=ws, run_dir=ws / "runs", resilience=False)
    try:
        return await wf.run(rt, **kw)
    finally:
        rt.close()


def answering(channel: HumanChannel, answers: list[str]) -> Any:
    """An event sink that answers each question the moment it is asked, as a person would."""

    def sink(ev: Event) -> None:
        if ev.kind == "ask" and ev.payload.get("state") == "asked":
            channel.answer(ev.payload["id"], answers.pop(0))

    return sink


def steps(ws: Path) -> list[str]:
    return [r["step"] for r in manifest.read_rows(ws / "runs")]


def roles(api: FakeAnthropic) -> list[str]:
    return [role_of(r) for r in api.requests]


# -- goal_offline [2]-[7] ---------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.slow
async def test_achieved_first_round(fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path) -> None:
    """[2] One round; the verdict is in ctx; the judge saw the goal and the worker's report."""
    fake_api.add(worker("写好了 hello.txt"), judge(PASS))
    ctx = await run(guarded(workspace, rounds=3), workspace)
    assert "_failed_at" not in ctx
    assert ctx["_verdict"].state == ACHIEVED and ctx["_goal_rounds"] == 1
    assert roles(fake_api) == ["worker", "judge"]
    verify = fake_api.requests[1]
    assert "- 内容是 hello" in verify.last_user_text and "写好了 hello.txt" in verify.last_user_text
    assert steps(workspace) == ["干活", "干活·判定#1"]


@pytest.mark.anyio
@pytest.mark.slow
async def test_the_judges_sessions_say_nothing_about_context(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """Issue 13: "near the hand-off line" was printed at the start of every session, the judge's too.
    Here only the judge's context is past the warning line; nobody is told anything."""
    fake_api.add(worker("写好了 hello.txt", usage={"input_tokens": 500}), judge(PASS, usage={"input_tokens": 5_000}))
    events: list[Event] = []
    handoff = HandoffPolicy(window=40_000)  # warns from 1K, hands off at 10K
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False, handoff=handoff)
    try:
        ctx = await guarded(workspace, rounds=1).run(rt, on_event=events.append)
    finally:
        rt.close()
    assert ctx["_verdict"].state == ACHIEVED
    assert rt.handoff.warn_at < 5_000 < rt.handoff.at
    assert [e for e in events if e.kind == "handoff"] == []


@pytest.mark.anyio
@pytest.mark.slow
async def test_not_yet_then_achieved(fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path) -> None:
    """[3] The second round resumes the same work session with the judge's feedback."""
    fake_api.add(worker("写成 hullo 了"), judge(FAIL), worker("改成 hello 了"), judge(PASS))
    ctx = await run(guarded(workspace, rounds=3), workspace)
    assert "_failed_at" not in ctx and ctx["_goal_rounds"] == 2
    assert [v.state for v in ctx["_verdicts"]] == [NOT_YET, ACHIEVED]
    first, _, second, _ = fake_api.requests
    assert sid_of(second) == sid_of(first) and second.n_messages > first.n_messages
    feedback = second.last_user_text
    assert "内容是 hullo" in feedback and "- 内容是 hello" in feedback and "接着做" in feedback
    assert steps(workspace) == ["干活", "干活·判定#1", "干活#round2", "干活·判定#2"]
    assert ctx["_results"]["干活"].step == "干活#round2"


@pytest.mark.anyio
@pytest.mark.slow
async def test_vague_verdict_with_one_round_fails(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """[4] and [7] rounds=1: one round only; an unclear verdict is not a pass."""
    fake_api.add(worker("做了"), judge(VAGUE), worker("不该有第二轮"))
    ctx = await run(guarded(workspace, rounds=1), workspace)
    assert ctx["_failed_at"] == "干活"
    assert ctx["_verdict"].state == "" and ctx["_verdict"].reason == UNCLEAR and "没给出明确结论" in UNCLEAR
    assert roles(fake_api) == ["worker", "judge"]
    assert steps(workspace) == ["干活", "干活·判定#1"]


@pytest.mark.anyio
@pytest.mark.slow
async def test_unreachable_accepted(fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path) -> None:
    """[5] The person accepts an unreachable verdict: the step passes after one round."""
    fake_api.add(worker("做不了"), judge(UNREACHABLE))
    wf = guarded(workspace, rounds=3)
    ctx = await run(wf, workspace, on_event=answering(wf.channel, [ACCEPT]))
    assert "_failed_at" not in ctx and ctx["_goal_rounds"] == 1
    (asked,) = wf.channel.transcript()
    assert "无法达成" in asked.question and "授权" in asked.question
    assert asked.options == [ACCEPT, AMEND, MISJUDGED] and asked.answer == ACCEPT


@pytest.mark.anyio
@pytest.mark.slow
async def test_unreachable_misjudged(fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path) -> None:
    """[5] The person says the judge is wrong: a second round is told so, and to go on."""
    fake_api.add(worker("做不了"), judge(UNREACHABLE), worker("还是做了"), judge(PASS))
    wf = guarded(workspace, rounds=3)
    ctx = await run(wf, workspace, on_event=answering(wf.channel, ["3"]))  # option 3, as typed in a terminal
    assert "_failed_at" not in ctx and ctx["_goal_rounds"] == 2
    second = fake_api.requests[2]
    assert role_of(second) == "worker" and sid_of(second) == sid_of(fake_api.requests[0])
    assert "判断有误" in second.last_user_text and MISJUDGED in second.last_user_text
    assert "接着做" in second.last_user_text


@pytest.mark.anyio
@pytest.mark.slow
async def test_unreachable_goal_amended(fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path) -> None:
    """[5] The person amends the goal: 目标.md is rewritten and the next round and judge see it."""
    fake_api.add(worker("做不了"), judge(UNREACHABLE), worker("按新目标写了 hi"), judge(PASS))
    wf = guarded(workspace, rounds=3)
    ctx = await run(wf, workspace, on_event=answering(wf.channel, [AMEND, "写 hi 也行"]))
    assert "_failed_at" not in ctx
    amended = Goal.load(goal_path(workspace))
    assert amended is not None and "(已修改)写 hi 也行" in amended.statement
    assert amended.checks == Goal.parse(GOAL).checks
    second_work, second_judge = fake_api.requests[2:]
    assert "目标已被人修改" in second_work.last_user_text and "写 hi 也行" in second_work.last_user_text
    assert "写 hi 也行" in second_judge.last_user_text


@pytest.mark.anyio
@pytest.mark.slow
async def test_unreachable_and_nobody_answers(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """[6] Nobody can answer (timeout 0): it stops after one round, however many were allowed."""
    fake_api.add(worker("做不了"), judge(UNREACHABLE), worker("不该有第二轮"))
    ctx = await run(guarded(workspace, rounds=5, channel=HumanChannel(timeout_s=0)), workspace)
    assert ctx["_failed_at"] == "干活"
    assert "无人应答" in ctx["_aborted"] and short_path(goal_path(workspace), workspace) in ctx["_aborted"]
    assert roles(fake_api) == ["worker", "judge"]


# -- goal_offline [8], [8b], [8c], [9] --------------------------------------------------------------


def goal_flow(ws: Path, *, always_set: bool = False) -> Workflow:
    ch = HumanChannel(timeout_s=0)
    step = goal_step(ch, goal_path=goal_path(ws), brief_key="确认需求", always_set=always_set)
    return Workflow([step], channel=ch, context={"确认需求": BRIEF.strip()}, continuous=False)


@pytest.mark.anyio
@pytest.mark.slow
async def test_goal_step_freezes_then_skips(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """[8] The goal is written and put into ctx; with the file there, the step is skipped but ctx is
    still filled."""
    fake_api.add(as_role("goal", text("好的。\n\n" + GOAL)))
    ctx = await run(goal_flow(workspace), workspace)
    assert "_failed_at" not in ctx
    assert Goal.load(goal_path(workspace)) == Goal.parse(GOAL)
    assert isinstance(ctx["_goal"], Goal) and "判定清单" in ctx["设定目标"]
    (request,) = fake_api.requests
    assert role_of(request) == "goal" and "## 边界\n不碰别的文件" in request.last_user_text

    again = await run(goal_flow(workspace), workspace)
    assert len(fake_api.requests) == 1
    assert again["_goal"] == Goal.parse(GOAL) and "- 内容是 hello" in again["设定目标"]
    assert "设定目标" not in again["_results"]


@pytest.mark.anyio
@pytest.mark.slow
async def test_unverifiable_checks_warn_once(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """[8b] Two checks this environment cannot verify: one warning event, and no failure."""
    doubtful = GOAL + "- [此环境无法验证:要真机] 手机上能打开\n- [无法验证:要人眼] 排版好看\n"
    fake_api.add(as_role("goal", text(doubtful)))
    events: list[Event] = []
    ctx = await run(goal_flow(workspace), workspace, on_event=events.append)
    assert "_failed_at" not in ctx
    assert len(ctx["_goal"].unverifiable) == 2
    (warning,) = [e for e in events if e.kind == "task"]
    assert warning.payload["total"] == 4 and len(warning.payload["unverifiable"]) == 2
    assert short_path(goal_path(workspace), workspace) in warning.text and "2/4" in warning.text


@pytest.mark.anyio
@pytest.mark.slow
async def test_clean_goal_no_warning_and_checkless_goal_fails(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """[8c] A clean goal warns about nothing; a goal without checks (re-derived with always_set)
    fails the step and leaves the frozen file alone."""
    fake_api.add(as_role("goal", text(GOAL)), as_role("goal", text("## 目标\n写出 hello.txt\n\n## 判定清单\n(空)")))
    events: list[Event] = []
    await run(goal_flow(workspace), workspace, on_event=events.append)
    assert [e for e in events if e.kind == "task"] == []
    ctx = await run(goal_flow(workspace, always_set=True), workspace)
    assert len(fake_api.requests) == 2
    assert ctx["_failed_at"] == "设定目标"
    assert Goal.load(goal_path(workspace)) == Goal.parse(GOAL)


@pytest.mark.anyio
async def test_gate_without_runtime_aborts(workspace: Path) -> None:
    """[9] No runtime in ctx: the gate refuses to judge rather than pass."""
    work = with_goal(Step("干活", WORKER, "做。"), HumanChannel(), goal_path=goal_path(workspace))
    assert work.gate is not None
    with pytest.raises(StepAbort, match="Runtime"):
        await work.gate(SimpleNamespace(text="做完了", ok=True), {})


# -- flow_offline: what test_workflow_lineage does not cover ----------------------------------------


@pytest.mark.anyio
@pytest.mark.slow
async def test_when_on_fail_and_on_step(fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path) -> None:
    """A False ``when`` skips a step without trace; ``on_fail`` skip / continue / stop; on_step is
    called for every step that ran, failures included."""
    fake_api.add(text("一"), text("二"), text("三"), text("四"))
    seen: list[tuple[str, bool]] = []

    def reject(result: Any, ctx: dict[str, Any]) -> bool:
        return False

    wf = Workflow(
        [
            Step("跳过", WORKER, "不该发出。", when=lambda ctx: False),
            Step("可略", WORKER, "一。", gate=reject, on_fail="skip"),
            Step("照旧", WORKER, "二。", gate=reject, on_fail="continue", reduce=lambda r, c: "不该用 reduce"),
            Step("必须", WORKER, "三。", gate=reject, on_fail="stop"),
            Step("之后", WORKER, "不该发出。"),
        ],
        continuous=False,
    )
    ctx = await run(wf, workspace, on_step=lambda step, result: seen.append((step.name, result.ok)))
    assert [r.last_user_text.strip()[-2:] for r in fake_api.requests] == ["一。", "二。", "三。"]
    assert "跳过" not in ctx and "跳过" not in ctx["_results"]
    assert "可略" not in ctx  # skip: no ctx key, no _failed_at
    assert ctx["照旧"] == "二"  # continue: the raw text, not the reduced one
    assert ctx["_failed_at"] == "必须" and "必须" not in ctx
    assert "之后" not in ctx["_results"]
    assert seen == [("可略", True), ("照旧", True), ("必须", True)]
    assert set(ctx["_results"]) == {"可略", "照旧", "必须"}


@pytest.mark.anyio
@pytest.mark.slow
async def test_gate_skipped_for_a_failed_attempt(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """The gate only judges results that are ok; a gate that passes stops the retries."""
    # the CLI retries a 401 CLI_MAX_RETRIES times itself before the attempt fails
    fake_api.add(error(401, "invalid x-api-key", times=CLI_MAX_RETRIES + 1), text("好"), text("不该有第三次"))
    gated: list[str] = []

    def gate(result: Any, ctx: dict[str, Any]) -> bool:
        gated.append(result.step)
        return True

    wf = Workflow([Step("A", WORKER, "做A。", retries=2, gate=gate)], continuous=False)
    ctx = await run(wf, workspace)
    assert "_failed_at" not in ctx and ctx["A"] == "好"
    assert gated == ["A#retry1"]
    assert [r["step"] for r in manifest.read_rows(workspace / "runs")] == ["A", "A#retry1"]
    assert [r["ok"] for r in manifest.read_rows(workspace / "runs")] == [False, True]


@pytest.mark.anyio
@pytest.mark.slow
async def test_ctx_sessions_fork_and_a_second_run(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """``_sessions`` is the live dict, fork branches under a new id, a callable prompt gets ctx, and
    a second run of the same Workflow reuses its ctx (so each step continues its session from the
    first run) and updates ``_sessions``."""
    fake_api.add(text("方案A"), text("分支B"), text("方案C"), text("分支D"))
    prompts: list[str] = []

    def branch_prompt(ctx: dict[str, Any]) -> str:
        prompts.append(ctx["方案"])
        return f"在「{ctx['方案']}」上另开一支。"

    wf = Workflow(
        [Step("方案", WORKER, "出方案。"), Step("分支", WORKER, branch_prompt, resume_from="方案", fork=True)],
        continuous=False,
    )
    ctx = await run(wf, workspace)
    plan, fork = fake_api.requests
    assert sid_of(fork) != sid_of(plan) and "方案A" in fork.all_text  # a branch of the plan's history
    assert ctx["_sessions"] == {"方案": sid_of(plan), "分支": sid_of(fork)}
    assert set(ctx["_results"]) == {"方案", "分支"} and prompts == ["方案A"]
    sessions = ctx["_sessions"]

    again = await run(wf, workspace)
    assert again is ctx and again["_sessions"] is sessions
    plan2, fork2 = fake_api.requests[2:]
    assert sid_of(plan2) == sessions["方案"] == sid_of(plan) and plan2.n_messages > plan.n_messages
    assert sessions["分支"] == sid_of(fork2) not in (sid_of(fork), sid_of(plan))
    assert prompts == ["方案A", "方案C"]


@pytest.mark.anyio
@pytest.mark.slow
async def test_interrupt_inside_a_workflow(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """An interrupt resumes the same session with the person's words; the step does not fail."""
    assert INTERRUPTED == "interrupted-by-human"
    for word in ("副作用", "不是环境故障", "重试", "防御"):
        assert word in INTERRUPT_NOTE
    spec = AgentSpec(name="worker", instructions="", allowed_tools=["Bash"])
    fake_api.add(tool_use("Bash", {"command": "python3 -c 'import time; time.sleep(30)'"}), text("改成 json 了"))
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False)

    def sink(ev: Event) -> None:
        if ev.kind == "tool_call":
            threading.Timer(0.5, rt.interrupt, args=("改用 json",)).start()

    try:
        ctx = await Workflow([Step("干活", spec, "导出数据。")], continuous=False).run(rt, on_event=sink)
    finally:
        rt.close()
    assert "_failed_at" not in ctx and ctx["干活"] == "改成 json 了"
    first, resumed = fake_api.requests
    assert sid_of(resumed) == sid_of(first)
    assert "改用 json" in resumed.last_user_text and INTERRUPT_NOTE[:20] in resumed.last_user_text


# -- lineage_offline [8]-[9] and trial_offline: how starter_flow assembles the workflow --------------


def clarified(ws: Path, *, lineage_steps: dict[str, str] | None = None) -> None:
    """A directory that has run before: a complete brief and goal, and a lineage."""
    Brief.parse(BRIEF).write(ws / ".flower" / "notes" / "需求.md")
    Goal.parse(GOAL).write(goal_path(ws))
    lin = Lineage.open(ws / "runs", ws)
    for step, sid in (lineage_steps or {"干活": "sid-干活"}).items():
        lin.remember(step, sid)
    lin.bump()


def test_new_archives_the_three_facets(workspace: Path) -> None:
    """lineage_offline [8]"""
    clarified(workspace)
    assert wake_state(workspace, run_dir=workspace / "runs").waking
    starter = starter_flow("另一件事", workspace=workspace, run_dir=workspace / "runs", new=True)
    assert not starter.waking and starter.archived is not None
    state = wake_state(workspace, run_dir=workspace / "runs")
    assert not state.waking and state.steps == {} and state.woke == 0
    (archive,) = (workspace / ".flower" / "notes" / "archive").iterdir()
    assert archive == starter.archived
    assert sorted(p.name for p in archive.iterdir()) == sorted(["lineage.json", "需求.md", "目标.md"])
    assert json.loads((archive / "lineage.json").read_text(encoding="utf-8"))["steps"] == {"干活": "sid-干活"}
    assert not (workspace / "runs" / "sessions.db").exists()  # nothing else was created or moved


def test_wake_phrase_assembly(workspace: Path) -> None:
    """lineage_offline [9] A phrase at wake is appended and forces the goal step; an empty wake does
    neither once the goals followed the brief (until then it derives them again); the work step always
    has a resume prompt."""
    clarified(workspace)
    brief_path = workspace / ".flower" / "notes" / "需求.md"
    said = starter_flow("顺便支持配置文件", workspace=workspace, run_dir=workspace / "runs")
    assert said.waking and said.amended and said.said == "顺便支持配置文件"
    assert "## 唤醒时追加(" in brief_path.read_text(encoding="utf-8")
    assert "顺便支持配置文件" in brief_path.read_text(encoding="utf-8")
    assert [s.name for s in said.workflow.steps] == ["确认需求", "设定目标", "干活"]
    assert said.workflow.steps[1].when is not None and said.workflow.steps[1].when({}) is True
    work = said.workflow.steps[2]
    assert work.resume_prompt is not None
    ctx: dict[str, Any] = {"_goal": Goal.parse(GOAL)}
    assert work.render(ctx, resuming=True).startswith("顺便支持配置文件")
    assert "以这份为准" in work.render(ctx, resuming=True)

    # the process died before the goal step ran: the next wake, a quiet one too, derives them again
    died = starter_flow("", workspace=workspace, run_dir=workspace / "runs")
    assert died.workflow.steps[1].when is not None and died.workflow.steps[1].when({}) is True
    Goal.parse(GOAL).write(workspace / ".flower" / "notes" / "目标.md")  # the goal step ran this time

    # the same phrase again is not appended twice; an empty wake changes nothing
    before = brief_path.read_text(encoding="utf-8")
    again = starter_flow("顺便支持配置文件", workspace=workspace, run_dir=workspace / "runs")
    assert not again.amended and brief_path.read_text(encoding="utf-8") == before
    quiet = starter_flow("", workspace=workspace, run_dir=workspace / "runs")
    assert quiet.waking and not quiet.amended and brief_path.read_text(encoding="utf-8") == before
    goal = quiet.workflow.steps[1]
    assert goal.when is not None and goal.when({}) is False
    assert quiet.workflow.steps[2].resume_prompt is not None
    assert quiet.workflow.steps[2].render(ctx, resuming=True).startswith("接着做")


def test_clarify_skipped_on_a_complete_brief_fills_ctx(workspace: Path) -> None:
    """trial_offline: a complete brief skips clarify, and its content (with what was appended at
    wake) is in ctx for the goal setter and the worker."""
    clarified(workspace)
    starter = starter_flow("顺便支持配置文件", workspace=workspace, run_dir=workspace / "runs")
    clarify = starter.workflow.steps[0]
    ctx: dict[str, Any] = {}
    assert clarify.when is not None and clarify.when(ctx) is False
    assert ctx["确认需求"].startswith("## 目标\n写出 hello.txt")
    assert "顺便支持配置文件" in ctx["确认需求"]
    assert ctx["_brief"] == Brief.parse(BRIEF)


@pytest.mark.anyio
@pytest.mark.slow
async def test_freezing_the_brief_keeps_words_sent_meanwhile(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """Regression: the clarify gate replaced 需求.md wholesale, erasing what the person had sent
    while the clarification ran (appended to the same file). Issue 22: the clarifier never looked at
    its inbox, so it never heard them; the step now ends only after one more turn with them, once."""
    starter = starter_flow("写个 hello", workspace=workspace, run_dir=workspace / "runs", clarify_only=True)
    assert starter.channel.send("顺便要支持中文") is not None
    fake_api.add(as_role("clarifier", text(BRIEF, times=2)))
    ctx = await run(starter.workflow, workspace)
    assert "_failed_at" not in ctx
    asked = [r for r in fake_api.requests if role_of(r) == "clarifier"]
    assert [r.all_text.count("顺便要支持中文") for r in asked] == [0, 1]
    assert starter.channel.pending_mail() == []
    frozen = starter.brief_path.read_text(encoding="utf-8")
    assert Brief.parse(frozen) == Brief.parse(BRIEF)
    assert "## 运行中补充(" in frozen and "顺便要支持中文" in frozen
    assert "顺便要支持中文" in ctx["确认需求"]


def test_starter_flow_defaults_and_flags(workspace: Path) -> None:
    """trial_offline: three steps; the judged work step; rounds; --no-goal; the channel's limits."""
    default = starter_flow("写个脚本", workspace=workspace, run_dir=workspace / "runs")
    names = [s.name for s in default.workflow.steps]
    assert names == ["确认需求", "设定目标", "干活"]
    work = default.workflow.steps[2]
    assert work.gate is not None and work.on_reject is not None and work.retries == 2
    assert work.resume_prompt is not None
    assert default.channel.max_asks is None and default.channel.timeout_s == 1800.0
    assert default.workflow.steps[0].spec.max_turns is None
    assert default.workflow.channel is default.channel

    assert starter_flow("写个脚本", workspace=workspace, rounds=5).workflow.steps[2].retries == 4
    no_goal = starter_flow("写个脚本", workspace=workspace, goal=False).workflow.steps
    assert [s.name for s in no_goal] == ["确认需求", "干活"]
    assert no_goal[1].gate is None and no_goal[1].on_reject is None
    limited = starter_flow("写个脚本", workspace=workspace, max_asks=2, timeout_s=5.0)
    assert limited.channel.max_asks == 2 and limited.channel.timeout_s == 5.0
    only = starter_flow("写个脚本", workspace=workspace, clarify_only=True)
    assert [s.name for s in only.workflow.steps] == ["确认需求"]


def test_empty_ask_in_a_fresh_directory(workspace: Path) -> None:
    with pytest.raises(NoTaskError, match="诉求"):
        starter_flow("   ", workspace=workspace, run_dir=workspace / "runs")
    assert isinstance(NoTaskError(), ValueError)
    assert list(workspace.iterdir()) == []


# -- the verdict a wake ends on (issue 13) -----------------------------------------------------------

_NOT_YET = "## 结论\n未达成\n\n## 理由\n还差一条。\n\n## 未通过\n- a 能运行\n"


@pytest.mark.parametrize(
    ("steps", "texts", "oks", "expected"),
    [
        (["干活", "干活·判定#1"], ["w", _NOT_YET], [True, True], "还差一条。"),
        (["干活·判定#2", "干活#round3"], [_NOT_YET, "w"], [True, True], None),  # the worker got it since
        (["干活", "干活·判定#1"], ["w", "## 结论\n达成\n"], [True, True], None),
        (["干活", "干活·判定#1"], ["w", "## 结论\n无法达成\n\n## 理由\n要真机。"], [True, True], None),
        (["干活", "干活·判定#1"], ["w", ""], [True, False], None),  # the judge's own run failed
        (["干活", "干活·判定#1"], ["w", "嗯……"], [True, True], UNCLEAR),
        (["干活·判定#1", "设定目标", "别的·判定#1"], [_NOT_YET, "g", "## 结论\n达成\n"], [True] * 3, "还差一条。"),
        ([], [], [], None),
    ],
)
def test_unheard_verdict(steps: list[str], texts: list[str], oks: list[bool], expected: str | None) -> None:
    rows = [{"step": s, "text": t, "ok": ok} for s, t, ok in zip(steps, texts, oks, strict=True)]
    verdict = unheard_verdict(rows, "干活")
    assert (verdict.reason if verdict else None) == expected
    if verdict is not None and expected == "还差一条。":
        assert verdict.failed == ["a 能运行"] and "a 能运行" in verdict.feedback()


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_flowers_own_reason_is_said_in_the_persons_language_and_the_worker_reads_the_original(
    tmp_path: Path, lang: str
) -> None:
    """Issue 23 (4): the reasons flower gives a verdict itself (unclear, amended, overruled) were Chinese
    literals, so the "rounds used" ending told an English person "判定者没给出明确结论,按未达成处理". The
    worker still reads the original runtime's words."""
    from flower_magic.core.words import say

    rows = [{"step": "干活", "text": "w", "ok": True}, {"step": "干活·判定#1", "text": "嗯……", "ok": True}]
    verdict = unheard_verdict(rows, "干活")
    assert verdict is not None and verdict.reason == UNCLEAR and UNCLEAR in verdict.feedback()
    assert verdict.reason_for(lang) == say("judge_unclear", lang)
    step = with_goal(Step("干活", WORKER, "做"), HumanChannel(), goal_path=goal_path(tmp_path), rounds=1, lang=lang)
    assert step.why is not None
    why = step.why(None, {"_verdict": verdict})
    assert say("judge_unclear", lang) in why
    assert (re.search(r"[\u4e00-\u9fff]", why) is None) == (lang == "en")
