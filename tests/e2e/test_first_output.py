"""What a person sees first, in one real kernel (issue 24, items 6, 7 and 8; the times are in
bench/bench_first_paint.py, nothing here is timed):

1. ``%load_ext`` and ``%flower`` in one cell of a fresh kernel: the cell's first output is the run's
   header saying it waits for the agent to start, shown before the Claude Agent SDK is imported;
2. ``%flower --bg`` returns with the runner's pid while the runner still waits for the SDK (held at a
   gate, ``tests/sdk_gate.py``), and its view says what it waits for;
3. a kernel restart while that run waits for an answer: the cell that followed it is left static (no
   question card whose buttons would reach nobody), and ``%load_ext`` in the new kernel names the
   live run, its question and how to follow and answer it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flower_magic.core.human import ASK_TOOL
from flower_magic.core.live import live_state
from flower_magic.core.words import say
from flower_magic.display.run import WIDGET_MIME
from flower_magic.testing import FakeAnthropic, text, tool_use
from flower_magic.testing.roles import as_role
from tests.e2e.kernel import Kernel
from tests.helpers import command_line, wait_until
from tests.sdk_gate import SdkGate

pytestmark = pytest.mark.slow

BRIEF = "## 目标\n写个笔记\n\n## 验收标准\n- note.md\n\n## 边界\n只写 note.md\n\n## 未知与假设\n- 无"
GOAL = "## 目标\nnote.md 在\n\n## 判定清单\n- note.md 存在"
PASS = "## 结论\n达成\n\n## 理由\n在。\n\n## 未通过\n(无)"
QUESTION = "笔记写成什么格式?"
WAITING = say("hdr_wait_agent", "zh")
MARK = "SDK-IMPORT-BEGINS"
# Shows MARK on the kernel's iopub the moment anything first imports the SDK (the warm-up thread).
SPY = f"""
import sys
from IPython.display import display as _show

class _Spy:
    def find_spec(self, name, path=None, target=None):
        if name == "claude_agent_sdk":
            sys.meta_path.remove(self)
            _show({{"text/plain": "{MARK}"}}, raw=True)
        return None

sys.meta_path.insert(0, _Spy())
"""


def _said(msg: dict[str, Any]) -> str:
    if msg["msg_type"] not in ("display_data", "update_display_data"):
        return ""
    return str(msg["content"]["data"].get("text/plain", ""))


def _restart_reading_the_last_words(kernel: Kernel, last_words: Callable[[], object]) -> None:
    """A restart as JupyterLab asks for it (a shutdown request with ``restart``), reading what the going
    kernel sends until ``last_words()`` holds, then the new kernel. (``Kernel.restart`` reads iopub
    away while it waits for the new kernel.)"""
    kernel.kc.shutdown(restart=True)
    kernel.pump(last_words, "the going kernel's last words")
    kernel.km.restart_kernel(now=False)
    kernel.kc.wait_for_ready(timeout=60)


def _card_up(kernel: Kernel) -> bool:
    """The question's card (its option buttons) was made in the kernel."""
    return any(
        m["msg_type"] == "comm_open"
        and ((m["content"].get("data") or {}).get("state") or {}).get("description") == "md"
        for m in kernel.seen
    )


@pytest.fixture
def gated(fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path, tmp_path: Path) -> Iterator[Any]:
    """A kernel whose runners wait at the SDK gate; whatever runner is left in the workspace is ended."""
    gate = SdkGate(tmp_path)
    # As JupyterLab names a kernel's notebook: no "bound to the starting folder" line comes first.
    kernel = Kernel(workspace, {**gate.env(child_env), "JPY_SESSION_NAME": str(workspace / "first.ipynb")})
    try:
        yield kernel, gate
    finally:
        kernel.close()
        gate.fail()  # a runner still at the gate leaves
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError, ValueError):
                if Path(os.readlink(entry / "cwd")) == workspace and "flower_magic.runner" in command_line(
                    int(entry.name)
                ):
                    os.kill(int(entry.name), signal.SIGKILL)


def test_the_header_first_bg_at_once_and_a_restart_while_a_question_waits(
    fake_api: FakeAnthropic, workspace: Path, gated: Any
) -> None:
    kernel, gate = gated
    runs = workspace / "runs"

    # -- 1: the first output of a fresh kernel's first cell is the header, before the SDK's import --
    fake_api.add(
        as_role("clarifier", text(BRIEF)),
        as_role("goal", text(GOAL)),
        as_role("worker", text("写好了")),
        as_role("judge", text(PASS)),
    )
    first = kernel.run(f'{SPY}\n%load_ext flower_magic\n%flower "写个笔记"', answer=lambda _prompt: "")
    assert first.status == "ok", first.text
    shown = [m for m in kernel.seen if _said(m)]
    assert WAITING in _said(shown[0]), _said(shown[0])  # the cell's first output: the header, waiting
    assert shown[0]["parent_header"].get("msg_id") == first.msg_id
    assert MARK in "".join(_said(m) for m in shown)  # the SDK was imported, after it
    marked = next(i for i, m in enumerate(shown) if MARK in _said(m))
    assert marked > 0 and all(MARK not in _said(m) for m in shown[:marked])

    # -- 2: --bg returns with the pid while the runner still waits for the SDK ----------------------
    fake_api.add(as_role("clarifier", tool_use(ASK_TOOL, {"question": QUESTION, "options": ["md", "txt"]})))
    bg = kernel.run('%flower --new --bg "另写一个"', answer=lambda _prompt: "")
    assert bg.status == "ok", bg.text
    state = live_state(runs)
    assert state is not None and state.live
    follow = say("runner_follow_magic", "zh")
    assert say("runner_started", "zh", pid=state.pid, follow=follow) in bg.text
    assert WAITING in bg.text  # its view says what it waits for
    wait_until(lambda: gate.reached, "the runner at the SDK's import")  # it had not got past it
    gate.open()
    kernel.pump(lambda: _card_up(kernel), "the question's card in the following cell")
    view = kernel.display_id(bg)

    # -- 3: a restart while the question waits ---------------------------------------------------------
    let_go = say("follow_let_go", "zh", pid=state.pid)
    _restart_reading_the_last_words(kernel, lambda: any(let_go in str(d) for d in kernel.displays_of(view)))
    last = kernel.displays_of(view)[-1]
    assert WIDGET_MIME not in last  # no question card left, and nothing that needs the gone kernel
    assert let_go in last["text/plain"]
    assert say("question", "zh", question=QUESTION) in last["text/plain"]
    loaded = kernel.run("%load_ext flower_magic")
    front = say("front_background", "zh")
    assert say("load_live_asking", "zh", pid=state.pid, front=front, question=QUESTION, n=1) in loaded.text
    assert say("live_stop_sent", "zh", cmd="%flower") in kernel.run("%flower --stop").text
    wait_until(lambda: not live_state(runs).live, "the stopped run's end")  # type: ignore[union-attr]
