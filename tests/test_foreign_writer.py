"""A session someone else is still writing (issue 10, build item 3): a step waits for the writer to
stop and never resumes on top of it. Writers are real processes named like Claude Code (``claude``,
``--resume=<sid>`` in their arguments) appending to a real file; a thread stands in where processes
cannot be seen (outside Linux)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from flower_magic import AgentSpec, Runtime
from flower_magic.core import manifest
from flower_magic.core.errors import SessionBusy
from flower_magic.core.events import Event
from flower_magic.core.foreign_writer import ClaudeProcess, OtherWriters, claude_processes, settle
from flower_magic.core.project import local_transcript
from flower_magic.core.result import Plan, StepResult
from flower_magic.testing import FakeAnthropic, text
from tests.helpers import wait_until, write_script

SID = str(uuid.uuid4())  # fresh per test run: no other run's writer can name it
QUIET_S = 0.6  # what the tests ask for; the module's own QUIET_S is what a real run uses
LINUX = sys.platform.startswith("linux")

# A stand-in for an orphaned Claude Code CLI: its script is named ``claude`` and its arguments name
# the session, as the SDK's ``--resume=<sid>`` does. It appends a line every ``every`` seconds
# (0 = writes nothing: a CLI inside a long tool call) until killed.
WRITER = """
import sys, time
path, every = sys.argv[1], float(sys.argv[2])
print("READY", flush=True)
while True:
    if every:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write('{"type": "progress"}\\n')
        time.sleep(every)
    else:
        time.sleep(3600)
"""


class FakeFinder:
    """Answers what ``claude_processes`` would, and records each time it was asked."""

    def __init__(self, answer: list[ClaudeProcess] | None) -> None:
        self.answer = answer
        self.calls = 0

    def __call__(self, session_id: str, workspace: Path) -> list[ClaudeProcess] | None:
        self.calls += 1
        return self.answer


def writer(
    tmp_path: Path, path: Path, every: float, cwd: Path | None = None, session: str = SID
) -> subprocess.Popen[str]:
    script = tmp_path / "bin" / "claude"
    script.parent.mkdir(exist_ok=True)
    write_script(script, WRITER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(path), str(every), f"--resume={session}"],
        cwd=cwd or tmp_path,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
    return proc


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    path = tmp_path / "projects" / "ws" / f"{SID}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text('{"type": "user"}\n', encoding="utf-8")
    return path


@pytest.fixture
def stop_after() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.__exit__(None, None, None)


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


# -- cheap when there is nothing to wait for --------------------------------------------------------


def test_an_absent_or_old_transcript_costs_one_stat(tmp_path: Path, transcript: Path) -> None:
    finder = FakeFinder(None)
    notices: list[str] = []
    run(settle(tmp_path / "absent.jsonl", SID, tmp_path, find=finder, on_wait=notices.append, quiet_s=QUIET_S))
    old = time.time() - 60
    os.utime(transcript, (old, old))
    run(settle(transcript, SID, tmp_path, find=finder, on_wait=notices.append, quiet_s=QUIET_S))
    assert finder.calls == 0 and notices == []


def test_our_own_recent_write_waits_only_for_a_claude_naming_the_session(tmp_path: Path, transcript: Path) -> None:
    """Written by this runtime's own CLI (now exited): no wait, even where processes cannot be seen
    or a person's claude works in the same folder; but a live claude that names the session has
    resumed it since, and is waited for."""
    mine = time.time()
    for seen in (None, [ClaudeProcess(1, False)], []):
        run(settle(transcript, SID, tmp_path, mine_until=mine, find=FakeFinder(seen), max_wait_s=0.0))
    with pytest.raises(SessionBusy) as caught:
        run(
            settle(
                transcript, SID, tmp_path, mine_until=mine, find=FakeFinder([ClaudeProcess(7, True)]), max_wait_s=0.0
            )
        )
    assert caught.value.pids == (7,)


def test_a_recent_file_with_no_live_claude_is_a_writer_gone(tmp_path: Path, transcript: Path) -> None:
    """A run killed a moment ago left the file fresh; on Linux nobody alive can be writing it: no wait."""
    finder = FakeFinder([])
    notices: list[str] = []
    run(settle(transcript, SID, tmp_path, find=finder, on_wait=notices.append, max_wait_s=0.0))
    assert finder.calls == 1 and notices == []


# -- where processes cannot be seen: the file's quiet decides ---------------------------------------


def _append_in_a_thread(path: Path, *, times: int) -> tuple[threading.Thread, threading.Event, threading.Event]:
    stop, done = threading.Event(), threading.Event()

    def append() -> None:
        for _ in range(times):
            if stop.is_set():
                break
            with path.open("a", encoding="utf-8") as fh:
                fh.write('{"type": "progress"}\n')
            time.sleep(0.05)
        done.set()

    thread = threading.Thread(target=append, daemon=True)
    thread.start()
    return thread, stop, done


def test_unknown_platform_waits_until_the_writes_stop(tmp_path: Path, transcript: Path) -> None:
    thread, _, done = _append_in_a_thread(transcript, times=40)
    notices: list[str] = []
    run(settle(transcript, SID, tmp_path, find=FakeFinder(None), on_wait=notices.append, quiet_s=QUIET_S, lang="en"))
    assert done.is_set()  # it returned only after the last write
    thread.join()
    assert len(notices) == 1 and f"someone else is still writing session {SID}" in notices[0]


def test_unknown_platform_refuses_a_writer_that_never_stops(tmp_path: Path, transcript: Path) -> None:
    thread, stop, done = _append_in_a_thread(transcript, times=10_000)
    try:
        with pytest.raises(SessionBusy) as caught:
            run(settle(transcript, SID, tmp_path, find=FakeFinder(None), quiet_s=QUIET_S, max_wait_s=1.5))
        assert not done.is_set()  # still writing when we gave up
    finally:
        stop.set()
        thread.join()
    exc = caught.value
    assert (exc.session_id, exc.path, exc.pids) == (SID, transcript, ())
    assert exc.waited_s >= 1.5
    assert "\n" not in str(exc) and SID in str(exc) and f"{SID}.jsonl" in str(exc)


# -- Linux: real processes --------------------------------------------------------------------------


@pytest.mark.skipif(not LINUX, reason="/proc")
def test_claude_processes_sees_who_names_the_session_or_works_here(
    tmp_path: Path, transcript: Path, stop_after: list[subprocess.Popen[str]]
) -> None:
    here = tmp_path / "ws"
    here.mkdir()
    named = writer(tmp_path, transcript, 0)
    stop_after.append(named)
    found = claude_processes(SID, here)
    assert found is not None and ClaudeProcess(named.pid, True) in found
    other = writer(tmp_path, transcript, 0, cwd=here)
    stop_after.append(other)
    assert ClaudeProcess(other.pid, True) in (claude_processes(SID, here) or [])
    # A claude in the workspace that names another session is seen by where it works.
    assert ClaudeProcess(other.pid, False) in (claude_processes("another-session", here) or [])
    assert all(p.pid != named.pid for p in claude_processes("another-session", here) or [])
    named.kill()
    named.wait()
    assert all(p.pid != named.pid for p in claude_processes(SID, here) or [])
    assert all(p.pid != os.getpid() for p in claude_processes(SID, here) or [])


@pytest.mark.skipif(not LINUX, reason="/proc")
def test_a_live_claude_naming_the_session_keeps_the_step_waiting_though_the_file_is_quiet(
    tmp_path: Path, transcript: Path, stop_after: list[subprocess.Popen[str]]
) -> None:
    """A CLI inside a long tool call writes nothing for minutes; it is still a live writer."""
    proc = writer(tmp_path, transcript, 0)
    stop_after.append(proc)
    transcript.write_text('{"type": "assistant"}\n', encoding="utf-8")
    notices: list[str] = []

    async def go() -> bool:
        task = asyncio.ensure_future(settle(transcript, SID, tmp_path, on_wait=notices.append, quiet_s=QUIET_S))
        while not notices:
            await asyncio.sleep(0.05)
        await asyncio.sleep(QUIET_S * 3)  # the file has long been quiet ...
        waiting = not task.done()  # ... and still we wait
        proc.kill()
        proc.wait()
        await task
        return waiting

    assert asyncio.run(go())
    assert f"claude 进程 {proc.pid}" in notices[0]


@pytest.mark.skipif(not LINUX, reason="/proc")
def test_a_claude_that_keeps_writing_stops_the_step_with_its_pid(
    tmp_path: Path, transcript: Path, stop_after: list[subprocess.Popen[str]]
) -> None:
    proc = writer(tmp_path, transcript, 0.1)
    stop_after.append(proc)
    with pytest.raises(SessionBusy) as caught:
        run(settle(transcript, SID, tmp_path, quiet_s=QUIET_S, max_wait_s=1.0, lang="en"))
    assert caught.value.pids == (proc.pid,)
    assert f"kill {proc.pid}" in str(caught.value) and "the step stopped" in str(caught.value)


# -- the runtime: a step never resumes on top of a live writer ------------------------------------


@dataclass
class FakeRuns:
    """What ``OtherWriters`` reads of a runtime: its workspace, CLI environment and finished steps."""

    workspace: Path
    env: dict[str, str]
    results: list[StepResult] = field(default_factory=list)


@pytest.mark.skipif(not LINUX, reason="/proc")
def test_the_runtime_s_own_writes_are_not_someone_else_s(
    tmp_path: Path, stop_after: list[subprocess.Popen[str]]
) -> None:
    """Written by an earlier step of this runtime (before it ended) or an earlier attempt of this
    step: no wait. Otherwise a live claude working in the workspace makes the step wait."""
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {"CLAUDE_CONFIG_DIR": str(tmp_path / "config")}
    path = local_transcript(ws, SID, env)
    path.parent.mkdir(parents=True)
    path.write_text("{}\n", encoding="utf-8")
    # A person's own claude, working here on another session.
    stop_after.append(writer(tmp_path, tmp_path / "elsewhere.jsonl", 0, cwd=ws, session="another-session"))
    policy = OtherWriters(max_wait_s=0.0)  # any wait at all raises SessionBusy
    resume = Plan("接着。", resume=SID)
    step = StepResult(step="干活")
    earlier = StepResult(step="干活", session_id=SID, ended_at=time.time())
    run(policy.before_attempt(FakeRuns(ws, env, [earlier]), resume, step, None))
    run(policy.before_attempt(FakeRuns(ws, env), resume, StepResult(step="干活", session_id=SID), None))
    run(policy.before_attempt(FakeRuns(ws, env), Plan("新的。"), step, None))
    events: list[Event] = []
    with pytest.raises(SessionBusy):
        run(policy.before_attempt(FakeRuns(ws, env), resume, step, events.append))
    too_early = StepResult(step="干活", session_id=SID, ended_at=time.time() - 60)
    with pytest.raises(SessionBusy):
        run(policy.before_attempt(FakeRuns(ws, env, [too_early]), resume, step, events.append))
    assert [e.payload for e in events] == [{"step": "干活", "foreign_writer": SID}] * 2


SPEC = AgentSpec(name="w", instructions="简短回答。", allowed_tools=[])


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="/proc")
def test_the_runtime_waits_then_refuses_then_resumes_once_quiet(
    fake_api: FakeAnthropic,
    fake_api_env: dict[str, str],
    workspace: Path,
    tmp_path: Path,
    stop_after: list[subprocess.Popen[str]],
) -> None:
    fake_api.add(text("第一轮"))
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False)
    try:
        first = asyncio.run(rt.run(SPEC, "开始。"))
        assert first.ok and first.session_id
        sid = first.session_id
        path = local_transcript(workspace, sid, rt.env)
        assert path.is_file()  # the first CLI's own copy: what an orphaned CLI keeps writing

        # Someone else resumes it and keeps writing: the step waits, then stops, sending nothing.
        script = tmp_path / "bin" / "claude"
        script.parent.mkdir()
        write_script(script, WRITER)
        other = subprocess.Popen(
            [sys.executable, str(script), str(path), "0.1", f"--resume={sid}"], stdout=subprocess.PIPE, text=True
        )
        stop_after.append(other)
        assert other.stdout is not None and other.stdout.readline().strip() == "READY"
        rt.other_writers = OtherWriters(max_wait_s=1.5)
        events: list[Event] = []
        with pytest.raises(SessionBusy) as caught:
            asyncio.run(rt.run(SPEC, "接着。", resume=sid, on_event=events.append))
        assert caught.value.session_id == sid and caught.value.pids == (other.pid,)
        assert len(fake_api.requests) == 1  # never resumed on top of it
        notices = [e for e in events if e.kind == "retry" and e.payload.get("foreign_writer") == sid]
        assert len(notices) == 1 and sid in notices[0].text
        row = manifest.read_rows(workspace / "runs")[-1]
        assert row["error"].startswith("SessionBusy") and row["session_id"] is None

        # It stops: the next run waits for the quiet, then resumes the same session.
        other.kill()
        other.wait()
        fake_api.add(text("第二轮"))
        again = asyncio.run(rt.run(SPEC, "接着。", resume=sid))
        assert again.ok and again.session_id == sid
        resumed = fake_api.requests[-1]
        assert "第一轮" in resumed.all_text and resumed.n_messages > 2
    finally:
        rt.close()


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="/proc")
def test_back_to_back_steps_of_one_runtime_never_wait_for_themselves(
    fake_api: FakeAnthropic,
    fake_api_env: dict[str, str],
    workspace: Path,
    tmp_path: Path,
    stop_after: list[subprocess.Popen[str]],
) -> None:
    """Our own CLI wrote the transcript a moment ago: that is not someone else (no notice, no wait),
    even with a person's own ``claude`` open in the same directory on another session."""
    stop_after.append(writer(tmp_path, tmp_path / "elsewhere.jsonl", 0, cwd=workspace))  # names SID, not ours
    fake_api.add(text("一"), text("二"))
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False)
    rt.other_writers = OtherWriters(max_wait_s=0.0)  # any wait at all would raise SessionBusy
    events: list[Event] = []
    try:
        first = asyncio.run(rt.run(SPEC, "一。"))
        assert first.session_id
        wait_until(lambda: local_transcript(workspace, first.session_id or "", rt.env).is_file(), "the local copy")
        second = asyncio.run(rt.run(SPEC, "二。", resume=first.session_id, on_event=events.append))
    finally:
        rt.close()
    assert second.ok
    assert not [e for e in events if e.payload.get("foreign_writer")]
