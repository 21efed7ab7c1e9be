"""The flags of ``flower`` and ``%flower``, declared once.

Each flag is one ``Flag`` row: its spellings, its type, the run's default, its help (a phrase key in
``core.words``, so ``flower -h`` and ``%flower?`` read in the person's language) and which front
ends take it. ``add_flags`` renders the table into an argparse parser: the command's own, or the
magic's ``MagicArgumentParser``. ``go_options`` turns parsed arguments into ``GoOptions`` the same
way for both; the magic passes its ``%config`` settings as ``fallback`` for the flags a cell left out.

Invariants:
    - A flag's default lives here and in ``GoOptions`` only; the magic parses every flag with
      default None so that "not given" can fall back to ``%config FlowerMagics.<name>``.
    - A relative ``-r`` is under the workspace for every front end (``core.rundir``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flower_magic.core.words import say
from flower_magic.front.options import DEFAULT_ROUNDS, DEFAULT_TIMEOUT_S, GoOptions

CLI, MAGIC = "cli", "magic"
BOTH = (CLI, MAGIC)


@dataclass(frozen=True)
class Flag:
    """One flag. ``dest`` is argparse's; ``default`` is the run's (what "not given" means)."""

    names: tuple[str, ...]
    help_key: str
    kind: type | None = None  # int, float, str; None = a switch (store_true)
    default: Any = None
    front_ends: tuple[str, ...] = BOTH

    @property
    def dest(self) -> str:
        return self.names[-1].lstrip("-").replace("-", "_")

    @property
    def switch(self) -> bool:
        return self.kind is None


FLAGS: tuple[Flag, ...] = (
    Flag(("-w", "--workspace"), "flag_workspace", str, ".", (CLI,)),
    Flag(("-r", "--run-dir"), "flag_run_dir", str),
    Flag(("--new",), "flag_new"),
    Flag(("--rounds",), "flag_rounds", int, DEFAULT_ROUNDS),
    Flag(("--no-goal",), "flag_no_goal"),
    Flag(("--judge-can-run",), "flag_judge_can_run"),
    Flag(("--asks",), "flag_asks", int, -1),
    Flag(("--timeout",), "flag_timeout", float, DEFAULT_TIMEOUT_S),
    Flag(("--window",), "flag_window", int),
    Flag(("--no-handoff",), "flag_no_handoff"),
    Flag(("--clarify-only",), "flag_clarify_only"),
    Flag(("--no-trim",), "flag_no_trim"),
    Flag(("--lang",), "flag_lang", str),
    Flag(("--sessions",), "flag_sessions", str),
    Flag(("-v", "--verbose"), "flag_verbose"),
    Flag(("--status",), "flag_status"),
    Flag(("--demo",), "flag_demo"),
    Flag(("--panel",), "flag_panel", front_ends=(MAGIC,)),
    Flag(("--no-context",), "flag_no_context", front_ends=(MAGIC,)),  # the command has no kernel
    Flag(("--bg",), "flag_bg", front_ends=(MAGIC,)),
    Flag(("--detach",), "flag_detach", front_ends=(CLI,)),
    Flag(("--attach",), "flag_attach", front_ends=(CLI,)),  # the magic attaches when a run is live
    Flag(("--stop",), "flag_stop"),
)


def add_flags(parser: argparse.ArgumentParser, front_end: str, lang: str) -> argparse.ArgumentParser:
    """Add the task words and every flag ``front_end`` takes to ``parser``; returns it.

    The command shows each default in its help and parses to it; the magic parses "not given" as
    None (its ``%config`` settings fill those in ``go_options``).
    """
    parser.add_argument("task", nargs="*", help=say("flag_task", lang))
    for flag in FLAGS:
        if front_end not in flag.front_ends:
            continue
        text = say(flag.help_key, lang).replace("%", "%%")  # argparse formats help with %
        if flag.switch:
            parser.add_argument(*flag.names, action="store_true", help=text)
            continue
        shown = flag.default is not None and front_end == CLI
        assert flag.kind is not None
        parser.add_argument(
            *flag.names,
            type=flag.kind,
            default=flag.default if front_end == CLI else None,
            help=f"{text} ({say('flag_default', lang, value=flag.default)})" if shown else text,
        )
    return parser


def given(args: argparse.Namespace) -> list[str]:
    """The spellings of the flags ``args`` sets to something other than "not given" (magic parsing)."""
    out = []
    for flag in FLAGS:
        value = getattr(args, flag.dest, None)
        if value not in (None, False):
            out.append(flag.names[-1])
    return out


def go_options(
    args: argparse.Namespace, *, task: str, workspace: Path, fallback: dict[str, Any] | None = None
) -> GoOptions:
    """``GoOptions`` from parsed flags; a flag not given takes ``fallback[dest]`` (the magic's
    ``%config``), else the run's default. Not checked: call ``.check()``."""
    fallback = fallback or {}

    def pick(dest: str) -> Any:
        value = getattr(args, dest, None)
        if value is None or value is False:
            if fallback.get(dest) not in (None, ""):
                return fallback[dest]
            flag = next(f for f in FLAGS if f.dest == dest)
            return flag.default if not flag.switch else bool(value)
        return value

    run_dir = pick("run_dir")
    return GoOptions(
        task=task,
        workspace=workspace,
        run_dir=Path(run_dir) if run_dir else None,
        new=bool(args.new),
        rounds=int(pick("rounds")),
        goal=not args.no_goal,
        judge_can_run=bool(args.judge_can_run),
        asks=int(pick("asks")),
        timeout=float(pick("timeout")),
        window=pick("window"),
        handoff=not args.no_handoff,
        clarify_only=bool(args.clarify_only),
        trim=not args.no_trim,
        verbose=bool(pick("verbose")),
        lang=str(pick("lang") or ""),
        demo=bool(args.demo),
        context=not getattr(args, "no_context", False) and fallback.get("context", True) is not False,
        sessions=str(pick("sessions") or ""),
    )
