"""Sizes (issue 10, build item 4, "One message over 1 MiB breaks the stream"): a 1.1 MB ``Write`` and a
1 MB reply complete on the first attempt; a message past flower's read limit stops the step with its
cause, once and in one line; a task no model can take is refused before anything is written, and one
just under the limit reaches the model. Real ``flower`` processes and the real Claude Code CLI against
the scripted fake API; ``%%flower`` in an in-process IPython shell.
"""

from __future__ import annotations

import json
import os
import pty
import resource
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from flower_magic import AgentSpec, Runtime
from flower_magic.core import manifest
from flower_magic.core.agent import MAX_MESSAGE_BYTES
from flower_magic.core.resilience import RESUME_PROMPT
from flower_magic.core.words import say
from flower_magic.front.options import MAX_TASK_CHARS
from flower_magic.front.outcome import Ending, Outcome
from flower_magic.testing import FakeAnthropic, Request, text, tool_use
from flower_magic.testing.roles import as_role, role_of

PROC_TIMEOUT_S = 300  # a hung run fails the test instead of the suite's guard
BRIEF = "## 目标\n写个脚本\n\n## 验收标准\n- 能跑\n\n## 边界\n不做 GUI\n\n## 未知与假设\n- 无\n"
GOAL = "## 目标\n脚本能跑\n\n## 判定清单\n- python a.py 退出码为 0\n"
# Linux caps one argv string at 32 pages (MAX_ARG_STRLEN); a task of megabytes goes in as many words.
ARG_CHARS = 100_000
ARGV_ROOM_BYTES = 6 * 2**20  # Linux gives argv a quarter of the stack limit, at most 6 MiB


def _words(n_chars: int) -> list[str]:
    """An ASCII task of exactly ``n_chars`` as argv words (``flower`` joins them with one space)."""
    words, left = [], n_chars
    while left > 0:
        word = "x" * min(ARG_CHARS, left)
        words.append(word)
        left -= len(word) + 1
    return words


def _roomy_argv() -> None:
    """In the child before exec: a stack limit that lets argv carry a few MB (Linux: 8 MiB -> 2 MiB)."""
    _, hard = resource.getrlimit(resource.RLIMIT_STACK)
    want = 4 * ARGV_ROOM_BYTES
    resource.setrlimit(resource.RLIMIT_STACK, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard))


@dataclass
class Done:
    rc: int
    out: str
    err: str


def flower(ws: Path, env: dict[str, str], *args: str) -> Done:
    """Run ``flower`` to its end with nobody at stdin."""
    _, hard = resource.getrlimit(resource.RLIMIT_STACK)
    if sum(len(a) + 1 for a in args) > ARG_CHARS * 4 and hard != resource.RLIM_INFINITY and hard < 4 * ARGV_ROOM_BYTES:
        pytest.skip(f"the stack's hard limit ({hard} bytes) leaves argv no room for a task of megabytes")
    proc = subprocess.run(
        ["flower", *args],
        cwd=ws,
        env={**env, "FLOWER_LANG": "en"},  # the lines below are read in English
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=PROC_TIMEOUT_S,
        preexec_fn=_roomy_argv,
    )
    return Done(proc.returncode, proc.stdout, proc.stderr)


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file's bytes (None for a folder) under ``root``: equal snapshots = nothing was written."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _waking(ws: Path) -> None:
    """A directory with a run to wake: a complete brief (a wake phrase would be appended to it)."""
    notes = ws / ".flower" / "notes"
    notes.mkdir(parents=True)
    (notes / "需求.md").write_text(BRIEF, encoding="utf-8")


def _rows(ws: Path) -> list[dict[str, Any]]:
    return manifest.read_rows(ws / "runs")


def _resumed_as_interrupted(requests: list[Request]) -> list[int]:
    return [r.index for r in requests if RESUME_PROMPT in r.last_user_text]


# -- messages of megabytes ------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.slow
async def test_a_1_1_mb_write_and_a_1_mb_reply_complete_on_the_first_attempt(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """Regression: with the SDK's default 1 MiB read limit both broke the stream, were retried under a
    false "you were interrupted" prompt (a second, bigger request) and left ``errors: []``."""
    data = "".join(f"{i},{i * i},{'abcdef' * 3}\n" for i in range(40_000))
    assert len(data.encode()) > 1_100_000
    # The SDK measures a line in characters: ASCII, so that 1 MB is a million of them.
    reply = "A long answer, every word of it kept. " * 26_400
    assert len(reply) > 1_000_000
    target = workspace / "data.csv"
    fake_api.add(tool_use("Write", {"file_path": str(target), "content": data}), text("写好了"), text(reply))
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs")
    spec = AgentSpec(name="a", instructions="", allowed_tools=["Write"], permission_mode="acceptEdits")
    try:
        wrote = await rt.run(spec, "把数据写进 data.csv", step_name="写数据")
        said = await rt.run(spec, "全部说一遍", step_name="长回答")
    finally:
        rt.close()
    assert target.read_bytes() == data.encode()  # whole, byte for byte
    assert said.text == reply.strip()
    rows = {r["step"]: r for r in _rows(workspace)}
    for step in ("写数据", "长回答"):
        row = rows[step]
        assert (row["ok"], row["attempts"], row["error"], row["errors"], row["resumed"]) == (True, 1, None, [], False)
    assert wrote.text == "写好了"
    reqs = fake_api.requests
    assert len(reqs) == 3  # the Write, its result back, the long reply: nothing asked twice
    assert _resumed_as_interrupted(reqs) == []


@pytest.mark.slow
def test_a_message_past_the_limit_stops_the_step_once_with_its_cause_in_one_line(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """A worker reply 1 MiB past ``MAX_MESSAGE_BYTES``: the step is not retried (not by the runtime under
    the "interrupted" prompt, not by the workflow as another round), its row carries the SDK's words,
    the person reads one line saying what to do, and the process exits without a traceback (the CLI's
    stdout pipe, left unread, used to be finalised after the loop closed: "Event loop is closed")."""
    fake_api.add(
        as_role("clarifier", text(BRIEF)),
        as_role("goal", text(GOAL)),
        as_role("worker", text("x" * (MAX_MESSAGE_BYTES + 2**20))),
    )
    done = flower(workspace, child_env, "写个脚本")
    assert done.rc == 1, done.err
    failed = Outcome(Ending.FAILED, step="干活")  # the ending, said as every view says it
    assert done.err.splitlines() == [
        say("too_big", "en", limit="64 MiB", cmd="flower"),
        failed.headline("en"),
        failed.next_step("en", "flower"),
    ]
    assert "Traceback" not in done.err + done.out and "Event loop is closed" not in done.err
    assert [role_of(r) for r in fake_api.requests] == ["clarifier", "goal", "worker"]
    assert _resumed_as_interrupted(fake_api.requests) == []
    (work,) = [r for r in _rows(workspace) if str(r["step"]).startswith("干活")]
    assert (work["ok"], work["attempts"]) == (False, 1)
    (cause,) = work["errors"]
    assert f"exceeded maximum buffer size of {MAX_MESSAGE_BYTES} bytes" in cause
    assert str(work["error"]).startswith(cause) and "run flower again" in str(work["error"])
    lineage = json.loads((workspace / "runs" / "lineage.json").read_text(encoding="utf-8"))
    assert lineage["steps"]["干活"] == work["session_id"]  # the session is kept for the next run


# -- tasks no model can take ----------------------------------------------------------------------


@pytest.mark.parametrize("waking", [False, True], ids=["fresh", "wake-phrase"])
def test_flower_refuses_a_task_past_the_limit_in_one_line_and_writes_nothing(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path, waking: bool
) -> None:
    """Regression: a 10 MB task was written into 需求.md (or appended to it at wake) and never reached
    the model. Now: exit 2 (a usage mistake), one line, the directory byte for byte as it was."""
    (workspace / "spec.md").write_text("# 已有的文件\n", encoding="utf-8")
    if waking:
        _waking(workspace)
    before = snapshot(workspace)
    done = flower(workspace, child_env, *_words(MAX_TASK_CHARS + 1))
    assert done.rc == 2
    (line,) = done.err.splitlines()
    assert line.startswith("flower: error: the task is 2,850,001 characters") and "spec.md" in line
    assert done.out == ""
    assert snapshot(workspace) == before
    assert fake_api.requests == []


def test_a_task_typed_at_the_prompt_is_held_to_the_same_limit(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """``flower`` with no task on a terminal asks for one; what is typed is checked like an argument.
    (A terminal line holds 4 KB at most, so a small ``--window`` makes the limit reachable.)"""
    before = snapshot(workspace)
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            ["flower", "--window", "1000"],
            cwd=workspace,
            env={**child_env, "FLOWER_LANG": "en"},
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.write(leader, b"y" * 1501 + b"\n")
        _, err = proc.communicate(timeout=PROC_TIMEOUT_S)
    finally:
        os.close(leader)
        os.close(follower)
    assert proc.returncode == 2
    (line,) = err.splitlines()
    assert line.startswith("flower: error: the task is 1,501 characters") and "(at most 1,500)" in line
    assert snapshot(workspace) == before
    assert fake_api.requests == []


@pytest.mark.slow
def test_a_task_just_under_the_limit_reaches_the_model(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """The limit leaves room for what the CLI adds: a task of exactly ``MAX_TASK_CHARS`` is not refused
    by the CLI's own "Prompt is too long" (which would cut it to a degraded hand-off's excerpt)."""
    words = _words(MAX_TASK_CHARS)
    task = " ".join(words)
    assert len(task) == MAX_TASK_CHARS
    # A small reported context: the fake API would otherwise count the 2.85 MB as most of a window.
    fake_api.add(as_role("clarifier", text(BRIEF, usage={"input_tokens": 3000})))
    done = flower(workspace, child_env, "--clarify-only", *words)
    assert done.rc == 0, done.err
    (first,) = fake_api.requests
    assert task in first.last_user_text
    assert (workspace / ".flower" / "notes" / "需求.md").is_file()


@pytest.fixture
def shell(workspace: Path, fake_api_env: dict[str, str]) -> Iterator[InteractiveShell]:
    """The shell, with ``%flower`` loaded and bound to ``workspace`` as the notebook's directory."""
    sh = InteractiveShell.instance()
    sh.extension_manager.load_extension("flower_magic")
    sh.run_line_magic("config", 'FlowerMagics.lang = "en"')  # the lines below are read in English
    sh.user_ns["__vsc_ipynb_file__"] = str(workspace / "notebook.ipynb")
    try:
        yield sh
    finally:
        sh.user_ns.pop("__vsc_ipynb_file__", None)


@pytest.mark.parametrize(
    ("cell", "waking"),
    [
        ("%%flower\n{task}", False),  # a cell body
        ("%%flower --rounds 2\n{task}", True),  # a wake phrase, as a cell body
        ("%flower --window 1000 {small}", False),  # --window says the model takes less: 1500 characters
    ],
)
def test_flower_magic_refuses_a_task_past_the_limit_with_one_usage_error(
    shell: InteractiveShell,
    fake_api: FakeAnthropic,
    workspace: Path,
    capsys: pytest.CaptureFixture[str],
    cell: str,
    waking: bool,
) -> None:
    if waking:
        _waking(workspace)
    before = snapshot(workspace)
    capsys.readouterr()
    result = shell.run_cell(cell.format(task="任务" * (MAX_TASK_CHARS // 2 + 1), small="x" * 1501))
    assert type(result.error_in_exec) is UsageError  # exactly: a subclass prints a traceback
    message = str(result.error_in_exec)
    assert "\n" not in message and message.startswith("%flower: the task is ")
    shown = capsys.readouterr()
    assert [ln for ln in (shown.out + shown.err).splitlines() if ln.strip()] == [f"UsageError: {message}"]
    assert snapshot(workspace) == before
    assert fake_api.requests == []
