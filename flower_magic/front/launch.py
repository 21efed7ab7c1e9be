"""One owner of a run's life, for every front end: ``plan`` → ``apply`` → ``run`` → one ``Outcome``.

The kernel (``%flower``), the terminal (``flower``) and the background runner each make a ``Launch``
from their checked options and call its three phases; none of them sequences a run itself.

``plan()``
    Every check (the machine, the run dir's files, credentials, something to do), one look at the
    directory (``look``: the snapshot and whether a clarification was cut short), the start's
    decisions as data (``workflow.starter.StartPlan``: archive? save the request? amend 需求.md with
    which words?) and, last, the session store opened when it is a server's (PostgreSQL: unreachable
    is said here). Every user mistake is raised here as a ``UserError``, before a byte is written.
``apply()``
    Takes the run lock, opens the run dir's own sessions.db (creating it is a write), records a
    previous run that ended without a word (``kill -9``: its step's manifest row and its log's end,
    found, not guessed), starts this run's event log and live state,
    makes the writes the plan names, and builds the workflow and a runtime handed the open store.
    Its first part, ``hold()`` (the lock, the previous run's ending, the log and live state begun), is
    quick and imports no SDK: a front end may show the run, and the runner say it started, before the
    rest (the SDK's import takes seconds).
``run()``
    Runs the workflow to its end and returns the ``Outcome``. Whatever stops it — every step done, the
    judge not satisfied, an interrupt (the kernel's ■, Ctrl-C), a stop (``--stop``, the panel), the
    kernel shutting down, SIGTERM / SIGHUP, the store or the model gone, a bug — the ending is written
    once: one ``end`` record in the event log, ``live.json`` ended, the manifest's rows, the lock
    released.

Guarantees:
    - Nothing is written before ``apply``; a ``plan`` that raises leaves the directory byte-identical.
    - The ending is decided and written once (``_end``); a second ending (a shutdown racing the run's
      own end) is a no-op. Each step attempt has one manifest row, a rescued one included.
    - ``interrupt`` and ``end_now`` are safe from any thread; ``end_now`` is safe from a signal handler.
Not guaranteed:
    - A ``kill -9`` writes nothing: the next ``apply`` (or ``--status``, ``found_outcome``) finds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flower_magic.core.errors import FlowerError, UserError, disk_error, logged
from flower_magic.core.rundir import WORK_STEP, RunDir, Snapshot
from flower_magic.core.words import say, short_path
from flower_magic.front.options import GoError, GoOptions, model_session, on_demo_model, snapshot
from flower_magic.front.outcome import Ending, Outcome, typed

if TYPE_CHECKING:
    from flower_magic.core.live import LiveRun
    from flower_magic.core.runlock import RunLock
    from flower_magic.workflow.starter import Starter, StartPlan

log = logging.getLogger(__name__)

ENDING_WAIT_S = 3.0  # a process that is going waits this long for another thread writing the ending

STOP_REASONS = {  # what the agent's open question is settled with, by who ended the run (the model reads it)
    Ending.INTERRUPTED: "人按了中断",
    Ending.STOPPED: "人让运行停下",
    Ending.CLOSED: "内核关掉了",
    Ending.SIGNALLED: "进程被终止了",
}


@dataclass(frozen=True)
class Look:
    """What the directory holds, read once for a launch.

    Attributes:
        facts: the snapshot (brief, goals, lineage, the work session's context).
        waking: a confirmed brief exists and this is not ``--new``: words are a remark.
        resumable: there is something to continue without words (a brief, or a clarification cut short).
    """

    facts: Snapshot
    waking: bool
    resumable: bool


class Launch:
    """A run's life for one front end (see the module docstring).

    Args:
        opts: checked options (``GoOptions.check``).
        front_end: ``notebook``, ``terminal`` or ``background`` (the run lock's holder and the log's start).
        by: for a background run, who started it (``notebook`` / ``terminal``): how to continue is said
            in that front end's words.
        notebook: the notebook's context of this wake (``core.notebook.NotebookContext``), a kernel's.
        resilience: the runtime's outage policy (``core.resilience.Resilience``; None = its default).
    """

    def __init__(
        self, opts: GoOptions, *, front_end: str, by: str = "", notebook: Any = None, resilience: Any = None
    ) -> None:
        self.opts = opts
        self.front_end = front_end
        self.by = by or front_end
        self.notebook = notebook if opts.context else None
        self.resilience = resilience
        self.rundir: RunDir = opts.rundir
        self.start: StartPlan | None = None
        self.starter: Starter | None = None
        self.rt: Any = None
        self.live: LiveRun | None = None
        self.lock: RunLock | None = None
        self.found: Outcome | None = None  # how the previous run ended, when it left no word (kill -9)
        self.demo = opts.demo  # on the offline demo model (``--demo`` or the notebooks' demo mode): set by apply
        self.outcome: Outcome | None = None
        self.error: BaseException | None = None  # a bug or a disk error the run ended on
        self._store: Any = None
        self._look: Look | None = None
        self._checked = False
        self._cause: Ending | None = None
        self._asked = False  # a question was open when a person ended the run
        # Whether the process is being shut down (a kernel's exit_now): a front end that knows sets it.
        self.closing: Callable[[], bool] = lambda: False
        self._ending = threading.Lock()
        self._exit = contextlib.ExitStack()

    @property
    def cmd(self) -> str:
        """How a person runs flower where this run's words are read."""
        return "%flower" if self.by == "notebook" else "flower"

    # -- plan -----------------------------------------------------------------------------------------

    def look(self) -> Look:
        """What the directory holds (read once; read-only)."""
        if self._look is None:
            facts = snapshot(self.rundir, self.opts.sessions)
            waking = facts.waking and not self.opts.new
            self._look = Look(facts, waking, waking or (facts.cut_short and not self.opts.new))
        return self._look

    def check(self) -> None:
        """The machine (``GoOptions.preflight``): the workspace and run dir usable, the run dir's files
        flower's own, credentials unless ``--demo``. Reads only; raises a ``UserError``."""
        if not self._checked:
            self.opts.preflight(cmd=self.cmd)
            self._checked = True

    def plan(self) -> StartPlan:
        """Every check, the start's decisions, the store opened; nothing written.

        Raises:
            UserError: a mistake or a machine that cannot run this (one line, nothing written).
        """
        from flower_magic.workflow.starter import plan_start

        opts = self.opts
        self.check()
        seen = self.look()
        self.start = plan_start(
            opts.task,
            self.rundir,
            cut_short=seen.resumable,
            new=opts.new,
            lang=opts.lang,
            cmd=typed(self.cmd, demo=opts.demo),
        )
        self._store = self._open_store(remote_only=True)
        return self.start

    def _open_store(self, *, remote_only: bool) -> Any:
        """The run's session store, opened; None when it is the run dir's own SQLite file and
        ``remote_only`` (opened under the lock in ``apply``: creating sessions.db is a write, and a
        local file's troubles are the disk's, which ``check`` looked at)."""
        from flower_magic.core.handoff import HandoffPolicy
        from flower_magic.core.storage import choose_store
        from flower_magic.stores.backend import open_store

        opts = self.opts
        self._handoff = HandoffPolicy(enabled=opts.handoff, **({"window": opts.window} if opts.window else {}))
        location = choose_store(self.rundir.path, opts.sessions, opts.lang)
        if remote_only and location.is_default:
            return None
        try:
            return open_store(
                self.rundir.sessions_db,
                location=location,
                workspace=self.rundir.workspace,
                trim=opts.trim,
                line=self._handoff.at,
            )
        except (ImportError, ConnectionError) as exc:  # no driver, or PostgreSQL unreachable / refusing us
            why = getattr(exc, "why", None) or str(exc)
            raise GoError(say("sessions_unreachable", opts.lang, where=location.redacted, why=why)) from None

    def abandon(self) -> None:
        """A launch that will not run: close what its plan opened; an applied one ends ``interrupted``
        (its log ended, the lock let go). Never raises."""
        if self.rt is None:
            if self._store is not None:
                with logged(log, "closing the store of a plan not applied"):
                    self._store.close()
                self._store = None
            if self.lock is not None:  # held (``hold``), not applied: its log ends, the lock goes
                with logged(log, "abandoning a held launch"):
                    self._end(self._told(self._cause or Ending.INTERRUPTED, ""))
                self._release()
            return
        if self.outcome is None:
            with logged(log, "abandoning an applied launch"):
                self._cause = self._cause or Ending.INTERRUPTED
                self._finish(None)

    # -- apply ----------------------------------------------------------------------------------------

    def apply(
        self,
        *,
        view_sink: Callable[[Any], None] | None = None,
        heard: Callable[[dict[str, Any]], None] | None = None,
    ) -> Starter:
        """Take the lock, find how the previous run ended, start the log, write what the plan names,
        build the workflow and the runtime.

        Raises:
            UserError: the run dir is held by another run (``RunLocked``), or cannot be written; the
                lock and the store are let go, and the log (if it began) ends ``failed``.
        """
        from flower_magic.workflow.starter import apply_start

        self.hold(view_sink=view_sink, heard=heard)
        assert self.start is not None and self.live is not None
        opts = self.opts
        try:
            if self._store is None:
                self._store = self._open_store(remote_only=False)
            self._exit.enter_context(model_session(opts))
            self.starter = apply_start(
                self.start,
                clarify_only=opts.clarify_only,
                goal=opts.goal,
                rounds=max(1, opts.rounds),
                judge_can_run=opts.judge_can_run,
                max_asks=opts.max_asks,
                timeout_s=opts.timeout_s,
                on_event=self.live.sink,
                lang=opts.lang,
                notebook=self.notebook,
            )
            self.rt = self._runtime()
        except BaseException as exc:
            self._failed(exc)
            raise
        if self.starter.archived is not None:
            where = short_path(self.starter.archived, opts.workspace)
            self.live.line([("dim", say("archived", opts.lang, path=where))])
        if opts.demo:
            self.live.line([("dim", say("demo_on", opts.lang))])
        self.live.serve(self.starter.channel, self.rt)
        return self.starter

    def hold(
        self,
        *,
        view_sink: Callable[[Any], None] | None = None,
        heard: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """The first part of ``apply``, quick and without the SDK: take the lock, find how the previous
        run ended, start this run's event log and live state. From here the run is live to every
        follower; a front end may show it before the rest of ``apply`` (which imports the SDK, seconds)
        and the runner says it started. Called by ``apply`` when not called before; a second call does
        nothing. ``abandon`` after it ends the log ``interrupted`` and lets the lock go.

        Raises:
            UserError: the run dir is held by another run (``RunLocked``), or cannot be written.
        """
        from flower_magic.core.live import LiveRun
        from flower_magic.core.runlock import acquire

        if self.live is not None:
            return
        if self.start is None:
            self.plan()
        opts = self.opts
        try:
            self.lock = acquire(self.rundir.path, front_end=self.front_end, lang=opts.lang)
        except BaseException:
            self.abandon()
            raise
        self.demo = on_demo_model(opts)
        try:
            self.found = found_outcome(self.rundir.path, held=True)
            if self.found is not None:
                record_found(self.rundir, self.found)
            start = dict(start_record(opts, self.front_end), by=self.by, demo=self.demo)
            if self.found is not None:
                start["previous"] = self.found.to_record()
            self.live = LiveRun(
                self.rundir.path, front_end=self.front_end, start=start, view_sink=view_sink, heard=heard
            )
        except BaseException as exc:
            self._failed(exc)
            raise

    def _failed(self, exc: BaseException) -> None:
        """``apply`` went wrong under the lock: the log (if it began) ends ``failed`` with why, the lock goes."""
        self.error = exc
        why = str(exc) if isinstance(exc, FlowerError) else f"{type(exc).__name__}: {exc}"
        self._end(Outcome(Ending.FAILED, why=why, demo=self.demo))
        self._release()

    def _runtime(self) -> Any:
        from flower_magic.core.foreign_writer import OtherWriters
        from flower_magic.core.runtime import Runtime

        rd, opts = self.rundir, self.opts
        kw = {"resilience": self.resilience} if self.resilience is not None else {}
        rt = Runtime(
            workspace=rd.workspace, run_dir=rd.path, handoff=self._handoff, store=self._store, lang=opts.lang, **kw
        )
        rt.other_writers = OtherWriters(lang=opts.lang)
        assert self.live is not None
        rt.run_id = self.live.log.run_id  # one id for the run's rows and its log: a later start finds both
        return rt

    # -- run ------------------------------------------------------------------------------------------

    def run(self, *, on_step: Callable[[Any, Any], Any] | None = None) -> Outcome:
        """Run the workflow in a new event loop until it ends; returns how it ended (also ``self.outcome``)."""
        return asyncio.run(self.drive(on_step=on_step))

    async def drive(self, *, on_step: Callable[[Any, Any], Any] | None = None) -> Outcome:
        """``run`` in the caller's event loop. A ``KeyboardInterrupt`` or ``SystemExit`` is re-raised after
        the ending is written; any other exception is the ending's (``self.error``), not raised."""
        assert self.starter is not None and self.live is not None
        live = self.live

        def stepped(step: Any, result: Any) -> Any:
            live.on_step(step, result)
            return on_step(step, result) if on_step is not None else None

        ctx: dict[str, Any] | None = None
        try:
            ctx = await self.starter.workflow.run(self.rt, on_event=live.sink, on_step=stepped)
        except (KeyboardInterrupt, SystemExit, asyncio.CancelledError):
            # A second Ctrl-C, or SIGINT where there is no terminal (asyncio cancels the run for it).
            self._cause = self._cause or Ending.INTERRUPTED
            self._finish(ctx)
            raise
        except BaseException as exc:
            self.error = exc
            log.warning("the run ended on an error", exc_info=True)
        self._finish(ctx)
        assert self.outcome is not None
        return self.outcome

    def _finish(self, ctx: dict[str, Any] | None) -> None:
        asked = self._asked or bool(self.live is not None and self.live.state.asks)
        assert self.starter is not None
        self.starter.channel.cancel_all()
        with logged(log, "closing the runtime"):
            self.rt.close()
        self._end(self._outcome(ctx, asked=asked))
        self._release()

    def _release(self) -> None:
        with logged(log, "ending the model session"):
            self._exit.close()
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    # -- endings --------------------------------------------------------------------------------------

    def interrupt(self, words: str = "", *, cause: Ending | None = None) -> None:
        """From any thread: with ``cause`` (``INTERRUPTED``, ``STOPPED``) end the step in flight, keep its
        session, and settle an open question; without, resume the same session with ``words``."""
        if self.rt is None:
            return
        if cause is None:
            self.rt.interrupt(words)
            return
        self._cause = self._cause or cause
        self._asked = self._asked or bool(self.live is not None and self.live.state.asks)
        self.rt.interrupt("", resume=False)
        if self.starter is not None:
            self.starter.channel.cancel_all(STOP_REASONS.get(cause, STOP_REASONS[Ending.INTERRUPTED]))

    def end_now(self, cause: Ending, *, stop: bool = True) -> None:
        """The process is going (the kernel shuts down, SIGTERM): record the step in flight and the
        ending now, then (``stop``) stop the run, which nobody can see any more, should the process
        linger. Never raises. With ``stop=False`` it is safe from a signal handler (it waits for no lock)."""
        if self.rt is None or self.outcome is not None:
            return
        # The process is going: that is the ending, even over a person's interrupt it follows (a kernel's
        # shutdown interrupts the cell first).
        self._cause = cause if self._cause in (None, Ending.INTERRUPTED) else self._cause
        with logged(log, "recording the step in flight"):
            self.rt.rescue()
        step = self.live.state.step if self.live is not None else ""
        asked = bool(self.live is not None and self.live.state.asks)
        self._end(self._told(self._cause, step, asked=asked), wait=ENDING_WAIT_S if stop else False)
        if stop:
            with logged(log, "stopping a run whose process is going"):
                self.interrupt(cause=cause)

    def ending_so_far(self) -> Outcome | None:
        """The ending once written; before that, the one a person's interrupt or stop will write (a cell
        returned by a second Interrupt while the run winds down shows it); else None."""
        if self.outcome is not None or self._cause is None:
            return self.outcome
        step = self.live.state.step if self.live is not None else ""
        return self._told(self._cause, step)

    def _end(self, outcome: Outcome, *, wait: bool | float = True) -> None:
        """Write ``outcome`` unless an ending is written already. ``wait``: True, or the seconds to wait
        for another thread writing one now (a process that is going must not leave before it is on disk);
        False from a signal handler, which may have landed during that write."""
        got = self._ending.acquire(timeout=wait) if not isinstance(wait, bool) else self._ending.acquire(blocking=wait)
        if not got:
            return
        try:
            if self.outcome is not None:
                return
            self.outcome = outcome
            if self.live is not None:
                self.live.end(outcome.to_record())
        finally:
            self._ending.release()

    def _told(self, ending: Ending, step: str, *, asked: bool = False, why: str = "") -> Outcome:
        from flower_magic.core import manifest

        rt = self.rt
        # What the manifest totals now (earlier wakes too): read back, so the words and the file agree.
        run_cost = float(manifest.totals(manifest.read_rows(rt.run_dir))["cost_usd"]) if rt is not None else 0.0
        return Outcome(
            ending,
            step=step,
            why=why,
            cost_usd=float(rt.total_cost()) if rt is not None else 0.0,
            rows=len(getattr(rt, "results", ()) or ()),
            manifest=str(rt.manifest_path) if rt is not None else "",
            demo=self.demo,
            asked=asked,
            run_cost_usd=run_cost,
        )

    def _outcome(self, ctx: dict[str, Any] | None, *, asked: bool) -> Outcome:
        """How the run ended: the one place that reads the workflow's ctx for it."""
        from flower_magic.core.result import INTERRUPTED, KILLED
        from flower_magic.front.phrases import explain_error, plain

        ctx = ctx or {}
        lang = self.opts.lang
        failed = str(ctx.get("_failed_at") or "")
        result = (ctx.get("_results") or {}).get(failed) if failed else None
        error = str(getattr(result, "error", None) or "")
        why = str(ctx.get("_aborted") or "")
        running = self.live.state.step if self.live is not None else ""
        step = str(ctx.get("_interrupted") or failed or (running if self._cause else ""))
        if self.live is not None and self.live.stopped and self._cause is None:
            self._cause = Ending.STOPPED
        if self.error is not None:
            why = _error_why(self.error, lang)
            return self._told(_error_ending(self.error), step or running, asked=asked, why=why)
        if self._cause is Ending.INTERRUPTED and self.closing():
            self._cause = Ending.CLOSED  # the interrupt was a shutdown's first step
        if self._cause is not None:
            return self._told(self._cause, step or running, asked=asked)
        if ctx.get("_interrupted") or error == INTERRUPTED:
            return self._told(Ending.INTERRUPTED, step, asked=asked)
        if not failed:
            return self._told(Ending.DONE, "")
        if error == KILLED:
            return self._told(Ending.SIGNALLED, step, asked=asked)
        if result is not None and getattr(result, "ok", False) and failed == WORK_STEP and self.opts.goal:
            return self._told(Ending.NOT_REACHED, step, why=why)
        if error and _is_outage(error):
            return self._told(Ending.MODEL_UNREACHABLE, step, why=error)
        if error and _is_store_error(error):
            return self._told(Ending.STORE_UNREACHABLE, step, why=error)
        explained = explain_error(error, lang, cmd=self.cmd) if error else None
        return self._told(Ending.FAILED, step, why=why or (plain(explained) if explained else error))


def _is_outage(error: str) -> bool:
    from flower_magic.core.resilience import TRANSIENT, classify

    return classify(error) == TRANSIENT


def _is_store_error(error: str) -> bool:
    return "StoreUnreachable" in error or "session store" in error


def _error_ending(exc: BaseException) -> Ending:
    if isinstance(exc, ConnectionError) or type(exc).__name__ in ("StoreUnreachable", "OperationalError"):
        return Ending.STORE_UNREACHABLE
    return Ending.FAILED


def _error_why(exc: BaseException, lang: str) -> str:
    """What a person reads for an error that ended the run: a mistake's own line, the disk's trouble
    said as the disk's (what could not be written, and why), else the error as raised."""
    if isinstance(exc, UserError):
        return str(exc)
    disk = disk_error(exc, lang)
    return str(disk) if disk is not None else f"{type(exc).__name__}: {exc}"


# -- the previous run, when it left no word --------------------------------------------------------------


def found_outcome(run_dir: Path, *, held: bool = False) -> Outcome | None:
    """How the run dir's last run ended when it left no end record and nobody holds its lock now (it was
    killed, crashed, or the machine went down): a ``KILLED`` outcome at the step its log last started;
    None when its log ended (or there is none) or it still runs.

    Args:
        held: this process holds the run lock (``apply``): nobody else can be running it.
    """
    from flower_magic.core.live import live_pid, read_log

    records = read_log(run_dir)
    if not records or records[0].get("type") != "start" or any(r.get("type") == "end" for r in records):
        return None
    if not held and live_pid(run_dir) is not None:
        return None
    start = records[0]
    step = ""
    for record in records:
        if _is_step(record):
            step = str(record["event"].get("text") or "")[:200]
    return Outcome(Ending.KILLED, step=step, demo=bool(start.get("demo")))


def last_outcome(run_dir: Path) -> Outcome | None:
    """How the run dir's last run ended: its log's end record, else what ``found_outcome`` finds; None
    when it left no log or still runs."""
    from flower_magic.core.live import read_log

    ends = [r for r in read_log(run_dir) if r.get("type") == "end"]
    return Outcome.from_record(ends[0]) if ends else found_outcome(run_dir)


def _is_step(record: dict[str, Any]) -> bool:
    event = record.get("event")
    return record.get("type") == "event" and isinstance(event, dict) and event.get("kind") == "step"


def record_found(rundir: RunDir, found: Outcome) -> None:
    """Write what a killed run could not: the end record of its log (``found``) and the manifest row of
    the step attempt it was in (``killed-by-signal``, its session, from its start to its last record),
    unless that row exists. Never raises."""
    from flower_magic.core import manifest
    from flower_magic.core.live import EventLog, read_log
    from flower_magic.core.result import KILLED

    run_dir = rundir.path
    with logged(log, "recording how the previous run ended"):
        records = read_log(run_dir)
        if not records or any(r.get("type") == "end" for r in records):
            return  # found and written already
        start = records[0]
        run_id = str(start.get("run") or "")
        began = 0.0
        for record in records:
            if _is_step(record):
                began = float(record.get("t") or 0.0)
        last = float(records[-1].get("t") or began)
        EventLog.append_end(run_dir, dict(found.to_record(), found=True))
        if not found.step or not run_id:
            return
        rows = [r for r in manifest.read_rows(run_dir) if r.get("run") == run_id]
        if any(r.get("step") == found.step and float(r.get("started_at") or 0) >= began - 1 for r in rows):
            return  # the step's row was written before the process went (a SIGTERM's rescue)
        from flower_magic.core.lineage import Lineage

        base = found.step.split("#")[0].split("·")[0]
        sid = Lineage.open(run_dir, rundir.workspace).steps.get(base)
        row: dict[str, Any] = {
            "step": found.step,
            "session_id": sid,
            "ok": False,
            "cost_usd": 0.0,
            "num_turns": 0,
            "text": "",
            "error": KILLED,
            "started_at": began,
            "ended_at": last,
            "attempts": 1,
            "errors": [],
            "resumed": False,
            "retired": [],
            "context": 0,
            "duration_s": round(max(0.0, last - began), 2),
        }
        manifest.persist(run_dir, run_id, [*rows, row])


def start_record(opts: GoOptions, front_end: str) -> dict[str, Any]:
    """The settings a run's event log starts with (``core.live``): what a view that attaches later
    needs to show the run as its own front end does."""
    return {
        "lang": opts.lang,
        "verbose": opts.verbose,
        "rounds": max(1, opts.rounds) if opts.goal else 0,
        "window": opts.window or 0,
        "task": opts.task[:2000],
        "new": opts.new,
        "demo": opts.demo,
        "front_end": front_end,
    }


def end_on_signals(launch: Launch) -> Callable[[], None]:
    """Until the returned function is called: SIGHUP / SIGTERM (a closed terminal, ``kill``; on Windows
    the console's Ctrl-Break or close) end the run as ``SIGNALLED`` (the step in flight recorded) and
    end the process by the same signal. Main thread only (where Python runs signal handlers)."""
    import signal
    import sys

    def on_end(signum: int, frame: Any) -> None:
        launch.end_now(Ending.SIGNALLED, stop=False)  # the process ends by the signal right after
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    if sys.platform == "win32":
        ends = (signal.SIGBREAK, signal.SIGTERM)
    else:
        ends = (signal.SIGHUP, signal.SIGTERM)
    before = {s: signal.signal(s, on_end) for s in ends}

    def restore() -> None:
        for sig, handler in before.items():
            signal.signal(sig, handler)

    return restore
