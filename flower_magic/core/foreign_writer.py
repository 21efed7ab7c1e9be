"""A session someone else is still writing: wait for them to stop, never resume on top of them.

The run lock keeps our own front ends apart, but a writer that does not take it can still be alive:
the original ``flower`` runtime leaves its Claude Code process running for minutes after its own
process is killed, and that CLI keeps appending to the session's local transcript
(``$CLAUDE_CONFIG_DIR/projects/<project_key>/<sid>.jsonl``). Resuming the session then would put two
agents on one conversation. Before every attempt that resumes (or restarts) a session, the runtime
asks its ``OtherWriters`` policy, which calls ``settle``.

Guarantees:
    - One ``stat`` and nothing else when the transcript is absent or older than ``QUIET_S``.
    - A recent write no later than ``mine_until`` is the runtime's own (an earlier attempt of the same
      step, or an earlier step that ended then; that CLI has exited): no wait, unless a live
      ``claude`` names the session (someone resumed it since, and has not written yet).
    - Otherwise it returns only once the file has not changed for ``QUIET_S`` and no live
      ``claude`` process names the session in its arguments (``--resume=<sid>``,
      ``--session-id=<sid>``); if that does not happen within ``max_wait_s`` it raises
      ``SessionBusy`` and the step stops. The person is told once, through ``on_wait``, before the
      first pause.
    - On Linux, a recent file with no live ``claude`` process that names the session or works in
      the workspace is the trace of a writer that is gone (a run killed a moment ago): no wait.
Not guaranteed:
    - Seeing processes outside Linux (``claude_processes`` answers None, "unknown"): there the file's
      quiet is the only evidence, and a CLI inside a tool call longer than ``QUIET_S`` looks quiet.
    - On Linux, a CLI that started the session fresh (no id in its arguments) is known only by its
      working directory; once its file has been quiet for ``QUIET_S`` (a long tool call) we go on.
    - Writers on another host (a shared filesystem), or a ``claude`` run under another user.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from flower_magic.core.errors import SessionBusy, logged
from flower_magic.core.events import Event, Sink, emit
from flower_magic.core.project import local_transcript
from flower_magic.core.result import Plan, StepResult

# A CLI appends an entry to its transcript as each message ends; a killed process's last entry lands
# within a second of its death. Five seconds without a change is past both, and short enough that a
# run started right after a crash elsewhere barely notices the wait.
QUIET_S = 5.0
POLL_S = 0.25  # how often the file and the process table are looked at while waiting
# The original runtime's orphaned CLI ends with the turn it was in; a turn rarely runs past a few
# minutes. Longer than this, the person should decide (stop it) rather than watch a silent wait.
MAX_WAIT_S = 180.0


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaudeProcess:
    """A live Claude Code process that may write a session.

    Attributes:
        pid: its process id.
        names_session: its arguments name the session (else: it only works in the workspace).
    """

    pid: int
    names_session: bool


Finder = Callable[[str, Path], list[ClaudeProcess] | None]


def _is_claude(argv: list[str]) -> bool:
    # The program or the script it runs: .../_bundled/claude, claude-<hash> (our launcher),
    # node .../@anthropic-ai/claude-code/cli.js.
    return any("claude" in arg.lower() for arg in argv[:2])


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return True
    # "pid (comm) S ...": the comm may hold spaces and parentheses; the state follows the last ')'.
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def claude_processes(session_id: str, workspace: Path) -> list[ClaudeProcess] | None:
    """Live ``claude`` processes (not this one) that name ``session_id`` or work in ``workspace``.

    Linux only (``/proc``); None elsewhere, meaning "cannot tell". Never raises.
    """
    if not sys.platform.startswith("linux") or not os.path.isdir("/proc"):
        return None
    me = os.getpid()
    where = os.path.realpath(workspace)
    found: list[ClaudeProcess] = []
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return None
    for name in entries:
        pid = int(name)
        if pid == me:
            continue
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        argv = [a.decode("utf-8", errors="replace") for a in raw.split(b"\0") if a]
        if not _is_claude(argv):
            continue
        names = any(session_id in arg for arg in argv)
        here = False
        if not names:
            with contextlib.suppress(OSError):
                here = os.readlink(f"/proc/{pid}/cwd") == where
        if (names or here) and not _zombie(pid):
            found.append(ClaudeProcess(pid, names))
    return found


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def _lang(lang: str) -> str:
    from flower_magic.core.words import pick_lang

    try:
        return pick_lang(lang or None)
    except ValueError:
        return "zh"


async def settle(
    path: Path,
    session_id: str,
    workspace: Path,
    *,
    mine_until: float = 0.0,
    max_wait_s: float = MAX_WAIT_S,
    quiet_s: float = QUIET_S,
    on_wait: Callable[[str], None] | None = None,
    find: Finder = claude_processes,
    lang: str = "",
) -> None:
    """Return once nobody else is writing ``path``, the local transcript of ``session_id``.

    Args:
        path: the session's local transcript (``core.project.local_transcript``).
        session_id: the session about to be resumed.
        workspace: the agent's directory.
        mine_until: wall time at which this process's own CLI last exited; writes up to then are ours.
        max_wait_s: give up after this long.
        quiet_s: how long the file must stay unchanged (and how recent a write counts as live).
        on_wait: told once, with the notice to show, when waiting begins.
        find: what sees live Claude Code processes (``claude_processes``).
        lang: the language of the notice and of the error ("" = ``FLOWER_LANG`` or zh).

    Raises:
        SessionBusy: the file kept changing, or a ``claude`` naming the session stayed alive, for
            ``max_wait_s``.
    """
    first = _stamp(path)
    if first is None:
        return
    written = first[0] / 1e9
    if time.time() - written > quiet_s:
        return
    seen = find(session_id, workspace)
    if seen == [] or (written <= mine_until and not any(p.names_session for p in seen or ())):
        return
    lang = _lang(lang)
    pids = tuple(p.pid for p in seen or ())
    if on_wait is not None:
        from flower_magic.core.words import foreign_wait_line

        with logged(log, "settle"):
            on_wait(foreign_wait_line(session_id, path, pids=pids, wait_s=max_wait_s, lang=lang))
    started = time.monotonic()
    quiet_since = started - max(0.0, time.time() - written)
    last: tuple[int, int, int] | None = first
    while True:
        named = tuple(p.pid for p in find(session_id, workspace) or () if p.names_session)
        now = time.monotonic()
        if not named and now - quiet_since >= quiet_s:
            return
        if now - started >= max_wait_s:
            raise SessionBusy(session_id, path, pids=named or pids, waited_s=now - started, lang=lang)
        await asyncio.sleep(POLL_S)
        stamp = _stamp(path)
        if stamp != last:
            last, quiet_since = stamp, time.monotonic()


class _Runs(Protocol):
    workspace: Path
    env: dict[str, str]
    results: list[StepResult]


@dataclass(frozen=True)
class OtherWriters:
    """How a runtime treats a session someone else may still be writing (frozen: safe as a shared default).

    Attributes:
        max_wait_s: how long a step waits for them before it stops with ``SessionBusy``.
        quiet_s: how long the transcript must stay unchanged.
        lang: the language of the notice and the error ("" = ``FLOWER_LANG`` or zh).
    """

    max_wait_s: float = MAX_WAIT_S
    quiet_s: float = QUIET_S
    lang: str = ""

    async def before_attempt(self, runs: _Runs, plan: Plan, result: StepResult, on_event: Sink | None) -> None:
        """Before an attempt resumes (or restarts under its id) a session: ``settle`` on its local transcript.

        Args:
            runs: the runtime (its workspace, CLI environment and finished steps).
            plan: what the attempt asks for; nothing is checked for a new session.
            result: the step's result so far (its earlier attempts ran on ``result.session_id``).
            on_event: told once, with a ``retry`` event, if the step has to wait.

        Raises:
            SessionBusy: someone else kept writing the session for ``max_wait_s``.
        """
        sid = plan.resume or plan.session_id
        if not sid:
            return
        # Our own CLI wrote it: in an earlier attempt of this step (it has exited: attempts are
        # sequential), or in an earlier step, up to the moment that step ended.
        ended = [r.ended_at for r in runs.results if r.session_id == sid]
        mine_until = time.time() if result.session_id == sid else max(ended, default=0.0)
        payload = {"step": result.step, "foreign_writer": sid}

        def notice(text: str) -> None:
            emit(on_event, Event("retry", text, payload=payload))

        await settle(
            local_transcript(runs.workspace, sid, runs.env),
            sid,
            runs.workspace,
            mine_until=mine_until,
            max_wait_s=self.max_wait_s,
            quiet_s=self.quiet_s,
            on_wait=notice,
            lang=self.lang,
        )
