"""``flower``: the default workflow from a terminal, on the same files as ``%flower``.

    flower "task"            start (or, in a directory with a run, say something at wake)
    flower                   continue (on a terminal: asks first; /new starts something else)
    flower --new "task"      archive the old brief, goals and lineage; start fresh
    flower --status          what this directory remembers; runs nothing
    flower --demo "task"     the offline demo: a small scripted model, no key needed

Exit codes: 0 done, 1 stopped (the message says why), 2 a usage mistake, 130 a second Ctrl-C.
A directory another run is using (a notebook, another terminal) is refused with exit 1 and one line
saying who holds it; nothing in it is touched.
Ctrl-C once interrupts the agent and lets you say something; twice quits. SIGHUP / SIGTERM record
the step in flight in the manifest before the process goes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn

from flower_magic.core.errors import FlowerError, disk_error, logged
from flower_magic.core.live import heard_line
from flower_magic.core.words import pick_lang_or_default, say, short_path
from flower_magic.front.flags import CLI, add_flags, go_options
from flower_magic.front.launch import Launch, Look, end_on_signals, found_outcome, last_outcome
from flower_magic.front.options import GoError, GoOptions, NotText, RunDirLink, TaskTooBig, settle_lang
from flower_magic.front.outcome import Ending, Outcome, typed, typed_in
from flower_magic.front.phrases import Line, ending_lines, plain, problem_line, total_line, wake_banner
from flower_magic.terminal import TerminalView, echo
from flower_magic.workflow.starter import NEW_CMD, NoTaskError

log = logging.getLogger(__name__)


class _Parser(argparse.ArgumentParser):
    """argparse, except that a mistake is one line (what is wrong, and where the flags are listed)
    instead of the usage block: the command says a mistake in one line, whatever it is. ``lang`` is
    the language of that line (the run's, once the options have settled it)."""

    lang = ""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} ({say('see_help', pick_lang_or_default(self.lang))})\n")


def build_parser() -> _Parser:
    """``flower``'s parser: the flags of ``front.flags``, help in FLOWER_LANG's language."""
    lang = pick_lang_or_default()
    parser = _Parser(
        prog="flower", description=say("cli_about", lang), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_flags(parser, CLI, lang)
    return parser


def _words_lang(argv: list[str]) -> str:
    """The language of a command line argparse refuses (before any option is settled), as a run's is
    settled: the one asked for, else ``FLOWER_LANG``, else its words' (the flags' own names left out),
    else the language this folder's run dir remembers."""
    asked = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--lang"), "")
    asked = next((a.split("=", 1)[1] for a in argv if a.startswith("--lang=")), asked)
    words = " ".join(a for a in argv if not a.startswith("-"))
    try:
        return settle_lang(asked, words, GoOptions().remembered_lang)
    except ValueError:
        return ""


def options_from(args: argparse.Namespace) -> GoOptions:
    """Checked options from ``flower``'s parsed flags (raises GoError / TaskTooBig / NotText)."""
    return go_options(args, task=" ".join(args.task), workspace=Path(args.workspace)).check()


def _status(opts: GoOptions) -> int:
    """``flower --status``: what this directory remembers (banner, goals and latest verdict, the
    newest manifest rows), the same view as ``%flower --status``. Runs nothing, writes nothing."""
    from flower_magic.display.bundles import status_of

    try:
        opts.preflight(run=False)
    except FlowerError as exc:
        echo(f"flower: {exc}", err=True)
        return 1
    with contextlib.suppress(BrokenPipeError):  # `flower --status | head`
        echo(status_of(opts, cmd="flower")["text/plain"])
    return 0


def _prompt(lang: str, *, waking: bool) -> str:
    key = "ask_wake" if waking else "ask_fresh"
    if sys.stdin.isatty():
        echo(f"{say(key, lang)}{say(key + '_hint', lang)}")
    return input("> ")


def _ask_first(opts: GoOptions, seen: Look) -> bool:
    """No task on the command line: on a terminal, show what a plain start would go on with, then ask;
    elsewhere continue (or explain). Returns whether the wake banner was shown (the run then does not
    show it again)."""
    if not sys.stdin.isatty():
        return False
    waking = seen.resumable
    shown = False
    if waking and not opts.new:  # what "接着上次?" / "continue?" means, before it is asked
        view = TerminalView(opts.lang)
        for line in _what_continues(opts, seen):
            view.line(line)
        shown = seen.waking
    try:
        said = _prompt(opts.lang, waking=waking and not opts.new).strip()
        if said == NEW_CMD:
            opts.new = True
            said = _prompt(opts.lang, waking=False).strip()
    except (EOFError, KeyboardInterrupt):
        echo()
        raise SystemExit(say("cancelled", opts.lang)) from None
    if not said and (opts.new or not waking):
        raise SystemExit(say("empty_ask", opts.lang, cmd=typed("flower", demo=opts.demo)))
    opts.task = said
    try:
        opts.check()
    except GoError as exc:
        echo(f"flower: error: {exc}", err=True)
        raise SystemExit(2) from None
    return shown


def _what_continues(opts: GoOptions, seen: Look) -> list[Line]:
    """What a plain start here goes on with: the wake banner (a confirmed brief) and how the last run
    ended (a clarification cut short included), or the line saying a clarification is unfinished."""
    from flower_magic.core.words import short_path

    lines: list[Line] = []
    if seen.waking:
        lines.append(wake_banner(seen.facts, opts.lang))
        problem = problem_line(seen.facts, opts.lang)
        if problem:
            lines.append(problem)
    ended = last_outcome(opts.rundir.path)
    if ended is not None:
        lines.append([(ended.style, ended.headline(opts.lang))])
    elif not seen.waking:
        where = short_path(seen.facts.workspace)
        lines.append([("dim", say("cut_short", opts.lang, where=where, cmd=typed_in(opts.rundir.path, "flower")))])
    return lines


class _Console:
    """stdin while a run goes: answers, mail, and the words after a Ctrl-C."""

    def __init__(self, view: TerminalView, lang: str, *, hint_timeout: bool = True) -> None:
        self.view, self.lang = view, lang
        self.hint_timeout = hint_timeout
        self.rt: Any = None
        self.channel: Any = None
        self.armed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._read, name="flower-stdin", daemon=True)

    def attach(self, rt: Any, channel: Any) -> None:
        """Start reading stdin for this run's runtime and channel.

        Only once both exist: a stdin that is already closed (``/dev/null``) must reach the channel
        and time its questions out at once, not end unheard before the run starts.
        """
        self.rt, self.channel = rt, channel
        self._loop = asyncio.get_running_loop()
        if not sys.stdin.isatty() and self.hint_timeout:
            # Only where it applies: a --timeout on the command line (0 or any other) was the person's
            # choice already.
            self.view.say("dim", say("no_tty", self.lang))
        self._thread.start()

    def _read(self) -> None:
        for raw in sys.stdin:
            text = raw.rstrip("\n")
            if self.armed:
                self.armed = False
                if self.channel is not None and text.strip():
                    self.channel.amend(text.strip())  # on disk first: a kill now does not lose them
                if self.rt is not None:
                    self.rt.interrupt(text.strip())
                continue
            if self.channel is None:
                continue
            what = self.channel.route_input(text)
            if what == "mail":
                last = self.channel.last_mail
                kept = last is not None and last.amended
                self.view.say("dim", say("received" if kept else "received_no_brief", self.lang))
        # stdin closed: nobody can answer from now on.
        if self.channel is not None:
            self.channel.nobody_answers()

    def on_sigint(self, signum: int, frame: Any) -> None:
        """Ctrl-C: arm the interrupt, and say so once the handler has returned. The handler may run
        while this thread is inside the view's printing (holding its lock): printing here would wait
        for that lock forever."""
        if self.armed or self.rt is None:
            raise KeyboardInterrupt
        self.armed = True
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._announce)
        else:
            threading.Thread(target=self._announce, name="flower-interrupt", daemon=True).start()

    def _announce(self) -> None:
        self.view.say("warn", say("interrupted", self.lang))
        waiting = len(self.channel.pending()) if self.channel is not None else 0
        if waiting:
            self.view.say("dim", say("pending_asks", self.lang, n=waiting))
        self.view.say("dim", say("interrupt_say", self.lang))


async def _drive(launch: Launch, view: TerminalView, console: _Console) -> Outcome:
    """The run, with stdin read for it (answers, mail, the words after a Ctrl-C)."""
    assert launch.starter is not None
    console.attach(launch, launch.starter.channel)
    return await launch.drive(on_step=view.on_step)


def _tell_end(lang: str, cmd: str, view: TerminalView, outcome: Outcome, workspace: Path) -> None:
    """The terminal's last lines: the total, then how the run ended and how to continue (stderr when it
    did not end well, so a script sees why)."""
    view.say("", "")
    view.line(total_line(outcome.cost_usd, outcome.manifest, lang, base=workspace, run_cost=outcome.run_cost_usd))
    for line in ending_lines(outcome, lang, cmd):
        if outcome.ok:
            view.line(line)
        else:
            echo(plain(line), err=True)


def _lenient_stdin() -> None:
    """A line typed in another encoding reaches the run with U+FFFD for the bytes that are not UTF-8:
    strict decoding would end the thread reading answers (the question then waits for its timeout),
    and the ``surrogateescape`` of a C locale would hand on characters no prompt or file can hold."""
    reconfigure = getattr(sys.stdin, "reconfigure", None)
    if reconfigure is not None:
        with contextlib.suppress(ValueError, OSError):
            reconfigure(errors="replace")


def main(argv: list[str] | None = None) -> int:
    _lenient_stdin()
    parser = build_parser()
    # A value set in the namespace beforehand is one argparse does not replace with the default, so
    # ``timeout`` stays None unless --timeout was given (go_options then takes the default).
    parser.lang = _words_lang(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv, namespace=argparse.Namespace(timeout=None))
    opts = go_options(args, task=" ".join(args.task), workspace=Path(args.workspace))
    parser.lang = ""  # check() settles the run's language first: its mistakes are said in it
    try:
        opts.check()
    except (TaskTooBig, NotText) as exc:
        # The flags were right, so the usage synopsis would not help: one line says what to do.
        echo(f"flower: error: {exc}", err=True)
        return 2
    except RunDirLink as exc:  # no flag was wrong: the folder was, as preflight's refusals below
        echo(f"flower: {exc}", err=True)
        return 1
    except GoError as exc:
        parser.lang = opts.lang
        parser.error(str(exc))
    if args.status:
        return _status(opts)
    # --new on a live run goes on to the run lock, whose refusal names the holder and how to stop it.
    if args.stop or args.attach or (_live_here(opts) and not opts.new):
        return _to_live_run(opts, stop=args.stop, follow=not args.detach)
    launch = Launch(opts, front_end="terminal")
    starting = _prepare_runner(opts) if args.detach else None
    try:
        # Before anything heavy is imported and before a byte is written: a missing key is said at once.
        launch.check()
        shown = False
        if not opts.task and not args.detach:
            shown = _ask_first(opts, launch.look())
        launch.plan()
    except NoTaskError as exc:  # not a mistake in what was typed: what to type
        _cancel(starting)
        echo(str(exc), err=True)
        return 1
    except FlowerError as exc:
        _cancel(starting)
        echo(f"flower: {exc}", err=True)
        return 1
    if args.detach:
        launch.abandon()
        return _detach(opts, starting)
    return _run(launch, timeout_given=args.timeout is not None, banner_shown=shown)


def _prepare_runner(opts: GoOptions) -> Any:
    """``--detach``: the runner's process, started before the checks so it imports the engine meanwhile
    (``runner.prepare``); None when it cannot be made now (``_detach`` says why, after the checks)."""
    from flower_magic.runner import prepare

    try:
        return prepare(opts)
    except FlowerError:
        return None


def _cancel(starting: Any) -> None:
    if starting is not None:
        starting.cancel()


def _live_here(opts: GoOptions) -> bool:
    from flower_magic.core.live import live_pid

    return live_pid(opts.rundir.path) is not None


def _to_live_run(opts: GoOptions, *, stop: bool, follow: bool = True) -> int:
    """A directory whose run is live: ``--stop`` stops it; words are a remark to it; then (unless
    ``--detach``) follow it until it ends or Ctrl-C."""
    from flower_magic.core.live import post

    rd = opts.rundir
    try:
        if stop:
            post(rd.path, "stop", source="terminal", lang=opts.lang)
            echo(say("live_stop_sent", opts.lang, cmd=typed_in(rd.path, "flower")))
            return 0
        if opts.task:
            post(rd.path, "remark", text=opts.task, source="terminal", lang=opts.lang)
            echo(say("live_remark_sent", opts.lang))
    except FlowerError as exc:  # NotLive included: it says which directory has no live run
        echo(f"flower: {exc}", err=True)
        return 1
    return _attach(opts) if follow else 0


def _attach(opts: GoOptions) -> int:
    """Follow the live run here: its log so far, then live. A line typed answers the open question,
    or else is a remark; Ctrl-C stops watching (the run goes on)."""
    from flower_magic.core.live import Watch, live_state, post

    rd = opts.rundir
    state = live_state(rd.path)
    if state is None or not state.live:
        echo(f"flower: {say('live_no_run', opts.lang)}", err=True)
        return 1
    lang = opts.live_lang()  # the run's language, unless one was asked for
    view = TerminalView(lang, verbose=opts.verbose, workspace=opts.workspace)
    view.say("dim", say("live_attached", lang, pid=state.pid, front=say(f"front_{state.front_end}", lang)))
    watch = Watch(rd.path, view, lang)

    def read() -> None:
        for raw in sys.stdin:
            text = raw.rstrip("\n")
            now = live_state(rd.path)
            if now is None or not now.live:
                return
            asks = now.asks
            with contextlib.suppress(FlowerError):
                if asks:
                    post(rd.path, "answer", text=text, ask_id=str(asks[0].get("id", "")), source="terminal")
                elif text.strip():
                    post(rd.path, "remark", text=text.strip(), source="terminal")

    threading.Thread(target=read, name="flower-attach-stdin", daemon=True).start()
    try:
        end = watch.run()
    except KeyboardInterrupt:
        echo()
        view.say("dim", say("live_detached", lang))
        return 0
    # None: its process is gone without a word, which the next start will record as found here.
    outcome = Outcome.from_record(end) if end is not None else found_outcome(rd.path) or Outcome(Ending.KILLED)
    _tell_end(lang, "flower", view, outcome, opts.workspace)
    return outcome.exit_code


def _detach(opts: GoOptions, starting: Any = None) -> int:
    """``flower --detach``: start the run (planned here: a mistake is said here) in the background and
    return once the runner holds it (``starting``: its process, made before the checks)."""
    from flower_magic.runner import prepare

    try:
        starting = starting or prepare(opts)
        starting.begin(opts, front_end="terminal")
        pid = starting.wait()
    except FlowerError as exc:
        echo(f"flower: {exc}", err=True)
        return 1
    echo(say("runner_started", opts.lang, pid=pid, follow=say("runner_follow_cli", opts.lang)))
    return 0


def _run(launch: Launch, *, timeout_given: bool = False, banner_shown: bool = False) -> int:
    """The run itself, in this terminal. ``timeout_given``: ``--timeout`` was on the command line, so the
    person already chose how long questions wait (no hint about it). ``banner_shown``: the wake banner
    was shown before the question that started it (not again)."""
    opts = launch.opts
    view = TerminalView(opts.lang, verbose=opts.verbose, workspace=opts.workspace)
    try:  # the lock first: a refused run prints its one line and nothing else
        starter = launch.apply(view_sink=view, heard=lambda record: view.line(heard_line(record, opts.lang)))
    except FlowerError as exc:
        echo(str(exc), err=True)
        return 1
    except OSError as exc:
        disk = disk_error(exc, opts.lang)
        if disk is None:
            raise
        echo(str(disk), err=True)
        return 1
    if opts.demo:
        view.say("dim", say("demo_on", opts.lang))
    seen = launch.look()
    if seen.waking and not banner_shown:
        view.line(wake_banner(seen.facts, opts.lang))
        problem = problem_line(seen.facts, opts.lang)
        if problem:
            view.line(problem)
    if launch.found is not None:
        view.say("dim", say("previous_found", opts.lang, how=launch.found.headline(opts.lang)))
    if starter.archived is not None:
        view.say("dim", say("archived", opts.lang, path=short_path(starter.archived, opts.workspace)))
    console = _Console(view, opts.lang, hint_timeout=not timeout_given and opts.timeout_s > 0)
    old_int = signal.signal(signal.SIGINT, console.on_sigint) if sys.stdin.isatty() else None
    restore = end_on_signals(launch)  # a closed terminal, a kill: the step in flight and the ending recorded
    try:
        outcome = asyncio.run(_drive(launch, view, console))
    except KeyboardInterrupt:
        echo()
        if launch.outcome is not None:  # ended by a second Ctrl-C (or SIGINT with no terminal): say how
            _tell_end(opts.lang, launch.cmd, view, launch.outcome, opts.workspace)
        return 130
    finally:
        restore()
        if old_int is not None:
            with logged(log, "run held"):
                signal.signal(signal.SIGINT, old_int)
    _tell_end(opts.lang, launch.cmd, view, outcome, opts.workspace)
    return outcome.exit_code


if __name__ == "__main__":  # python -m flower_magic.cli, as the `flower` command
    sys.exit(main())
