"""The `flower` command's Ctrl-C handling, in-process (the terminal tests in test_cli_signals.py drive
a real process; this one holds the moment they can only hit by chance)."""

from __future__ import annotations

import asyncio
import io
import signal
import threading

from flower_magic.cli import _Console
from flower_magic.core.words import say
from flower_magic.terminal import TerminalView


def test_ctrl_c_while_the_view_is_printing_neither_hangs_nor_loses_the_prompt() -> None:
    """Python runs a signal handler on the main thread between two bytecodes, possibly inside the
    view's printing, which holds a lock: a handler that printed waited for that lock forever (the
    terminal hung, and CI's Ctrl-C test timed out under load)."""
    out = io.StringIO()
    view = TerminalView("zh", out=out)
    console = _Console(view, "zh")
    console.rt = object()

    async def ctrl_c_while_printing() -> None:
        console._loop = asyncio.get_running_loop()
        with view._lock:  # the main thread is in the middle of printing a line
            console.on_sigint(signal.SIGINT, None)
        for _ in range(3):
            await asyncio.sleep(0)

    done = threading.Thread(target=asyncio.run, args=(ctrl_c_while_printing(),), daemon=True)
    done.start()
    done.join(10)
    assert not done.is_alive(), "the Ctrl-C handler waited for the view's lock"
    assert console.armed and say("interrupt_say", "zh") in out.getvalue()
