"""Every line a person reads about a run, built from facts in one place: the terminal and the
notebook render the same segments (the terminal with ANSI colours, the notebook as escaped HTML).

In the run's language (``core.words``: asked for, else the task's words, else the run dir's last run).
File names are data and stay as they are; a step's name is said in the language (``step_name``).

A line is a list of ``(style, text)`` segments; styles: ``""``, ``dim``, ``bold``, ``head``,
``ok``, ``bad``, ``warn``, ``note``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flower_magic.core import lineage as lineage_file
from flower_magic.core.rundir import Snapshot
from flower_magic.core.words import cols, human_elapsed, human_tokens, say, short_path, step_name
from flower_magic.front.outcome import Outcome

Segment = tuple[str, str]
Line = list[Segment]

MIN_WIDTH, MAX_WIDTH = 40, 110  # the step header's rule: readable in a narrow pane, not absurd on a wide one


def plain(line: Line) -> str:
    return "".join(text for _, text in line)


def wake_banner(facts: Snapshot, lang: str = "zh", *, home: str | None = None) -> Line:
    """``<- 在 ~/proj 接上上次 需求已确认 · 目标 15 条 · 干活上下文 80.2K · 第 3 次唤醒``."""
    bits = [say("brief_ok", lang)]
    if facts.checks:
        bits.append(say("goals", lang, n=facts.checks))
    if facts.work_context:
        bits.append(say("work_ctx", lang, ctx=human_tokens(facts.work_context)))
    bits.append(say("wake_n", lang, n=facts.woke + 1))
    where = short_path(facts.workspace, facts.workspace, home)  # ~/proj, or the folder's name
    return [("head", say("wake_head", lang, where=where)), ("", " "), ("dim", " · ".join(bits))]


def problem_line(facts: Snapshot, lang: str = "zh") -> Line | None:
    """The one dim line saying lineage.json cannot be used and will be kept aside (None when it can)."""
    if not facts.problem:
        return None
    return [("dim", say("unreadable_next", lang, what=lineage_file.FILENAME, why=facts.problem))]


def step_header(
    name: str, index: int, total: int, *, resumed: bool, woke: int, width: int = 80, lang: str = "zh"
) -> Line:
    """``== 干活 ======  3/3  <- 接上次 · 第 3 次唤醒`` (``== Work ======  3/3 …`` in English)."""
    name = step_name(name, lang)
    tail = f"{index}/{total}"
    if resumed:
        tail += f"  {say('carried', lang)} · {say('wake_n', lang, n=woke)}"
    width = max(MIN_WIDTH, min(MAX_WIDTH, width))
    bar = "=" * max(4, width - cols(name) - cols(tail) - 6)
    return [("head", f"== {name} {bar}"), ("", " "), ("dim", tail)]


def round_header(name: str, *, judge: bool = False, width: int = 80, lang: str = "zh") -> Line:
    """``-- 干活#round2 ------`` or ``-- 干活·判定#1 ------``: a round inside a step, not a new step."""
    name = step_name(name, lang)
    width = max(MIN_WIDTH, min(MAX_WIDTH, width))
    return [("note" if judge else "bold", f"-- {name} {'-' * max(4, width - cols(name) - 4)}")]


def explain_error(error: str, lang: str = "zh", *, cmd: str = "flower") -> Line | None:
    """A step's error whose cause flower knows, as one line saying what happened and what to do; None
    for any other error (the front end shows it as it is).

    Args:
        error: ``StepResult.error``.
        cmd: how the person runs flower here (``flower``, ``%flower``).
    """
    from flower_magic.core.agent import MAX_MESSAGE_BYTES
    from flower_magic.core.handoff import RESULT_TOO_BIG, ContextStop
    from flower_magic.core.resilience import is_too_big

    if is_too_big(error):
        return [("bad", say("too_big", lang, limit=f"{MAX_MESSAGE_BYTES // 2**20} MiB", cmd=cmd))]
    stop = ContextStop.parse(error)
    if stop is not None:
        key = "stop_result_too_big" if stop.cause == RESULT_TOO_BIG else "stop_window_too_small"
        tokens = {k: human_tokens(getattr(stop, k)) for k in ("result", "floor", "line", "window")}
        return [("bad", "! " + say(key, lang, tool=stop.tool or "?", cmd=cmd, **tokens))]
    return None


ASK_STATES = ("timeout", "declined", "over_budget", "invalid", "cancelled")


def ask_state_line(state: str, lang: str = "zh") -> Line:
    """How a question ended, when not with an answer: ``  (没人回答,它自己拿主意)``."""
    if state in ASK_STATES:
        text = say(f"ask_{state}", lang)
    else:
        text = say("ask_other", lang, state="".join(c for c in state[:40] if c.isprintable()))
    return [("dim", f"  {text}")]


def result_line(ok: bool, turns: int, cost: float, elapsed_s: float, lang: str = "zh") -> Line:
    mark, word = ("+", say("done", lang)) if ok else ("x", say("failed", lang))
    return [
        ("ok" if ok else "bad", f"{mark} {word}"),
        ("", " "),
        ("dim", say("result", lang, n=turns, cost=cost, elapsed=human_elapsed(elapsed_s))),
    ]


def status_line(
    context: int, cost: float, elapsed_s: float, lang: str = "zh", *, round_n: int = 0, rounds: int = 0
) -> Line:
    text = say("status", lang, ctx=human_tokens(context), cost=cost, elapsed=human_elapsed(elapsed_s))
    if rounds:
        text += " · " + say("round", lang, n=round_n, total=rounds)
    return [("dim", f"- {text}")]


def total_line(
    cost: float, manifest: str, lang: str = "zh", *, base: str | Path | None = None, run_cost: float = 0.0
) -> Line:
    """``总花费 $0.1239 · 清单 runs/manifest.json``: what the run cost and where its rows are (relative to
    ``base``, the workspace: ``short_path``). After a wake the manifest also holds the earlier wakes'
    rows, so the words say which number is which:
    ``总花费:这次唤醒 $0.1241 · 清单合计 $0.2480(runs/manifest.json)``.

    Args:
        cost: this run's cost (this wake's).
        manifest: the manifest's path ("" when unknown).
        run_cost: what the manifest totals (0: unknown).
    """
    from flower_magic.core.printable import printable

    where = printable(short_path(manifest, base)) if manifest else "-"
    if run_cost >= cost + 0.00005:  # earlier rows in the manifest: at least what 4 decimals can show
        return [("bold", say("total_wake", lang, cost=cost, run=run_cost, manifest=where))]
    return [("bold", say("total", lang, cost=cost, manifest=where))]


WHY_CHARS = 600  # a reason is a line or two; the whole error is in the manifest row


def ending_words(outcome: Outcome, lang: str, cmd: str) -> tuple[str, str, str]:
    """``(why, headline, next)``: the words every view says an ending in (``ending_lines``, the panel's
    run answer). ``why`` is "" when the ending says it all; ``next`` is how to continue as ``cmd`` is
    typed in that view (``%flower``, ``flower``)."""
    from flower_magic.core.printable import printable

    why = printable(outcome.why)[:WHY_CHARS] if outcome.why else ""
    why = why[2:] if why.startswith("! ") else why  # a phrase that is a warning already: ending_lines marks it
    return why, printable(outcome.headline(lang)), outcome.next_step(lang, cmd)


def ending_lines(outcome: Outcome, lang: str, cmd: str) -> list[Line]:
    """How a run ended, the same in every view: why (when the ending does not say it), the headline,
    and how to continue as ``cmd`` is typed in that view (``%flower``, ``flower``)."""
    why, headline, next_step = ending_words(outcome, lang, cmd)
    lines: list[Line] = []
    if why:
        lines.append([("bad", "! " + why)])
    lines.append([(outcome.style, headline)])
    lines.append([("dim", next_step)])
    return lines


def handoff_block(payload: Mapping[str, Any], lang: str = "zh", *, base: str | Path | None = None) -> list[Line]:
    """The lines shown when a hand-off is done: the four sections, where it is (relative to ``base``,
    the workspace: ``short_path``), what happens next."""
    window_k = int(payload.get("window") or 0) // 1000
    lines: list[Line] = [
        [
            (
                "warn",
                "# " + say("handoff_head", lang, ctx=human_tokens(int(payload.get("context") or 0)), window=window_k),
            )
        ]
    ]
    if payload.get("degraded"):
        lines.append([("bad", "  " + say("handoff_degraded", lang))])
    sections = payload.get("sections") or {}
    labels = [
        ("doing", "handoff_doing"),
        ("decided", "handoff_decided"),
        ("deadends", "handoff_deadends"),
        ("next", "handoff_next"),
    ]
    width = max(cols(say(k, lang)) for _, k in labels)
    for field_name, key in labels:
        body = str(sections.get(field_name) or "").strip()
        if body:
            label = say(key, lang)
            first = body.splitlines()[0][:200]
            lines.append([("bold", "  " + label + " " * (width - cols(label))), ("", "  " + first)])
    if payload.get("path"):
        lines.append([("dim", say("handoff_path", lang, path=short_path(str(payload["path"]), base)))])
    lines.append([("dim", say("handoff_new", lang, ctx=0))])
    return lines
