"""``%flower`` in an in-process IPython shell and the run lock (issue 10, build item 3): a run holds
the run dir until its thread ends; another run on the same directory is one plain ``UsageError``
line and writes nothing; ``--status`` keeps answering while a run holds it. (Real kernels:
tests/e2e.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from flower_magic.core import runlock
from flower_magic.testing import FakeAnthropic, Request, text
from flower_magic.testing.roles import role_of
from tests.helpers import LockHolder, other_process_tries, snapshot

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
    assert "\n" not in message and f"kill {held.pid}" in message and "干活" in message
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
