"""The portable watchdog: runs the Claude Code CLI as its child and kills it when flower's process dies.

Linux kills the CLI with its parent through ``PR_SET_PDEATHSIG`` (``core.launcher``); macOS and the
BSDs have no such thing, and ``FLOWER_WATCHDOG=portable`` asks for this mechanism on Linux too. The
SDK starts this script in place of the CLI (``python -I -S watchdog.py <cli> <args>``, through the
launcher script ``core.launcher`` writes); the script starts the CLI with the same arguments,
environment and working directory, hands it its stdout and stderr as they are, and relays its stdin.

That stdin is the pipe the SDK writes to, and flower's process holds its only write end. However
that process ends (``kill -9`` included) the OS closes the end, and the relay reads end-of-file; the
watchdog then closes the CLI's stdin and, as soon as its parent is gone (``getppid()`` no longer
names it: the orphan was handed to init or a subreaper), kills the CLI. It also looks at
``getppid()`` every ``POLL_S`` without waiting for the pipe, for a parent whose pipe end a forked
child still holds.

Guarantees:
    - The CLI is killed (SIGKILL) within about ``POLL_S`` of the parent's death, once the OS has
      re-parented the watchdog; the watchdog then exits.
    - A normal end is untouched: when the SDK closes stdin (its disconnect) the CLI sees end-of-file
      exactly as without the watchdog, finishes and exits; the watchdog exits with its exit code
      (``128 + N`` for a CLI ended by signal N).
    - ``SIGTERM`` (the SDK's ``terminate()``) is passed on to the CLI; a CLI still running
      ``KILL_AFTER_TERM_S`` later is killed, so the SDK's own SIGKILL of the watchdog never has to
      come.
    - Ctrl-C and a closed terminal (``SIGINT``, ``SIGHUP``) do not stop the watchdog: the CLI gets
      its own signal from the terminal, and the parent's death is handled as above.
    - When the parent is already gone as the watchdog starts, the CLI is never started.
    - The script imports only the standard library and runs with ``-I -S``: nothing on the user's
      ``PYTHONPATH`` or in site-packages is imported, and the package is not needed at run time.
Not guaranteed:
    - A watchdog killed with SIGKILL by someone else leaves the CLI to end on its own stdin's
      end-of-file (it finishes the turn it was in).
    - Processes the CLI started (a tool's shell command) are not killed with it, as with
      ``PR_SET_PDEATHSIG``.
    - Windows: not used there (the SDK runs only an executable as the CLI); ``core.winjob`` ties the
      CLI to flower's process with a Job object instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from types import FrameType

# How often the parent is looked for while its pipe is open, and how long after end-of-file: a
# syscall every 50 ms costs nothing, and the CLI is dead well inside a second of its parent.
POLL_S = 0.05
# The SDK waits 5 s after its terminate() before it kills; the CLI gets most of that to exit cleanly.
KILL_AFTER_TERM_S = 4.0
# Read size of the stdin relay: the SDK's messages are JSON lines, up to megabytes for a long task.
RELAY_CHUNK_BYTES = 1 << 16
PARENT_ENV = "FLOWER_WATCHDOG_PARENT"  # the pid of flower's process, set by core.launcher


def exit_code(returncode: int) -> int:
    """The watchdog's own exit code for the CLI's ``returncode`` (``-N``, killed by signal N: ``128 + N``)."""
    return returncode if returncode >= 0 else 128 - returncode


def parent_pid(environ: Mapping[str, str]) -> int:
    """The process this watchdog guards: ``FLOWER_WATCHDOG_PARENT``, else whoever started it."""
    value = environ.get(PARENT_ENV, "")
    return int(value) if value.isdigit() else os.getppid()


def _relay(source: int, child: subprocess.Popen[bytes], done: threading.Event) -> None:
    """Copy ``source`` into the CLI's stdin until end-of-file; then close it (the CLI sees EOF too)."""
    assert child.stdin is not None
    target = child.stdin.fileno()
    try:
        while True:
            data = os.read(source, RELAY_CHUNK_BYTES)
            if not data:
                break
            view = memoryview(data)
            while view:
                view = view[os.write(target, view) :]
    except OSError:
        pass  # the CLI closed its stdin or exited; nothing left to relay
    finally:
        with contextlib.suppress(OSError):
            child.stdin.close()
        done.set()


def run(argv: list[str], *, stdin_fd: int = 0, environ: Mapping[str, str] = os.environ) -> int:
    """Run ``argv`` (the CLI and its arguments) under the watchdog; returns the exit code to exit with.

    Raises:
        OSError: on Windows (see the module's docstring), or when the CLI cannot be started.
    """
    if sys.platform == "win32":
        raise OSError("the watchdog runs on POSIX systems; on Windows core.winjob ties the CLI to its parent")
    parent = parent_pid(environ)
    if os.getppid() != parent:
        return exit_code(-signal.SIGKILL)  # nobody is left to talk to the CLI: never start it
    term_at: list[float] = []

    def ignore(signum: int, frame: FrameType | None) -> None:
        pass

    # Installed before the CLI starts (handlers, unlike SIG_IGN, are reset to the default by exec, so
    # the CLI keeps its own Ctrl-C).
    signal.signal(signal.SIGINT, ignore)
    signal.signal(signal.SIGHUP, ignore)
    child = subprocess.Popen(argv, stdin=subprocess.PIPE)

    def on_term(signum: int, frame: FrameType | None) -> None:
        term_at.append(time.monotonic())
        with contextlib.suppress(OSError):
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, on_term)
    eof = threading.Event()
    threading.Thread(target=_relay, args=(stdin_fd, child, eof), daemon=True, name="stdin-relay").start()
    while child.poll() is None:
        if os.getppid() != parent or (term_at and time.monotonic() - term_at[0] > KILL_AFTER_TERM_S):
            child.kill()
            break
        if eof.is_set():
            time.sleep(POLL_S)
        else:
            eof.wait(POLL_S)  # end-of-file wakes the check at once
    return exit_code(child.wait())


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
