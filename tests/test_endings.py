"""The endings matrix (issue 23, acceptance b and d): each front end (``flower`` in a terminal, the
background runner of ``flower --detach``, a kernel's ``%flower``) ended each way a person meets, with the
real processes, the real Claude Code CLI and the scripted fake API.

After each ending the same things must agree (``agree``): the event log has one ``end`` record saying
that ending (or none, for ``kill -9``, which ``--status`` and the next start find), ``live.json`` never
says a gone process runs, every step attempt has one manifest row, the front end and ``flower --status``
say the ending's headline and how to continue in the same words (``front.outcome``), and the next plain
start continues the same session.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest

from flower_magic.core import live, manifest
from flower_magic.core.brief import Brief
from flower_magic.core.goal import Goal
from flower_magic.core.lineage import Lineage
from flower_magic.front.outcome import Ending, Outcome
from flower_magic.testing import FakeAnthropic, hang, text, tool_use
from flower_magic.testing.roles import as_role, role_of
from tests.helpers import stored_session, wait_until
from tests.pg import PgServer

pytestmark = pytest.mark.slow

LANG = "en"
BRIEF = """Here it is.

## 目标
Write hello.py.

## 验收标准
- python hello.py prints hello

## 边界
Nothing else.

## 未知与假设
Prints to stdout (the person chose).
"""
GOAL = "## 目标\nhello.py prints hello\n\n## 判定清单\n- python hello.py prints hello\n"
ACHIEVED = "## 结论\n达成\n\n## 理由\nChecked.\n\n## 未通过\n(无)\n"
NOT_YET = "## 结论\n未达成\n\n## 理由\nNot written yet.\n\n## 未通过\n- python hello.py prints hello\n"
QUESTION = "Where should it print?"
WORK, CLARIFY = "干活", "确认需求"


@pytest.fixture
def env(child_env: dict[str, str]) -> dict[str, str]:
    return dict(child_env, FLOWER_LANG=LANG)


@pytest.fixture
def ws(workspace: Path) -> Path:
    return workspace


def _waking(ws: Path) -> None:
    notes = ws / ".flower" / "notes"
    notes.mkdir(parents=True, exist_ok=True)
    Brief.parse(BRIEF).write(notes / "需求.md")
    Goal.parse(GOAL).write(notes / "目标.md")


def _flower(ws: Path, env: dict[str, str], *args: str, stdin: Any = subprocess.DEVNULL) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["flower", *args], cwd=ws, env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _done(proc: subprocess.Popen[str], timeout: float = 180) -> tuple[int, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out + err


def _ends(ws: Path) -> list[str]:
    return [str(r.get("ending")) for r in live.read_log(ws / "runs") if r["type"] == "end"]


def _running(fake_api: FakeAnthropic, role: str, n: int = 1) -> None:
    """Wait until ``n`` requests of ``role`` have reached the API (its step is running)."""
    wait_until(lambda: sum(role_of(r) == role for r in fake_api.requests) >= n, f"a {role} request")


def agree(ws: Path, env: dict[str, str], ending: Ending, step: str, said: str, cmd: str) -> None:
    """Every view tells ``ending`` at ``step`` the same way (see the module docstring)."""
    runs = ws / "runs"
    told = Outcome(ending, step=step)
    wait_until(lambda: not (live.live_state(runs) or live.LiveState()).live, "the run to be over")
    if ending is Ending.KILLED:
        assert _ends(ws) == []  # nobody could write it: --status and the next start find it
    else:
        assert _ends(ws) == [ending.value]
        state = json.loads((runs / "live.json").read_text(encoding="utf-8"))["state"]
        assert state == live.ENDED
    rows = manifest.read_rows(runs)
    assert len({(r["run"], r["step"], r["started_at"]) for r in rows}) == len(rows), rows
    assert told.headline(LANG) in said, said
    assert told.next_step(LANG, cmd) in said, said
    status = _status(ws, env)
    assert told.headline(LANG) in status and told.next_step(LANG, "flower") in status, status


def _status(ws: Path, env: dict[str, str]) -> str:
    """What ``flower --status`` says in this terminal (how to continue as ``flower``)."""
    return subprocess.run(["flower", "--status"], cwd=ws, env=env, capture_output=True, text=True, timeout=60).stdout


def continues(ws: Path, env: dict[str, str], fake_api: FakeAnthropic, step: str) -> None:
    """The next plain ``flower`` ends well and keeps ``step``'s session (the same conversation)."""
    before = Lineage.open(ws / "runs", ws).steps.get(step)
    fake_api.add(
        as_role("clarifier", text(BRIEF, times=None)),
        as_role("goal", text(GOAL, times=None)),
        as_role("worker", text("Done it.", times=None)),
        as_role("judge", text(ACHIEVED, times=None)),
    )
    rc, said = _done(_flower(ws, env, "--rounds", "1"))
    assert rc == 0, said
    assert _ends(ws) == [Ending.DONE.value]
    if before is not None:
        assert Lineage.open(ws / "runs", ws).steps.get(step) == before


# -- the terminal --------------------------------------------------------------------------------------


def test_terminal_done_and_not_reached(ws: Path, env: dict[str, str], fake_api: FakeAnthropic) -> None:
    _waking(ws)
    fake_api.add(as_role("worker", text("Half of it.")), as_role("judge", text(NOT_YET)))
    rc, said = _done(_flower(ws, env, "--rounds", "1"))
    assert rc == 1
    agree(ws, env, Ending.NOT_REACHED, WORK, said, "flower")
    continues(ws, env, fake_api, WORK)


@pytest.mark.parametrize(
    ("how", "ending"),
    [
        ("stop", Ending.STOPPED),
        ("term", Ending.SIGNALLED),
        ("hup", Ending.SIGNALLED),
        ("int", Ending.INTERRUPTED),
        ("kill", Ending.KILLED),
    ],
)
def test_terminal_ended_mid_step(
    ws: Path, env: dict[str, str], fake_api: FakeAnthropic, how: str, ending: Ending
) -> None:
    _waking(ws)
    fake_api.add(as_role("worker", hang(120)))
    proc = _flower(ws, env, "--rounds", "1")
    _running(fake_api, "worker")
    wait_until(lambda: (live.live_state(ws / "runs") or live.LiveState()).live, "the run to be live")
    sig = {"term": signal.SIGTERM, "hup": signal.SIGHUP, "int": signal.SIGINT, "kill": signal.SIGKILL}.get(how, 0)
    if how == "stop":
        stopped = subprocess.run(["flower", "--stop"], cwd=ws, env=env, capture_output=True, text=True, timeout=60)
        assert stopped.returncode == 0, stopped
    else:
        os.kill(proc.pid, sig)
    rc, said = _done(proc)
    assert rc == (-signal.SIGKILL if how == "kill" else 130 if how == "int" else -sig if how in ("term", "hup") else 1)
    if how in ("kill", "term", "hup"):  # ended by a signal: its own terminal said nothing more
        said = _status(ws, env)
    agree(ws, env, ending, WORK, said, "flower")
    continues(ws, env, fake_api, WORK)
    if how == "kill":  # the next start found the kill and wrote what the killed run could not
        rows = manifest.read_rows(ws / "runs")
        assert next(r["error"] for r in rows if r["step"] == WORK) == "killed-by-signal"


def test_terminal_store_lost_mid_run(
    ws: Path, env: dict[str, str], fake_api: FakeAnthropic, own_pg: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's sessions live in PostgreSQL, which goes away while the worker answers and comes back
    before the judge. The run goes on (the CLI keeps its own copy of every line), says the store could
    not be used (naming it without its password), and ends once, with the ending that happened, the
    same in every view; the next start continues the same session, and the store holds what was said
    while it was away."""
    url = own_pg.fresh_url()
    env = dict(env, FLOWER_SESSIONS=url)
    monkeypatch.setenv("FLOWER_SESSIONS", url)  # this process reads the store too (its password)
    _waking(ws)
    gate = threading.Event()
    fake_api.add(as_role("worker", text("Half of it.", hold=gate)), as_role("judge", text(ACHIEVED)))
    proc = _flower(ws, env, "--rounds", "1")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    _running(fake_api, "worker")
    own_pg.halt()
    gate.set()
    lost = f"session store postgresql://flower@127.0.0.1:{own_pg.port}/"
    wait_until(lambda: any(lost in line for line in list(lines)), "the run to say the store is lost", give_up_s=120)
    own_pg.resume()
    rc = proc.wait(timeout=300)
    reader.join(timeout=30)
    with proc.stdout or nullcontext(), proc.stderr or nullcontext():
        said = "".join(lines) + (proc.stderr.read() if proc.stderr else "")
    assert rc == 0, said
    assert own_pg.password not in said
    agree(ws, env, Ending.DONE, "", said, "flower")
    work = Lineage.open(ws / "runs", ws).steps[WORK]
    continues(ws, env, fake_api, WORK)
    held = json.dumps(stored_session(ws / "runs", work, ws) or [], ensure_ascii=False)
    assert "Half of it." in held, "the store never received what it missed"


# -- the background runner ------------------------------------------------------------------------------


def _runner_pid(ws: Path) -> int:
    state = live.live_state(ws / "runs")
    assert state is not None and state.live
    return state.pid


@pytest.mark.parametrize(
    ("how", "ending"),
    [
        ("done", Ending.DONE),
        ("stop", Ending.STOPPED),
        ("panel", Ending.STOPPED),
        ("term", Ending.SIGNALLED),
        ("kill", Ending.KILLED),
    ],
)
def test_background_runner_endings(
    ws: Path, env: dict[str, str], fake_api: FakeAnthropic, how: str, ending: Ending
) -> None:
    """Stops come with a question open (the clarifier waits for an answer nobody gives)."""
    if how == "done":
        fake_api.add(
            as_role("clarifier", text(BRIEF)),
            as_role("goal", text(GOAL)),
            as_role("worker", text("Done.")),
            as_role("judge", text(ACHIEVED)),
        )
    else:
        fake_api.add(as_role("clarifier", tool_use("mcp__human__ask", {"question": QUESTION, "options": ["a", "b"]})))
    rc, said = _done(_flower(ws, env, "--detach", "--rounds", "1", "write hello.py"))
    assert rc == 0, said
    step = "" if how == "done" else CLARIFY
    if how != "done":
        wait_until(lambda: (live.live_state(ws / "runs") or live.LiveState()).asks, "the question to wait")
        pid = _runner_pid(ws)
        if how == "stop":
            assert subprocess.run(["flower", "--stop"], cwd=ws, env=env, timeout=60).returncode == 0
        elif how == "panel":
            live.post(ws / "runs", "stop", source="panel")  # what the panel's POST writes
        else:
            os.kill(pid, signal.SIGTERM if how == "term" else signal.SIGKILL)
    wait_until(lambda: not (live.live_state(ws / "runs") or live.LiveState()).live, "the runner to end", give_up_s=120)
    agree(ws, env, ending, step, _status(ws, env), "flower")
    if how != "done":
        continues(ws, env, fake_api, CLARIFY)


# -- a kernel ---------------------------------------------------------------------------------------------


@pytest.fixture
def kernels(ws: Path, env: dict[str, str]) -> Iterator[list[Any]]:
    from tests.e2e.kernel import Kernel

    started: list[Any] = []

    def start() -> Any:
        k = Kernel(ws, env)
        started.append(k)
        return k

    yield [start]
    for k in started:
        k.close()


def _asking_kernel(start: Any, ws: Path, fake_api: FakeAnthropic) -> Any:
    """A kernel whose ``%flower`` waits on the clarifier's question (an input() nobody answers)."""
    fake_api.add(as_role("clarifier", tool_use("mcp__human__ask", {"question": QUESTION, "options": ["a", "b"]})))
    k = start()
    k.run("%load_ext flower_magic")
    k.kc.execute('%flower --rounds 1 "write hello.py"', allow_stdin=True)
    wait_until(lambda: (live.live_state(ws / "runs") or live.LiveState()).asks, "the question to wait")
    return k


def test_kernel_interrupted_with_a_question_open(
    ws: Path, env: dict[str, str], fake_api: FakeAnthropic, kernels: list[Any]
) -> None:
    """Acceptance e: the kernel's ■ while the agent waits: the cell's header says interrupted (not a
    green done) and the line to continue, in the same words as ``--status``."""
    (start,) = kernels
    fake_api.add(as_role("clarifier", tool_use("mcp__human__ask", {"question": QUESTION, "options": ["a", "b"]})))
    k = start()
    k.run("%load_ext flower_magic")
    cell: dict[str, bool] = {}

    def interrupt_once(res: Any) -> None:
        if not cell and (live.live_state(ws / "runs") or live.LiveState()).asks:  # the question card is up
            cell["asked"] = True
            k.interrupt()

    res = k.run('%flower --rounds 1 "write hello.py"', answer=lambda prompt: "", on_output=interrupt_once)
    assert cell
    told = Outcome(Ending.INTERRUPTED, step=CLARIFY)
    final = res.displays[-1]
    assert say_pill(Ending.INTERRUPTED) in final["text/html"] and 'data-status="stopped"' in final["text/html"]
    agree(ws, env, Ending.INTERRUPTED, CLARIFY, res.text, "%flower")
    assert told.next_step(LANG, "%flower") in final["text/plain"]
    continues(ws, env, fake_api, CLARIFY)


def say_pill(ending: Ending) -> str:
    from flower_magic.core.words import say

    return say(f"pill_{ending.value}", LANG)


def test_four_kernels_shut_down_with_a_question_open(
    tmp_path: Path, env: dict[str, str], fake_api: FakeAnthropic
) -> None:
    """Acceptance d: what ``DELETE /api/sessions/<id>`` does, four times: one manifest row each, live.json
    ended, and the next ``%flower`` continues the same session (3 of 4 wrote the row twice before)."""
    from tests.e2e.kernel import Kernel

    for i in range(4):
        ws = tmp_path / f"ws{i}"
        ws.mkdir()
        k = Kernel(ws, env)
        try:
            _asking_kernel(lambda k=k: k, ws, fake_api)  # type: ignore[misc]
            rows_before = len(manifest.read_rows(ws / "runs"))
            k.km.shutdown_kernel(now=False)  # a shutdown request: the kernel ends its cell and goes
        finally:
            k.close()
        runs = ws / "runs"
        assert _ends(ws) == [Ending.CLOSED.value], live.read_log(runs)[-3:]
        assert json.loads((runs / "live.json").read_text(encoding="utf-8"))["state"] == live.ENDED
        rows = manifest.read_rows(runs)
        assert rows_before == 0 and [r["step"] for r in rows] == [CLARIFY], rows
        sid = Lineage.open(runs, ws).steps[CLARIFY]
        again = Kernel(ws, env)
        try:
            fake_api.add(as_role("clarifier", text(BRIEF)))
            again.run("%load_ext flower_magic")
            res = again.run('%flower --clarify-only "print to stdout"')
            assert res.status == "ok", res.text
        finally:
            again.close()
        assert Lineage.open(runs, ws).steps[CLARIFY] == sid
        last = [r for r in fake_api.requests if role_of(r) == "clarifier"][-1]
        assert last.headers.get("x-claude-code-session-id") == sid


def test_kernel_killed(ws: Path, env: dict[str, str], fake_api: FakeAnthropic, kernels: list[Any]) -> None:
    (start,) = kernels
    k = _asking_kernel(start, ws, fake_api)
    k.kill()
    time.sleep(0.5)
    agree(ws, env, Ending.KILLED, CLARIFY, _status(ws, env), "flower")
    continues(ws, env, fake_api, CLARIFY)


def test_no_python_front_end_sequences_a_run() -> None:
    """Acceptance a: magics.py, cli.py and runner.py call no starter, runtime builder or live record."""
    root = Path(__file__).parents[1] / "flower_magic"
    banned = ("starter_flow", "apply_start", "plan_start", "Runtime(", "LiveRun(", "make_runtime", "hold_run_dir")
    for name in ("magics.py", "cli.py", "runner.py"):
        source = (root / name).read_text(encoding="utf-8")
        assert [b for b in banned if b in source] == [], name


# -- refusals: nothing written -------------------------------------------------------------------------


def _finished_run(ws: Path, env: dict[str, str], fake_api: FakeAnthropic) -> None:
    fake_api.add(
        as_role("clarifier", text(BRIEF)),
        as_role("goal", text(GOAL)),
        as_role("worker", text("Done.")),
        as_role("judge", text(ACHIEVED)),
    )
    rc, said = _done(_flower(ws, env, "--rounds", "1", "write hello.py"))
    assert rc == 0, said
    assert (ws / ".flower" / "notes" / "需求.md").is_file() and (ws / "runs" / "live.json").is_file()


@pytest.mark.parametrize("case", ["store", "read-only", "flag", "credentials"])
@pytest.mark.parametrize("front", ["flower", "%flower"])
def test_a_refused_start_leaves_a_finished_run_byte_identical(
    tmp_path: Path, env: dict[str, str], fake_api: FakeAnthropic, request: pytest.FixtureRequest, case: str, front: str
) -> None:
    """Acceptance c: a store that cannot be opened (the run's PostgreSQL database gone), a read-only run
    dir, a bad flag, missing credentials — with a finished run in the folder, a start with words is one
    line (exit != 0, or one UsageError) and the folder stays byte-identical, 需求.md and live.json too."""
    from tests.helpers import snapshot

    ws = tmp_path / "ws"
    ws.mkdir()
    if case == "store":
        pg = request.getfixturevalue("pg_server")
        url = pg.fresh_url()
        env = dict(env, FLOWER_SESSIONS=url)
    _finished_run(ws, env, fake_api)
    args = ["also support a config file"]
    mount: Path | None = None
    if case == "store":
        import psycopg

        with psycopg.connect(pg.url(), autocommit=True) as conn:  # the database goes away
            conn.execute(f'DROP DATABASE "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
    elif case == "read-only":
        mount = ws / "runs"
        done = subprocess.run(["mount", "--bind", str(mount), str(mount)], capture_output=True)
        if done.returncode != 0:
            pytest.skip("cannot bind-mount here")
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mount)], check=True)
    elif case == "flag":
        args = ["--rounds", "-1", *args]
    else:
        env = {k: v for k, v in env.items() if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")}
    try:
        if front == "flower":
            before = snapshot(ws)
            rc, said = _done(_flower(ws, env, *args))
            assert rc != 0 and len(said.strip().splitlines()) == 1, said
        else:
            from tests.e2e.kernel import Kernel

            k = Kernel(ws, env)
            try:
                # %load_ext reads what the folder remembers (SQLite may leave its -shm beside the
                # database for a reader): the refused cell is the one after it.
                k.run("%load_ext flower_magic")
                before = snapshot(ws)
                line = " ".join(f'"{a}"' if " " in a else a for a in args)
                res = k.run(f"%flower {line}")
            finally:
                k.close()
            assert res.status == "error" and len(res.errors) == 1, res.text
            assert "Traceback" not in res.text
        assert snapshot(ws) == before
    finally:
        if mount is not None:
            subprocess.run(["umount", str(mount)], check=False)
