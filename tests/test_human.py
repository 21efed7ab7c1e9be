"""HumanChannel: the agent's ask / inbox tools and the front ends' side of them.

Unit tests drive the channel on an asyncio loop with no CLI. The ``slow`` ones run the real Claude
Code CLI against the scripted fake API through ``Runtime``: the fake API's request log is the
witness of what the model was told.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from flower_magic.core.brief import WAKE_LABEL, Brief
from flower_magic.core.events import Event
from flower_magic.core.human import (
    CANCELLED_REASON,
    DECLINED_TEXT,
    EMPTY_INBOX_TEXT,
    EMPTY_QUESTION_TEXT,
    LOG_HEADER,
    OVER_BUDGET_TEXT,
    TIMEOUT_TEXT,
    TOOL_NAMES,
    Ask,
    HumanChannel,
    Mail,
    resolve_answer,
)
from flower_magic.testing import FakeAnthropic, text, tool_use

pytestmark = pytest.mark.anyio

GUARD_S = 10.0  # a hang guard only: a correct channel settles these in milliseconds
T = TypeVar("T")


class FakeFrontEnd:
    """A sink that records every event, the thread it arrived on, and can react to ``asked``."""

    def __init__(self, on_asked: Callable[[Event], object] | None = None) -> None:
        self.events: list[Event] = []
        self.threads: list[int] = []
        self.on_asked = on_asked
        self.asked = threading.Event()

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        self.threads.append(threading.get_ident())
        if event.payload.get("state") == "asked":
            self.asked.set()
            if self.on_asked is not None:
                self.on_asked(event)

    def states(self) -> list[tuple[str, str]]:
        return [(e.payload["id"], e.payload["state"]) for e in self.events]


async def _asked(front: FakeFrontEnd) -> Event:
    """The first ``asked`` event, waited for without blocking the loop."""
    while not front.asked.is_set():
        await asyncio.sleep(0.001)
    return next(e for e in front.events if e.payload.get("state") == "asked")


async def _settled(awaitable: Awaitable[T], guard_s: float = GUARD_S) -> T:
    """The awaitable's result; the test fails if it is not done within ``guard_s``."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=guard_s)
    if task not in done:
        task.cancel()
        pytest.fail("never settled: the waiting side was not woken")
    return task.result()


async def _ask(ch: HumanChannel, question: str, options: list[str] | None = None) -> Ask:
    return await _settled(ch.ask(question, options))


async def test_quota_counts_real_questions_and_then_refuses() -> None:
    front = FakeFrontEnd()
    ch = HumanChannel(on_event=front, max_asks=2, timeout_s=0)
    assert ch.remaining == 2
    first = await _ask(ch, "一?")
    assert (first.state, ch.remaining) == ("timeout", 1)
    empty = await _ask(ch, "  ")
    assert (empty.state, ch.remaining) == ("invalid", 1)  # an empty question costs nothing
    await _ask(ch, "二?")
    over = await _ask(ch, "三?")
    assert (over.state, ch.remaining) == ("over_budget", 0)
    assert ch.reply_for(over) == OVER_BUDGET_TEXT
    assert [e.payload["remaining"] for e in front.events] == [1, 1, 0, 0]


async def test_zero_asks_means_no_questions() -> None:
    front = FakeFrontEnd()
    ch = HumanChannel(on_event=front, max_asks=0, timeout_s=60)
    ask = await _ask(ch, "可以问吗?")
    assert ask.state == "over_budget"
    assert front.states() == [("q1", "over_budget")]
    assert ch.pending() == []


async def test_unlimited_quota_reports_minus_one() -> None:
    front = FakeFrontEnd()
    ch = HumanChannel(on_event=front, timeout_s=0)
    for _ in range(5):
        await _ask(ch, "还有吗?")
    assert ch.remaining == -1
    assert {e.payload["remaining"] for e in front.events} == {-1}


@pytest.mark.parametrize("timeout_s", [0, -1, 0.0])
async def test_timeout_not_positive_settles_at_once_with_one_event(timeout_s: float) -> None:
    front = FakeFrontEnd()
    ch = HumanChannel(on_event=front, timeout_s=timeout_s)
    ask = await _ask(ch, "格式?", ["csv"])
    assert ask.state == "timeout"
    assert front.states() == [("q1", "timeout")]
    assert ch.reply_for(ask) == TIMEOUT_TEXT
    assert "未知与假设" in TIMEOUT_TEXT


async def test_unanswered_question_times_out_after_waiting() -> None:
    front = FakeFrontEnd()
    ch = HumanChannel(on_event=front, timeout_s=0.01)
    ask = await _ask(ch, "有人吗?")
    assert ask.state == "timeout"
    assert front.states() == [("q1", "asked"), ("q1", "timeout")]
    assert ch.answer("q1", "晚了") is False
    assert ch.pending() == []


async def test_empty_question_is_invalid() -> None:
    front = FakeFrontEnd()
    ch = HumanChannel(on_event=front, timeout_s=60)
    ask = await _ask(ch, " \n ", ["a"])
    assert ask.state == "invalid"
    assert ch.reply_for(ask) == EMPTY_QUESTION_TEXT
    assert front.states() == [("q1", "invalid")]


@pytest.mark.parametrize(
    ("said", "meant"),
    [("2", "json"), (" 1 ", "csv"), ("3", "3"), ("0", "0"), ("-1", "-1"), ("2x", "2x"), ("json", "json")],
)
def test_a_number_in_range_picks_an_option(said: str, meant: str) -> None:
    assert resolve_answer(Ask(id="q1", question="?", options=["csv", "json"]), said) == meant


async def test_answer_by_option_number() -> None:
    ch = HumanChannel(timeout_s=60)
    ch.on_event = FakeFrontEnd(on_asked=lambda ev: ch.answer(ev.payload["id"], "2"))
    ask = await _ask(ch, "用哪个格式?", ["csv", "json"])
    assert (ask.state, ask.answer, ch.reply_for(ask)) == ("answered", "json", "json")


async def test_answer_from_another_thread_wakes_the_waiting_ask() -> None:
    """Regression: an answer set from a terminal thread without call_soon_threadsafe never woke the loop."""
    ch = HumanChannel(timeout_s=None)  # no timer of its own that could wake the loop by chance
    settled = threading.Event()
    seen: list[tuple[bool, bool]] = []

    def terminal(ask_id: str) -> None:
        time.sleep(0.2)  # answer once the loop has gone idle in its wait, as a person would
        accepted = ch.answer(ask_id, "好")
        seen.append((accepted, settled.wait(GUARD_S)))

    ch.on_event = FakeFrontEnd(
        on_asked=lambda ev: threading.Thread(target=terminal, args=(ev.payload["id"],), daemon=True).start()
    )
    task = asyncio.ensure_future(ch.ask("可以吗?"))
    task.add_done_callback(lambda _: settled.set())
    ask = await _settled(task, guard_s=3 * GUARD_S)
    while not seen:
        await asyncio.sleep(0.001)
    assert (ask.state, ask.answer, seen) == ("answered", "好", [(True, True)])


async def test_answer_from_the_loop_thread_like_a_widget_callback() -> None:
    ch = HumanChannel(timeout_s=120)
    front = FakeFrontEnd()
    ch.on_event = front
    task = asyncio.ensure_future(ch.ask("可以吗?"))
    asked = await _asked(front)
    asyncio.get_running_loop().call_soon(ch.answer, asked.payload["id"], "可以")
    ask = await _settled(task)
    assert (ask.state, ask.answer) == ("answered", "可以")
    assert set(front.threads) == {threading.get_ident()}


async def test_only_the_first_settlement_wins() -> None:
    ch = HumanChannel(timeout_s=120)
    front = FakeFrontEnd()
    ch.on_event = front
    task = asyncio.ensure_future(ch.ask("?"))
    await _asked(front)
    assert ch.answer("q1", "甲") is True
    assert ch.answer("q1", "乙") is False
    assert ch.decline("q1") is False
    assert ch.answer("q99", "丙") is False
    assert (await _settled(task)).answer == "甲"


async def test_declined_with_reason() -> None:
    ch = HumanChannel(timeout_s=120)
    ch.on_event = FakeFrontEnd(on_asked=lambda ev: ch.decline(ev.payload["id"], " 我也不知道 "))
    ask = await _ask(ch, "截止日期?")
    assert (ask.state, ask.answer) == ("declined", "我也不知道")
    assert ch.reply_for(ask) == DECLINED_TEXT + "(对方说:我也不知道)"


async def test_blank_answer_declines_without_reason() -> None:
    ch = HumanChannel(timeout_s=120)
    ch.on_event = FakeFrontEnd(on_asked=lambda ev: ch.answer(ev.payload["id"], "   "))
    ask = await _ask(ch, "?")
    assert (ask.state, ask.answer, ch.reply_for(ask)) == ("declined", "", DECLINED_TEXT)


async def test_cancel_all_declines_every_pending_question() -> None:
    front = FakeFrontEnd()
    ch = HumanChannel(on_event=front, timeout_s=120)
    tasks = [asyncio.ensure_future(ch.ask(q)) for q in ("一?", "二?")]
    while len(ch.pending()) < 2:
        await asyncio.sleep(0.001)
    assert ch.cancel_all("要关机了") == 2
    asks = await _settled(asyncio.gather(*tasks))
    assert [(a.state, a.answer) for a in asks] == [("declined", "要关机了")] * 2
    assert ch.pending() == [] and ch.cancel_all() == 0


async def test_cancelled_ask_is_settled_before_the_cancellation_propagates() -> None:
    """The CLI cancels the tool call on an interrupt; the front end must not keep showing the question."""
    front = FakeFrontEnd()
    ch = HumanChannel(on_event=front, timeout_s=120)
    task = asyncio.ensure_future(ch.ask("?"))
    await _asked(front)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert front.states() == [("q1", "asked"), ("q1", "declined")]
    assert front.events[-1].payload["answer"] == CANCELLED_REASON
    assert ch.pending() == []


async def test_next_ask_hands_each_question_out_once() -> None:
    ch = HumanChannel(timeout_s=120)
    puller = asyncio.ensure_future(ch.next_ask(GUARD_S))
    task = asyncio.ensure_future(ch.ask("哪个?", ["a", "b"]))
    got = await _settled(puller)
    assert got is not None and got.id == "q1"
    assert await ch.next_ask(0) is None
    ch.answer(got.id, "1")
    assert (await _settled(task)).answer == "a"
    assert await ch.next_ask(0.01) is None


async def test_a_front_end_on_its_own_loop_and_thread_answers() -> None:
    """A terminal front end runs its own loop in a thread: next_ask and answer cross loops."""
    ch = HumanChannel(timeout_s=120)

    def terminal() -> None:
        async def serve() -> None:
            ask = await ch.next_ask(3 * GUARD_S)  # longer than the agent's guard: a lost wake-up fails
            assert ask is not None
            ch.answer(ask.id, f"收到:{ask.question}")

        asyncio.run(serve())

    thread = threading.Thread(target=terminal, daemon=True)
    thread.start()
    ask = await _ask(ch, "在吗")
    thread.join(GUARD_S)
    assert (ask.state, ask.answer) == ("answered", "收到:在吗")


async def test_route_input_shares_the_terminal_rules(tmp_path: Path) -> None:
    ch = HumanChannel(timeout_s=120, amend_path=tmp_path / "需求.md")
    assert ch.route_input("") == "ignored"
    assert ch.pending_mail() == []
    assert ch.route_input("顺便加一列") == "mail"
    assert ch.route_input("?没有旁路就当消息") == "mail"
    assert [m.text for m in ch.pending_mail()] == ["顺便加一列", "?没有旁路就当消息"]

    first = asyncio.ensure_future(ch.ask("格式?", ["csv", "json"]))
    while not ch.pending():
        await asyncio.sleep(0.001)
    assert ch.route_input("2") == "answered"
    assert (await _settled(first)).answer == "json"

    second = asyncio.ensure_future(ch.ask("表头?"))
    while not ch.pending():
        await asyncio.sleep(0.001)
    assert ch.route_input("  ") == "declined"
    assert (await _settled(second)).state == "declined"


class FakeLateChannel(HumanChannel):
    """A channel whose question closes (times out) between the look at what waits and the answer, as
    when a person is still typing when the timeout comes."""

    def pending(self) -> list[Any]:
        waiting = super().pending()
        for ask in waiting:
            self._settle(ask.id, "timeout", "")
        return waiting


async def test_a_line_for_a_question_that_closed_meanwhile_is_mail_not_dropped(tmp_path: Path) -> None:
    """Issue 22: the line answered a question that had just closed, and ``route_input`` returned
    ``ignored``: the words went nowhere. They are mail now (in the brief, and in the inbox)."""
    ch = FakeLateChannel(timeout_s=120, amend_path=tmp_path / "需求.md")
    asking = asyncio.ensure_future(ch.ask("格式?", ["csv", "json"]))
    while not HumanChannel.pending(ch):
        await asyncio.sleep(0.001)
    assert ch.route_input("用 csv,再加一列") == "mail"
    assert (await _settled(asking)).state == "timeout"
    assert [m.text for m in ch.pending_mail()] == ["用 csv,再加一列"]
    assert "用 csv,再加一列" in (tmp_path / "需求.md").read_text(encoding="utf-8")


async def test_send_is_delivered_to_the_inbox_once() -> None:
    front = FakeFrontEnd()
    ch = HumanChannel(on_event=front)
    assert ch.send("   ") is None
    mail = ch.send("顺便加一列")
    assert isinstance(mail, Mail) and (mail.id, mail.state, mail.amended) == ("m1", "queued", "")
    assert ch.pending_mail() == [mail]
    said = ch.check_inbox()
    assert "(m1) 顺便加一列" in said
    assert ch.pending_mail() == [] and mail.state == "delivered"
    assert ch.check_inbox() == EMPTY_INBOX_TEXT
    assert [e.payload for e in front.events] == [
        {"kind": "mail", "state": "queued", "id": "m1", "amended": ""},
        {"kind": "mail", "state": "delivered", "id": "m1", "amended": ""},
    ]


async def test_mail_sent_from_another_thread_is_announced_on_the_loop_thread() -> None:
    front = FakeFrontEnd()
    ch = HumanChannel(on_event=front, timeout_s=0)
    await _ask(ch, "先问一句,让通道认识这个 loop")
    sender = threading.Thread(target=ch.send, args=("从终端线程发来",))
    sender.start()
    sender.join(GUARD_S)
    while len(front.events) < 2:
        await asyncio.sleep(0.001)
    assert front.events[-1].payload["state"] == "queued"
    assert set(front.threads) == {threading.get_ident()}


async def test_mail_and_amend_append_to_the_brief(tmp_path: Path) -> None:
    brief_path = tmp_path / "notes" / "需求.md"
    brief_path.parent.mkdir()
    original = Brief(goal="做个表", accept="能打开", bounds="不联网", unknowns="无")
    original.write(brief_path)
    before = brief_path.read_text(encoding="utf-8")
    front = FakeFrontEnd()
    ch = HumanChannel(on_event=front, amend_path=brief_path)

    mail = ch.send("顺便加一列")
    assert mail is not None and mail.amended == str(brief_path)
    assert ch.amend("再导出 csv", label=WAKE_LABEL) is True
    assert ch.amend("  ") is False

    after = brief_path.read_text(encoding="utf-8")
    assert after.startswith(before)
    assert "\n## 运行中补充(" in after and "\n顺便加一列\n" in after
    assert "\n## 唤醒时追加(" in after and after.endswith("\n再导出 csv\n")
    assert Brief.load(brief_path) == original
    assert "已经追加进需求确认书" in ch.check_inbox()
    assert front.events[0].payload["amended"] == str(brief_path)


async def test_a_brief_that_cannot_be_written_is_reported_not_raised(tmp_path: Path) -> None:
    ch = HumanChannel(amend_path=tmp_path)  # a directory: appending fails
    mail = ch.send("加一列")
    assert mail is not None and mail.amended == ""
    assert len(ch.ui_errors) == 1 and isinstance(ch.ui_errors[0], OSError)
    assert HumanChannel().amend("没有确认书") is False


async def test_the_log_file_records_every_question_and_delivered_mail(tmp_path: Path) -> None:
    log = tmp_path / "notes" / "问答.md"
    ch = HumanChannel(timeout_s=120, log_path=log)
    replies = iter([("answer", "2"), ("decline", "随你")])

    def respond(ev: Event) -> None:
        how, said = next(replies)
        getattr(ch, how)(ev.payload["id"], said)

    ch.on_event = FakeFrontEnd(on_asked=respond)
    await _ask(ch, "用哪个格式?", ["csv", "json"])
    await _ask(ch, "要不要表头?")
    ch.timeout_s = 0
    await _ask(ch, "多行\n问题")
    ch.send("顺便加一列")
    ch.send("第二条")
    ch.check_inbox()
    assert ch.send("还没送达的不进日志") is not None

    assert log.read_text(encoding="utf-8") == (
        LOG_HEADER + "- **Q**(q1) 用哪个格式?\n"
        "  - 选项:csv / json\n"
        "  - **A**[answered] json\n"
        "- **Q**(q2) 要不要表头?\n"
        "  - **A**[declined] 随你\n"
        "- **Q**(q3) 多行\n"
        "    问题\n"
        "  - **A**[timeout]\n"
        "- **人主动说**(m4) 顺便加一列\n"
        "- **人主动说**(m5) 第二条\n"
    )


async def test_the_log_only_appends_and_keeps_one_header(tmp_path: Path) -> None:
    log = tmp_path / "问答.md"
    log.write_text("# 需求问答记录\n\n旧的内容\n", encoding="utf-8")
    await _ask(HumanChannel(timeout_s=0, log_path=log), "新问题")
    assert log.read_text(encoding="utf-8") == "# 需求问答记录\n\n旧的内容\n- **Q**(q1) 新问题\n  - **A**[timeout]\n"


async def test_event_sequence_and_payloads() -> None:
    front = FakeFrontEnd()
    ch = HumanChannel(on_event=front, max_asks=3, timeout_s=120)
    front.on_asked = lambda ev: ch.answer(ev.payload["id"], "1")
    ask = await _ask(ch, "格式?", ["csv", "json"])
    ch.send("加一列")
    ch.check_inbox()

    asked, answered, queued, delivered = front.events
    assert {e.kind for e in front.events} == {"ask"}
    assert asked.text == answered.text == "格式?"
    assert asked.raw is ask and queued.text == "加一列"
    assert asked.payload == {
        "id": "q1",
        "options": ["csv", "json"],
        "state": "asked",
        "answer": "",
        "remaining": 2,
        "asked_at": ask.asked_at,
        "waited_s": 0.0,
    }
    assert answered.payload == dict(asked.payload, state="answered", answer="csv", waited_s=ask.waited_s)
    assert (queued.payload["id"], queued.payload["state"]) == ("m2", "queued")
    assert (delivered.payload["id"], delivered.payload["state"]) == ("m2", "delivered")
    json.dumps([e.to_dict() for e in front.events], ensure_ascii=False)  # nothing a front end cannot send


async def test_a_raising_sink_never_reaches_the_agent() -> None:
    def broken(event: Event) -> None:
        raise RuntimeError(f"widget gone: {event.payload['state']}")

    ch = HumanChannel(on_event=broken, timeout_s=0.01)
    ask = await _ask(ch, "?")
    ch.send("m")
    ch.check_inbox()
    assert ask.state == "timeout"
    assert [str(e) for e in ch.ui_errors] == [f"widget gone: {s}" for s in ("asked", "timeout", "queued", "delivered")]


async def test_transcript_is_a_copy_in_order() -> None:
    ch = HumanChannel(timeout_s=0)
    await _ask(ch, "一?", ["a"])
    ch.send("二")
    entries = ch.transcript()
    assert [e.to_dict()["kind"] for e in entries] == ["question", "mail"]
    assert [e.id for e in entries] == ["q1", "m2"]
    entries[0].state = "answered"
    assert isinstance(entries[0], Ask)
    entries[0].options.append("b")
    assert ch.transcript()[0].to_dict()["state"] == "timeout"
    assert ch.transcript()[0].to_dict()["options"] == ["a"]


def test_importing_the_channel_does_not_import_the_sdk() -> None:
    probe = "import sys, flower_magic.core.human; print('claude_agent_sdk' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow  # imports the SDK (seconds, cold)
def test_mcp_server_config_and_tool_names() -> None:
    config: Any = HumanChannel().mcp_server()
    assert (config["type"], config["name"]) == ("sdk", "human")
    assert TOOL_NAMES == ("mcp__human__ask", "mcp__human__inbox")


def test_cli_env_lets_our_timeout_fire_before_the_clis() -> None:
    assert HumanChannel(timeout_s=1800).cli_env() == {"MCP_TOOL_TIMEOUT": str((1800 + 60) * 1000)}
    assert HumanChannel(timeout_s=0).cli_env() == {}
    assert HumanChannel(timeout_s=None).cli_env() == {}


async def _run(ch: HumanChannel, ws: Path, prompt: str = "问我一个问题", **runtime: Any) -> Any:
    from flower_magic import AgentSpec, Runtime

    spec = AgentSpec(
        name="clarifier",
        instructions="需要人拿主意时用 ask 工具提问。",
        allowed_tools=list(TOOL_NAMES),
        mcp_servers={"human": ch.mcp_server()},
    )
    rt = Runtime(workspace=ws, run_dir=ws / "runs", resilience=False, **runtime)
    try:
        return await asyncio.wait_for(rt.run(spec, prompt), 120)
    finally:
        rt.close()


@pytest.mark.slow
async def test_cli_answer_from_a_thread_reaches_the_model(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    ch = HumanChannel(timeout_s=120)
    front = FakeFrontEnd(on_asked=lambda ev: threading.Thread(target=ch.answer, args=(ev.payload["id"], "2")).start())
    ch.on_event = front
    question = {"question": "用哪个格式?", "options": ["csv", "json"]}
    fake_api.add(tool_use("mcp__human__ask", question), text("好的,用 json"))
    result = await _run(ch, workspace)
    assert result.ok, result.error
    first, second = fake_api.requests
    assert first.tool_results() == []
    assert [r["content"] for r in second.tool_results()] == [[{"type": "text", "text": "json"}]]
    assert second.tool_results()[0].get("is_error") in (None, False)
    assert front.states() == [("q1", "asked"), ("q1", "answered")]


@pytest.mark.slow
async def test_cli_unattended_question_times_out_at_once(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    front = FakeFrontEnd()
    ch = HumanChannel(on_event=front, timeout_s=0)
    fake_api.add(tool_use("mcp__human__ask", {"question": "用哪个格式?"}), text("那就 csv,并记下假设"))
    result = await _run(ch, workspace)
    assert result.ok, result.error
    assert TIMEOUT_TEXT in fake_api.requests[-1].last_user_text
    assert front.states() == [("q1", "timeout")]


@pytest.mark.slow
async def test_cli_inbox_delivers_mail_once_then_says_carry_on(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    ch = HumanChannel(amend_path=workspace / "需求.md")
    ch.send("顺便加一列")
    fake_api.add(tool_use("mcp__human__inbox", {}), tool_use("mcp__human__inbox", {}), text("收到"))
    result = await _run(ch, workspace, "干活")
    assert result.ok, result.error
    _, second, third = fake_api.requests
    assert "顺便加一列" in second.last_user_text and "已经追加进需求确认书" in second.last_user_text
    assert third.last_user_text.strip() == EMPTY_INBOX_TEXT
    assert third.all_text.count("顺便加一列") == 1
    assert ch.pending_mail() == []


@pytest.mark.slow
async def test_cli_interrupt_while_a_question_waits_settles_it(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """An interrupt makes the CLI cancel the blocked tool call: the question must not stay pending."""
    from flower_magic import AgentSpec, Runtime

    front = FakeFrontEnd()
    ch = HumanChannel(on_event=front, timeout_s=120)
    spec = AgentSpec(
        name="clarifier",
        instructions="提问。",
        allowed_tools=list(TOOL_NAMES),
        mcp_servers={"human": ch.mcp_server()},
    )
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False)
    front.on_asked = lambda ev: threading.Thread(target=rt.interrupt, args=("用 csv 就行",)).start()
    fake_api.add(tool_use("mcp__human__ask", {"question": "用哪个格式?"}), text("好,用 csv"))
    try:
        result = await asyncio.wait_for(rt.run(spec, "问我一个问题"), 120)
    finally:
        rt.close()
    assert result.ok and result.resumed, result.error
    assert front.states() == [("q1", "asked"), ("q1", "declined")]
    assert front.events[-1].payload["answer"] == CANCELLED_REASON
    assert ch.pending() == []
    assert "用 csv 就行" in fake_api.requests[-1].last_user_text


@pytest.mark.slow
async def test_cli_tool_timeout_shorter_than_ours_cuts_the_question(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """Why ``cli_env`` exists: the CLI's MCP_TOOL_TIMEOUT cancels an ask still waiting for a person,
    and the model reads the CLI's error instead of our timeout text."""
    front = FakeFrontEnd()
    ch = HumanChannel(on_event=front, timeout_s=120)
    fake_api.add(tool_use("mcp__human__ask", {"question": "用哪个格式?"}), text("那就 csv"))
    result = await _run(ch, workspace, env={"MCP_TOOL_TIMEOUT": "1500"})
    assert result.ok, result.error
    assert front.states() == [("q1", "asked"), ("q1", "declined")]
    cut = fake_api.requests[-1].tool_results()[0]
    assert cut.get("is_error") is True and "timed out" in json.dumps(cut.get("content"))
    assert ch.cli_env()["MCP_TOOL_TIMEOUT"] != "1500"
