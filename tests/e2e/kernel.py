"""A real IPython kernel for tests: start it in a directory with an environment, run cells, read
every output (streams, displays and their updates, errors), answer input prompts, kill it."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty
from typing import Any

from jupyter_client.manager import KernelManager


@dataclass
class CellResult:
    status: str = ""
    stream: str = ""
    errors: list[dict[str, Any]] = field(default_factory=list)
    displays: list[dict[str, Any]] = field(default_factory=list)  # display_data + update_display_data + results
    prompts: list[str] = field(default_factory=list)
    msg_id: str = ""

    @property
    def text(self) -> str:
        """Everything a person would read as text: streams and the text/plain of every display."""
        parts = [self.stream]
        parts += [str(d.get("text/plain", "")) for d in self.displays]
        parts += [f"{e['ename']}: {e['evalue']}" for e in self.errors]
        return "\n".join(parts)

    @property
    def html(self) -> str:
        return "\n".join(str(d.get("text/html", "")) for d in self.displays)


class Kernel:
    """One kernel process (``python3``), started with ``cwd`` and ``env``."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=str(cwd), env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        # Every iopub message read, whichever cell it belongs to: a view that a thread updates after
        # its cell ended sends its updates under a later cell's header (or none).
        self.seen: list[dict[str, Any]] = []

    @property
    def pid(self) -> int:
        provisioner = self.km.provisioner
        assert provisioner is not None
        return int(provisioner.process.pid)  # type: ignore[attr-defined]

    def run(
        self,
        code: str,
        *,
        timeout: float = 240,
        answer: Callable[[str], str] | None = None,
        on_output: Callable[[CellResult], None] | None = None,
    ) -> CellResult:
        """Execute one cell; ``answer(prompt)`` replies to input() prompts (None: stdin not allowed)."""
        msg_id = self.kc.execute(code, allow_stdin=answer is not None)
        res = CellResult(msg_id=str(msg_id))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if answer is not None:
                with contextlib.suppress(Empty):
                    req = self.kc.get_stdin_msg(timeout=0.01)
                    if req["msg_type"] == "input_request":
                        prompt = req["content"]["prompt"]
                        res.prompts.append(prompt)
                        self.kc.input(answer(prompt))
            try:
                msg = self.kc.get_iopub_msg(timeout=0.05)
            except Empty:
                continue
            self.seen.append(msg)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                res.stream += content["text"]
            elif kind in ("display_data", "update_display_data", "execute_result"):
                res.displays.append(content["data"])
            elif kind == "error":
                res.errors.append(content)
            elif kind == "status" and content["execution_state"] == "idle":
                reply = self.kc.get_shell_msg(timeout=30)
                while reply["parent_header"].get("msg_id") != msg_id:  # a reply to a cell sent with start()
                    reply = self.kc.get_shell_msg(timeout=30)
                res.status = reply["content"]["status"]
                if res.status == "error" and not res.errors:
                    # UsageError is printed on stderr, not sent as an error message; the reply names it.
                    res.errors.append(reply["content"])
                return res
            if on_output is not None:
                on_output(res)
        raise TimeoutError(f"cell did not finish in {timeout}s:\n{code}\n--- so far:\n{res.text[-2000:]}")

    def pump(self, until: Callable[[], object], what: str, *, give_up_s: float = 60) -> None:
        """Read iopub (into ``seen``) while no cell runs, until ``until()`` holds."""
        deadline = time.monotonic() + give_up_s
        while not until():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} never happened")
            with contextlib.suppress(Empty):
                self.seen.append(self.kc.get_iopub_msg(timeout=0.05))

    def displays_of(self, display_id: str) -> list[dict[str, Any]]:
        """The data of every display and update of ``display_id`` seen so far, oldest first."""
        return [
            m["content"]["data"]
            for m in self.seen
            if m["msg_type"] in ("display_data", "update_display_data")
            and (m["content"].get("transient") or {}).get("display_id") == display_id
        ]

    def display_id(self, cell: CellResult) -> str:
        """The id of the first display the cell made with one (``display(..., display_id=True)``)."""
        for m in self.seen:
            if m["parent_header"].get("msg_id") == cell.msg_id and m["msg_type"] == "display_data":
                found = (m["content"].get("transient") or {}).get("display_id")
                if found:
                    return str(found)
        raise AssertionError("the cell made no display with an id")

    def comm_send(self, comm_id: str, data: dict[str, Any]) -> None:
        """What a frontend sends a widget (a click is ``{"method": "custom", "content": {"event": "click"}}``)."""
        msg = self.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": data})
        self.kc.shell_channel.send(msg)

    def start(self, code: str) -> str:
        """Send a cell without waiting for it (to kill or interrupt the kernel while it runs)."""
        return str(self.kc.execute(code, allow_stdin=False))

    def interrupt(self) -> None:
        self.km.interrupt_kernel()

    def restart(self) -> None:
        self.km.restart_kernel(now=False)
        self.kc.wait_for_ready(timeout=60)

    def kill(self) -> None:
        """SIGKILL: no atexit, no finally — a crash."""
        os.kill(self.pid, signal.SIGKILL)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.kc.stop_channels()
        with contextlib.suppress(Exception):
            self.km.shutdown_kernel(now=True)
        with contextlib.suppress(Exception):
            self.km.cleanup_resources()


def children(pid: int) -> list[int]:
    """Direct child processes of ``pid`` (every thread's children)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out += [int(x) for x in (task / "children").read_text().split()]
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"
