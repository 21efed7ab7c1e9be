"""``%flower`` in an in-process IPython shell and the run lock (issue 10, build item 3): a run holds
the run dir until its thread ends; another run on the same directory is one plain ``UsageError``
line and writes nothing; ``--status`` keeps answering while a run holds it. (Real kernels:
tests/e2e.)"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from flower_magic.core import runlock
from flower_magic.core.words import say, short_path, step_name
from flower_magic.front.outcome import Ending, Outcome
from flower_magic.magics import Binding, binding
from flower_magic.testing import FakeAnthropic, Request, text
from flower_magic.testing.roles import role_of
from tests.helpers import LockHolder, other_process_tries, snapshot, wait_until

BRIEF = "## 目标\n写个脚本\n\n## 验收标准\n- 能跑\n\n## 边界\n不做 GUI\n\n## 未知与假设\n- 无"


@pytest.fixture
def shell(workspace: Path, fake_api_env: dict[str, str]) -> Iterator[InteractiveShell]:
    """The shell, with ``%flower`` loaded and bound to ``workspace`` as the notebook's directory."""
    sh = InteractiveShell.instance()
    sh.extension_manager.load_extension("flower_magic")
    sh.user_ns["__vsc_ipynb_file__"] = str(workspace / "notebook.ipynb")
    try:
        yield sh
    finally:
        sh.user_ns.pop("__vsc_ipynb_file__", None)


def _waking(ws: Path) -> None:
    notes = ws / ".flower" / "notes"
    notes.mkdir(parents=True)
    (notes / "需求.md").write_text(BRIEF, encoding="utf-8")


@pytest.mark.parametrize("line", ['"顺便支持 Y"', '--new "另一件事"', '--lang en "x"'])
def test_flower_on_a_held_directory_is_one_usage_error_and_writes_nothing(
    shell: InteractiveShell, workspace: Path, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    """A wake phrase would be appended to 需求.md and --new would archive: refused before either."""
    _waking(workspace)
    with LockHolder(workspace / "runs", "terminal", "干活") as held:
        before = snapshot(workspace)
        capsys.readouterr()
        result = shell.run_cell(f"%flower {line}")
        assert snapshot(workspace) == before
    assert type(result.error_in_exec) is UsageError  # exactly: a subclass would print a traceback
    message = str(result.error_in_exec)
    step = step_name("干活", "en" if "--lang en" in line else "zh")  # the step the holder is in, said
    assert "\n" not in message and f"kill {held.pid}" in message and step in message
    assert ("press Ctrl-C in that terminal" if "--lang en" in line else "在那个终端按 Ctrl-C") in message
    shown = capsys.readouterr()
    assert "Traceback" not in shown.out + shown.err
    assert [ln for ln in (shown.out + shown.err).splitlines() if ln.strip()] == [f"UsageError: {message}"]


def test_status_answers_while_another_run_holds_the_directory(
    shell: InteractiveShell, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _waking(workspace)
    runs = workspace / "runs"
    runs.mkdir()
    row = {"step": "确认需求", "session_id": "s", "ok": True, "cost_usd": 0.5, "run": "20260101-000000-abcdef"}
    (runs / "manifest.json").write_text(json.dumps([row], ensure_ascii=False), encoding="utf-8")
    with LockHolder(runs, "notebook", "干活"):
        capsys.readouterr()
        result = shell.run_cell("%flower --status")
        assert result.error_in_exec is None
        assert "确认需求" in capsys.readouterr().out


@pytest.mark.slow
def test_a_run_holds_the_directory_until_its_thread_ends(
    shell: InteractiveShell, fake_api: FakeAnthropic, workspace: Path
) -> None:
    run_dir = workspace / "runs"
    seen: list[Any] = []

    def answer(request: Request) -> Any:
        # While the model works: who the record names, and whether another process may take the lock.
        seen.append((role_of(request), runlock.holder(run_dir), other_process_tries(run_dir)))
        return text(BRIEF)

    fake_api.default = answer
    result = shell.run_cell('%flower --clarify-only "写个脚本"')
    assert result.error_in_exec is None
    ((role, holder, other),) = seen
    assert role == "clarifier"
    assert holder is not None and (holder.front_end, holder.step) == ("notebook", "确认需求")
    assert other == f"REFUSED {holder.pid} 确认需求"
    # The thread ended: the lock is free again, for this kernel and for anyone else.
    assert not runlock.held_here(run_dir) and runlock.holder(run_dir) is None
    assert other_process_tries(run_dir) == "GOT"


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_no_credentials_is_one_usage_error_that_points_to_the_demo_and_a_silent_key(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], lang: str
) -> None:
    """Issue 12: ``%flower`` without a key did not mention the demo, and the README advised
    ``%env ANTHROPIC_API_KEY=...``, which prints the key into the saved notebook."""
    from flower_magic.core.errors import CLOUD_VARS, CREDENTIAL_VARS

    for key in (*CREDENTIAL_VARS, *CLOUD_VARS):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "no-login"))
    sh = InteractiveShell.instance()
    sh.extension_manager.load_extension("flower_magic")
    monkeypatch.setitem(sh.user_ns, "__vsc_ipynb_file__", str(workspace / "notebook.ipynb"))
    capsys.readouterr()
    result = sh.run_cell(f'%flower --lang {lang} "写个脚本"')
    assert type(result.error_in_exec) is UsageError
    message = str(result.error_in_exec)
    assert "\n" not in message and '%flower --demo "' in message
    assert "getpass.getpass()" in message and "%env" not in message
    assert snapshot(workspace) == {}
    shown = capsys.readouterr()
    assert [ln for ln in (shown.out + shown.err).splitlines() if ln.strip()] == [f"UsageError: {message}"]


# -- where a run happens (issue 12, build item 6) -------------------------------------------------------


def _front_end(start: Path, **ns: str) -> SimpleNamespace:
    """What ``binding`` reads of a shell: its namespace and the folder the kernel started in."""
    return SimpleNamespace(user_ns=dict(ns), starting_dir=str(start))


def test_the_notebook_folder_comes_from_whichever_front_end_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    start, nbdir = tmp_path / "started", tmp_path / "nb dir"
    start.mkdir(), nbdir.mkdir()
    (nbdir / "a.ipynb").write_text("{}", encoding="utf-8")
    (start / "sub").mkdir()
    (start / "sub" / "b.ipynb").write_text("{}", encoding="utf-8")
    # papermill --inject-input-path: absolute, or relative to where papermill started (no --cwd).
    assert binding(_front_end(start, PAPERMILL_INPUT_PATH=str(nbdir / "a.ipynb"))) == Binding(nbdir, "notebook")
    assert binding(_front_end(start, PAPERMILL_INPUT_PATH="sub/b.ipynb")) == Binding(start / "sub", "notebook")
    # Relative to a folder the kernel cannot know (papermill --cwd moved it): not a notebook here.
    assert binding(_front_end(start, PAPERMILL_INPUT_PATH="../elsewhere/c.ipynb")) == Binding(start, "start")
    assert binding(_front_end(start)).is_guess
    vsc = _front_end(start, __vsc_ipynb_file__=str(nbdir / "a.ipynb"), PAPERMILL_INPUT_PATH="sub/b.ipynb")
    assert binding(vsc) == Binding(nbdir, "notebook")
    monkeypatch.setenv("JPY_SESSION_NAME", str(nbdir / "a.ipynb"))
    assert binding(_front_end(start)) == Binding(nbdir, "notebook")
    # A setting wins over every front end; relative = under the kernel's starting folder.
    assert binding(vsc, "sub") == Binding(start / "sub", "setting")
    assert binding(vsc, str(tmp_path)) == Binding(tmp_path, "setting")


@pytest.fixture
def fresh_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    """The shell as a plain kernel started in ``tmp_path/started`` sees it: nobody names the notebook."""
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    sh = InteractiveShell.instance()
    start = tmp_path / "started"
    start.mkdir()
    saved = sh.starting_dir
    sh.starting_dir = str(start)
    for name in ("__vsc_ipynb_file__", "__session__", "PAPERMILL_INPUT_PATH"):
        sh.user_ns.pop(name, None)
    try:
        yield sh
    finally:
        sh.run_line_magic("config", 'FlowerMagics.workspace = ""')
        sh.starting_dir = saved


def test_a_guessed_folder_is_the_first_line_shown_and_said_once(
    fresh_shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 12: under papermill the agent ran in the folder papermill started in, and nothing said so."""
    start = tmp_path / "started"
    _waking(start)
    capsys.readouterr()
    fresh_shell.extension_manager.reload_extension("flower_magic")  # %load_ext in a fresh kernel
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == say("bound_to_start", "zh", folder=short_path(start, start))
    assert say("continue_hint", "zh", cmd="%flower") in lines[1:]  # then the wake banner, as before
    assert fresh_shell.run_cell("%flower --status").error_in_exec is None
    assert say("bound_to_start", "zh", folder=short_path(start, start)) not in capsys.readouterr().out


def test_the_workspace_setting_binds_the_banner_status_and_panel(
    fresh_shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    _waking(chosen)
    fresh_shell.run_line_magic("config", f'FlowerMagics.workspace = "{chosen}"')
    capsys.readouterr()
    fresh_shell.extension_manager.reload_extension("flower_magic")
    loaded = capsys.readouterr().out
    named = say("wake_head", "zh", where="chosen")  # the folder as a person reads it: outside ~, its name
    assert named in loaded and say("bound_to_start", "zh", folder="") not in loaded
    assert fresh_shell.run_cell("%flower --status").error_in_exec is None
    assert named in capsys.readouterr().out
    assert fresh_shell.run_cell("%flower --panel").error_in_exec is None
    assert say("panel_elsewhere", "zh", where="chosen") in capsys.readouterr().out  # the chosen folder
    assert not (tmp_path / "started" / "runs").exists()


@pytest.mark.parametrize("line", ['"x"', "--status", "--panel"])
def test_a_workspace_setting_naming_a_file_is_one_usage_error(
    fresh_shell: InteractiveShell, tmp_path: Path, line: str
) -> None:
    (tmp_path / "a-file").write_text("not a folder", encoding="utf-8")
    fresh_shell.run_line_magic("config", f'FlowerMagics.workspace = "{tmp_path / "a-file"}"')
    before = snapshot(tmp_path)
    result = fresh_shell.run_cell(f"%flower {line}")
    assert type(result.error_in_exec) is UsageError
    assert str(tmp_path / "a-file") in str(result.error_in_exec) and "\n" not in str(result.error_in_exec)
    assert snapshot(tmp_path) == before


def test_panel_outside_jupyterlab_says_where_the_run_can_be_seen(
    fresh_shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 12: in terminal IPython (or VS Code, nbclient) --panel pointed to a palette command that
    does not exist there. It now says the panel is JupyterLab's and how to see the run here."""
    fresh_shell.extension_manager.load_extension("flower_magic")
    capsys.readouterr()
    assert fresh_shell.run_cell("%flower --panel").error_in_exec is None
    out = capsys.readouterr().out
    assert say("panel_elsewhere", "zh", where="started") in out  # outside the home directory: its name
    assert say("lab_command", "zh") not in out


# -- a live run (issue 15): %flower follows it, talks to it, or refuses -------------------------------------


def _live_json(run_dir: Path, pid: int) -> None:
    """What a runner's ``core.live.LiveRun`` writes; live while ``pid`` holds the run lock."""
    state = {"pid": pid, "front_end": "background", "state": "running", "step": "干活"}
    (run_dir / "live.json").write_text(json.dumps(state), encoding="utf-8")


def _one_usage_error(result: Any, capsys: pytest.CaptureFixture[str]) -> str:
    assert type(result.error_in_exec) is UsageError
    message = str(result.error_in_exec)
    shown = capsys.readouterr()
    assert "\n" not in message and "Traceback" not in shown.out + shown.err
    return message


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ('--new "另一件事"', "live_busy_new"),
        ('--stop "停"', "live_stop_alone"),
        ("--stop --bg", "live_stop_alone"),
    ],
)
def test_a_mistake_on_a_live_run_is_one_usage_error_and_writes_nothing(
    shell: InteractiveShell, workspace: Path, capsys: pytest.CaptureFixture[str], line: str, key: str
) -> None:
    _waking(workspace)
    runs = workspace / "runs"
    runs.mkdir()
    with LockHolder(runs, "background", "干活") as held:
        _live_json(runs, held.pid)
        before = snapshot(workspace)
        capsys.readouterr()
        result = shell.run_cell(f"%flower {line}")
        assert snapshot(workspace) == before
    message = _one_usage_error(result, capsys)
    if key == "live_busy_new":
        assert message == say("live_busy_new", "zh", path="runs", stop="%flower --stop")
    else:
        assert message.startswith(say("live_stop_alone", "zh", extra="")[:10])


@pytest.mark.parametrize("left", ["nothing", "dead", "zombie"])
def test_stop_with_no_live_run_is_one_usage_error_and_writes_nothing(
    shell: InteractiveShell, workspace: Path, capsys: pytest.CaptureFixture[str], left: str
) -> None:
    """``dead``: live.json names a process that holds nothing. ``zombie``: the run's process was
    killed with -9 and its parent has not reaped it yet (a kernel under its manager): its pid still
    exists, but it holds no lock, so the run is not live."""
    runs = workspace / "runs"
    if left == "dead":
        runs.mkdir()
        _live_json(runs, 1)
    if left == "zombie":
        with LockHolder(runs, "notebook", "干活") as held:
            _live_json(runs, held.pid)
            os.kill(held.pid, signal.SIGKILL)
            wait_until(
                lambda: Path(f"/proc/{held.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z", "a zombie"
            )
            before = snapshot(workspace)
            capsys.readouterr()
            result = shell.run_cell("%flower --stop")
            assert snapshot(workspace) == before
        assert _one_usage_error(result, capsys) == say("live_no_stop", "zh")
        return
    before = snapshot(workspace)
    capsys.readouterr()
    result = shell.run_cell("%flower --stop")
    assert snapshot(workspace) == before
    assert _one_usage_error(result, capsys) == say("live_no_stop", "zh")  # not "nothing to follow"


def test_bg_is_checked_as_a_foreground_run_is_and_writes_nothing(
    shell: InteractiveShell, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(workspace)
    capsys.readouterr()
    result = shell.run_cell("%flower --bg")  # nothing to do in a fresh folder
    assert snapshot(workspace) == before
    assert _one_usage_error(result, capsys) == say("need_ask", "zh", cmd="%flower")  # the magic's syntax
    # A directory held by a process that is not a live run (no live.json): the runner refuses, as a
    # foreground run would, and the cell says who holds it.
    _waking(workspace)
    with LockHolder(workspace / "runs", "terminal", "干活") as held:
        before = snapshot(workspace)
        capsys.readouterr()
        result = shell.run_cell('%flower --bg "顺便支持 Y"')
        assert snapshot(workspace) == before
    assert f"kill {held.pid}" in _one_usage_error(result, capsys)


def test_stop_and_words_on_a_live_run_go_to_its_inbox(
    shell: InteractiveShell, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import threading

    from flower_magic.core.live import take_inbox

    _waking(workspace)
    runs = workspace / "runs"
    runs.mkdir()
    with LockHolder(runs, "background", "干活") as held:
        _live_json(runs, held.pid)
        capsys.readouterr()
        assert shell.run_cell("%flower --stop").error_in_exec is None
        assert say("live_stop_sent", "zh", cmd="%flower") in capsys.readouterr().out
        assert [(m["op"], m["from"]) for m in take_inbox(runs)] == [("stop", "notebook")]
        assert shell.run_cell('%flower "顺便支持 Y"').error_in_exec is None
        out = capsys.readouterr().out
        assert say("live_remark_sent", "zh") in out and f"{held.pid}" in out  # then it follows the run
        assert [(m["op"], m["text"]) for m in take_inbox(runs)] == [("remark", "顺便支持 Y")]
        held.release()
    for thread in threading.enumerate():  # the following thread sees the runner gone and ends
        if thread.name == "flower-watch":
            thread.join(10)
    # Its process went without an end record: the follower says what the next start will record.
    assert Outcome(Ending.KILLED).headline("zh") in capsys.readouterr().out


def test_load_ext_names_a_live_run_and_the_question_it_waits_on(
    shell: InteractiveShell, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After a kernel restart under a background run waiting for an answer, %load_ext said nothing of
    it (issue 24, 7): it names the run, quotes the question, and says how to follow and answer."""
    _waking(workspace)
    runs = workspace / "runs"
    runs.mkdir()
    with LockHolder(runs, "background", "干活") as held:
        ask = {"id": "q1", "question": "输出到哪里?\x1b[31m", "options": ["stdout"]}
        state = {"pid": held.pid, "front_end": "background", "state": "waiting", "step": "确认需求", "asks": [ask]}
        (runs / "live.json").write_text(json.dumps(state), encoding="utf-8")
        capsys.readouterr()
        shell.run_line_magic("reload_ext", "flower_magic")
        out = capsys.readouterr().out
        front = say("front_background", "zh")
        assert say("load_live_asking", "zh", pid=held.pid, front=front, question="输出到哪里?", n=1) in out
        assert "\x1b" not in out  # the question is text from outside: made printable
        hint = say("continue_hint", "zh", cmd="%flower")
        assert hint not in out  # the banner's hint gives way to the live run's line
        held.release()
    capsys.readouterr()
    shell.run_line_magic("reload_ext", "flower_magic")
    out = capsys.readouterr().out  # nothing runs now: the banner, with its hint, and no live line
    assert say("continue_hint", "zh", cmd="%flower") in out and str(held.pid) not in out


def test_the_sessions_setting_keeps_its_password_aside(
    shell: InteractiveShell, workspace: Path, capsys: pytest.CaptureFixture[str], pg_server: Any, pg_url: str
) -> None:
    """Issue 17 (d): ``%config FlowerMagics`` prints every setting; the store's password is not among
    what it shows, yet the run connects with it. A setting that is no store is one UsageError line
    that shows only its scheme."""
    from flower_magic.core.storage import StoreLocation

    magics = shell.magics_manager.registry["FlowerMagics"]
    try:
        shell.run_cell(f'%config FlowerMagics.sessions = "{pg_url}"')
        shell.run_cell("%config FlowerMagics")
        assert magics.sessions == StoreLocation.parse(pg_url).redacted
        assert StoreLocation.parse(magics._sessions_setting()).password == pg_server.password
        result = shell.run_cell("%flower --status")
        assert result.error_in_exec is None
        shell.run_cell(f'%config FlowerMagics.sessions = "mysql://flower:{pg_server.password}@127.0.0.1/x"')
        refused = shell.run_cell("%flower --status")
        shell.run_cell("%config FlowerMagics")
        assert type(refused.error_in_exec) is UsageError and "mysql://…" in str(refused.error_in_exec)
        shown = capsys.readouterr()
        assert "FlowerMagics.sessions" in shown.out
        assert pg_server.password not in shown.out + shown.err + str(refused.error_in_exec)
    finally:
        magics.sessions = ""
