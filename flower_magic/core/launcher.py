"""Starting the Claude Code CLI so that it dies with the process that started it.

When a kernel or a ``flower`` process is killed (``kill -9``, an OOM kill, a crashed terminal), the
CLI child would otherwise go on: it finishes its turn with stdin closed, keeps calling the API and
writing a transcript nobody mirrors — and the next run would then be a second agent on the same
session. What ties the CLI to its parent depends on the platform (``FLOWER_WATCHDOG`` chooses):

- Linux (``auto``): a launcher that sets ``PR_SET_PDEATHSIG`` to SIGKILL (``setpriv --pdeathsig``,
  or ``prctl`` from a Python stub where util-linux is missing) and execs the CLI: the kernel kills
  it the moment its parent dies.
- macOS and other POSIX systems (``auto``), or any POSIX system with ``portable``: a launcher that
  runs ``core.watchdog``, which relays the CLI's stdin and kills the CLI when the parent's end of
  that pipe closes and the parent is gone.
- Windows (``auto`` or ``portable``): the bundled CLI as it is, put into a kill-on-close Job object
  (``core.winjob``) by ``tie`` as soon as it has started.
- ``off``: the bundled CLI as it is, tied to nothing (to rule the launcher out when diagnosing).

A launcher is a small ``/bin/sh`` script in ``~/.cache/flower_magic/bin`` (named by the hash of its
text, written once); every path in it is quoted, so homes and interpreters with spaces or any
Unicode work.

When a step ends, ``disconnect`` lets go of the CLI so that nothing of it outlives the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flower_magic.core import watchdog
from flower_magic.core.durable import write_atomic
from flower_magic.core.errors import logged

log = logging.getLogger(__name__)

WATCHDOG_ENV = "FLOWER_WATCHDOG"
WATCHDOG_MODES = ("auto", "portable", "off")


def watchdog_mode(environ: Mapping[str, str] | None = None) -> str:
    """``FLOWER_WATCHDOG`` (``auto`` when unset or empty).

    Raises:
        ValueError: any other value, in one line naming the choices.
    """
    env = os.environ if environ is None else environ
    mode = (env.get(WATCHDOG_ENV) or "auto").strip().lower()
    if mode not in WATCHDOG_MODES:
        raise ValueError(
            f"{WATCHDOG_ENV}={env.get(WATCHDOG_ENV)!r} is not one of {', '.join(WATCHDOG_MODES)}; "
            f"unset it (auto) or set e.g. {WATCHDOG_ENV}=portable"
        )
    return mode


def mechanism(mode: str, platform: str = sys.platform) -> str:
    """What ties the CLI to its parent for ``mode`` on ``platform``: ``pdeathsig``, ``watchdog``,
    ``job`` or ``none``."""
    if mode == "off":
        return "none"
    if platform == "win32":
        return "job"
    if mode == "auto" and platform.startswith("linux"):
        return "pdeathsig"
    return "watchdog"


def bundled_cli() -> Path | None:
    """The Claude Code binary shipped inside claude-agent-sdk, if present."""
    import claude_agent_sdk

    path = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    return path if path.is_file() else None


def _cache_dirs() -> list[Path]:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    user = getattr(os, "getuid", lambda: "")()
    return [Path(base) / "flower_magic" / "bin", Path(tempfile.gettempdir()) / f"flower_magic-{user}"]


# An interpreter that ignores PYTHON* variables and site-packages and does not put the script's own
# folder (flower_magic/core, whose module names could shadow others) on sys.path.
_ISOLATED = ("-I", "-S")


def pdeathsig_script(cli: Path) -> str:
    """The Linux launcher: parent-death SIGKILL, then exec the CLI."""
    setpriv = shutil.which("setpriv")
    if setpriv:
        return f'#!/bin/sh\nexec {shlex.quote(setpriv)} --pdeathsig KILL -- {shlex.quote(str(cli))} "$@"\n'
    stub = (
        "import ctypes, os, signal, sys; "
        "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0); "  # PR_SET_PDEATHSIG
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    python, cli_q = shlex.quote(sys.executable), shlex.quote(str(cli))
    return f'#!/bin/sh\nexec {python} {" ".join(_ISOLATED)} -c {shlex.quote(stub)} {cli_q} "$@"\n'


def watchdog_script(cli: Path) -> str:
    """The portable launcher: ``core.watchdog`` runs the CLI and kills it when the parent dies."""
    python, program = shlex.quote(sys.executable), shlex.quote(str(Path(watchdog.__file__).resolve()))
    return f'#!/bin/sh\nexec {python} {" ".join(_ISOLATED)} {program} {shlex.quote(str(cli))} "$@"\n'


_cached: dict[str, str | None] = {}


def _written(script: str) -> str | None:
    """Path of an executable file holding ``script`` (written once per distinct text), or None."""
    if script in _cached:
        return _cached[script]
    name = "claude-" + hashlib.sha256(script.encode()).hexdigest()[:12]
    result: str | None = None
    for folder in _cache_dirs():
        path = folder / name
        with contextlib.suppress(OSError):
            if not (path.is_file() and path.read_text(encoding="utf-8") == script):
                write_atomic(path, script.encode("utf-8"))
            path.chmod(0o755)
            result = str(path)
            break
    _cached[script] = result
    return result


def cli_launcher(environ: Mapping[str, str] | None = None) -> str | None:
    """Path of an executable that runs the bundled CLI tied to this process, or None to let the SDK
    start the CLI itself (Windows, where ``tie`` does the tying; ``FLOWER_WATCHDOG=off``; no bundled
    CLI; or nothing could be written).

    Raises:
        ValueError: ``FLOWER_WATCHDOG`` has a value that is not one of ``WATCHDOG_MODES``.
    """
    how = mechanism(watchdog_mode(environ))
    if how not in ("pdeathsig", "watchdog"):
        return None
    cli = bundled_cli()
    if cli is None:
        return None
    script = pdeathsig_script(cli) if how == "pdeathsig" else watchdog_script(cli)
    if not sys.executable and "setpriv" not in script:
        return None  # an embedded Python that cannot name its interpreter cannot run the stub
    return _written(script)


def launcher_env() -> dict[str, str]:
    """What the CLI's environment must carry for the launcher: the pid the watchdog guards."""
    return {watchdog.PARENT_ENV: str(os.getpid())}


def tie(client: Any, environ: Mapping[str, str] | None = None) -> bool:
    """On Windows, put the started CLI of ``client`` into this process's kill-on-close Job object.

    Elsewhere, and with ``FLOWER_WATCHDOG=off``, nothing to do (False). Never raises.
    """
    try:
        if mechanism(watchdog_mode(environ)) != "job":
            return False
    except ValueError:
        return False
    pid = getattr(getattr(getattr(client, "_transport", None), "_process", None), "pid", None)
    if not isinstance(pid, int):
        return False
    from flower_magic.core import winjob

    return winjob.assign(pid)


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
            with logged(log, "disconnect"):
                await asyncio.wait_for(aclose(), PIPES_CLOSE_TIMEOUT_S)
