"""Stop and words during an outage wait (issue 23, build item 6 and acceptance g).

A step that waits out an API outage (the probes, then the back-off; up to an hour) used to hear a stop
only once the API was back: ``flower --stop`` said it asked, the log said ``heard``, and the run went on
waiting. Here the real CLI talks to the fake API, which goes away; a stop ends the wait at once, words
said during it go with the first message once the API answers again, exactly once.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from flower_magic import AgentSpec, Runtime
from flower_magic.core import manifest
from flower_magic.core.events import Event
from flower_magic.core.handoff import Handoff, HandoffPolicy
from flower_magic.core.resilience import Resilience
from flower_magic.core.result import INTERRUPTED, KILLED
from flower_magic.core.words import say
from flower_magic.testing import FakeAnthropic, Request, error, text, tool_use
from flower_magic.testing.roles import asks_for_handoff

# pytest-jupyter (loaded by test_liveness.py and test_server.py) collects every coroutine test itself,
# before anyio can mark it as needing ``anyio_backend``; anyio then re-makes such a test once per backend
# and drops its other parameters. Asking for the fixture outright keeps this module's tests as written.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("anyio_backend")]

SPEC = AgentSpec(name="worker", instructions="", allowed_tools=[])
WORKER = AgentSpec(name="worker", instructions="", allowed_tools=["Bash"])
# Nothing ends these waits but the API coming back or a stop: an hour of probes a minute apart.
PATIENT = Resilience(probe_interval=60.0, probe_timeout=1.0, max_offline_wait=3600.0)
GIVE_UP_S = 30.0  # only keeps a broken wait from hanging the suite; the runs end within a second or two
WORDS = "顺便把表头也改成英文-OW7"


def _down_said(events: list[Event], api: FakeAnthropic) -> bool:
    return any(e.kind == "retry" and e.text.startswith(f"127.0.0.1:{api.port} 不可达") for e in events)


async def _until(happened: Any, what: str) -> None:
    """Wait until ``happened()``; give up (a failure, not a timing) after two minutes, as helpers.wait_until."""
    give_up = time.monotonic() + 120
    while not happened():
        if time.monotonic() > give_up:
            raise AssertionError(f"{what} never happened")
        await asyncio.sleep(0.05)


def _from_another_thread(call: Any) -> None:
    """What a front end does: the inbox thread, the kernel's cell thread, the stdin reader."""
    thread = threading.Thread(target=call)
    thread.start()
    thread.join()


async def _stopped_within(task: asyncio.Task[Any], what: str) -> float:
    started = time.monotonic()
    done, _ = await asyncio.wait({task}, timeout=GIVE_UP_S)
    if not done:
        task.cancel()
        await asyncio.wait({task})
        raise AssertionError(f"{what}: the step still waits {GIVE_UP_S:.0f} s after the stop")
    return time.monotonic() - started


@pytest.mark.anyio
async def test_a_stop_ends_the_wait_for_the_api_at_once(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """Issue 23: a stop during the outage wait was taken (``heard``) but the step went on probing until
    the API came back (up to an hour). The step ends now, ``interrupted-by-human``, one manifest row."""
    fake_api.stop()
    events: list[Event] = []
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=PATIENT)
    try:
        task = asyncio.ensure_future(rt.run(SPEC, "做", on_event=events.append))
        await _until(lambda: _down_said(events, fake_api), "the wait for the API")
        _from_another_thread(lambda: rt.interrupt("", resume=False))
        took = await _stopped_within(task, "stop while probing")
        result = task.result()
    finally:
        rt.close()
    print(f"stop during the probes: the step ended {took:.2f} s after it")
    assert not result.ok and result.error == INTERRUPTED
    assert result.errors, "the outage is kept among the step's errors"
    rows = manifest.read_rows(workspace / "runs")
    assert [(r["step"], r["error"]) for r in rows] == [("worker", INTERRUPTED)]
    assert not fake_api.requests


@pytest.mark.anyio
async def test_a_stop_ends_the_back_off(fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path) -> None:
    """The API answers but is overloaded: the step backs off (here ten minutes); a stop ends it now."""
    fake_api.add(error(529, "Overloaded", times=None))
    events: list[Event] = []
    slow = Resilience(base_delay=600.0, max_delay=600.0, probe_timeout=1.0)
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=slow)
    try:
        task = asyncio.ensure_future(rt.run(SPEC, "做", on_event=events.append))
        await _until(lambda: any(e.kind == "retry" for e in events), "the back-off")
        await asyncio.sleep(0.5)  # past the probe (the endpoint answers): in the sleep itself
        _from_another_thread(lambda: rt.interrupt("", resume=False))
        took = await _stopped_within(task, "stop while backing off")
        result = task.result()
    finally:
        rt.close()
    print(f"stop during the back-off: the step ended {took:.2f} s after it")
    assert result.error == INTERRUPTED and result.attempts == 1
    assert [r["error"] for r in manifest.read_rows(workspace / "runs")] == [INTERRUPTED]


def _said(request: Request) -> int:
    """How many times the words are in what the model was sent (every turn of its history)."""
    return json.dumps(request.messages, ensure_ascii=False).count(WORDS)


@pytest.mark.anyio
async def test_words_during_the_wait_reach_the_model_once_it_is_back(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """Words said while the step waits cannot reach the model; they are kept (and the person told so),
    then sent with the first message once the API answers again: in the first request, exactly once,
    and only once in every later one. A bare interrupt said then (Ctrl-C, Enter) changes nothing."""
    fake_api.stop()
    events: list[Event] = []
    quick = Resilience(base_delay=0.2, max_delay=1.0, probe_interval=0.5, probe_timeout=1.0, max_offline_wait=120.0)
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=quick)
    try:
        task = asyncio.ensure_future(rt.run(SPEC, "写 a.txt", on_event=events.append))
        await _until(lambda: _down_said(events, fake_api), "the wait for the API")
        _from_another_thread(lambda: rt.interrupt(WORDS))
        _from_another_thread(lambda: rt.interrupt(""))
        await _until(lambda: any(e.payload.get("words_kept") for e in events), "the words kept said")
        await asyncio.sleep(1.5)  # a few more probes: the words stay kept, nothing is sent
        assert not fake_api.requests and not task.done()
        fake_api.add(text("好的,表头改成英文了。"), text("还有别的吗"))
        fake_api.start()
        done, _ = await asyncio.wait({task}, timeout=120)
        assert done, "the step never ended after the API came back"
        result = task.result()
    finally:
        rt.close()
    assert result.ok, (result.error, result.errors)
    assert result.text == "好的,表头改成英文了。"
    kept = [e for e in events if e.payload.get("words_kept")]
    assert [e.text for e in kept] == [say("words_kept_offline", "zh")]
    first = fake_api.requests[0]
    assert _said(first) == 1 and WORDS in first.last_user_text
    assert all(_said(r) == 1 for r in fake_api.requests)
    assert [r["error"] for r in manifest.read_rows(workspace / "runs")] == [None]


@pytest.mark.anyio
async def test_a_rescue_during_the_wait_is_one_row_when_the_step_then_ends(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """``Launch.end_now`` (the kernel shutting down, SIGTERM) records the step in flight during the
    wait (``rescue``); the step then ending on a stop must not write it a second time."""
    fake_api.stop()
    events: list[Event] = []
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=PATIENT)
    try:
        task = asyncio.ensure_future(rt.run(SPEC, "做", on_event=events.append))
        await _until(lambda: _down_said(events, fake_api), "the wait for the API")
        _from_another_thread(rt.rescue)
        assert [r["error"] for r in manifest.read_rows(workspace / "runs")] == [KILLED]
        _from_another_thread(lambda: rt.interrupt("", resume=False))
        await _stopped_within(task, "stop after a rescue")
    finally:
        rt.close()
    rows = manifest.read_rows(workspace / "runs")
    assert len(rows) == 1 and rows[0]["step"] == "worker", rows


def test_a_stop_stays_a_stop_when_words_follow(fake_api_env: dict[str, str], tmp_path: Path) -> None:
    """A remark right after ``--stop`` (the panel's, another terminal's) turned the stop back into a
    resume: the run went on. The stop stands; the words are the next run's (the front ends wrote them
    to 需求.md)."""
    rt = Runtime(workspace=tmp_path / "ws", run_dir=tmp_path / "runs")
    try:
        rt.interrupt("", resume=False)
        rt.interrupt("还有一件事-S3")
        rt.interrupt("")
        assert not rt.words_waiting() and rt.take_words() is None
    finally:
        rt.close()


@pytest.mark.anyio
async def test_words_said_while_the_next_attempt_starts_join_the_words_before(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """Words cut the running turn and were taken for the next attempt's prompt; more words came while
    that attempt's CLI started (the words said after an outage meet the same moment): the attempt
    was cut before it said anything, and resumed with the new words only — the first were lost."""
    first, second = "先说的-A1", "后说的-B2"
    gate = threading.Event()
    fake_api.add(text("还在写。", hold=gate), text("两句都照做了。"))
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False)

    cuts: list[Event] = []

    def sink(event: Event) -> None:
        if event.kind == "retry" and event.payload.get("interrupt"):
            cuts.append(event)
            if len(cuts) == 1:
                rt.interrupt(second)  # the first words are taken; the next attempt has not sent them yet

    try:
        task = asyncio.ensure_future(rt.run(SPEC, "写 a.txt", on_event=sink))
        await _until(lambda: fake_api.requests, "the first request")
        _from_another_thread(lambda: rt.interrupt(first))
        done, _ = await asyncio.wait({task}, timeout=120)
        assert done, "the step never ended"
        result = task.result()
    finally:
        gate.set()
        rt.close()
    assert result.ok and result.text == "两句都照做了。", (result.error, result.errors)
    resumed = fake_api.requests[-1]
    said = json.dumps(resumed.messages, ensure_ascii=False)
    assert said.count(first) == 1 and said.count(second) == 1, resumed.last_user_text
    assert resumed.last_user_text.index(first) < resumed.last_user_text.index(second)
    assert len(cuts) == 1  # one cut: the second words went with the attempt that was starting


HANDOFF_DOC = """## 现在在做什么
在改 clean.py 的日期解析。

## 已经定下的
- 用标准库 csv。

## 走不通的路
- 无。

## 下一步
给 parse_dates() 补测试-HD3。

## 现场
- clean.py
"""


def _handing_off(fake_api: FakeAnthropic) -> None:
    """A worker whose second reply crosses the hand-off line (15K of a 40K window); the hand-off turn's
    answer is a complete document; the successor then finishes."""
    fake_api.add(
        tool_use("Bash", {"command": "echo step"}, usage={"input_tokens": 8_000}),
        text("继续中", usage={"input_tokens": 16_000}),
        text(HANDOFF_DOC, match=asks_for_handoff, usage={"input_tokens": 16_500}),
        text("接手完成", usage={"input_tokens": 3_000}),
    )


def _away_while_writing(fake_api: FakeAnthropic, events: list[Event]) -> Any:
    """A sink that takes the API away the moment the hand-off turn begins."""

    def sink(event: Event) -> None:
        events.append(event)
        if event.kind == "handoff" and event.payload.get("phase") == "writing":
            fake_api.stop()

    return sink


@pytest.mark.anyio
async def test_a_hand_off_due_during_an_outage_is_written_once_the_api_is_back(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """Found by the sequence walk (a hand-off, then the API away, then a stop): the hand-off turn was
    tried once, failed on the outage and became a degraded hand-off that quoted the raw connection
    error to the successor. It waits out the outage as any attempt does, and the real one is written."""
    _handing_off(fake_api)
    events: list[Event] = []
    policy = HandoffPolicy(window=40_000, headroom=25_000)
    brisk = Resilience(probe_interval=0.5, probe_timeout=1.0, max_offline_wait=600.0)
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=brisk, handoff=policy)
    try:
        task = asyncio.ensure_future(rt.run(WORKER, "清洗这些 CSV。", on_event=_away_while_writing(fake_api, events)))
        await _until(lambda: _down_said(events, fake_api), "the hand-off's wait for the API")
        fake_api.start()
        done, _ = await asyncio.wait({task}, timeout=120)
        assert done, "the step never ended"
        result = task.result()
    finally:
        rt.close()
    assert result.ok and result.text == "接手完成", (result.error, result.errors)
    assert len(result.retired) == 1 and result.session_id not in result.retired
    doc = Handoff.parse((workspace / ".flower" / "notes" / "交接-worker.md").read_text(encoding="utf-8"))
    assert doc.complete() and not doc.degraded and "HD3" in doc.next
    assert "HD3" in fake_api.requests[-1].last_user_text
    assert not any("Connection refused" in r.all_text for r in fake_api.requests)


@pytest.mark.anyio
async def test_a_stop_while_a_hand_off_waits_for_the_api_keeps_the_session(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """The same wait, stopped: the step ends interrupted with its full session still its own (nothing
    retired, no hand-off file, lineage unchanged), so the next wake hands off from it; before, a
    degraded hand-off named a successor that had never spoken."""
    _handing_off(fake_api)
    events: list[Event] = []
    policy = HandoffPolicy(window=40_000, headroom=25_000)
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=PATIENT, handoff=policy)
    try:
        task = asyncio.ensure_future(rt.run(WORKER, "清洗这些 CSV。", on_event=_away_while_writing(fake_api, events)))
        await _until(lambda: _down_said(events, fake_api), "the hand-off's wait for the API")
        first = fake_api.requests[0].headers.get("x-claude-code-session-id")
        _from_another_thread(lambda: rt.interrupt("", resume=False))
        await _stopped_within(task, "stop while the hand-off waits")
        result = task.result()
    finally:
        rt.close()
    assert not result.ok and result.error == INTERRUPTED
    assert result.retired == [] and result.session_id == first
    assert not (workspace / ".flower" / "notes" / "交接-worker.md").exists()
    assert not any(asks_for_handoff(r) for r in fake_api.requests)
    rows = manifest.read_rows(workspace / "runs")
    assert [(r["step"], r["error"]) for r in rows] == [("worker", INTERRUPTED)]
