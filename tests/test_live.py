"""core.live: the event log, the live state and the inbox, as files (quick tier: no model, no CLI).

What a slow test cannot show cheaply: a log that moves to its next part while a follower reads it,
records that are too big, a disk that fails mid-run, hostile things in the inbox, and a message that is
refused leaving the run dir as it was.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from flower_magic.core import live, runlock
from flower_magic.core.errors import UserError
from flower_magic.core.events import Event
from flower_magic.core.human import HumanChannel
from tests.helpers import LockHolder, Stranger, other_process_tries, plant_holder, snapshot

pytestmark = pytest.mark.anyio


def _texts(records: list[dict[str, Any]]) -> list[str]:
    return [r["event"]["text"] for r in records if r["type"] == "event"]


def test_a_follower_gets_every_record_once_across_parts(tmp_path: Path) -> None:
    log = live.EventLog(tmp_path, {"lang": "en"}, part_bytes=4000)
    follower = live.Follower(tmp_path)
    got: list[dict[str, Any]] = []
    for i in range(200):
        log.event(Event("text", f"line {i} " + "x" * 40))
        if i % 11 == 0:
            got += follower.poll()
    got += follower.poll()
    assert [r["n"] for r in got] == list(range(1, 202))  # the start record, then 200 events
    assert _texts(got) == [f"line {i} " + "x" * 40 for i in range(200)]
    assert (tmp_path / live.OLD_LOG_NAME).exists()
    # Two parts at most: the log stays bounded however long the run.
    total = sum(p.stat().st_size for p in tmp_path.glob("events*.jsonl"))
    assert total <= 2 * 4000 + 400
    assert follower.skipped == 0


def test_a_follower_more_than_a_part_behind_counts_what_it_missed(tmp_path: Path) -> None:
    log = live.EventLog(tmp_path, {"lang": "en"}, part_bytes=1500)
    follower = live.Follower(tmp_path)
    follower.poll()
    for i in range(100):
        log.event(Event("text", f"line {i} " + "x" * 40))
    got = follower.poll()
    assert follower.skipped > 0 and got[-1]["n"] == 101
    assert len(got) + follower.skipped == 100  # every event is either read or counted as missed


def test_a_late_follower_starts_with_the_settings_and_what_the_parts_hold(tmp_path: Path) -> None:
    log = live.EventLog(tmp_path, {"lang": "en", "rounds": 3}, part_bytes=1500)
    for i in range(100):
        log.event(Event("text", f"line {i} " + "x" * 40))
    got = live.Follower(tmp_path).poll()
    assert got[0]["type"] == "start" and got[0]["rounds"] == 3
    ns = [r["n"] for r in got[1:]]
    assert ns == list(range(ns[0], 102)) and ns[-1] == 101
    assert live.read_log(tmp_path)[1:] == got[1:]


def test_a_new_run_is_followed_from_its_start(tmp_path: Path) -> None:
    first = live.EventLog(tmp_path, {"lang": "en"})
    first.event(Event("text", "old"))
    follower = live.Follower(tmp_path)
    assert _texts(follower.poll()) == ["old"]
    first.close()
    second = live.EventLog(tmp_path, {"lang": "en"})
    second.event(Event("text", "new"))
    got = follower.poll()
    assert [r["type"] for r in got] == ["start", "event"] and _texts(got) == ["new"]
    assert follower.restarted == 1 and follower.run_id == second.run_id


def test_half_a_line_is_not_read_until_it_is_whole(tmp_path: Path) -> None:
    log = live.EventLog(tmp_path, {"lang": "en"})
    follower = live.Follower(tmp_path)
    follower.poll()
    path = tmp_path / live.LOG_NAME
    with path.open("ab") as f:
        f.write(b'{"n": 2, "t": 1, "type": "event", "event": {"kind": "text", "te')
    assert follower.poll() == []
    with path.open("ab") as f:
        f.write(b'xt": "whole"}}\n')
    assert _texts(follower.poll()) == ["whole"]
    log.close()


def test_big_records_are_clipped_not_lost(tmp_path: Path) -> None:
    log = live.EventLog(tmp_path, {"lang": "en"})
    log.event(
        Event("tool_call", "t" * 100_000, tool="Write", payload={"id": "toolu_1", "input": {"content": "c" * 200_000}})
    )
    log.event(Event("text", "after"))
    records = live.read_log(tmp_path)
    call = records[1]["event"]
    assert len(call["text"]) <= live.TEXT_CHARS + 1 and call["payload"]["id"] == "toolu_1"
    assert len(json.dumps(records[1])) < live.MAX_RECORD_BYTES
    assert _texts(records)[-1] == "after"


def test_the_log_never_stores_a_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 22 item 7: events.jsonl kept an sk-ant- key from an `env` tool result verbatim (and a
    gateway token in ANTHROPIC_AUTH_TOKEN is shaped like nothing)."""
    key, gateway = "sk-ant-api03-LOGCANARY-abcdefghijkl", "gw-log-9f8e7d6c5b4a"
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", gateway)
    env_output = f"HOME=/root\nANTHROPIC_API_KEY={key}\nANTHROPIC_AUTH_TOKEN={gateway}\nLANG=C.UTF-8"
    log = live.EventLog(tmp_path, {"lang": "en", "task": f"use {key}"})
    long = "x" * (live.TEXT_CHARS - 10) + key  # cut by the clip: its head must not stay readable
    log.event(Event("tool_result", env_output, payload={"content": env_output, "headers": {"Cookie": "sid=c00kie-1"}}))
    log.event(Event("text", long))
    log.record("heard", op="remark", text=f"the token is {gateway}")
    log.close()
    written = (tmp_path / live.LOG_NAME).read_text(encoding="utf-8")
    for secret in (key, key[:10], gateway, "c00kie-1"):
        assert secret not in written
    assert "HOME=/root" in written and "LANG=C.UTF-8" in written  # the rest of the output is kept
    records = [json.loads(line) for line in written.splitlines()]
    assert records[1]["event"]["payload"]["headers"] == {"Cookie": "[redacted]"}


def test_a_disk_error_stops_the_log_not_the_run(tmp_path: Path) -> None:
    log = live.EventLog(tmp_path, {"lang": "en"})
    assert log._fd is not None
    os.close(log._fd)  # what a vanished disk looks like to the writer: every write fails
    assert log.event(Event("text", "lost")) == 0
    assert log.broken and log.event(Event("text", "again")) == 0


def test_a_log_path_that_is_a_directory_breaks_only_the_log(tmp_path: Path) -> None:
    (tmp_path / live.LOG_NAME).mkdir()
    log = live.EventLog(tmp_path, {"lang": "en"})
    assert log.broken and log.event(Event("text", "x")) == 0
    assert live.read_log(tmp_path) == [] and live.Follower(tmp_path).poll() == []


def test_a_persons_edit_of_the_log_skips_only_what_it_broke(tmp_path: Path) -> None:
    log = live.EventLog(tmp_path, {"lang": "en"})
    log.event(Event("text", "one"))
    log.close()
    path = tmp_path / live.LOG_NAME
    path.write_bytes(path.read_bytes() + b"my note, not JSON\n[1, 2]\n" + b'{"n": 3, "t": 1, "type": "end"}\n')
    assert [r["type"] for r in live.read_log(tmp_path)] == ["start", "event", "end"]


# -- the live state ---------------------------------------------------------------------------------


def test_live_only_while_the_process_holds_the_run_lock(tmp_path: Path) -> None:
    run = live.LiveRun(tmp_path, front_end="api", start={"lang": "en"})
    assert live.live_state(tmp_path) is not None and not live.live_state(tmp_path).live  # type: ignore[union-attr]
    lock = runlock.acquire(tmp_path, front_end="api")
    try:
        state = live.live_state(tmp_path)
        assert state is not None and state.live and state.pid == os.getpid()
        run.end({"ending": "done"})
        assert not live.live_state(tmp_path).live  # type: ignore[union-attr]
    finally:
        lock.release()


def test_the_process_running_it_says_its_own_run_is_live(tmp_path: Path) -> None:
    """Issue 23, build 5: live_state tries the lock, and a try from a second descriptor of the holding
    process itself must not read as "nobody holds it" (nor, where locks are per process, release it):
    the front end's hold, joined by the workflow as ``Workflow.run`` does, is answered without one."""
    lock = runlock.acquire(tmp_path, front_end="terminal")
    run = live.LiveRun(tmp_path, front_end="terminal", start={"lang": "en"})
    try:
        inner = runlock.acquire(tmp_path, front_end="api", join=True)
        state = live.live_state(tmp_path)
        assert state is not None and state.live and state.pid == os.getpid()
        inner.release()
        assert live.live_state(tmp_path).live and live.live_pid(tmp_path) == os.getpid()  # type: ignore[union-attr]
        assert other_process_tries(tmp_path) == f"REFUSED {os.getpid()}"  # still held, after all those looks
        run.end({"ending": "done"})
        assert not live.live_state(tmp_path).live  # type: ignore[union-attr]
    finally:
        run.close()
        lock.release()
    assert live.live_pid(tmp_path) is None


def test_a_killed_runs_files_naming_a_live_process_are_not_a_live_run(tmp_path: Path) -> None:
    """Guards: after ``kill -9`` live.json and run.lock's record stay; once their pid names a live
    process that is not the run (pid reuse, here ``sleep``), the run was said to be live and ``post``
    wrote into an inbox nobody empties. Nothing is written now, and the run dir stays as it was."""
    with LockHolder(tmp_path, "background", "干活") as held:
        live.LiveRun(tmp_path, front_end="background", start={"lang": "en"}).log.close()
        plant_holder(tmp_path, held.pid)
        assert live.live_state(tmp_path).live  # type: ignore[union-attr]  # the real holder: live
        os.kill(held.pid, signal.SIGKILL)
        held.proc.wait(timeout=30)
    with Stranger() as stranger:
        plant_holder(tmp_path, stranger.pid)
        before = snapshot(tmp_path)
        state = live.live_state(tmp_path)
        assert state is not None and state.pid == stranger.pid and state.state == live.RUNNING and not state.live
        assert live.live_pid(tmp_path) is None
        with pytest.raises(live.NotLive):
            live.post(tmp_path, "remark", text="hello")
        assert snapshot(tmp_path) == before


def test_a_run_recorded_before_a_reboot_is_not_live(tmp_path: Path) -> None:
    """After a reboot the recorded pid may belong to another process (here: this one, holding the lock)."""
    run = live.LiveRun(tmp_path, front_end="api", start={"lang": "en"})
    lock = runlock.acquire(tmp_path, front_end="api")
    try:
        assert live.live_state(tmp_path).live  # type: ignore[union-attr]
        data = json.loads((tmp_path / live.LIVE_NAME).read_text())
        assert data["boot"] == live.boot_id() != ""
        (tmp_path / live.LIVE_NAME).write_text(json.dumps(dict(data, boot="an-earlier-boot")))
        assert not live.live_state(tmp_path).live  # type: ignore[union-attr]
    finally:
        run.close()
        lock.release()


def test_live_json_that_is_garbage_or_a_fifo_is_no_run(tmp_path: Path) -> None:
    (tmp_path / live.LIVE_NAME).write_text("{not json")
    assert live.live_state(tmp_path) is None
    (tmp_path / live.LIVE_NAME).write_text('{"pid": "me", "asks": 3}')
    assert live.live_state(tmp_path) is None
    (tmp_path / live.LIVE_NAME).unlink()
    os.mkfifo(tmp_path / live.LIVE_NAME)
    assert live.live_state(tmp_path) is None  # and did not hang


def test_the_state_follows_questions_steps_and_outages(tmp_path: Path) -> None:
    run = live.LiveRun(tmp_path, front_end="api", start={"lang": "en"})

    def state() -> live.LiveState:
        found = live.live_state(tmp_path)
        assert found is not None
        return found

    run.sink(Event("step", "干活", payload={"index": 3, "total": 3}))
    assert (state().state, state().step) == (live.RUNNING, "干活")
    run.sink(Event("step", "干活#2", payload={"judge": True, "round": 2}))
    assert (state().step, state().round) == ("干活", 2)
    run.sink(Event("ask", "Which?", payload={"id": "q1", "state": "asked", "options": ["a", "b"]}))
    assert state().state == live.WAITING
    assert state().asks == [{"id": "q1", "question": "Which?", "options": ["a", "b"]}]
    run.sink(Event("ask", "Which?", payload={"id": "q1", "state": "answered", "answer": "a"}))
    assert (state().state, state().asks) == (live.RUNNING, [])
    run.sink(Event("retry", "overloaded; again in 5 s"))
    assert state().state == live.IDLE
    run.sink(Event("text", "back"))
    assert state().state == live.RUNNING
    run.end({"ending": "failed", "step": "干活", "why": "why"})
    assert state().state == live.ENDED
    end = live.read_log(tmp_path)[-1]
    assert end["type"] == "end" and (end["ending"], end["step"], end["why"]) == ("failed", "干活", "why")


# -- the inbox --------------------------------------------------------------------------------------


@pytest.fixture
def held(tmp_path: Path) -> Any:
    run = live.LiveRun(tmp_path, front_end="api", start={"lang": "en"})
    lock = runlock.acquire(tmp_path, front_end="api")
    yield run
    run.close()
    lock.release()


def test_a_refused_message_leaves_the_run_dir_as_it_was(tmp_path: Path, held: live.LiveRun) -> None:
    before = snapshot(tmp_path)
    refused = [
        ("delete", "", ""),
        ("remark", "x" * (live.MAX_WORDS_CHARS + 1), ""),
        ("remark", "a\ud800b", ""),  # a lone surrogate: no message file can hold it (issue 22)
        ("answer", "yes", "q\udcff"),
    ]
    for op, text, ask_id in refused:
        with pytest.raises(UserError):
            live.post(tmp_path, op, text=text, ask_id=ask_id, lang="en")
        assert snapshot(tmp_path) == before
    (tmp_path / live.INBOX_NAME).write_text("a file where the inbox belongs")
    before = snapshot(tmp_path)
    with pytest.raises(UserError, match="should be a folder"):
        live.post(tmp_path, "remark", text="hi", lang="en")
    assert snapshot(tmp_path) == before


def test_no_live_run_no_message(tmp_path: Path) -> None:
    live.LiveRun(tmp_path, front_end="api", start={"lang": "en"}).end({"ending": "done"})
    before = snapshot(tmp_path)
    with pytest.raises(live.NotLive, match="no flower is running"):
        live.post(tmp_path, "stop", lang="en")
    assert snapshot(tmp_path) == before


def test_the_inbox_takes_messages_in_order_and_keeps_bad_ones_aside(tmp_path: Path, held: live.LiveRun) -> None:
    first = live.post(tmp_path, "remark", text="one", source="terminal")
    live.post(tmp_path, "answer", text="two", ask_id="q1", source="panel")
    box = tmp_path / live.INBOX_NAME
    (box / "00000000000000000001-bad.json").write_text("{not json")
    (box / "00000000000000000002-big.json").write_bytes(b" " * (live.MAX_MESSAGE_BYTES + 1))
    (box / "00000000000000000003-dir.json").mkdir()
    os.mkfifo(box / "00000000000000000004-fifo.json")
    taken = live.take_inbox(tmp_path)  # does not hang on the FIFO
    assert [(m["op"], m["text"], m["from"]) for m in taken] == [
        ("remark", "one", "terminal"),
        ("answer", "two", "panel"),
    ]
    assert not first.exists()
    assert (box / "00000000000000000001-bad.json.bad").read_text() == "{not json"
    assert (box / "00000000000000000002-big.json.bad").exists()
    assert live.take_inbox(tmp_path) == []


async def test_an_answer_from_the_inbox_settles_the_question(tmp_path: Path, held: live.LiveRun) -> None:
    channel = HumanChannel(timeout_s=30)
    held.serve(channel, None)
    asking = asyncio.ensure_future(channel.ask("Which format?", ["md", "txt"]))
    while not channel.pending():
        await asyncio.sleep(0.01)
    await asyncio.to_thread(live.post, tmp_path, "answer", text="2", source="panel")
    ask = await asyncio.wait_for(asking, 10)
    assert (ask.state, ask.answer) == ("answered", "txt")
    for _ in range(500):  # the heard record is written once the answer has been given
        heard = [r for r in live.read_log(tmp_path) if r["type"] == "heard"]
        if heard:
            break
        await asyncio.sleep(0.01)
    assert heard == [{**heard[0], "op": "answer", "from": "panel", "id": "q1", "took": True}]


def test_remark_and_stop_reach_the_runtime(tmp_path: Path, held: live.LiveRun) -> None:
    seen: list[tuple[str, bool]] = []
    done = threading.Event()

    class Runtime:  # what LiveRun calls on a runtime: its interrupt, nothing else
        def interrupt(self, message: str = "", *, resume: bool = True) -> None:
            seen.append((message, resume))
            if len(seen) == 2:
                done.set()

    channel = HumanChannel(timeout_s=30)
    heard: list[dict[str, Any]] = []
    held.heard = heard.append
    held.serve(channel, Runtime())
    live.post(tmp_path, "remark", text="use pandas", source="notebook")
    live.post(tmp_path, "stop", source="terminal")
    assert done.wait(10)
    for _ in range(200):  # heard is told after the runtime was
        if len(heard) == 2:
            break
        threading.Event().wait(0.02)
    assert seen == [("use pandas", True), ("", False)] and held.stopped
    assert [(h["op"], h["from"]) for h in heard] == [("remark", "notebook"), ("stop", "terminal")]
    line = live.heard_line(heard[0], "en")
    assert "notebook" in line[0][1] and "use pandas" in line[0][1]


def test_a_remark_is_written_down_before_the_run_hears_it(tmp_path: Path, held: live.LiveRun) -> None:
    """Issue 22: a remark went only to ``Runtime.interrupt``; a run killed before the words reached the
    model lost them. It is in 需求.md before the runtime is told, where the next run looks."""
    brief = tmp_path / "需求.md"
    in_brief_when_told: list[bool] = []
    told = threading.Event()

    class Runtime:
        def interrupt(self, message: str = "", *, resume: bool = True) -> None:
            in_brief_when_told.append(message in brief.read_text(encoding="utf-8"))
            told.set()

    held.serve(HumanChannel(timeout_s=30, amend_path=brief), Runtime())
    live.post(tmp_path, "remark", text="改用 pandas-R4", source="terminal")
    assert told.wait(10)
    assert in_brief_when_told == [True]


def test_an_answer_to_a_question_that_closed_goes_as_a_remark(tmp_path: Path, held: live.LiveRun) -> None:
    """Issue 22: an answer that came after its question had closed was recorded as missed and went
    nowhere. The words reach the run as a remark (written down first), and the heard line says so."""
    brief = tmp_path / "需求.md"
    seen: list[tuple[str, bool]] = []
    heard: list[dict[str, Any]] = []
    held.heard = heard.append

    class Runtime:
        def interrupt(self, message: str = "", *, resume: bool = True) -> None:
            seen.append((message, resume))

    held.serve(HumanChannel(timeout_s=30, amend_path=brief), Runtime())
    live.post(tmp_path, "answer", text="csv, and bye.txt too", ask_id="q1", source="panel")
    for _ in range(500):
        if heard:
            break
        threading.Event().wait(0.02)
    assert seen == [("csv, and bye.txt too", True)]
    assert "csv, and bye.txt too" in brief.read_text(encoding="utf-8")
    assert heard[0]["took"] is False and heard[0]["as_remark"] is True
    line = "".join(text for _, text in live.heard_line(heard[0], "en"))
    assert "as a remark" in line and "not used" not in line
