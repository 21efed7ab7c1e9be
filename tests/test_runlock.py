"""One agent per run directory (issue 10, build item 3, acceptance d): the run lock itself, in real
processes (flock is per open file, so threads would prove nothing), and who takes it: the Python API,
the ``flower`` command and, racing, two ``flower`` processes on one directory."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flower_magic import AgentSpec, Runtime, Step, Workflow
from flower_magic.core import manifest, runlock
from flower_magic.core.errors import RunLocked
from flower_magic.core.pid import is_alive
from flower_magic.core.project import project_key
from flower_magic.core.words import run_locked_line, short_path, step_name
from flower_magic.stores.sqlite import SqliteSessionStore
from flower_magic.testing import FakeAnthropic, Request, text
from flower_magic.testing.roles import as_role
from tests.helpers import (
    LockHolder,
    Stranger,
    other_process_tries,
    plant_holder,
    snapshot,
    wait_until,
    write_script,
)

# -- the lock ---------------------------------------------------------------------------------------


def test_the_holder_record_follows_the_steps_and_release_empties_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs"
    lock = runlock.acquire(run_dir, front_end="notebook")
    try:
        found = runlock.holder(run_dir)
        assert found is not None
        assert (found.pid, found.host, found.step, found.front_end) == (
            os.getpid(),
            socket.gethostname(),
            "",
            "notebook",
        )
        assert found.since[:4].isdigit() and "T" in found.since  # ISO 8601
        lock.note_step("设定目标")
        assert runlock.holder(run_dir) == runlock.Holder(os.getpid(), found.host, found.since, "设定目标", "notebook")
        raw = json.loads((run_dir / "run.lock").read_text(encoding="utf-8"))
        assert raw["step"] == "设定目标" and raw["pid"] == os.getpid()
        assert other_process_tries(run_dir) == f"REFUSED {os.getpid()} 设定目标"
    finally:
        lock.release()
    inode = (run_dir / "run.lock").stat().st_ino
    assert (run_dir / "run.lock").read_bytes() == b""  # a clean exit leaves no holder behind
    assert runlock.holder(run_dir) is None
    assert other_process_tries(run_dir) == "GOT"
    with runlock.acquire(run_dir, front_end="api"):
        assert (run_dir / "run.lock").stat().st_ino == inode  # the same file: never replaced


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_a_second_process_is_refused_with_who_holds_it_and_nothing_changes(tmp_path: Path, lang: str) -> None:
    run_dir = tmp_path / "runs"
    with LockHolder(run_dir, "terminal", "干活") as held:
        before = snapshot(tmp_path)
        with pytest.raises(RunLocked) as caught:
            runlock.acquire(run_dir, front_end="notebook", lang=lang)
        assert snapshot(tmp_path) == before
    exc = caught.value
    assert (exc.pid, exc.host, exc.step, exc.front_end) == (held.pid, socket.gethostname(), "干活", "terminal")
    assert exc.path == run_dir.resolve() / "run.lock"
    message = str(exc)
    assert "\n" not in message
    step = step_name("干活", lang)  # the step it holds the run dir in, as a person reads it
    assert str(held.pid) in message and step in message and exc.since.replace("T", " ") in message
    assert f"kill {held.pid}" in message
    assert ("Ctrl-C" in message) and (("终端" in message) if lang == "zh" else ("terminal" in message))
    assert message == run_locked_line(
        exc.path, pid=held.pid, host=exc.host, since=exc.since, step="干活", front_end="terminal", lang=lang
    )


def test_the_refusal_says_how_to_stop_each_front_end() -> None:
    lines = {
        (front, lang): run_locked_line(
            Path("/w/runs/run.lock"),
            pid=7,
            host="h",
            since="2026-01-01T10:00:00+08:00",
            step="",
            front_end=front,
            lang=lang,
        )
        for front in runlock.FRONT_ENDS
        for lang in ("zh", "en")
    }
    assert "中断内核" in lines["notebook", "zh"] and "interrupt that notebook's kernel" in lines["notebook", "en"]
    assert "Ctrl-C" in lines["terminal", "zh"] and "Ctrl-C in that terminal" in lines["terminal", "en"]
    assert "停掉那个脚本" in lines["api", "zh"] and "stop that script" in lines["api", "en"]
    assert all("kill 7" in line and "/w/runs" in line for line in lines.values())
    assert "还没开始" in lines["api", "zh"] and "(starting)" in lines["api", "en"]


def test_kill_minus_nine_frees_the_lock_at_once(tmp_path: Path) -> None:
    """No stale lock: the OS drops it with the process. Its child (a Claude Code CLI that outlives
    it) does not inherit the lock either."""
    run_dir = tmp_path / "runs"
    with LockHolder(run_dir, with_child=True) as held:
        assert held.child is not None
        os.kill(held.pid, signal.SIGKILL)
        held.proc.wait(timeout=30)
        os.kill(held.child, 0)  # the child is still alive ...
        assert runlock.holder(run_dir) is None  # ... the dead holder's record is not taken for a holder
        with runlock.acquire(run_dir, front_end="terminal"):  # ... and the lock is free, now, without waiting
            found = runlock.holder(run_dir)
            assert found is not None and found.pid == os.getpid()


def test_only_a_holder_that_died_is_reported_as_having_died(tmp_path: Path) -> None:
    """Issue 12: a normal exit was described to the model as a kill. ``died_before`` names the previous
    holder only when it ended without releasing the lock (kill -9 here), never after a clean release."""
    run_dir = tmp_path / "runs"
    with LockHolder(run_dir, "notebook", "确认需求") as held:
        held.release()
    with runlock.acquire(run_dir, front_end="terminal"):
        assert runlock.died_before(run_dir) is None
    with LockHolder(run_dir, "notebook", "确认需求") as held:
        os.kill(held.pid, signal.SIGKILL)
        held.proc.wait(timeout=30)
    with runlock.acquire(run_dir, front_end="terminal"):
        found = runlock.died_before(run_dir)
        assert found is not None and (found.pid, found.step, found.front_end) == (held.pid, "确认需求", "notebook")
        with runlock.acquire(run_dir, front_end="api", join=True):  # a workflow joining sees the same
            assert runlock.died_before(run_dir) == found
    assert runlock.died_before(run_dir) is None  # not held here any more
    with runlock.acquire(run_dir, front_end="terminal"):  # the dead holder's record was replaced, then emptied
        assert runlock.died_before(run_dir) is None


def test_reentry_in_one_process(tmp_path: Path) -> None:
    """A front end's hold is exclusive (a second %flower in the same kernel is refused); a workflow
    joins it (no deadlock); the process lets go only when the last hold is released."""
    run_dir = tmp_path / "runs"
    outer = runlock.acquire(run_dir, front_end="notebook")
    try:
        with pytest.raises(RunLocked) as caught:
            runlock.acquire(run_dir, front_end="notebook")
        assert caught.value.pid == os.getpid()
        inner = runlock.acquire(run_dir, front_end="api", join=True)
        inner.note_step("干活")
        inner.release()
        inner.release()  # a second release of one hold does nothing
        assert runlock.held_here(run_dir)
        assert other_process_tries(run_dir) == f"REFUSED {os.getpid()} 干活"
    finally:
        outer.release()
    assert not runlock.held_here(run_dir)
    assert other_process_tries(run_dir) == "GOT"


def test_a_torn_record_is_never_read_as_a_holder(tmp_path: Path) -> None:
    """A reader that catches a rewrite half-done (the new record's start over the old one's end)
    gets the old record, the new one, or None: never a mix such as a step nobody ran."""
    run_dir = tmp_path / "runs"
    seen = set()
    with LockHolder(run_dir) as held:  # a record is read only while the lock is held
        me, host = held.pid, socket.gethostname()
        old = runlock._encode(runlock.Holder(me, host, "2026-01-01T10:00:00+08:00", "确认需求", "terminal"))
        new = runlock._encode(runlock.Holder(me, host, "2026-01-01T10:00:00+08:00", "设定目标", "terminal"))
        assert len(old) == len(new)
        for cut in range(len(new) + 1):
            (run_dir / "run.lock").write_bytes(new[:cut] + old[cut:])
            found = runlock.holder(run_dir)
            assert found is None or found.step in ("确认需求", "设定目标"), (cut, found)
            seen.add(found.step if found else None)
            (run_dir / "run.lock").write_bytes(new[:cut])
            assert runlock.holder(run_dir) in (None, runlock._decode(new))
    assert seen == {"确认需求", "设定目标", None}


def test_readers_never_create_anything(tmp_path: Path) -> None:
    assert runlock.holder(tmp_path / "runs") is None
    assert not runlock.held(tmp_path / "runs")
    assert not runlock.held_here(tmp_path / "runs")
    runlock.note_step(tmp_path / "runs", "干活")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "runs").mkdir()
    assert not runlock.held(tmp_path / "runs") and runlock.holder(tmp_path / "runs") is None
    assert list((tmp_path / "runs").iterdir()) == []  # the try opens run.lock only if it is there


# -- whether it is held: tried, not read (issue 23, build 5) ----------------------------------------


@pytest.mark.parametrize("who", ["stranger", "init", "this test"])
def test_a_killed_holders_record_naming_a_live_process_is_no_holder(tmp_path: Path, who: str) -> None:
    """Guards: after ``kill -9`` the record stays, and once its pid names another live process (pid
    reuse), or a record is forged with a live pid (1, the reader's own), it was taken for a holder:
    ``flower --attach`` followed forever, ``--stop`` claimed success. The lock is tried instead; the
    try changes nothing in the file and leaves the lock free for the next start."""
    run_dir = tmp_path / "runs"
    with LockHolder(run_dir, "background", "干活") as held:
        os.kill(held.pid, signal.SIGKILL)
        held.proc.wait(timeout=30)
    with Stranger() as stranger:
        pid = {"stranger": stranger.pid, "init": 1, "this test": os.getpid()}[who]
        plant_holder(run_dir, pid)
        lock = run_dir / "run.lock"
        record, st = lock.read_bytes(), lock.stat()
        assert runlock._decode(record) is not None and runlock._decode(record).pid == pid  # type: ignore[union-attr]
        assert is_alive(pid)  # a record and a live pid: what was believed before
        assert not runlock.held(run_dir)
        assert runlock.holder(run_dir) is None
        assert runlock.holder(run_dir, attempts=3) is None
        after = lock.stat()
        assert lock.read_bytes() == record and (after.st_ino, after.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
        assert other_process_tries(run_dir) == "GOT"


def test_trying_the_lock_disturbs_no_holder_and_writes_nothing(tmp_path: Path) -> None:
    """Every look at a held lock says held, names the holder, and leaves the holder holding and its
    record as it was; a ``run.lock`` that is a link is not tried (nor is its target touched)."""
    run_dir = tmp_path / "runs"
    with LockHolder(run_dir, "terminal", "干活") as held:
        lock = run_dir / "run.lock"
        record, st = lock.read_bytes(), lock.stat()
        for _ in range(300):
            assert runlock.held(run_dir)
        found = runlock.holder(run_dir)
        assert found is not None and (found.pid, found.step) == (held.pid, "干活")
        assert other_process_tries(run_dir) == f"REFUSED {held.pid} 干活"
        after = lock.stat()
        assert lock.read_bytes() == record and (after.st_ino, after.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
    assert not runlock.held(run_dir)
    elsewhere = tmp_path / "elsewhere"
    with LockHolder(elsewhere, "terminal", "干活"):
        (run_dir / "run.lock").unlink()
        (run_dir / "run.lock").symlink_to(elsewhere / "run.lock")
        target = (elsewhere / "run.lock").read_bytes()
        assert not runlock.held(run_dir) and runlock.holder(run_dir) is None
        assert (elsewhere / "run.lock").read_bytes() == target


@pytest.fixture
def read_only_view(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """``(folder, view)``: a folder and a read-only bind mount of it (skipped where mounting is not allowed)."""
    folder, view = tmp_path / "rw", tmp_path / "ro"
    folder.mkdir()
    view.mkdir()
    done = subprocess.run(["mount", "--bind", str(folder), str(view)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {done.stderr.decode(errors='replace').strip()}")
    try:
        ro = subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], capture_output=True)
        if ro.returncode != 0:
            pytest.skip(f"cannot make a bind mount read-only here: {ro.stderr.decode(errors='replace').strip()}")
        yield folder, view
    finally:
        subprocess.run(["umount", "-l", str(view)], capture_output=True)


def test_a_reader_that_may_only_read_the_run_dir_knows_whether_it_is_held(
    read_only_view: tuple[Path, Path],
) -> None:
    """A panel or ``--status`` whose view of the run dir is read-only (here: a read-only mount of it;
    the tests run as root, whom file modes do not stop) still tries the lock."""
    folder, view = read_only_view
    with LockHolder(folder / "runs", "background", "干活") as held:
        with pytest.raises(OSError):
            os.open(view / "runs" / "run.lock", os.O_RDWR)  # the view really is read-only
        assert runlock.held(view / "runs")
        found = runlock.holder(view / "runs")
        assert found is not None and found.pid == held.pid
        os.kill(held.pid, signal.SIGKILL)
        held.proc.wait(timeout=30)
    with Stranger() as stranger:
        plant_holder(folder / "runs", stranger.pid)
        assert not runlock.held(view / "runs") and runlock.holder(view / "runs") is None


# Tries the lock of argv[1] in a loop, as fast as it can, until stdin closes; says LOOKING first.
LOOKER = """
import sys, threading
from flower_magic.core import runlock
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
print("LOOKING", flush=True)
n = 0
while not done.is_set():
    runlock.held(sys.argv[1])
    n += 1
print(n, flush=True)
"""


def test_a_start_is_not_refused_while_readers_try_the_lock(tmp_path: Path) -> None:
    """A look holds the lock (shared) for a few microseconds; a start that meets one tries again
    instead of refusing with no holder to name. Here two readers look without pause."""
    run_dir = tmp_path / "runs"
    run_dir.mkdir()
    (run_dir / "run.lock").write_bytes(b"")
    lookers = [
        subprocess.Popen(
            [sys.executable, "-c", LOOKER, str(run_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        for looker in lookers:
            assert looker.stdout is not None and looker.stdout.readline().strip() == "LOOKING"
        for _ in range(2000):  # without the second try, about 1 in 200 of these was refused
            runlock.acquire(run_dir, front_end="terminal").release()
    finally:
        looks = []
        for looker in lookers:
            assert looker.stdin is not None and looker.stdout is not None
            looker.stdin.close()
            looks.append(int(looker.stdout.read().strip() or 0))
            looker.stdout.close()
            looker.wait(timeout=30)
    assert min(looks) > 2000  # they really looked all along


# A reader descheduled in the middle of its look: holds the shared lock 30 ms, then lets go and ends.
SLOW_LOOK = """
import os, sys, time
from flower_magic.core import oslock
fd = os.open(sys.argv[1], os.O_RDONLY)
assert oslock.try_lock(fd, shared=True)
print("LOOKING", flush=True)
time.sleep(0.03)
oslock.unlock(fd)
"""


def test_a_start_outwaits_a_reader_caught_in_the_middle_of_its_look(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs"
    run_dir.mkdir()
    (run_dir / "run.lock").write_bytes(b"")
    with subprocess.Popen([sys.executable, "-c", SLOW_LOOK, str(run_dir / "run.lock")], stdout=subprocess.PIPE) as look:
        assert look.stdout is not None and look.stdout.readline().strip() == b"LOOKING"
        with runlock.acquire(run_dir, front_end="terminal"):
            assert runlock.holder(run_dir) is not None


# -- the Python API ---------------------------------------------------------------------------------

API_CHILD = """
    import asyncio, sys
    from flower_magic import AgentSpec, Runtime, Step, Workflow

    def sink(ev):
        if ev.kind == "system" and ev.text == "init":
            print("STARTED", flush=True)

    async def main():
        spec = AgentSpec(name="w", instructions="简短回答。", allowed_tools=[])
        rt = Runtime(workspace=".", run_dir="runs", resilience=False)
        try:
            await Workflow([Step("慢活", spec, "慢慢做。")]).run(rt, on_event=sink)
        finally:
            rt.close()

    asyncio.run(main())
"""

SPEC = AgentSpec(name="w", instructions="简短回答。", allowed_tools=[])


@pytest.mark.slow
def test_two_scripts_using_the_api_cannot_both_drive_one_run_dir(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], child_env: dict[str, str], workspace: Path
) -> None:
    fake_api.add(text("慢慢做完了", delay_s=600))
    script = write_script(workspace / "child.py", API_CHILD)
    with subprocess.Popen(
        [sys.executable, str(script)], cwd=workspace, env=child_env, stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "STARTED"
            fake_api.wait_for_requests(1, timeout=60)  # the first script's model is at work
            rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False)
            lineage = (workspace / "runs" / "lineage.json").read_bytes()
            try:
                with pytest.raises(RunLocked) as caught:
                    asyncio.run(Workflow([Step("慢活", SPEC, "也来做。")]).run(rt))
            finally:
                rt.close()
            # Lineage not bumped, no manifest row (sessions.db is the first script's, still being written).
            assert (workspace / "runs" / "lineage.json").read_bytes() == lineage
            assert not (workspace / "runs" / "manifest.json").exists()
            assert (caught.value.pid, caught.value.front_end, caught.value.step) == (child.pid, "api", "慢活")
            assert len(fake_api.requests) == 1  # the second never reached the API
        finally:
            child.kill()


@pytest.mark.slow
def test_the_record_names_the_step_the_model_is_working_on(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """Workflow.run takes the lock itself (front end "api") and the record follows every step."""
    run_dir = workspace / "runs"
    seen: list[Any] = []

    def answer(request: Request) -> Any:
        seen.append(runlock.holder(run_dir))
        return text("好")

    fake_api.default = answer
    wf = Workflow([Step("调研", SPEC, "调研一下。"), Step("干活", SPEC, "干活。")])
    rt = Runtime(workspace=workspace, run_dir=run_dir, resilience=False)
    try:
        asyncio.run(wf.run(rt))
    finally:
        rt.close()
    assert [(h.pid, h.front_end, h.step) for h in seen] == [(os.getpid(), "api", "调研"), (os.getpid(), "api", "干活")]
    assert not runlock.held_here(run_dir) and runlock.holder(run_dir) is None


# -- the flower command -----------------------------------------------------------------------------

BRIEF = "## 目标\n写个脚本\n\n## 验收标准\n- 能跑\n\n## 边界\n不做 GUI\n\n## 未知与假设\n- 无"


def test_flower_on_a_held_directory_says_who_and_touches_nothing(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """A wake phrase (appended to 需求.md by build) and --new (archives) are both refused before
    they write: the directory stays byte-identical."""
    notes = workspace / ".flower" / "notes"
    notes.mkdir(parents=True)
    (notes / "需求.md").write_text(BRIEF, encoding="utf-8")
    with LockHolder(workspace / "runs", "notebook", "干活") as held:
        before = snapshot(workspace)
        for args in (["顺便支持 Y"], ["--new", "另一件事"], ["--lang", "en", "x"]):
            done = subprocess.run(
                ["flower", *args], cwd=workspace, env=child_env, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 1, done
            assert done.stdout == ""
            (line,) = done.stderr.splitlines()
            assert f"kill {held.pid}" in line and step_name("干活", "en" if "en" in args else "zh") in line
            assert ("interrupt that notebook's kernel" if "en" in args else "中断内核") in line
            assert snapshot(workspace) == before, args
    assert fake_api.requests == []


# -- acceptance d: two flower processes start on one directory at the same moment -------------------

TRIALS = 20
# Each process imports everything first, then waits for one byte on stdin: the two are let go
# together, so they reach the lock within microseconds of each other.
AT_THE_BARRIER = "import os, sys; from flower_magic.cli import main; os.read(0, 1); sys.exit(main(sys.argv[1:]))"
REFUSED_ZH = re.compile(
    r"^(?P<dir>\S+) 正被另一个 flower 使用:进程 (?P<pid>\d+)\(终端,[^)]+\),"
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\S* 起,当前步骤「(确认需求|还没开始)」。"
    r"等它跑完,或者停掉它:在那个终端按 Ctrl-C,或 kill (?P=pid)。$"
)


def _chain_is_whole(entries: list[dict[str, Any]]) -> bool:
    seen: set[str] = set()
    for entry in entries:
        parent = entry.get("parentUuid")
        if parent is not None and parent not in seen:
            return False
        if entry.get("uuid"):
            seen.add(entry["uuid"])
    return True


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_flowers_at_the_same_moment_exactly_one_runs(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    # Slow enough that the winner is still running when the loser reaches the lock.
    fake_api.add(as_role("clarifier", text(BRIEF, delay_s=1.0, times=None)))
    run_dir = workspace / "runs"
    winners: list[int] = []
    for trial in range(1, TRIALS + 1):
        task = f"任务 {trial}"
        argv = [sys.executable, "-c", AT_THE_BARRIER, "--new", "--clarify-only", task]
        logs = [workspace.parent / f"trial{trial}-{n}.{kind}" for n in range(2) for kind in ("out", "err")]
        files = [path.open("wb") for path in logs]
        procs = [
            subprocess.Popen(argv, cwd=workspace, env=child_env, stdin=subprocess.PIPE, stdout=out, stderr=err)
            for out, err in (files[0:2], files[2:4])
        ]
        try:
            for p in procs:
                assert p.stdin is not None
                p.stdin.write(b"x")
                p.stdin.flush()
            for p in procs:
                assert p.stdin is not None
                p.stdin.close()
            for p in procs:
                p.wait(timeout=180)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            for f in files:
                f.close()
        outs = [(logs[0].read_bytes(), logs[1].read_bytes()), (logs[2].read_bytes(), logs[3].read_bytes())]
        rcs = [p.returncode for p in procs]
        assert sorted(rcs) == [0, 1], (trial, rcs, outs)
        win, lose = (0, 1) if rcs[0] == 0 else (1, 0)
        winners.append(win)
        out, err = (o.decode() for o in outs[lose])
        assert out == "", (trial, out)
        (line,) = err.splitlines()  # one line, and nothing else
        m = REFUSED_ZH.match(line)
        assert m, (trial, line)
        assert int(m["pid"]) == procs[win].pid and m["dir"] == short_path(run_dir.resolve(), workspace.resolve())
        assert "Traceback" not in outs[win][1].decode()

        # No manifest row lost: one per winner so far, each from its own run.
        rows = manifest.read_rows(run_dir)
        assert [r["step"] for r in rows] == ["确认需求"] * trial
        assert all(r["ok"] for r in rows) and len({r["run"] for r in rows}) == trial
        # Losers never archived; the first winner's --new found nothing to set aside (a fresh folder).
        archive = workspace / ".flower" / "notes" / "archive"
        assert len(list(archive.iterdir()) if archive.exists() else []) == trial - 1
        assert len(fake_api.requests) == trial  # losers never reached the API
        # The sessions.db chain is intact.
        sid = json.loads((run_dir / "lineage.json").read_text(encoding="utf-8"))["steps"]["确认需求"]
        conn = sqlite3.connect(run_dir / "sessions.db")
        try:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        finally:
            conn.close()
        store = SqliteSessionStore(run_dir / "sessions.db", readonly=True)
        try:
            entries = store.load_sync({"project_key": project_key(workspace), "session_id": sid}) or []
        finally:
            store.close()
        said = [e for e in entries if e.get("type") in ("user", "assistant")]
        assert task in json.dumps(said[0], ensure_ascii=False) and "写个脚本" in json.dumps(
            said[-1], ensure_ascii=False
        )
        assert _chain_is_whole(entries), trial
        wait_until(lambda: runlock.holder(run_dir) is None, "the winner letting go of the lock")
    # Both sides won some: the race was a race, not an order.
    print(f"winners by launch order: first {winners.count(0)}, second {winners.count(1)}")
