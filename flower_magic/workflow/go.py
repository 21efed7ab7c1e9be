"""The ``go`` options, shared by the ``flower`` command and the ``%flower`` magic: one meaning per flag.

Each front end parses its own syntax into ``GoOptions`` and calls ``check()`` (user mistakes become
``GoError``, one line, nothing touched on disk); ``hold_run_dir`` takes the run dir's lock before
anything is written (a second run on the same directory is refused there); ``make_runtime`` and
``build`` then do the same thing for both.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flower_magic.core.handoff import WINDOW_1M_TOKENS, default_window
from flower_magic.core.words import pick_lang, say

if TYPE_CHECKING:
    from flower_magic.core.runlock import RunLock
    from flower_magic.workflow.starter import Starter

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


class GoError(ValueError):
    """A mistake in what the person asked for (a bad flag value, a file where a folder should be)."""


class TaskTooBig(GoError):
    """The task is longer than any prompt the model can be sent (``task_limit_chars``).

    Attributes:
        size_chars: the task's length as the CLI counts it (UTF-16 code units).
        limit_chars: the most that can be sent.
        window_tokens: the context window the limit comes from.
    """

    def __init__(self, size_chars: int, limit_chars: int, window_tokens: int) -> None:
        self.size_chars = size_chars
        self.limit_chars = limit_chars
        self.window_tokens = window_tokens
        super().__init__(
            f"the task is {size_chars:,} characters, more than a model with a {window_tokens:,}-token context "
            f"can be sent in one prompt (at most {limit_chars:,}); nothing was written. Save it as a file in "
            'the workspace and name the file instead, e.g. "do what spec.md says"'
        )


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
        workspace: the agent's directory.
        run_dir: sessions.db, manifest.json, lineage.json (relative: to the current directory).
        rounds: total judged work rounds in this wake (0 and 1 both mean one).
        asks: question quota; negative = unlimited.
        timeout: seconds to wait for an answer; ≤ 0 = never wait (the agent decides itself).
        window: the model's context window in tokens (None = from FLOWER_WINDOW / calibration / name).
    """

    task: str = ""
    workspace: Path = Path(".")
    run_dir: Path = Path("runs")
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
    lang: str = "zh"

    def check(self) -> GoOptions:
        """Validate and normalise. Raises GoError with one line saying what to change."""
        self.task = (self.task or "").strip()
        if self.task == NEW_CMD:
            self.task, self.new = "", True
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 0:
            raise GoError(f"--rounds must be a whole number ≥ 0, not {self.rounds!r}")
        if isinstance(self.asks, bool) or not isinstance(self.asks, int):
            raise GoError(f"--asks must be a whole number (negative = unlimited), not {self.asks!r}")
        if not isinstance(self.timeout, (int, float)) or isinstance(self.timeout, bool) or math.isnan(self.timeout):
            raise GoError(f"--timeout must be a number of seconds, not {self.timeout!r}")
        if self.window is not None and (
            isinstance(self.window, bool) or not isinstance(self.window, int) or self.window <= 0
        ):
            raise GoError(f"--window must be a positive number of tokens (e.g. 200000), not {self.window!r}")
        window = self.window or default_window()
        size, limit = cli_chars(self.task), task_limit_chars(window)
        if size > limit:
            raise TaskTooBig(size, limit, window)
        try:
            self.lang = pick_lang(self.lang)
        except ValueError as exc:
            raise GoError(f"--lang: {exc}") from None
        from flower_magic.core.launcher import WATCHDOG_ENV, WATCHDOG_MODES, watchdog_mode

        try:
            watchdog_mode()
        except ValueError:
            choices = ", ".join(WATCHDOG_MODES)
            value = os.environ.get(WATCHDOG_ENV, "")
            raise GoError(say("bad_watchdog", self.lang, value=repr(value), choices=choices)) from None
        for label, path in (("workspace (-w)", self.workspace), ("run dir (-r)", self.run_dir)):
            resolved = Path(path).expanduser()
            if resolved.exists() and not resolved.is_dir():
                raise GoError(f"the {label} {resolved} is a file, not a directory")
        return self

    @property
    def max_asks(self) -> int | None:
        return None if self.asks < 0 else self.asks

    @property
    def timeout_s(self) -> float:
        return float(self.timeout)


def hold_run_dir(opts: GoOptions, *, front_end: str) -> RunLock:
    """Take the run dir's lock for this run: the first thing a front end does that may touch the disk.

    Call it after ``check()`` and before ``build`` (which archives on ``--new`` and appends a phrase
    said at wake to 需求.md); release it when the workflow has ended. The workflow joins this hold.

    Args:
        front_end: ``notebook`` or ``terminal`` (said in the refusal another front end prints).

    Raises:
        RunLocked: another run holds the run dir (or one in this process that is still winding down);
            nothing was written.
        PathError: the run dir cannot be created.
    """
    from flower_magic.core.runlock import acquire

    return acquire(opts.run_dir, front_end=front_end, lang=opts.lang)


def make_runtime(opts: GoOptions, **kw: Any) -> Any:
    """The runtime for the ``go`` path: trimming on unless ``--no-trim``, hand-off unless ``--no-handoff``."""
    from flower_magic.core.foreign_writer import OtherWriters
    from flower_magic.core.handoff import HandoffPolicy
    from flower_magic.core.runtime import Runtime

    handoff = HandoffPolicy(enabled=opts.handoff, **({"window": opts.window} if opts.window else {}))
    rt = Runtime(workspace=opts.workspace, run_dir=opts.run_dir, trim=opts.trim, handoff=handoff, lang=opts.lang, **kw)
    rt.other_writers = OtherWriters(lang=opts.lang)
    return rt


def build(opts: GoOptions, *, on_event: Any = None) -> Starter:
    """The default workflow for these options (archives first with ``new``)."""
    from flower_magic.workflow.starter import starter_flow

    return starter_flow(
        opts.task,
        workspace=opts.workspace,
        run_dir=opts.run_dir,
        new=opts.new,
        clarify_only=opts.clarify_only,
        goal=opts.goal,
        rounds=max(1, opts.rounds),
        judge_can_run=opts.judge_can_run,
        max_asks=opts.max_asks,
        timeout_s=opts.timeout_s,
        on_event=on_event,
        lang=opts.lang,
    )
