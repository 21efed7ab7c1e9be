"""The ``go`` options, shared by the ``flower`` command and the ``%flower`` magic: one meaning per flag.

Each front end parses its own syntax into ``GoOptions`` and calls ``check()`` (user mistakes become
``GoError``, one line, nothing touched on disk); ``hold_run_dir`` takes the run dir's lock before
anything is written (a second run on the same directory is refused there); ``make_runtime`` and
``build`` then do the same thing for both.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flower_magic.core.errors import LinkRefused, UserError, check_dir, check_files, check_folders, has_credentials
from flower_magic.core.handoff import WINDOW_1M_TOKENS, default_window
from flower_magic.core.printable import unwritable_at
from flower_magic.core.rundir import DEFAULT_RUN_DIR, RunDir
from flower_magic.core.storage import SESSIONS_ENV, StoreLocation, choose_store
from flower_magic.core.words import LANGS, pick_lang, pick_lang_or_default, say, words_lang

if TYPE_CHECKING:
    from flower_magic.core.rundir import Snapshot

# Imported by %load_ext: keep this module light (the workflow and the SDK load when a run starts).
DEFAULT_ROUNDS = 3
DEFAULT_TIMEOUT_S = 1800.0  # the human channel's default (core.human.DEFAULT_TIMEOUT_S; a test keeps them equal)
NEW_CMD = "/new"
# A task (or a phrase said at wake, or a %%flower cell body) is sent whole in one prompt. Claude Code
# refuses, before any request, a prompt it estimates past the model's context window ("Prompt is too
# long"), counting about 3 characters a token whatever the script: CLI 2.1.332 with a 1M-token model
# refused prompts from about 2.92 million characters, of English, of Chinese or of "x" alike
# (measured), so its own system prompt and tools take ~28K tokens of the window; a role's instructions
# and the step's own words take a few more. Past (window - PROMPT_OVERHEAD_TOKENS) x 3 characters a
# task can never be sent; with the largest window, 1M tokens, that is MAX_TASK_CHARS (2.85 MB of
# English). A task of exactly MAX_TASK_CHARS reaches the model (tests/test_size_limits.py).
CLI_CHARS_PER_TOKEN = 3
PROMPT_OVERHEAD_TOKENS = 50_000
MAX_TASK_CHARS = (WINDOW_1M_TOKENS - PROMPT_OVERHEAD_TOKENS) * CLI_CHARS_PER_TOKEN


def settle_lang(asked: str | None, task: str, remembered: Callable[[], str | None]) -> str:
    """The language a run speaks: ``asked`` (``--lang``, ``%config``), else ``FLOWER_LANG``, else the
    task's words (``core.words.words_lang``: Chinese characters say zh, other words en), else
    ``remembered()`` (the run dir's last run; read only when needed), else zh, as the original.

    Raises:
        ValueError: ``asked`` or ``FLOWER_LANG`` names no language flower speaks.
    """
    if asked or os.environ.get("FLOWER_LANG"):
        return pick_lang(asked)
    return words_lang(task) or remembered() or pick_lang()


class GoError(UserError, ValueError):
    """A mistake in what the person asked for (a bad flag value, a file where a folder should be)."""


class TaskTooBig(GoError):
    """The task is longer than any prompt the model can be sent (``task_limit_chars``).

    Attributes:
        size_chars: the task's length as the CLI counts it (UTF-16 code units).
        limit_chars: the most that can be sent.
        window_tokens: the context window the limit comes from.
    """

    def __init__(self, size_chars: int, limit_chars: int, window_tokens: int, lang: str = "") -> None:
        self.size_chars = size_chars
        self.limit_chars = limit_chars
        self.window_tokens = window_tokens
        super().__init__(
            say(
                "task_too_big",
                pick_lang_or_default(lang),
                size=f"{size_chars:,}",
                window=f"{window_tokens:,}",
                limit=f"{limit_chars:,}",
            )
        )


class NotText(GoError):
    """The task, the workspace or the run dir holds what no prompt, JSON record or Claude Code can
    take (invalid UTF-8 bytes from a command line or a folder's name, a lone surrogate from a
    notebook cell): said as one line, like ``TaskTooBig``, with where it is."""


class RunDirLink(LinkRefused, GoError):
    """The default run dir (``runs``, not named with ``-r`` / ``%config``) is a symbolic link: flower
    does not follow one it finds (``core.rundir``); naming its target with ``-r`` does."""

    KEY = "run_dir_link"

    def __init__(self, path: Path, lang: str = "") -> None:
        super().__init__(path, lang, key=self.KEY)


def task_limit_chars(window_tokens: int) -> int:
    """The most characters of a task a model with this context window can be sent (see ``MAX_TASK_CHARS``).

    A window too small to hold the overhead (a test's, a small gateway model's) still takes a task of
    half of it: the CLI then says what it thinks.
    """
    return max(window_tokens - PROMPT_OVERHEAD_TOKENS, window_tokens // 2) * CLI_CHARS_PER_TOKEN


def cli_chars(text: str) -> int:
    """``text``'s length as Claude Code (JavaScript) counts it: UTF-16 code units."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


@dataclass
class GoOptions:
    """What ``flower [flags] "task"`` / ``%flower [flags] "task"`` asked for.

    Attributes:
        task: the request, or a phrase said at wake ("" = just continue). ``/new`` means ``new``.
        workspace: the agent's directory (made absolute by ``check``).
        run_dir: sessions.db, manifest.json, lineage.json; relative = under the workspace, for every
            front end (made absolute by ``check``). None = ``runs``.
        rounds: total judged work rounds in this wake (0 and 1 both mean one).
        asks: question quota; negative = unlimited.
        timeout: seconds to wait for an answer; ≤ 0 = never wait (the agent decides itself).
        window: the model's context window in tokens (None = from FLOWER_WINDOW / calibration / name).
        demo: run on the offline demo model (``flower_magic.testing.demo``); no credentials needed.
        context: give the agent the notebook's context and tools (``core.notebook``) when the front
            end has a kernel (``--no-context`` / ``%config FlowerMagics.context = False`` turn it off).
        sessions: where sessions live (``--sessions``; "" = ``FLOWER_SESSIONS``, else the run dir's
            record, else its sessions.db; ``core.storage.choose_store``). May hold a password: never
            shown (left out of ``repr``).
        run_dir_named: the person named the run dir (``-r``, ``%config``), so a link there is their
            choice; settled by the first ``check`` (None before), which makes ``run_dir`` absolute.
        lang: the language asked for (``--lang``, ``%config``; "" = none); ``check`` settles it
            (``settle_lang``): asked, else ``FLOWER_LANG``, else the task's words, else the run dir's
            last run, else zh.
        lang_asked: ``lang`` as it was before the first ``check`` (None before): a ``check`` after the
            task changed (``flower`` asked for it) settles the language again from the new words.
    """

    task: str = ""
    workspace: Path = Path(".")
    run_dir: Path | None = None
    new: bool = False
    rounds: int = DEFAULT_ROUNDS
    goal: bool = True
    judge_can_run: bool = False
    asks: int = -1
    timeout: float = DEFAULT_TIMEOUT_S
    window: int | None = None
    handoff: bool = True
    clarify_only: bool = False
    trim: bool = True
    verbose: bool = False
    lang: str = ""  # "" = FLOWER_LANG, else the task's words, else the run dir's (check() settles it)
    demo: bool = False
    context: bool = True
    sessions: str = field(default="", repr=False)
    run_dir_named: bool | None = field(default=None, repr=False)
    lang_asked: str | None = field(default=None, repr=False)

    def check(self) -> GoOptions:
        """Validate and normalise; reads nothing but the environment, whether the default run dir
        ``runs`` is a symbolic link (making it absolute would follow it: ``RunDirLink``) and, for a
        task with no words, the language the run dir's last run spoke (``settle_lang``). Raises
        GoError with one line saying what to change (in the run's language, when the language asked
        for is itself valid)."""
        if self.lang_asked is None:
            self.lang_asked = self.lang
        self.task = (self.task or "").strip()
        if self.task == NEW_CMD:
            self.task, self.new = "", True
        try:
            self.lang = settle_lang(self.lang_asked, self.task, self.remembered_lang)
        except ValueError:
            raise GoError(
                say("opt_lang", pick_lang_or_default(), langs="/".join(LANGS), value=repr(self.lang_asked))
            ) from None
        lang = self.lang
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 0:
            raise GoError(say("opt_rounds", lang, value=repr(self.rounds)))
        if isinstance(self.asks, bool) or not isinstance(self.asks, int):
            raise GoError(say("opt_asks", lang, value=repr(self.asks)))
        timeout = self.timeout
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not math.isfinite(timeout):
            raise GoError(say("opt_timeout", lang, value=repr(timeout)))
        if self.window is not None and (
            isinstance(self.window, bool) or not isinstance(self.window, int) or self.window <= 0
        ):
            raise GoError(say("opt_window", lang, value=repr(self.window)))
        window = self.window or default_window()
        size, limit = cli_chars(self.task), task_limit_chars(window)
        if size > limit:
            raise TaskTooBig(size, limit, window, lang)
        at = unwritable_at(self.task)
        if at is not None:  # invalid UTF-8 on a command line, a lone surrogate in a cell
            raise NotText(say("opt_not_text", lang, what=say("what_task", lang), at=at + 1))
        for what, path in (("what_workspace", self.workspace), ("what_run_dir", self.run_dir)):
            if path is not None and "\x00" in str(path):  # %config or a magic's line; no OS call takes it
                raise GoError(say("opt_nul", lang, what=say(what, lang)))
        if self.run_dir_named is None:
            self.run_dir_named = self.run_dir is not None
        found = Path(self.workspace).expanduser().resolve() / DEFAULT_RUN_DIR
        if not self.run_dir_named and os.path.islink(found):
            # Resolving it below would follow it: a cloned runs -> elsewhere would take every write of
            # the run, and a remark or --stop would go to whatever run lives there (core.rundir).
            raise RunDirLink(found, lang)
        rd = RunDir.at(self.workspace, self.run_dir)
        for what, path in (("what_workspace", rd.workspace), ("what_run_dir", rd.path)):
            at = unwritable_at(str(path))
            if at is not None:  # Claude Code cannot work there, and no JSON record can name it
                raise NotText(say("opt_path_not_text", lang, what=say(what, lang), at=at + 1))
        self.workspace, self.run_dir = rd.workspace, rd.path
        self.store_location()
        from flower_magic.core.launcher import WATCHDOG_ENV, WATCHDOG_MODES, watchdog_mode

        try:
            watchdog_mode()
        except ValueError:
            choices = ", ".join(WATCHDOG_MODES)
            value = os.environ.get(WATCHDOG_ENV, "")
            raise GoError(say("bad_watchdog", lang, value=repr(value), choices=choices)) from None
        return self

    @property
    def lang_chosen(self) -> bool:
        """A language was asked for (``--lang``, ``%config``, ``FLOWER_LANG``), not found in the words."""
        return bool(self.lang_asked or os.environ.get("FLOWER_LANG"))

    def live_lang(self) -> str:
        """The language a view following the run dir's live run speaks (after ``check``): the one asked
        for, else the run's own (its start record), whatever words this front end gave it."""
        from flower_magic.core.live import run_lang

        if self.lang_chosen:
            return self.lang
        return run_lang(self.rundir.path) or self.lang

    def remembered_lang(self) -> str | None:
        """The language the run dir's last run spoke (``core.live.run_lang``), None when none is known
        or the run dir cannot be named yet (a NUL in its path; ``check`` says so). Not read through a
        default ``runs`` that is a symbolic link (``check`` refuses it)."""
        from flower_magic.core.live import run_lang

        try:
            if self.run_dir is None and os.path.islink(Path(self.workspace).expanduser().resolve() / DEFAULT_RUN_DIR):
                return None
            return run_lang(RunDir.at(self.workspace, self.run_dir).path)
        except (OSError, ValueError):
            return None

    def store_location(self) -> StoreLocation:
        """The store this run's sessions go to (``sessions``, else ``FLOWER_SESSIONS``), not yet checked
        against the run dir's record (``preflight`` does). Raises GoError for a setting that is no store."""
        text = self.sessions or os.environ.get(SESSIONS_ENV, "")
        try:
            return StoreLocation.parse(text)
        except ValueError:
            shown = text.split("://", 1)[0] + "://…" if "://" in text else repr(text[:12])
            raise GoError(say("opt_sessions", self.lang or pick_lang_or_default(), value=shown)) from None

    @property
    def rundir(self) -> RunDir:
        """The run these options name (after ``check``)."""
        return RunDir.at(self.workspace, self.run_dir)

    def preflight(self, *, run: bool = True, cmd: str = "flower") -> None:
        """Everything about the machine a run needs, checked before a byte is written: the workspace
        and the run dir can be (or are) writable directories, the files and folders flower writes
        there and in ``.flower`` are no symbolic links (``core.rundir``), the files are regular
        files, and (for a run that is not ``--demo``; not for ``--status``) credentials exist. Raises a ``UserError``;
        ``cmd`` (``flower``, ``%flower``) is how the no-credentials message says what works without a key
        in this folder (the demo with a task, ``--demo`` after a demo run, the key for a real one)."""
        rd = self.rundir
        check_dir("workspace", rd.workspace, self.lang)
        check_dir("run dir", rd.path, self.lang)
        check_folders(rd.own_folders(), self.lang)
        check_files(rd.own_files(), self.lang)
        self.store_location()
        choose_store(rd.path, self.sessions, self.lang)  # StoreMismatch: the run dir's sessions live elsewhere
        if run and not self.demo and not has_credentials():
            from flower_magic.core.errors import CredentialsError
            from flower_magic.core.live import start_of

            start = start_of(rd.path)
            folder = "" if start is None and not rd.brief.exists() else "demo" if (start or {}).get("demo") else "real"
            raise CredentialsError(self.lang, cmd=cmd, folder=folder)

    @property
    def max_asks(self) -> int | None:
        return None if self.asks < 0 else self.asks

    @property
    def timeout_s(self) -> float:
        return float(self.timeout)


def model_session(opts: GoOptions) -> contextlib.AbstractContextManager[Any]:
    """Where this run's model is, for as long as the run goes: the offline demo model for ``--demo``
    (``flower_magic.testing.demo.demo_session``: the process's environment points at it, then is put
    back). Without ``--demo`` nothing changes, except that a demo already running in this process
    (the notebooks' automatic demo mode) speaks the run's language.

    Not guaranteed: a run still winding down after the session ended (a second Interrupt returns the
    cell at once) starts any further Claude Code process with the environment as it was put back.
    """
    import sys

    if opts.demo:
        from flower_magic.testing.demo import demo_session

        return demo_session(opts.lang)
    demo = sys.modules.get("flower_magic.testing.demo")
    if demo is not None and demo.running() is not None:
        demo.speak(opts.lang)
    return contextlib.nullcontext()


def on_demo_model(opts: GoOptions) -> bool:
    """The run goes to the offline demo model: ``--demo``, or the notebooks' demo mode pointed this
    process at it (``flower_magic.testing.demo.start_demo``). Its log then says so, and every way to go
    on with it is said with ``--demo``: without a key a plain ``%flower`` is refused after a restart."""
    import sys

    if opts.demo:
        return True
    demo = sys.modules.get("flower_magic.testing.demo")
    return demo is not None and bool(demo.pointed_here())


def snapshot(rundir: RunDir, sessions: str = "") -> Snapshot:
    """What ``rundir`` holds, with what its store says: the work session's context, and whether it holds
    the clarifier's session (``sessions``: the run's ``--sessions``, whose password a PostgreSQL store
    is read with)."""
    from flower_magic.stores.backend import has_session, last_context_of

    return rundir.snapshot(
        context_of=lambda rd, sid: last_context_of(rd, sid, sessions=sessions),
        holds=lambda rd, sid: has_session(rd, sid, sessions=sessions),
    )
