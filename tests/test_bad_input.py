"""Input no file, prompt or path can hold is one line and writes nothing (issue 22, item 7 and
acceptance e): invalid UTF-8 in a command-line task was a traceback that left ``events.jsonl``,
``live.json`` and ``run.lock`` behind; a NUL in the run dir and a lone surrogate in a ``%%flower`` body
were tracebacks. (The panel's POST: ``tests/test_server.py``.)

Each case runs the real front end: ``flower`` as a process given bytes on its command line (what a
shell passes for ``$'\\xff\\xfe'``), ``%flower`` in a real IPython shell. The workspace is hashed
before and after: byte-identical, and no folder made.

A NUL cannot reach ``flower`` (an OS command line cannot carry one) nor ``FLOWER_SESSIONS``-like
environment variables (``os.environ`` refuses it); it reaches a run dir through a magic's line or
``%config FlowerMagics.run_dir`` / ``.workspace``, which are the cases here.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from flower_magic.core.words import say
from tests.helpers import LockHolder, no_key_env

BRIEF = "## 目标\n写个脚本\n\n## 验收标准\n- 能跑\n\n## 边界\n不做 GUI\n\n## 未知与假设\n- 无\n"
NOT_UTF8 = b"\xff\xfe"


def digest(root: Path) -> str:
    """One hash over every path under ``root`` and every file's bytes (and each link's target)."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(os.fsencode(path.relative_to(root)) + b"\0")
        if path.is_symlink():
            h.update(b"link " + os.fsencode(os.readlink(path)))
        elif path.is_file():
            h.update(hashlib.sha256(path.read_bytes()).digest())
        h.update(b"\0")
    return h.hexdigest()


def waking(ws: Path) -> None:
    """A directory with a run to wake (a confirmed brief and a manifest): words would be appended."""
    notes = ws / ".flower" / "notes"
    notes.mkdir(parents=True)
    (notes / "需求.md").write_text(BRIEF, encoding="utf-8")
    (ws / "runs").mkdir()
    (ws / "runs" / "manifest.json").write_text("[]", encoding="utf-8")


# -- flower ---------------------------------------------------------------------------------------------


def _flower(ws: Path, env: dict[str, str], *argv: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [os.fsencode(sys.executable), b"-m", b"flower_magic.cli", *argv],
        cwd=ws,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
    )


def said(key: str, what: str) -> str:
    """The ``key`` phrase in English about ``what`` (a ``what_*`` phrase), up to where it counts."""
    return say(key, "en", what=say(what, "en"), at="\0").split("\0")[0]


def _one_line(out: subprocess.CompletedProcess[bytes], key: str, what: str) -> None:
    """Exit != 0, nothing on stdout, one line on stderr: the ``key`` phrase about ``what``."""
    err = out.stderr.decode("utf-8")
    assert out.returncode != 0 and out.stdout == b"", (out.returncode, out.stdout, err)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith(f"flower: error: {said(key, what)}"), err


@pytest.mark.parametrize(
    ("argv", "key", "what"),
    [
        ([NOT_UTF8], "opt_not_text", "what_task"),
        ([b"--demo", b"clean " + NOT_UTF8 + b" the csv"], "opt_not_text", "what_task"),
        ([b"--detach", b"--demo", NOT_UTF8], "opt_not_text", "what_task"),
        ([b"--new", NOT_UTF8], "opt_not_text", "what_task"),
        ([b"-r", b"runs-" + NOT_UTF8, b"task"], "opt_path_not_text", "what_run_dir"),
        ([b"--detach", b"--demo", b"-r", b"r" + NOT_UTF8, b"task"], "opt_path_not_text", "what_run_dir"),
        ([b"--status", b"-r", b"r" + NOT_UTF8], "opt_path_not_text", "what_run_dir"),
    ],
)
@pytest.mark.parametrize("wake", [False, True], ids=["fresh", "waking"])
def test_flower_given_what_is_not_text_says_one_line_and_writes_nothing(
    tmp_path: Path, workspace: Path, argv: list[bytes], key: str, what: str, wake: bool
) -> None:
    """Guards ``flower $'\\xff\\xfe'``: a traceback, and events.jsonl, live.json and run.lock left behind."""
    if wake:
        waking(workspace)
    env = no_key_env(tmp_path, "en")
    before = digest(workspace)
    _one_line(_flower(workspace, env, *argv), key, what)
    assert digest(workspace) == before


def test_flower_in_a_folder_whose_name_is_not_utf8_says_one_line(tmp_path: Path, workspace: Path) -> None:
    """Claude Code cannot work in such a folder (it retried and failed), and --detach crashed on it."""
    folder = os.fsencode(workspace) + b"/d" + NOT_UTF8
    os.mkdir(folder)
    env = no_key_env(tmp_path, "en")
    before = digest(workspace)
    for argv in ([b"--demo", b"task"], [b"--detach", b"--demo", b"task"]):
        out = subprocess.run(
            [os.fsencode(sys.executable), b"-m", b"flower_magic.cli", *argv],
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=120,
        )
        _one_line(out, "opt_path_not_text", "what_workspace")
        _one_line(_flower(workspace, env, b"-w", folder, *argv), "opt_path_not_text", "what_workspace")
    assert digest(workspace) == before


def test_words_that_are_not_text_for_a_live_run_are_one_line_and_reach_no_inbox(
    tmp_path: Path, workspace: Path
) -> None:
    """``flower "words"`` on a live run posts a remark: refused before the inbox is touched."""
    runs = workspace / "runs"
    runs.mkdir()
    with LockHolder(runs, "background", "干活") as holder:
        state = {"pid": holder.pid, "front_end": "background", "state": "running", "step": "干活", "asks": []}
        (runs / "live.json").write_text(json.dumps(state, ensure_ascii=False), encoding="utf-8")
        before = digest(workspace)
        _one_line(_flower(workspace, no_key_env(tmp_path, "en"), b"also " + NOT_UTF8), "opt_not_text", "what_task")
        assert digest(workspace) == before and not (runs / "inbox").exists()


# -- %flower ----------------------------------------------------------------------------------------------


@pytest.fixture
def shell(workspace: Path, fake_api_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    """The shell, with ``%flower`` loaded and bound to ``workspace``; its settings put back after."""
    monkeypatch.setenv("FLOWER_LANG", "en")
    sh = InteractiveShell.instance()
    sh.extension_manager.load_extension("flower_magic")
    sh.user_ns["__vsc_ipynb_file__"] = str(workspace / "notebook.ipynb")
    try:
        yield sh
    finally:
        sh.user_ns.pop("__vsc_ipynb_file__", None)
        # Through %config: the shell's config keeps what %config set, for the next %load_ext to read.
        sh.run_line_magic("config", 'FlowerMagics.run_dir = ""')
        sh.run_line_magic("config", 'FlowerMagics.workspace = ""')


MAGIC_CASES = [
    # (cells run first, the cell refused, the phrase it says, about what)
    ([], "%%flower --demo\n\ud800 clean the csv", "opt_not_text", "what_task"),  # JSON "\ud800" in a cell
    ([], "%%flower\nclean \udcff\udcfe the csv", "opt_not_text", "what_task"),
    ([], "%flower --demo 'clean \ud800 the csv'", "opt_not_text", "what_task"),
    ([], "%flower --demo -r 'a\x00b' task", "opt_nul", "what_run_dir"),
    ([], "%flower --status -r 'a\x00b'", "opt_nul", "what_run_dir"),
    (["%config FlowerMagics.run_dir = 'a\\x00b'"], "%flower --demo task", "opt_nul", "what_run_dir"),
    (["%config FlowerMagics.run_dir = 'a\\x00b'"], "%flower --status", "opt_nul", "what_run_dir"),
    (["%config FlowerMagics.workspace = 'a\\x00b'"], "%flower --demo task", "opt_nul", "what_workspace"),
    (["%config FlowerMagics.workspace = 'a\\x00b'"], "%flower --panel", "opt_nul", "what_workspace"),
    (["%config FlowerMagics.workspace = 'd\\udcff'"], "%flower --demo task", "opt_path_not_text", "what_workspace"),
]


@pytest.mark.parametrize(("first", "cell", "key", "what"), MAGIC_CASES)
@pytest.mark.parametrize("wake", [False, True], ids=["fresh", "waking"])
def test_flower_magic_given_what_is_not_text_is_one_usage_error_and_writes_nothing(
    shell: InteractiveShell,
    workspace: Path,
    capsys: pytest.CaptureFixture[str],
    first: list[str],
    cell: str,
    key: str,
    what: str,
    wake: bool,
) -> None:
    """Guards the tracebacks of a lone surrogate in a ``%%flower`` body and a NUL in ``-r``."""
    if wake:
        waking(workspace)
    for setup in first:
        assert shell.run_cell(setup).success
    before = digest(workspace)
    capsys.readouterr()
    result = shell.run_cell(cell)
    assert digest(workspace) == before
    assert type(result.error_in_exec) is UsageError  # exactly: a subclass would print a traceback
    message = str(result.error_in_exec)
    assert message.startswith(f"%flower: {said(key, what)}") and "\n" not in message
    shown = capsys.readouterr()
    lines = [ln for ln in (shown.out + shown.err).splitlines() if ln.strip() and not ln.startswith("flower runs in")]
    assert lines == [f"UsageError: {message}"]
