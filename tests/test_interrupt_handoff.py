"""Interrupt-resume and hand-off with the real CLI (issue 3, acceptance g and h)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from flower_magic import AgentSpec, Runtime, Step, Workflow
from flower_magic.core.events import Event
from flower_magic.core.handoff import DEGRADED, Handoff, HandoffPolicy
from flower_magic.core.result import INTERRUPT_NOTE
from flower_magic.testing import FakeAnthropic, Request, error, text, tool_use
from flower_magic.testing.roles import asks_for_handoff

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WORKER = AgentSpec(name="worker", instructions="", allowed_tools=["Bash", "Read"])
HANDOFF_DOC = """## 现在在做什么
在把 CSV 清洗脚本的日期解析改成按列推断。

## 已经定下的
- 用 pandas:数据不大,团队都熟。

## 走不通的路
- dateutil 逐行猜格式:太慢,十万行要一分钟。

## 下一步
在干净的分支上给 parse_dates() 补 3 个测试,再改实现。

## 现场
- clean.py, tests/test_clean.py
"""


def _asks_for_handoff(req: Request) -> bool:
    # The hand-off request names all five sections; a successor's hand-off block has only some.
    return asks_for_handoff(req)


async def test_interrupt_resumes_the_same_session_with_the_words(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    fake_api.add(tool_use("Bash", {"command": "python3 -c 'import time; time.sleep(30)'"}), text("好,改成 json 了"))
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False)
    events: list[Event] = []

    def sink(ev: Event) -> None:
        events.append(ev)
        if ev.kind == "tool_call":
            # From another thread, as a terminal's Ctrl-C handler or a notebook button would.
            threading.Timer(0.5, rt.interrupt, args=("改用 json 格式",)).start()

    try:
        result = await rt.run(WORKER, "把数据导出来", on_event=sink)
    finally:
        rt.close()
    assert result.ok, result.error
    assert result.attempts == 1 and result.resumed
    assert result.text == "好,改成 json 了"
    _first, resumed = fake_api.requests
    assert resumed.headers.get("x-claude-code-session-id") in (None, result.session_id)
    assert "改用 json 格式" in resumed.last_user_text and INTERRUPT_NOTE[:20] in resumed.last_user_text
    # The interrupted call's result went back neutral, not as "the user doesn't want to proceed".
    assert "doesn't want to proceed" not in resumed.all_text
    assert any(r.get("tool_use_id") for r in resumed.tool_results())
    assert [e.text for e in events if e.kind == "retry"] == ["已打断,带着你的话续跑"]


def _handoff_policy() -> HandoffPolicy:
    return HandoffPolicy(window=40_000, headroom=25_000)  # the line at 15K


async def test_crossing_the_line_hands_off_to_a_new_session(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    fake_api.add(
        tool_use("Bash", {"command": "echo step"}, usage={"input_tokens": 8_000}),
        text("继续中", usage={"input_tokens": 16_000}),  # crosses 15K
        text(HANDOFF_DOC, match=_asks_for_handoff, usage={"input_tokens": 16_500}),
        text("接手完成", usage={"input_tokens": 3_000}),
    )
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False, handoff=_handoff_policy())
    events: list[Event] = []
    wf = Workflow([Step("干活", WORKER, "清洗这些 CSV。")])
    try:
        ctx = await wf.run(rt, on_event=events.append)
    finally:
        rt.close()
    result = ctx["_results"]["干活"]
    assert result.ok, result.error
    assert result.text == "接手完成"
    (old,) = result.retired
    assert result.session_id and result.session_id != old
    assert result.attempts == 1
    # Lineage follows the successor.
    lineage = json.loads((workspace / "runs" / "lineage.json").read_text(encoding="utf-8"))
    assert lineage["steps"]["干活"] == result.session_id
    # The hand-off was written by the full session, and is on disk, readable.
    handoff_req = next(r for r in fake_api.requests if _asks_for_handoff(r))
    assert handoff_req.n_messages > 2
    doc = Handoff.parse((workspace / ".flower" / "notes" / "交接-干活.md").read_text(encoding="utf-8"))
    assert doc.complete() and not doc.degraded and "parse_dates" in doc.next
    # The successor starts with the hand-off block and without the original task text.
    successor = fake_api.requests[-1]
    assert successor.n_messages == 2
    assert "parse_dates" in successor.last_user_text and "清洗这些 CSV" not in successor.all_text
    phases = [e.payload.get("phase") for e in events if e.kind == "handoff"]
    assert phases.count("writing") == 1 and phases.count("done") == 1
    assert phases.index("near") < phases.index("writing") < phases.index("done")
    done = next(e for e in events if e.kind == "handoff" and e.payload.get("phase") == "done")
    assert done.payload["sections"]["next"].startswith("在干净的分支上")


async def test_words_heard_in_the_turn_a_hand_off_cuts_reach_the_successor(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """Seen in the soak (seed 1001): words said while the API was away went with the first request
    once it was back; that request's answer crossed the line, the hand-off cut the turn, and the
    successor began from a hand-off that did not carry them — the person's words were lost."""
    words = "改用 json 格式"
    fake_api.add(
        tool_use("Bash", {"command": "python3 -c 'import time; time.sleep(30)'"}, usage={"input_tokens": 8_000}),
        text("好的", usage={"input_tokens": 16_000}),  # the resumed turn, with the words, crosses 15K
        text(HANDOFF_DOC, match=_asks_for_handoff, usage={"input_tokens": 16_500}),
        text("接手完成", usage={"input_tokens": 3_000}),
    )
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False, handoff=_handoff_policy())

    def sink(ev: Event) -> None:
        if ev.kind == "tool_call":
            threading.Timer(0.5, rt.interrupt, args=(words,)).start()

    try:
        result = await rt.run(WORKER, "清洗这些 CSV。", on_event=sink)
    finally:
        rt.close()
    assert result.ok, result.error
    (old,) = result.retired
    heard = [r for r in fake_api.requests if words in r.all_text and not _asks_for_handoff(r)]
    assert {r.headers.get("x-claude-code-session-id") for r in heard} >= {old, result.session_id}
    successor = fake_api.requests[-1]
    assert successor.headers.get("x-claude-code-session-id") == result.session_id
    assert successor.all_text.count(words) == 1 and "parse_dates" in successor.last_user_text


async def test_two_degraded_handoffs_in_a_row_stop(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    # Every session starts small and crosses the line on its own work, and no hand-off turn produces the
    # required sections. (A session that starts above the line stops at once instead: tests/test_succession.py.)
    fake_api.add(text("胡言乱语", match=_asks_for_handoff, times=None))
    first = lambda r: r.n_messages <= 2 and not _asks_for_handoff(r)  # noqa: E731
    fake_api.add(tool_use("Bash", {"command": "echo hi"}, usage={"input_tokens": 3_000}, match=first, times=None))
    fake_api.add(text("还在干", usage={"input_tokens": 20_000}, times=None))
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False, handoff=_handoff_policy())
    try:
        result = await rt.run(WORKER, "干活")
    finally:
        rt.close()
    assert not result.ok
    assert len(result.retired) == 2
    assert "降级" in (result.error or "") and "余量" in (result.error or "")
    assert sum("交接降级" in e for e in result.errors) == 2


async def test_overflow_error_hands_off_at_once(
    fake_api: FakeAnthropic,
    fake_api_env: dict[str, str],
    workspace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    fake_api.add(
        text("读过了", usage={"input_tokens": 9_000}),
        # Only the full conversation overflows; the fresh successor (one user message) fits.
        error(400, "prompt is too long: 210000 tokens > 200000 maximum", times=None, match=lambda r: r.n_messages > 2),
        text("新会话接着干", usage={"input_tokens": 2_000}),
    )
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False, handoff=_handoff_policy())
    spec = AgentSpec(name="w", instructions="", allowed_tools=[])
    try:
        first = await rt.run(spec, "第一轮")
        result = await rt.run(spec, "第二轮", resume=first.session_id, step_name="第二轮")
    finally:
        rt.close()
    assert result.ok, result.error
    assert result.retired == [first.session_id]
    assert any("交接降级" in e for e in result.errors)
    successor = fake_api.requests[-1]
    assert DEGRADED in successor.last_user_text and successor.n_messages == 2
    # No extra turn was spent asking the overflowing session to write anything.
    assert not any(_asks_for_handoff(r) for r in fake_api.requests)
