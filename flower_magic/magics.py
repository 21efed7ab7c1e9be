"""``%flower`` / ``%%flower``: the default workflow in the notebook's directory, streamed in the cell.

A thin adapter: arguments become ``GoOptions`` (the same meaning as the ``flower`` command's flags),
user mistakes become one-line ``UsageError``s before anything on disk changes, and the workflow runs
in a worker thread with its own event loop while the cell's thread answers the agent's questions
(an input prompt) and turns the kernel's Interrupt into the engine's interrupt.

Guarantees:
    - The workspace is ``%config FlowerMagics.workspace`` when set, else the notebook's directory as
      a front end names it (``__vsc_ipynb_file__``, papermill's ``PAPERMILL_INPUT_PATH``,
      ``JPY_SESSION_NAME`` / ``__session__``), else the kernel's starting directory; the run dir is
      absolute under it: ``%cd`` elsewhere never changes which run continues.
    - When no front end names the notebook (papermill, nbclient, a plain kernel), the first thing
      flower shows in the kernel (the ``%load_ext`` output, else the first ``%flower``'s) is one line
      naming the folder the run is bound to, why, and how to choose another; again whenever that
      guessed folder changes.
    - Interrupt (the kernel's ■) stops the agent at the next message boundary, records the step as
      ``interrupted-by-human`` and keeps its session; ``%flower "words"`` then resumes it.
    - When the kernel shuts down the step in flight is recorded (``rescue``); when the kernel process
      dies the Claude Code CLI dies with it (parent-death signal), so two agents never share a session.
    - A run holds the run dir's lock (``core.runlock``) from before anything is written until its
      thread ends; a ``%flower`` on a directory another run holds (another notebook, a terminal, or
      this kernel's previous run still winding down) fails with one ``UsageError`` line saying who
      holds it, and writes nothing. ``--status`` and ``--panel`` only read and never wait for it.
    - A run in a cell keeps its event log, live state and inbox (``core.live.LiveRun``) from the moment
      it holds the lock; its end record is written before the lock is released, so a follower sees
      the end, not a vanished process.
    - A run's header is the cell's first output, shown once the run holds its lock and before the
      Claude Agent SDK is imported (seconds in a fresh kernel), saying it waits for the agent to start.
    - ``--bg`` is checked as a cell run is (a mistake writes nothing), then runs in a runner process
      (``flower_magic.runner``) that no kernel restart stops; the cell follows it and returns as soon
      as the runner holds the run (its pid said), before the runner has imported the SDK.
    - ``%load_ext`` in a directory whose run is live (a background run that outlived a restart) names
      it, the question it waits on, and how to follow and answer it; when the kernel shuts down or
      restarts, cells following a run are left static, saying that it goes on and how to follow it.
    - A directory whose run is live (its process holds the lock) is never run twice: ``%flower``
      follows it (``display.attach``), words are a remark to it, ``--stop`` stops it, ``--new`` is
      refused; talking to it only writes a message into its inbox.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from IPython.core.error import StdinNotImplementedError, UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import MagicArgumentParser
from IPython.utils.process import arg_split  # type: ignore[attr-defined]  # public, not re-exported
from traitlets import Bool, Float, Int, Unicode, validate

from flower_magic.core.errors import FlowerError, check_dir, disk_error, logged
from flower_magic.core.printable import printable
from flower_magic.core.words import pick_lang_or_default, say, short_path
from flower_magic.front.flags import MAGIC, add_flags, given, go_options
from flower_magic.front.options import DEFAULT_ROUNDS, GoError, GoOptions
from flower_magic.front.outcome import Ending

log = logging.getLogger(__name__)
JOIN_POLL_S = 0.1  # how often the cell's thread looks for questions while the run goes
WIND_DOWN_S = 30.0  # after an Interrupt: how long to wait for the agent to stop cleanly
# jupyter_client's shutdown interrupts the kernel, then sends the shutdown request within milliseconds:
# an Interrupt waits this long to see whether the kernel is going before it says "interrupted".
SHUTDOWN_FOLLOWS_S = 0.2
_LIVE_LAUNCHES: weakref.WeakSet[Any] = weakref.WeakSet()  # runs of this kernel, for a shutdown to end

# The Claude Agent SDK takes seconds to import (it brings mcp, jsonschema and pydantic's models). A
# %flower cell shows its header first and waits for the SDK after (``_warmed``); %load_ext starts that
# import in the background, so a %flower typed a few seconds later finds it done or under way, and
# %load_ext itself stays as quick as before. What the cell needs before its header comes first
# (PAINT_MODULES, a fraction of a second), so the header never waits behind the SDK.
PAINT_MODULES = (
    "ipywidgets",
    "flower_magic.display",
    "flower_magic.display.widgets",
    "flower_magic.display.attach",
    "flower_magic.core.goal",
    "flower_magic.core.handoff",
    "flower_magic.stores.backend",
    "flower_magic.workflow.starter",
    "flower_magic.front.launch",
    "flower_magic.kernel",
    "flower_magic.core.notebook",
)
WARM_MODULES = ("claude_agent_sdk",)
PAINT_WAIT_S = 5.0  # the longest a cell waits for PAINT_MODULES imported by the warm-up (a slow disk)
_warming: threading.Thread | None = None
_painted = threading.Event()  # PAINT_MODULES are imported


def _warm_up() -> None:
    for name in PAINT_MODULES:
        with logged(log, f"importing {name} ahead of the first run"):
            importlib.import_module(name)
    _painted.set()
    for name in WARM_MODULES:
        with logged(log, f"importing {name} ahead of the first run"):
            importlib.import_module(name)


def _paint_ready() -> None:
    """Before a cell imports what its view needs: if the warm-up is importing those same modules, let it
    finish them (a fraction of a second) rather than import them from two threads at once, where a
    module caught half-initialised would fail. The SDK, imported after them, is not waited for here."""
    if _warming is not None and _warming.is_alive():
        _painted.wait(PAINT_WAIT_S)


def _start_warming(ipython: Any) -> Callable[..., None]:
    """A ``post_run_cell`` callback that starts the background import once the %load_ext cell is
    done (started inside the cell, it would slow %load_ext by competing for the interpreter)."""

    def start(*_: Any) -> None:
        global _warming
        with logged(log, "unregistering the warm-up"):
            ipython.events.unregister("post_run_cell", start)
        if _warming is None:
            _warming = threading.Thread(target=_warm_up, name="flower-warm-up", daemon=True)
            _warming.start()

    return start


def _warmed() -> None:
    """The SDK imported, on the warm-up thread (started here when %load_ext's has not been yet, as when
    %flower is in the %load_ext cell): a run imports nothing heavy itself, since two threads importing
    the same modules at once could see each other's half-initialised modules. The cell's thread only
    waits, so an Interrupt ends the wait at once (the import goes on, harmless)."""
    global _warming
    if _warming is None:
        _warming = threading.Thread(target=_warm_up, name="flower-warm-up", daemon=True)
        _warming.start()
    _warming.join()


# What the JupyterLab extension renders and acts on (src/magicOutput.ts, PANEL_MIME); the folder's
# absolute path goes in the message's transient part (PANEL_TRANSIENT), which no notebook saves.
PANEL_MIME = "application/vnd.flower-magic.panel+json"
PANEL_TRANSIENT = "flower_magic_panel"


# papermill's --inject-input-path (or --inject-paths) puts the notebook's path, as given on its
# command line, into the kernel's namespace under this name; nothing else it runs tells the kernel.
PAPERMILL_INPUT = "PAPERMILL_INPUT_PATH"


@dataclass(frozen=True)
class Binding:
    """The folder a run in this kernel is bound to (its workspace), and who chose it.

    Attributes:
        folder: the workspace, absolute.
        chosen_by: ``"setting"`` (``%config FlowerMagics.workspace``), ``"notebook"`` (a front end
            named the notebook's file) or ``"start"`` (nobody did: the kernel's starting folder).
    """

    folder: Path
    chosen_by: str

    @property
    def is_guess(self) -> bool:
        """Nobody named the folder: a person may not expect it, so flower says which one it is."""
        return self.chosen_by == "start"


def binding(shell: Any, setting: str = "") -> Binding:
    """Where a run in this kernel happens (see the module docstring).

    Args:
        shell: the IPython shell (its namespace and starting folder are read).
        setting: ``FlowerMagics.workspace``; relative = under the kernel's starting folder.
    """
    start = Path(getattr(shell, "starting_dir", None) or os.getcwd())
    if setting.strip():
        return Binding((start / Path(setting.strip()).expanduser()).resolve(), "setting")
    ns = getattr(shell, "user_ns", {}) or {}
    given = ns.get(PAPERMILL_INPUT)
    if isinstance(given, str) and given and not os.path.isabs(given):
        # Relative to where papermill started: the kernel's starting folder unless --cwd moved it,
        # so it counts only when the notebook is really there.
        given = str(start / given) if (start / given).is_file() else None
    for candidate in (ns.get("__vsc_ipynb_file__"), given, os.environ.get("JPY_SESSION_NAME"), ns.get("__session__")):
        if isinstance(candidate, str) and os.path.isabs(candidate):
            folder = Path(candidate).parent
            if folder.is_dir():
                return Binding(folder.resolve(), "notebook")
    return Binding(start.resolve(), "start")


def bound_line(where: Binding, lang: str) -> str:
    """The one line that names a guessed folder, says why, and how to choose another."""
    # A folder's name may hold escapes. The folder itself: ~/x, or its name (never its whole path).
    return say("bound_to_start", lang, folder=printable(short_path(where.folder, where.folder)))


def _parser() -> MagicArgumentParser:
    """``%flower``'s parser: the flags of ``front.flags`` (help in FLOWER_LANG's language); a
    mistake raises a one-line ``UsageError``."""
    parser = MagicArgumentParser(prog="%flower", add_help=False)
    return add_flags(parser, MAGIC, pick_lang_or_default())  # type: ignore[return-value]


PARSER = _parser()


def _rescue_all() -> None:
    for launch in list(_LIVE_LAUNCHES):
        launch.end_now(Ending.CLOSED)
    if "flower_magic.display.attach" in sys.modules:  # some cell follows a run: leave it static, not dead
        from flower_magic.display.attach import let_go_all

        let_go_all()


def _on_exit_now(change: Any) -> None:
    # ipykernel sets shell.exit_now on a shutdown or restart request (on its control thread), while
    # the cell's thread may still be inside %flower; record the step in flight before it goes.
    if change.get("new"):
        _rescue_all()


HELP_LANG = pick_lang_or_default()  # ``%config FlowerMagics`` says its help in FLOWER_LANG's language at import


@magics_class
class FlowerMagics(Magics):
    """Settings that persist across cells: ``%config FlowerMagics.lang = "en"`` and so on."""

    lang = Unicode("", help=say("config_lang", HELP_LANG)).tag(config=True)
    rounds = Int(DEFAULT_ROUNDS, help=say("config_rounds", HELP_LANG)).tag(config=True)
    timeout = Float(1800.0, help=say("config_timeout", HELP_LANG)).tag(config=True)
    verbose = Bool(False, help=say("config_verbose", HELP_LANG)).tag(config=True)
    run_dir = Unicode("", help=say("config_run_dir", HELP_LANG)).tag(config=True)
    workspace = Unicode("", help=say("config_workspace", HELP_LANG)).tag(config=True)
    context = Bool(True, help=say("config_context", HELP_LANG)).tag(config=True)
    sessions = Unicode("", help=say("config_sessions", HELP_LANG)).tag(config=True)

    @validate("sessions")
    def _sessions_without_password(self, proposal: Any) -> str:
        # `%config FlowerMagics` prints every value: the password is kept aside, the trait shows the rest.
        from flower_magic.core.storage import StoreLocation

        text = str(proposal["value"] or "")
        try:
            location = StoreLocation.parse(text)
        except ValueError:  # said as a UsageError by the next %flower; what follows "://" may hold a password
            self._sessions_password = ""
            return text.split("://", 1)[0] + "://…" if "://" in text else text
        self._sessions_password = location.password
        return text if location.is_default else location.redacted

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._told: Path | None = None  # the guessed folder this kernel has been told about
        from flower_magic.kernel import CellErrors

        self.errors = CellErrors()  # recorded by a post_run_cell callback from %load_ext
        self._seen: dict[Path, Any] = {}  # run dir -> what the last wake's notebook block said

    def _sessions_setting(self) -> str:
        """``%config FlowerMagics.sessions`` with its password put back (to connect with, never to show)."""
        from flower_magic.core.storage import StoreLocation

        password = getattr(self, "_sessions_password", "")
        if not self.sessions or not password:
            return self.sessions
        try:
            location = StoreLocation.parse(self.sessions)
        except ValueError:
            return self.sessions
        return StoreLocation(**{**location.record(), "password": password}).conninfo()

    def where(self, lang: str | None = None, words: str = "") -> Binding:
        """The folder runs are bound to; the first time it is a guess (or a new guess), say so first
        (in ``lang``, else the language of the task's ``words``, as ``_lang`` settles it)."""
        if "\x00" in self.workspace:  # no path can hold it: one line now, not a traceback from the OS
            said = say("opt_nul", self._lang(lang, words), what=say("what_workspace", self._lang(lang, words)))
            raise UsageError(f"%flower: {said}")
        bound = binding(self.shell, self.workspace)
        if bound.is_guess and bound.folder != self._told:
            from IPython.display import display

            self._told = bound.folder
            display({"text/plain": bound_line(bound, self._lang(lang, words))}, raw=True)
        return bound

    @line_cell_magic
    def flower(self, line: str, cell: str | None = None) -> None:
        """Run the flower workflow in this notebook's directory, or continue it.

        ``%flower "task"`` starts (or, in a directory with a run, adds a remark at wake);
        ``%flower`` continues; ``%flower --new "task"`` archives and starts fresh (``/new`` as the task
        does the same); ``%%flower [flags]`` takes the cell body as the task, multi-line.
        ``%flower --status`` shows the wake banner, the goal list and the latest manifest rows.
        ``%flower --panel`` opens the Flower panel in JupyterLab on this notebook's run (alone, no task).
        ``%flower --bg "task"`` runs in a process of its own: the cell shows the run and returns at
        once; the run goes on through kernel restarts (no notebook context: it has no kernel to see).
        On a directory whose run is live, ``%flower`` follows it in the cell (its story so far, then
        live), ``%flower "words"`` gives it the words (it resumes the same session with them) and
        follows, and ``%flower --stop`` stops it (the step recorded as interrupted, the session kept).
        """
        _paint_ready()
        panel = self._panel_args(line)
        if panel is not None:
            self._panel(panel, cell)
            return
        opts, args = self._options(line, cell)
        if args.status:
            self._status(opts)
            return
        if args.stop:
            self._stop(opts, args)
            return
        from flower_magic.core.live import live_state

        state = live_state(opts.rundir.path)
        if state is not None and state.live:
            self._to_live(opts, state)
            return
        if args.bg:
            self._bg(opts)
            return
        self._run(opts)

    # -- arguments ----------------------------------------------------------------------------------

    def _lang(self, asked: str | None = None, words: str = "") -> str:
        """The language for a line said before the options are checked, settled as a run's is
        (``front.options.settle_lang``): the one asked for, else ``FLOWER_LANG``, else the task's
        ``words``, else the language this notebook's run dir remembers; zh for one that is no language."""
        from flower_magic.front.options import settle_lang

        def remembered() -> str | None:
            from flower_magic.core.live import run_lang
            from flower_magic.core.rundir import RunDir

            try:
                return run_lang(RunDir.at(binding(self.shell, self.workspace).folder, self.run_dir or None).path)
            except (OSError, ValueError):
                return None

        try:
            return settle_lang(asked or self.lang, words, remembered)
        except ValueError:
            return "zh"

    def _options(self, line: str, cell: str | None) -> tuple[GoOptions, argparse.Namespace]:
        try:
            # Shell-like words, quotes removed: %flower "a task" gives the task a task, not '"a task"'.
            argv = arg_split(line, posix=True, strict=True)
        except ValueError:  # unbalanced quotes
            raise UsageError(say("bad_quotes", self._lang(words=line))) from None
        args = PARSER.parse_args(argv)
        words = " ".join(args.task).strip()
        if cell is not None:
            body = cell.strip()
            if words and body:
                raise UsageError(say("both_task_and_body", self._lang(args.lang, words + body)))
            words = body
        settings = {
            "run_dir": self.run_dir,
            "rounds": self.rounds,
            "timeout": self.timeout,
            "verbose": self.verbose,
            "lang": self.lang,
            "context": self.context,
            "sessions": self._sessions_setting(),
        }
        opts = go_options(args, task=words, workspace=self.where(args.lang, words).folder, fallback=settings)
        try:
            opts.check()
        except GoError as exc:
            raise UsageError(f"%flower: {exc}") from None
        return opts, args

    # -- --panel ------------------------------------------------------------------------------------

    def _panel_args(self, line: str) -> argparse.Namespace | None:
        """The parsed arguments when the line asks for ``--panel``, else None (``_options`` then parses)."""
        try:
            argv = arg_split(line, posix=True, strict=True)
        except ValueError:  # unbalanced quotes: _options says so
            return None
        args = PARSER.parse_args(argv)
        return args if args.panel else None

    def _panel(self, args: argparse.Namespace, cell: str | None) -> None:
        """Ask the JupyterLab extension to open the Flower panel on this notebook's directory.

        The kernel knows only the absolute directory; the extension turns it into a path under the
        server root (or falls back to the folder of the notebook that ran the cell). The nonce lets the
        extension act once per output; a saved output never reopens the panel.
        """
        extra = [f for f in given(args) if f != "--panel"]
        if args.task:
            extra.insert(0, " ".join(args.task))
        if cell is not None and cell.strip():
            extra.append(say("a_cell_body", self._lang()))
        if extra:
            raise UsageError(say("panel_alone", self._lang(), extra=", ".join(extra)))
        import uuid

        from IPython.display import display

        from flower_magic.core.rundir import RunDir

        here = self.where().folder
        try:  # %config FlowerMagics.workspace may name a file: say so, as a run would
            check_dir("workspace", here, self._lang())
        except FlowerError as exc:
            raise UsageError(str(exc)) from None
        # A terminal IPython prints text/plain as it is; the folder as the banner says it (a saved
        # notebook carries no absolute path: that goes in the message's transient part only).
        shown, lang = printable(short_path(here, here)), self._lang()
        request = {"nonce": uuid.uuid4().hex, "where": shown}
        # %config FlowerMagics.run_dir: the panel reads the same run dir, when it lies under the folder.
        with contextlib.suppress(ValueError):
            request["run_dir"] = RunDir.at(here, self.run_dir or None).path.relative_to(here).as_posix()
        if not self._in_jupyter_server_front_end():
            display({"text/plain": say("panel_elsewhere", self._lang(), where=shown)}, raw=True)
            return
        display(
            {
                PANEL_MIME: request,
                "text/plain": say("lab_open_plain", lang, where=shown, command=say("lab_command", lang)),
            },
            raw=True,
            transient={PANEL_TRANSIENT: {"path": str(here)}},
        )

    def _in_jupyter_server_front_end(self) -> bool:
        """The kernel serves a front end of jupyter_server (JupyterLab, Notebook 7), which names each
        kernel's session (JPY_SESSION_NAME); terminal IPython, VS Code and nbclient have no panel."""
        shell = self.shell
        return (
            shell is not None
            and getattr(shell, "kernel", None) is not None
            and bool(os.environ.get("JPY_SESSION_NAME"))
            and "__vsc_ipynb_file__" not in shell.user_ns
        )

    # -- --status -----------------------------------------------------------------------------------

    def _status(self, opts: GoOptions) -> None:
        from IPython.display import display

        from flower_magic.display.bundles import status_of

        try:
            opts.preflight(run=False)
        except FlowerError as exc:
            raise UsageError(str(exc)) from None
        display(status_of(opts), raw=True)

    # -- a live run: follow it, talk to it ---------------------------------------------------------------

    def _stop(self, opts: GoOptions, args: argparse.Namespace) -> None:
        """``%flower --stop``: ask the live run to stop (alone: no task, no --new, no --bg)."""
        from IPython.display import display

        from flower_magic.core.live import NotLive, post

        extra = [f for f in ("--new", "--bg") if getattr(args, f.lstrip("-"), False)]
        if opts.task:
            extra.insert(0, opts.task[:80])
        if extra:
            raise UsageError(say("live_stop_alone", opts.lang, extra=", ".join(extra)))
        from flower_magic.front.outcome import typed_in

        try:
            post(opts.rundir.path, "stop", source="notebook", lang=opts.lang)
        except NotLive:
            raise UsageError(say("live_no_stop", opts.lang)) from None
        except FlowerError as exc:
            raise UsageError(str(exc)) from None
        display({"text/plain": say("live_stop_sent", opts.lang, cmd=typed_in(opts.rundir.path, "%flower"))}, raw=True)

    def _to_live(self, opts: GoOptions, state: Any) -> None:
        """A directory whose run is live (``core.live``): words are a remark to it; then follow it.
        ``--new`` is refused: the live run must stop first."""
        from flower_magic.core.live import NotLive, post

        if opts.new:
            where = short_path(opts.rundir.path, opts.workspace)
            raise UsageError(say("live_busy_new", opts.lang, path=where, stop="%flower --stop"))
        # The view speaks the run's language (its start record), unless one was asked for; these lines
        # are in it too.
        lang = opts.live_lang()
        front = say(f"front_{state.front_end}", lang) if state.front_end else "?"
        lead = [[("dim", say("live_attached", lang, pid=state.pid, front=front))]]
        if opts.task:
            try:
                post(opts.rundir.path, "remark", text=opts.task, source="notebook", lang=opts.lang)
            except NotLive:  # it ended since we looked: the words would be a new run's task
                raise UsageError(say("live_no_run", opts.lang)) from None
            except FlowerError as exc:
                raise UsageError(str(exc)) from None
            lead.append([("note", say("live_remark_sent", lang))])
        self._follow(opts, lead)

    def _follow(self, opts: GoOptions, lead: list[Any], lead_ended: list[Any] | None = None) -> Any:
        """Show the run of this directory in the cell and follow it from a daemon thread; returns at once."""
        from flower_magic.core.goal import Goal
        from flower_magic.display.attach import follow

        goal = Goal.load(opts.rundir.snapshot().goal)
        kernel = getattr(self.shell, "kernel", None)
        return follow(
            opts.rundir.path,
            lang=opts.live_lang(),
            lang_asked=opts.lang_chosen,
            interactive=bool(getattr(kernel, "_allow_stdin", True)),
            lead=lead,
            lead_ended=lead_ended or (),
            goal_checks=list(goal.checks) if goal else (),
            workspace=opts.workspace,
        )

    def _bg(self, opts: GoOptions) -> None:
        """``%flower --bg``: planned here as a foreground run is (a mistake writes nothing), then started
        in a runner process (``flower_magic.runner``) and followed here; the cell returns as soon as the
        runner holds the run (its pid said), before it has imported the SDK."""
        from flower_magic.runner import prepare

        try:  # first: it imports the engine in its own process while this kernel checks
            starting = prepare(opts)
        except FlowerError:
            starting = None  # the plan below says why, if it is a mistake (a workspace that is no folder)
        try:
            self._plan(opts).abandon()
        except BaseException:
            if starting is not None:
                starting.cancel()
            raise
        try:
            starting = starting or prepare(opts)
        except FlowerError as exc:
            raise UsageError(str(exc)) from None
        starting.begin(opts, front_end="notebook")
        with logged(log, "importing the view while the runner starts"):
            importlib.import_module("flower_magic.display.widgets")
        try:
            pid = starting.wait()
        except FlowerError as exc:
            raise UsageError(str(exc)) from None
        follow = say("runner_follow_magic", opts.lang)
        started = [("dim", say("runner_started", opts.lang, pid=pid, follow=follow))]
        self._follow(opts, [started], [[("dim", say("runner_ended", opts.lang, pid=pid))]])

    # -- a run ----------------------------------------------------------------------------------------

    def _plan(self, opts: GoOptions) -> Any:
        """A ``front.launch.Launch`` of ``opts`` in this kernel, planned: every mistake said as one line."""
        from flower_magic.front.launch import Launch

        launch = Launch(opts, front_end="notebook")
        try:
            launch.plan()
        except FlowerError as exc:
            raise UsageError(str(exc)) from None
        return launch

    def _run(self, opts: GoOptions) -> None:
        """A run in the cell: mistakes are told at once (``plan``); the lock is taken and the header shown
        (saying it waits for the agent to start) before the SDK is imported, which takes seconds in a
        fresh kernel; then the run."""
        from flower_magic.core.live import heard_line

        launch = self._plan(opts)
        seen = launch.look()
        from flower_magic.core.goal import Goal
        from flower_magic.core.handoff import default_window
        from flower_magic.display import RunView

        goal = Goal.load(seen.facts.goal)
        kernel = getattr(self.shell, "kernel", None)
        lang = opts.lang
        view = RunView(
            lang,
            verbose=opts.verbose,
            rounds=max(1, opts.rounds) if opts.goal else 0,
            goal_checks=list(goal.checks) if goal and not opts.new else (),
            banner_facts=seen.facts if seen.waking else None,
            # Headless (nbclient, papermill): no widgets, one display updated in place.
            interactive=bool(getattr(kernel, "_allow_stdin", True)),
            window=opts.window or default_window(),
            workspace=opts.workspace,
        )
        view.wait_for(say("hdr_wait_agent", lang))
        try:  # the lock before the header: a directory another run holds is one line, and no view
            launch.hold(view_sink=view.sink, heard=lambda record: view.line(heard_line(record, lang)))
        except BaseException as exc:
            view.close()
            told = exc if isinstance(exc, FlowerError) else disk_error(exc, lang)
            if told is not None:
                raise UsageError(str(told)) from None
            raise
        view.show()
        try:
            _warmed()
        except KeyboardInterrupt:  # before the run began: its log ends interrupted, the lock goes
            launch.abandon()
            view.close(launch.outcome)
            raise
        from flower_magic.kernel import Proposals

        proposals = Proposals(self.shell, opts.lang)
        launch.notebook = self._notebook(opts, proposals)
        self._go(launch, view, proposals)

    def _notebook(self, opts: GoOptions, proposals: Any) -> Any:
        """The notebook's context of this wake (``core.notebook``), read now, on the kernel's thread;
        None with ``--no-context`` / ``%config FlowerMagics.context = False``."""
        if not opts.context:
            return None
        from flower_magic.core.notebook import NotebookContext
        from flower_magic.kernel import ShellSource

        assert opts.run_dir is not None  # check() made it absolute
        notebook = NotebookContext(ShellSource(self.shell, self.errors, proposals), seen=self._seen.get(opts.run_dir))
        notebook.take()
        self._seen[opts.run_dir] = notebook.seen
        return notebook

    def _go(self, launch: Any, view: Any, proposals: Any) -> None:
        """The run itself, in the cell: applied, run on a worker thread, its ending shown."""
        from flower_magic.core.live import heard_line

        lang = launch.opts.lang
        try:
            starter = launch.apply(view_sink=view.sink, heard=lambda record: view.line(heard_line(record, lang)))
        except BaseException as exc:
            view.close(launch.outcome)
            told = exc if isinstance(exc, FlowerError) else disk_error(exc, lang)
            if told is not None:
                raise UsageError(str(told)) from None
            raise
        if launch.found is not None:
            view.say("dim", say("previous_found", lang, how=launch.found.headline(lang)))
        if launch.opts.demo:
            view.say("dim", say("demo_on", lang))
        view.attach(starter.channel.answer)
        view.show()
        _LIVE_LAUNCHES.add(launch)
        launch.closing = lambda: bool(getattr(self.shell, "exit_now", False))
        runner = _Runner(launch, view)
        try:
            runner.start()
            self._wait(runner, launch, proposals, ask=not view.answers_in_place)
        finally:
            proposals.finish()  # cells the agent proposed, shown (or the next input pre-filled)
            if runner.ident is None:  # the thread never started: the launch never ran
                launch.end_now(Ending.FAILED)
            # A second Interrupt returns the cell while the run still winds down: its ending is known.
            view.close(launch.outcome or launch.ending_so_far(), "%flower")

    def _wait(self, runner: _Runner, launch: Any, proposals: Any, *, ask: bool = True) -> None:
        """Serve questions (``ask``: with input(); else the view's widget answers them) and show proposed
        cells while the run goes; turn Interrupt into the run's ``interrupted`` ending."""
        channel, lang = launch.starter.channel, launch.opts.lang
        asked: set[str] = set()
        try:
            while runner.is_alive():
                if ask:
                    self._answer_questions(channel, asked, lang)
                proposals.deliver()
                runner.join(JOIN_POLL_S)
        except KeyboardInterrupt:
            # A shutdown or restart interrupts the cell first and asks the kernel to go a moment later:
            # that is a closed kernel, not a person's ■ (its ending says which).
            with contextlib.suppress(KeyboardInterrupt):
                deadline = time.monotonic() + SHUTDOWN_FOLLOWS_S
                while not launch.closing() and time.monotonic() < deadline:
                    time.sleep(0.01)
            launch.interrupt(cause=Ending.CLOSED if launch.closing() else Ending.INTERRUPTED)
            # A second Interrupt returns at once; the worker then finishes on its own.
            with contextlib.suppress(KeyboardInterrupt):
                runner.join(WIND_DOWN_S)
        error = launch.error
        if error is not None and not runner.is_alive():
            told = error if isinstance(error, FlowerError) else disk_error(error, lang)
            if told is not None:
                raise UsageError(str(told)) from None
            raise error

    @staticmethod
    def _answer_questions(channel: Any, asked: set[str], lang: str = "zh") -> None:
        for ask in channel.pending():
            if ask.id in asked:
                continue
            asked.add(ask.id)
            try:
                # The view already shows the question and its numbered options: the prompt only says
                # how to answer, so the question is on the page once.
                answer = input(say("answer_prompt", lang))
            except StdinNotImplementedError:
                # No one can answer here (nbclient, papermill): the agent decides and records it.
                channel.nobody_answers()
                return
            except EOFError:
                channel.nobody_answers()
                return
            channel.answer(ask.id, answer)


class _Runner(threading.Thread):
    """The launch's run in its own thread and event loop, so the cell's thread stays free for input()
    and for the kernel's KeyboardInterrupt."""

    def __init__(self, launch: Any, view: Any) -> None:
        super().__init__(name="flower-run", daemon=True)
        self.launch, self.view = launch, view

    def run(self) -> None:
        try:
            self.launch.run(on_step=self.view.on_step)
        finally:
            # Registered until the run has ended, not until the cell returns: a shutdown that cuts the
            # cell short must still find the step in flight and record it.
            _LIVE_LAUNCHES.discard(self.launch)


# ``%flower?`` shows the flags after the docstring, as magic_arguments would.
FlowerMagics.flower.__doc__ = f"{FlowerMagics.flower.__doc__ or ''}\n{PARSER.format_help()}"


def load(ipython: Any) -> None:
    """Register the magics; if the notebook's directory holds a run, show what it remembers."""
    if _warming is None:
        ipython.events.register("post_run_cell", _start_warming(ipython))
    ipython.register_magics(FlowerMagics)
    atexit.register(_rescue_all)
    with logged(log, "load"):
        ipython.observe(_on_exit_now, names="exit_now")
    magics = ipython.magics_manager.registry["FlowerMagics"]
    # Which cell raised what, for the agent's notebook context (a cell's own result says it).
    ipython.events.register("post_run_cell", magics.errors.record)
    try:
        from flower_magic.core.live import live_state
        from flower_magic.core.rundir import RunDir
        from flower_magic.front.options import snapshot

        # The same folder and run dir a %flower in this notebook would use (%config included).
        rundir = RunDir.at(binding(ipython, magics.workspace).folder, magics.run_dir or None)
        facts = snapshot(rundir)
        state = live_state(rundir.path)
        if facts.waking:
            # A guessed folder is said first, in the language its run dir remembers; a fresh folder's
            # is said by the first %flower, in its task's language (nothing here says which yet).
            magics.where()
    except (OSError, ValueError, UsageError):
        log.warning("could not read what this notebook's directory remembers", exc_info=True)
        return
    lang = magics._lang()
    live = state is not None and state.live
    if facts.waking or live:
        from IPython.display import display

        from flower_magic.display import banner_bundle
        from flower_magic.front.outcome import typed_in

        cmd = typed_in(facts.rundir.path, "%flower")  # after a demo run, a plain %flower needs a key
        if facts.waking:  # on a live run the next line says how to go on
            display(banner_bundle(facts, lang, hint=not live, cmd=cmd), raw=True)
        if state is not None and live:
            display({"text/plain": live_line(state, lang)}, raw=True)


QUESTION_CHARS = 200  # the open question, as the %load_ext line quotes it; the view shows it whole


def live_line(state: Any, lang: str) -> str:
    """What %load_ext says of a run that is live in this directory (a background run that outlived a
    kernel restart, a terminal's): who runs it, the question it waits on, how to follow and answer."""
    front = say(f"front_{state.front_end}", lang) if state.front_end else "?"
    asks = [a for a in state.asks if isinstance(a, dict)]
    if not asks:
        return say("load_live", lang, pid=state.pid, front=front)
    question = printable(str(asks[0].get("question") or ""))
    if len(question) > QUESTION_CHARS:
        question = question[: QUESTION_CHARS - 1] + "…"
    return say("load_live_asking", lang, pid=state.pid, front=front, question=question, n=len(asks))


def unload(ipython: Any) -> None:
    """Remove ``%flower`` / ``%%flower``."""
    magics = ipython.magics_manager.magics
    for kind in ("line", "cell"):
        magics[kind].pop("flower", None)
    registered = ipython.magics_manager.registry.pop("FlowerMagics", None)
    if registered is not None:
        with logged(log, "unload"):
            ipython.events.unregister("post_run_cell", registered.errors.record)
    atexit.unregister(_rescue_all)
    with logged(log, "unload"):
        ipython.unobserve(_on_exit_now, names="exit_now")
