"""The flower command and signals, with the real CLI: Ctrl-C once interrupts and lets you speak,
twice quits; SIGTERM records the step in flight (issue 4, build item 5)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from flower_magic.core.result import INTERRUPT_NOTE
from flower_magic.testing import FakeAnthropic, Request, text, tool_use
from flower_magic.testing.roles import as_role, role_of
from tests.helpers import running_in, wait_until

pytestmark = pytest.mark.slow

BRIEF = "## 目标\n清洗\n\n## 验收标准\n- a\n\n## 边界\nb\n\n## 未知与假设\n- c"
GOAL = "## 目标\n清洗\n\n## 判定清单\n- a 存在"
PASS = "## 结论\n达成\n\n## 理由\n好。\n\n## 未通过\n(无)"
SLOW_TOOL = tool_use("Bash", {"command": "python3 -c 'import time; time.sleep(120)'"})


def _workers(api: FakeAnthropic) -> list[Request]:
    return [r for r in api.requests if role_of(r) == "worker"]


class Terminal:
    """``flower`` with a pseudo-terminal as stdin (so it installs its Ctrl-C handler)."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.master, slave = os.openpty()
        self.proc = subprocess.Popen(
            ["flower", *args],
            cwd=cwd,
            env=env,
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        os.close(slave)
        self.out = ""

    def read_until(self, needle: str, timeout: float = 60) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while needle not in self.out and time.monotonic() < deadline:
            # Raw reads: a buffered readline could hold a second line where select() cannot see it.
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                self.out += chunk.decode("utf-8", errors="replace")
        assert needle in self.out, self.out[-2000:]

    def type(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        os.close(self.master)


def test_ctrl_c_once_interrupts_and_the_words_reach_the_same_session(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    fake_api.add(
        as_role("clarifier", text(BRIEF)),
        as_role("goal", text(GOAL)),
        as_role("worker", SLOW_TOOL),
        as_role("worker", text("按你说的改成 json 了")),
        as_role("judge", text(PASS)),
    )
    term = Terminal(["清洗 CSV"], workspace, child_env)
    try:
        wait_until(lambda: _workers(fake_api), "the work step's first request")
        term.read_until("[Bash]")
        time.sleep(1.0)
        term.proc.send_signal(signal.SIGINT)
        term.read_until("要说什么")
        term.type("改用 json 格式")
        assert term.proc.wait(timeout=120) == 0, term.out[-2000:]
    finally:
        term.close()
    first, resumed = _workers(fake_api)[:2]
    assert "改用 json 格式" in resumed.last_user_text and INTERRUPT_NOTE[:20] in resumed.last_user_text
    assert resumed.n_messages > first.n_messages  # the same conversation went on
    rows = json.loads((workspace / "runs" / "manifest.json").read_text(encoding="utf-8"))
    work = next(r for r in rows if r["step"] == "干活")
    assert work["ok"] and work["resumed"] and work["attempts"] == 1


def test_ctrl_c_twice_quits_and_the_step_is_in_the_manifest(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    fake_api.add(as_role("clarifier", text(BRIEF)), as_role("goal", text(GOAL)), as_role("worker", SLOW_TOOL))
    term = Terminal(["清洗 CSV"], workspace, child_env)
    try:
        wait_until(lambda: _workers(fake_api), "the work step's first request")
        term.read_until("[Bash]")
        term.proc.send_signal(signal.SIGINT)
        term.read_until("要说什么")
        term.proc.send_signal(signal.SIGINT)
        assert term.proc.wait(timeout=60) == 130
    finally:
        term.close()
    rows = json.loads((workspace / "runs" / "manifest.json").read_text(encoding="utf-8"))
    work = next(r for r in rows if r["step"] == "干活")
    assert not work["ok"] and work["session_id"]
    lineage = json.loads((workspace / "runs" / "lineage.json").read_text(encoding="utf-8"))
    assert lineage["steps"]["干活"] == work["session_id"]


def test_sigterm_records_the_step_in_flight(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    fake_api.add(as_role("clarifier", text(BRIEF)), as_role("goal", text(GOAL)), as_role("worker", SLOW_TOOL))
    with subprocess.Popen(
        ["flower", "清洗 CSV"],
        cwd=workspace,
        env=child_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as proc:
        wait_until(lambda: _workers(fake_api), "the work step's first request")
        wait_until(lambda: running_in(workspace, "time.sleep(120)"), "the worker's tool call running")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM
    rows = json.loads((workspace / "runs" / "manifest.json").read_text(encoding="utf-8"))
    work = next(r for r in rows if r["step"] == "干活")
    assert work["error"] == "killed-by-signal" and work["session_id"]
