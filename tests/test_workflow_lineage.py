"""Continuous workflows with the real CLI: what resumes, what starts fresh, what never enters lineage
(issue 2, acceptance c: the reference's lineage cases [1]-[7])."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from flower_magic import AgentSpec, Runtime, Step, Workflow
from flower_magic.core import manifest
from flower_magic.core.project import local_transcript
from flower_magic.testing import FakeAnthropic, text

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SPEC = AgentSpec(name="worker", instructions="简短回答。", allowed_tools=[])


def _rt(ws: Path, run_dir: Path | None = None) -> Runtime:
    return Runtime(workspace=ws, run_dir=run_dir or ws / "runs", resilience=False)


async def _run(wf: Workflow, ws: Path, run_dir: Path | None = None) -> dict[str, Any]:
    rt = _rt(ws, run_dir)
    try:
        return await wf.run(rt)
    finally:
        rt.close()


def _two_steps() -> Workflow:
    return Workflow(
        [
            Step("调研", SPEC, "调研一下。"),
            Step("干活", SPEC, "照需求做:写个脚本。", resume_prompt="接着做。"),
        ]
    )


def _lineage(run_dir: Path) -> dict[str, Any]:
    return dict(json.loads((run_dir / "lineage.json").read_text(encoding="utf-8")))


async def test_second_process_resumes_each_step(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """[1] and [5]: fresh sessions first, then each step continues its own, with resume_prompt."""
    fake_api.add(text("调研完了"), text("写好了"))
    ctx = await _run(_two_steps(), workspace)
    assert ctx["_woke"] == 1
    first = fake_api.requests
    assert [r.n_messages for r in first] == [2, 2]
    assert "照需求做" in first[1].last_user_text
    lin = _lineage(workspace / "runs")
    assert lin["woke"] == 1 and set(lin["steps"]) == {"调研", "干活"}

    fake_api.add(text("调研还是那样"), text("继续写了"))
    ctx2 = await _run(_two_steps(), workspace)  # new Workflow, Runtime and ctx: a new "process"
    assert ctx2["_woke"] == 2
    assert ctx2["_sessions"] == ctx["_sessions"]
    research, work = fake_api.requests[2:]
    assert research.n_messages > 2 and work.n_messages > 2
    assert "调研完了" in research.all_text and "写好了" in work.all_text
    # The continuation sends exactly resume_prompt; a step without one resends its prompt.
    assert work.last_user_text.strip().endswith("接着做。")
    assert "照需求做" not in work.last_user_text
    assert research.last_user_text.strip().endswith("调研一下。")


async def test_copied_directory_starts_fresh(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], tmp_path: Path
) -> None:
    """[2] Same run dir, other workspace (the directory was copied): no resume, no error."""
    ws_a, ws_b = tmp_path / "a", tmp_path / "b"
    ws_a.mkdir()
    run_dir = tmp_path / "runs"
    fake_api.add(text("一"), text("二"))
    await _run(Workflow([Step("干活", SPEC, "做。")]), ws_a, run_dir)
    shutil.copytree(ws_a, ws_b)
    ctx = await _run(Workflow([Step("干活", SPEC, "做。")]), ws_b, run_dir)
    assert fake_api.requests[1].n_messages == 2
    assert ctx["_woke"] == 1
    assert ctx["_lineage"].problem and "workspace" in ctx["_lineage"].problem
    # The other workspace's lineage was kept aside, not overwritten.
    kept = [p for p in run_dir.iterdir() if p.name.startswith("lineage.json.")]
    assert kept and str(ws_a) in kept[0].read_text(encoding="utf-8")


async def test_session_missing_from_store_is_not_resumed(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """[3] sessions.db lost, and no local copy either: the lineage id is not resumed (and the step
    still runs, without error, under the same id)."""
    fake_api.add(text("一"), text("二"))
    ctx = await _run(Workflow([Step("干活", SPEC, "做。")]), workspace)
    sid = ctx["_sessions"]["干活"]
    for f in (workspace / "runs").glob("sessions.db*"):
        f.unlink()
    local_transcript(workspace, sid, fake_api_env).unlink()
    ctx2 = await _run(Workflow([Step("干活", SPEC, "做。")]), workspace)
    assert fake_api.requests[1].n_messages == 2
    assert ctx2.get("_failed_at") is None
    assert ctx2["_sessions"]["干活"] == sid


async def test_store_lost_but_the_cli_kept_a_copy(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """sessions.db lost, the CLI's own local transcript still there: the conversation is taken back
    into the store and continues (nothing the model already heard is lost)."""
    fake_api.add(text("一"), text("二"))
    ctx = await _run(Workflow([Step("干活", SPEC, "做。", resume_prompt="接着做。")]), workspace)
    sid = ctx["_sessions"]["干活"]
    for f in (workspace / "runs").glob("sessions.db*"):
        f.unlink()
    ctx2 = await _run(Workflow([Step("干活", SPEC, "做。", resume_prompt="接着做。")]), workspace)
    again = fake_api.requests[1]
    assert again.n_messages > 2 and "一" in again.all_text and again.last_user_text.strip().endswith("接着做。")
    assert ctx2["_sessions"]["干活"] == sid


async def test_gate_sessions_never_enter_lineage(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """[4] and [4b]: a judge run from the gate on the same runtime is always a new session and is
    never recorded; the gate sees no lineage hook attached."""
    judge = AgentSpec(name="判定", instructions="判定。", allowed_tools=[])
    seen_hooks: list[object] = []
    judge_ids: list[str] = []

    async def gate(result: Any, ctx: dict[str, Any]) -> bool:
        rt = ctx["_runtime"]
        seen_hooks.append(rt.on_session)
        verdict = await rt.run(judge, "判定这一轮。", step_name="干活·判定#1")
        judge_ids.append(verdict.session_id)
        return "达成" in verdict.text

    def flow() -> Workflow:
        return Workflow([Step("干活", SPEC, "做。", resume_prompt="接着做。", gate=gate)])

    fake_api.add(text("做了"), text("## 结论\n达成"))
    ctx = await _run(flow(), workspace)
    work_sid = ctx["_sessions"]["干活"]
    fake_api.add(text("又做了"), text("## 结论\n达成"))
    ctx2 = await _run(flow(), workspace)
    reqs = fake_api.requests
    assert [r.n_messages for r in (reqs[1], reqs[3])] == [2, 2]  # the judge: fresh both times
    assert reqs[2].n_messages > 2  # the work step resumed
    assert seen_hooks == [None, None]
    assert ctx2["_runtime"].on_session is None
    lin = _lineage(workspace / "runs")
    assert lin["steps"] == {"干活": work_sid}
    assert not set(judge_ids) & set(lin["steps"].values())


async def test_resume_from_follows_this_run(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """[6] resume_from continues the session the named step produced in this run, never lineage."""

    def flow() -> Workflow:
        return Workflow([Step("方案", SPEC, "出方案。"), Step("实现", SPEC, "照方案实现。", resume_from="方案")])

    fake_api.add(text("方案A"), text("实现了A"))
    ctx = await _run(flow(), workspace)
    plan_sid = ctx["_sessions"]["方案"]
    assert ctx["_results"]["实现"].session_id == plan_sid
    assert "方案A" in fake_api.requests[1].all_text
    fake_api.add(text("方案A不变"), text("再实现"))
    ctx2 = await _run(flow(), workspace)
    assert ctx2["_results"]["实现"].session_id == plan_sid
    assert "再实现" not in fake_api.requests[2].all_text and "方案A不变" in fake_api.requests[3].all_text


async def test_resume_from_a_skipped_step_is_an_error(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    wf = Workflow(
        [Step("方案", SPEC, "出方案。", when=lambda ctx: False), Step("实现", SPEC, "实现。", resume_from="方案")]
    )
    with pytest.raises(ValueError, match="resume_from="):
        await _run(wf, workspace)
    assert fake_api.requests == []


async def test_manifest_merges_two_runtimes(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """[7] two runtimes on one run dir: both rows kept, in order; re-persisting never duplicates."""
    fake_api.add(text("一"), text("二"), text("三"))
    rt1, rt2 = _rt(workspace), _rt(workspace)
    try:
        assert rt1.run_id != rt2.run_id
        await rt1.run(SPEC, "第一次", step_name="第一次")
        await rt2.run(SPEC, "第二次", step_name="第二次")
        rt2._persist()
        rows = manifest.read_rows(workspace / "runs")
        assert [r["step"] for r in rows] == ["第一次", "第二次"]
        assert all(r["run"] for r in rows) and rows[0]["run"] != rows[1]["run"]
        assert all(isinstance(r["duration_s"], float) for r in rows)
        await rt1.run(SPEC, "第三次", step_name="第三次")
        assert [r["step"] for r in manifest.read_rows(workspace / "runs")] == ["第二次", "第一次", "第三次"]
    finally:
        rt1.close()
        rt2.close()


async def test_retries_gate_labels_and_reduce(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """Attempt labels (#retryN without on_reject, #roundN with it), gate calls, reduce and on_fail."""
    calls: list[str] = []

    def gate(result: Any, ctx: dict[str, Any]) -> bool:
        calls.append(result.step)
        return result.text == "好"

    fake_api.add(text("差"), text("差"), text("好"), text("差"), text("好"))
    wf = Workflow(
        [
            Step("A", SPEC, "做A。", retries=2, gate=gate, reduce=lambda r, c: r.text * 2),
            Step("B", SPEC, "做B。", retries=1, gate=gate, on_reject=lambda r, c: "再改改。"),
        ],
        continuous=False,
    )
    ctx = await _run(wf, workspace)
    assert calls == ["A", "A#retry1", "A#retry2", "B", "B#round2"]
    assert ctx["A"] == "好好" and ctx["B"] == "好"
    b2 = fake_api.requests[4]
    assert b2.n_messages > 2 and b2.last_user_text.strip().endswith("再改改。")  # on_reject resumed B
    assert [r.n_messages for r in fake_api.requests[:3]] == [2, 2, 2]  # plain retries start over
    steps = [r["step"] for r in manifest.read_rows(workspace / "runs")]
    assert steps == ["A", "A#retry1", "A#retry2", "B", "B#round2"]
    assert not (workspace / "runs" / "lineage.json").exists()  # continuous=False keeps no lineage
