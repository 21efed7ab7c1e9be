"""Starting the Claude Code CLI so that it dies with the process that started it.

When a kernel or a ``flower`` process is killed (``kill -9``, an OOM kill, a crashed terminal), the
CLI child would otherwise go on: it finishes its turn with stdin closed, keeps calling the API and
writing a transcript nobody mirrors — and the next run would then be a second agent on the same
session. On Linux the CLI is started through a tiny launcher that sets ``PR_SET_PDEATHSIG`` to
SIGKILL (``setpriv --pdeathsig``, or ``prctl`` from a Python stub where util-linux is missing), so
the kernel kills it the moment its parent dies. Elsewhere the bundled CLI is used as it is.

When a step ends, ``disconnect`` lets go of the CLI so that nothing of it outlives the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from flower_magic.core.durable import write_atomic


def bundled_cli() -> Path | None:
    """The Claude Code binary shipped inside claude-agent-sdk, if present."""
    import claude_agent_sdk

    path = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    return path if path.is_file() else None


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "flower_magic" / "bin"


def _script(cli: Path) -> str:
    setpriv = shutil.which("setpriv")
    if setpriv:
        return f'#!/bin/sh\nexec {shlex.quote(setpriv)} --pdeathsig KILL -- {shlex.quote(str(cli))} "$@"\n'
    stub = (
        "import ctypes, os, signal, sys\n"
        "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG\n"
        f"os.execv({str(cli)!r}, [{str(cli)!r}] + sys.argv[1:])\n"
    )
    return f"#!{sys.executable} -S\n{stub}"


_cached: dict[str, str | None] = {}


def cli_launcher() -> str | None:
    """Path of an executable that runs the bundled CLI with parent-death SIGKILL, or None (use the
    SDK's default) on other platforms or when nothing can be written."""
    if not sys.platform.startswith("linux"):
        return None
    cli = bundled_cli()
    if cli is None:
        return None
    key = str(cli)
    if key in _cached:
        return _cached[key]
    script = _script(cli)
    name = "claude-" + hashlib.sha256(script.encode()).hexdigest()[:12]
    result: str | None = None
    for folder in (_cache_dir(), Path(os.environ.get("TMPDIR", "/tmp")) / f"flower_magic-{os.getuid()}"):
        path = folder / name
        with contextlib.suppress(OSError):
            if not (path.is_file() and path.read_text() == script):
                write_atomic(path, script.encode())
            path.chmod(0o755)
            result = str(path)
            break
    _cached[key] = result
    return result


PIPES_CLOSE_TIMEOUT_S = 5.0  # the SDK has already waited for (or killed) the CLI; this only bounds a stuck one


async def disconnect(client: Any) -> None:
    """``client.disconnect()``, then close the CLI's pipes while the event loop still runs.

    The SDK (0.2.189) closes the CLI's stdin and stderr but not its stdout. When its reader stopped
    early (a message past ``max_buffer_size``), the unread output keeps that pipe open, the asyncio
    subprocess transport is never finished, and its finaliser runs after the loop has closed:
    "RuntimeError: Event loop is closed" at exit. anyio's ``Process.aclose`` closes all three pipes.
    The process is looked up before ``disconnect`` forgets it; an SDK without these attributes is
    disconnected as before.
    """
    process = getattr(getattr(client, "_transport", None), "_process", None)
    try:
        await client.disconnect()
    finally:
        aclose = getattr(process, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(aclose(), PIPES_CLOSE_TIMEOUT_S)
