"""Static views as MIME bundles (``text/plain`` + ``text/html``, no widgets): the wake banner shown
at ``%load_ext`` and what ``%flower --status`` shows without running anything.

Every value from disk (paths, step names, errors, checks) is data: sanitised for text/plain and
escaped for text/html.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from flower_magic.core.goal import UNVERIFIABLE_RE
from flower_magic.core.manifest import continued_rows, totals
from flower_magic.core.printable import printable
from flower_magic.core.rundir import Snapshot
from flower_magic.core.words import human_elapsed, human_tokens, say, short_path, short_paths_in, step_name
from flower_magic.display import html
from flower_magic.display.goals import goal_lines, marks_of
from flower_magic.front.phrases import Line, problem_line, wake_banner

ERROR_CHARS = 80  # the manifest's error column: enough to tell interrupted from an API error
NUMERIC = frozenset({2, 3, 4, 5, 7, 8})  # cost, turns, time, attempts, hand-offs, context


def _bundle(lines: Sequence[Line], extra_html: str = "", extra_text: str = "") -> dict[str, str]:
    text = html.lines_text(lines) + (f"\n{extra_text}" if extra_text else "")
    return {"text/plain": printable(text), "text/html": html.wrap(html.lines_html(lines) + extra_html)}


def _head(facts: Snapshot, lang: str) -> list[Line]:
    lines = [wake_banner(facts, lang)]
    problem = problem_line(facts, lang)
    if problem:
        lines.append(problem)
    return lines


def banner_bundle(facts: Snapshot, lang: str = "zh", *, hint: bool = False, cmd: str = "%flower") -> dict[str, str]:
    """The wake banner (and the problem line when lineage.json was unreadable).

    Args:
        facts: what the run dir holds (``front.options.snapshot``).
        lang: ``zh`` or ``en``.
        hint: add the dim line on how to continue (``phrases`` ``continue_hint``).
        cmd: how that line types the command (``%flower``; ``%flower --demo`` after a demo run).

    Returns:
        ``{"text/plain": ..., "text/html": ...}``.
    """
    lines = _head(facts, lang)
    if hint:
        lines.append([("dim", say("continue_hint", lang, cmd=cmd))])
    return _bundle(lines)


def _number(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return 0.0


def _cells(row: Mapping[str, Any], lang: str, *, continued: bool, base: Path) -> list[html.Cell]:
    ok = row.get("ok") is True
    retired = row.get("retired")
    error = "" if ok else printable(short_paths_in(str(row.get("error") or ""), base))
    if len(error) > ERROR_CHARS:
        error = error[:ERROR_CHARS] + "…"
    context = int(_number(row.get("context")))
    return [
        ("", printable(step_name(str(row.get("step") or "?"), lang))),
        ("ok", "+") if ok else ("bad", "x"),
        ("", f"${_number(row.get('cost_usd')):.4f}"),
        ("", str(int(_number(row.get("num_turns"))))),
        ("", human_elapsed(_number(row.get("duration_s")))),
        ("", str(int(_number(row.get("attempts", 1)))) or "1"),
        ("", say("yes", lang) if continued else ""),
        ("", str(len(retired)) if isinstance(retired, list) and retired else ""),
        ("", human_tokens(context) if context else ""),
        ("dim", error),
    ]


_COLUMNS = ("step", "ok", "cost", "turns", "time", "attempts", "resumed", "handoffs", "context", "error")


def status_bundle(
    facts: Snapshot,
    goal_checks: Sequence[str],
    last_verdict_checks: Iterable[Mapping[str, Any]] | None,
    rows: Sequence[Mapping[str, Any]],
    lang: str = "zh",
    *,
    max_rows: int = 20,
    cmd: str = "%flower",
    story: Sequence[Line] = (),
) -> dict[str, str]:
    """``%flower --status``: banner, goal list with the latest verdict marks, latest manifest rows.

    Args:
        facts: what the run dir holds (``front.options.snapshot``).
        goal_checks: the checks of 目标.md (``Goal.load(...).checks``), or empty.
        last_verdict_checks: the latest verdict's ``checks`` (``[{"check", "passed"}]``), or None
            when no verdict is known: every check shows as not judged yet.
        rows: ``core.manifest.read_rows(run_dir)``, oldest first; the totals cover all of them.
        lang: ``zh`` or ``en``.
        max_rows: how many of the newest rows the table shows.
        cmd: how the person goes on with this run dir's run here (``%flower``, ``flower``, with
            ``--demo`` after a demo run: ``front.outcome.typed_in``).
        story: the last run's story (``display.story.story``), shown last; empty = none.

    Returns:
        ``{"text/plain": ..., "text/html": ...}``.
    """
    if facts.waking:
        lines = _head(facts, lang)
    else:
        where = short_path(facts.workspace, facts.workspace)  # ~/proj, or the folder's name
        # A clarification cut short is not a fresh folder: the next plain start continues it.
        lines = [[("dim", say("cut_short" if facts.cut_short else "fresh", lang, where=where, cmd=cmd))]]
        problem = problem_line(facts, lang)
        if problem:
            lines.append(problem)
    checks = [short_paths_in(str(c), facts.workspace) for c in goal_checks]
    marks = {short_paths_in(k, facts.workspace): v for k, v in marks_of(last_verdict_checks).items()}
    if not checks and marks:
        checks = list(marks)
    doubtful = [c for c in checks if UNVERIFIABLE_RE.search(c)]
    goal = goal_lines(
        [printable(c) for c in checks],
        {printable(k): v for k, v in marks.items()},
        lang,
        unverifiable=[printable(c) for c in doubtful],
    ) or [[("dim", "- " + say("no_goal", lang))]]
    head_html = html.lines_html(lines)
    head_text = html.lines_text(lines)
    if goal:
        head_html += f'<div class="fm-box">{html.lines_html(goal)}</div>'
        head_text += "\n\n" + html.lines_text(goal)
    story_text = "\n\n" + html.lines_text(story) if story else ""
    story_html = f'<div class="fm-box">{html.lines_html(story)}</div>' if story else ""
    if not rows:
        empty = [[("dim", say("no_rows", lang))]]
        return {
            "text/plain": printable(head_text + "\n\n" + html.lines_text(empty) + story_text),
            "text/html": html.wrap(head_html + f'<div class="fm-box">{html.lines_html(empty)}</div>' + story_html),
        }
    first = max(0, len(rows) - max(1, max_rows))
    shown = list(rows)[first:]
    headers = [say(f"col_{c}", lang) for c in _COLUMNS]
    continued = continued_rows(rows)  # over every row: a wake continues a session of a row not shown
    table = [_cells(r, lang, continued=first + i in continued, base=facts.workspace) for i, r in enumerate(shown)]
    t = totals(rows)
    caption: Line = [("bold", say("rows_head", lang, n=len(shown), total=len(rows)))]
    summary: Line = [
        (
            "dim",
            say(
                "rows_total",
                lang,
                steps=t["steps"],
                turns=t["num_turns"],
                cost=t["cost_usd"],
                elapsed=human_elapsed(t["duration_s"]),
                retries=t["retries"],
                handoffs=t["handoffs"],
            ),
        )
    ]
    rows_html = html.line_html(caption) + html.table_html(headers, table, numeric=NUMERIC) + html.line_html(summary)
    rows_text = "\n".join(
        [html.line_text(caption), html.table_text(headers, table, numeric=NUMERIC), html.line_text(summary)]
    )
    return {
        "text/plain": printable(head_text + "\n\n" + rows_text + story_text),
        "text/html": html.wrap(head_html + f'<div class="fm-box">{rows_html}</div>' + story_html),
    }


def status_of(opts: Any, *, cmd: str = "%flower") -> dict[str, str]:
    """``--status`` for checked ``GoOptions`` (``preflight(run=False)`` already passed): what the run
    dir remembers, read once, as ``status_bundle`` renders it, and the last run's story when its event
    log is there (``display.story``). The one path behind ``%flower --status``
    and ``flower --status``. Reads only."""
    from flower_magic.core import manifest
    from flower_magic.core.goal import Goal
    from flower_magic.display.story import story
    from flower_magic.front.options import snapshot
    from flower_magic.front.outcome import typed_in
    from flower_magic.workflow.judge import check_marks, last_verdict

    facts = snapshot(opts.rundir, opts.sessions)
    goal = Goal.load(facts.goal)
    rows = manifest.read_rows(opts.rundir.path)
    verdict = last_verdict(rows)
    checks = list(goal.checks) if goal else []
    marks = check_marks(checks, verdict) if verdict is not None else None
    told = story(opts.rundir.path, opts.lang, cmd=cmd, base=opts.workspace)
    here = typed_in(opts.rundir.path, cmd)
    return status_bundle(facts, checks, marks, rows, opts.lang, cmd=here, story=told)
