"""Hostile input, one table (issue 11, acceptance g): every case ends in one clear line — or in a
fresh start that says what it set aside — never in a traceback, never in a silent drop.

Each case runs the real ``flower`` command (the demo model on the fake API, the real CLI) in a
fresh workspace, in English, and checks the exit code, that stderr is one line naming the cause,
and, for a mistake caught before the run, that the directory is byte-identical afterwards.
Cases that need their own filesystem (read-only, full) mount a small tmpfs and are skipped where
mounting is not allowed.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from flower_magic.core.entries import is_session_id
from flower_magic.core.words import short_path
from flower_magic.testing import FakeAnthropic
from flower_magic.testing.demo import DEMO_FILE
from tests.helpers import wait_until

pytestmark = pytest.mark.slow

TASK = "write a short notes file"


@pytest.fixture
def env(demo_api: FakeAnthropic, tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    drop = ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_MODEL", "FLOWER_WINDOW")
    out = {k: v for k, v in os.environ.items() if k not in drop}
    out.update(demo_api.env(home))
    out.update(FLOWER_LANG="en", PYTHONUNBUFFERED="1")
    return out


def tree(root: Path) -> dict[str, bytes | str]:
    """Every path under ``root`` with its bytes (files), ``dir`` or ``fifo``."""
    out: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_fifo():
            out[rel] = "fifo"
        elif path.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = path.read_bytes()
    return out


def flower(ws: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["flower", *args], cwd=ws, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300
    )


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _fifo(ws: Path) -> None:
    notes = ws / ".flower" / "notes"
    notes.mkdir(parents=True)
    os.mkfifo(notes / "需求.md")


# name, how to spoil the workspace, flags, exit code, words the one line must hold
BEFORE_THE_RUN: list[tuple[str, Callable[[Path], None], tuple[str, ...], int, tuple[str, ...]]] = [
    ("timeout inf", lambda ws: None, ("--timeout", "inf"), 2, ("--timeout", "inf")),
    ("timeout nan", lambda ws: None, ("--timeout", "nan"), 2, ("--timeout", "nan")),
    (
        "sessions.db is a directory",
        lambda ws: (ws / "runs" / "sessions.db").mkdir(parents=True),
        (),
        1,
        ("sessions.db", "directory"),
    ),
    (
        "the manifest lock is a directory",
        lambda ws: (ws / "runs" / ".lock").mkdir(parents=True),
        (),
        1,
        (".lock", "directory"),
    ),
    ("the brief is a named pipe", _fifo, (), 1, ("需求.md", "named pipe")),
    (
        "-r names a file",
        lambda ws: (ws / "a-file").write_text("x", encoding="utf-8"),
        ("-r", "a-file"),
        1,
        ("a-file", "run dir"),
    ),
]


@pytest.mark.parametrize(("name", "spoil", "flags", "rc", "words"), BEFORE_THE_RUN, ids=[c[0] for c in BEFORE_THE_RUN])
def test_a_mistake_before_the_run_is_one_line_and_touches_nothing(
    env: dict[str, str],
    workspace: Path,
    name: str,
    spoil: Callable[[Path], None],
    flags: tuple[str, ...],
    rc: int,
    words: tuple[str, ...],
) -> None:
    spoil(workspace)
    before = tree(workspace)
    done = flower(workspace, env, *flags, TASK)
    assert done.returncode == rc, done.stderr
    line = one_line(done.stderr.split("[task ...]")[-1])  # after argparse's synopsis, when it prints one
    assert all(w in line for w in words), line
    assert tree(workspace) == before


def test_lineage_with_ids_that_are_not_session_ids_starts_those_steps_afresh(
    env: dict[str, str], workspace: Path
) -> None:
    """A hand-edited lineage.json naming 'not-a-uuid' used to cost ~130 s of retries and a failed step."""
    runs = workspace / "runs"
    runs.mkdir()
    doc = {"workspace": str(workspace), "woke": 1, "steps": {"确认需求": "not-a-uuid", "干活": "../../etc/passwd"}}
    (runs / "lineage.json").write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    done = flower(workspace, env, TASK)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    told = [line for line in done.stdout.splitlines() if "lineage.json" in line and "not a session id" in line]
    assert len(told) == 2 and "'not-a-uuid'" in told[0]
    steps = json.loads((runs / "lineage.json").read_text(encoding="utf-8"))["steps"]
    assert steps and all(is_session_id(sid) for sid in steps.values())
    assert (workspace / DEMO_FILE).exists()


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mount tmpfs file systems under ``tmp_path`` (skip where mounting is not allowed)."""
    mounted: list[Path] = []

    def mount(options: str) -> Path:
        point = tmp_path / f"fs{len(mounted)}"
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def _fill(folder: Path) -> Path:
    """Write a file that takes all the space left on ``folder``'s filesystem."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    chunk = b"\0" * (1 << 20)
    try:
        while chunk:
            try:
                os.write(fd, chunk)
            except OSError:
                chunk = chunk[: len(chunk) // 2]  # down to the last page it will take
    finally:
        os.close(fd)
    return filler


def test_a_read_only_workspace_is_one_line(env: dict[str, str], small_fs: Callable[[str], Path]) -> None:
    ws = small_fs("size=1m,ro")
    done = flower(ws, env, TASK)
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert short_path(ws, ws) in line and ("not writable" in line or "read-only" in line)
    assert list(ws.iterdir()) == []


def test_a_full_disk_before_the_run_is_one_line_and_touches_nothing(
    env: dict[str, str], small_fs: Callable[[str], Path]
) -> None:
    ws = small_fs("size=4m")
    _fill(ws)
    before = tree(ws)
    done = flower(ws, env, TASK)
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert short_path(ws, ws) in line and "nearly full" in line
    assert tree(ws) == before


def test_a_disk_that_fills_during_the_run_is_one_line_and_the_next_run_continues(
    env: dict[str, str], small_fs: Callable[[str], Path]
) -> None:
    """The disk fills while the clarifier's question waits; the run stops with one line; once
    there is room again, the next run picks up the same clarification."""
    ws = small_fs("size=24m")
    proc = subprocess.Popen(
        ["flower", TASK],
        cwd=ws,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    seen: list[str] = []

    def asked() -> bool:
        seen.append(proc.stdout.readline())  # type: ignore[union-attr]
        return seen[-1].startswith("? ") or proc.poll() is not None

    wait_until(asked, "the clarifier's question", give_up_s=120)
    filler = _fill(ws)
    proc.stdin.write("Markdown\n")
    proc.stdin.flush()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    # The ending, said as every view says it: where it stopped, the disk's trouble in one line, what next.
    said = err.strip().splitlines()
    assert len(said) == 3 and "could not write" in said[0] and "No space left" in said[0], err
    assert "Traceback" not in err
    lineage = json.loads((ws / "runs" / "lineage.json").read_text(encoding="utf-8"))
    clarifier = lineage["steps"]["确认需求"]

    filler.unlink()
    again = flower(ws, env)
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr
    resumed = json.loads((ws / "runs" / "lineage.json").read_text(encoding="utf-8"))["steps"]
    assert resumed["确认需求"] == clarifier  # the same conversation, not a new one
    assert (ws / DEMO_FILE).exists()


@pytest.mark.parametrize("prompt", ["a\x00b", "x\ud800y"], ids=["NUL", "lone surrogate"])
def test_odd_characters_through_the_python_api_run_and_are_recorded(
    demo_api: FakeAnthropic, env: dict[str, str], workspace: Path, prompt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flower_magic import AgentSpec, Runtime
    from flower_magic.core import manifest

    for key, value in env.items():
        monkeypatch.setenv(key, value)

    async def go() -> tuple[bool, str | None]:
        rt = Runtime(workspace=workspace, run_dir=workspace / "runs")
        try:
            result = await rt.run(AgentSpec(name="a", instructions=""), prompt, step_name="odd")
        finally:
            rt.close()
        return result.ok, result.error

    ok, error = asyncio.run(go())
    assert (ok, error) == (True, None)
    rows = manifest.read_rows(workspace / "runs")
    assert [r["step"] for r in rows] == ["odd"] and rows[0]["ok"] is True


@pytest.mark.parametrize("line", ['%flower --timeout inf "x"', "%flower --rounds -1", '%flower "unbalanced'])
def test_a_mistake_in_the_magic_is_one_usage_error_line_and_touches_nothing(
    env: dict[str, str], workspace: Path, line: str
) -> None:
    from tests.e2e.kernel import Kernel

    kernel = Kernel(workspace, env)
    try:
        assert kernel.run("%load_ext flower_magic").status == "ok"
        res = kernel.run(line)
    finally:
        kernel.close()
    assert res.status == "error"
    [err] = res.errors
    assert err["ename"] == "UsageError" and "\n" not in err["evalue"].strip()
    assert list(workspace.iterdir()) == []


def test_mistakes_in_a_row_leave_the_run_as_it_was_and_the_corrected_phrase_re_derives_the_goals(
    env: dict[str, str], workspace: Path, small_fs: Callable[[str], Path]
) -> None:
    """Issue 11 (a): after a finished run, four mistakes — ``--new`` without credentials, ``-r`` under a
    file, a phrase for a read-only run dir, an unknown flag — each fail with one line and leave the
    directory byte-identical; the corrected phrase then reaches the brief once and the goals are
    derived again (the phrase used to be appended by the failed attempt, so the retry skipped that)."""
    from flower_magic.core import manifest

    (workspace / "a-file").write_text("x", encoding="utf-8")
    assert flower(workspace, env, TASK).returncode == 0
    before = tree(workspace)
    phrase = "also list the columns"
    no_key = {k: v for k, v in env.items() if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")}
    read_only = small_fs("size=1m,ro")

    tries = [
        (no_key, ("--new", "something else"), 1, "credentials"),
        (env, ("-r", "a-file/runs", phrase), 1, "a-file"),
        (env, ("-r", str(read_only / "runs"), phrase), 1, str(read_only)),
        (env, ("--bogus", phrase), 2, "--bogus"),
    ]
    for child_env, args, rc, named in tries:
        done = flower(workspace, child_env, *args)
        assert done.returncode == rc, (args, done.stderr)
        assert named in one_line(done.stderr.split("[task ...]")[-1]), args
        assert tree(workspace) == before, args

    done = flower(workspace, env, phrase)
    assert done.returncode == 0, done.stderr
    brief = (workspace / ".flower" / "notes" / "需求.md").read_text(encoding="utf-8")
    assert brief.count(phrase) == 1
    runs: dict[str, list[str]] = {}
    for row in manifest.read_rows(workspace / "runs"):
        runs.setdefault(row["run"], []).append(row["step"])
    last = list(runs.values())[-1]
    assert last[0] == "设定目标", last  # the goals were derived again from what was said
