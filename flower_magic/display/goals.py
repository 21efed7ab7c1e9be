"""The goal list: each check of 目标.md with the judge's latest verdict on it, as phrase lines.

Marks, as in the terminal: ``+`` passed, ``x`` failed, ``-`` not judged yet, ``!`` not judged yet
and marked unverifiable in this environment (the judge can never pass it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from flower_magic.core.printable import printable
from flower_magic.core.words import say
from flower_magic.front.phrases import Line

REASON_CHARS = 300  # one readable line of the judge's reason; the full text is in the judge's session


def marks_of(checks: Iterable[Any] | None) -> dict[str, bool]:
    """``{check: passed}`` from a verdict's ``checks`` (``[{"check", "passed"}]``); junk is skipped."""
    marks: dict[str, bool] = {}
    for item in checks or ():
        if isinstance(item, Mapping) and isinstance(item.get("check"), str):
            marks[item["check"]] = bool(item.get("passed"))
    return marks


PASS, FAIL, PENDING, UNVERIFIABLE = "pass", "fail", "pending", "unverifiable"


def check_states(
    checks: Sequence[str], marks: Mapping[str, bool], unverifiable: Iterable[str] = ()
) -> list[tuple[str, str]]:
    """``[(check, state)]``: the judge's latest word on each check (``pass``, ``fail``), else
    ``unverifiable`` when it is marked so, else ``pending``."""
    doubtful = set(unverifiable)
    out = []
    for check in checks:
        passed = marks.get(check)
        state = PASS if passed is True else FAIL if passed is False else UNVERIFIABLE if check in doubtful else PENDING
        out.append((check, state))
    return out


def _mark(check: str, marks: Mapping[str, bool], unverifiable: Iterable[str]) -> tuple[str, str]:
    passed = marks.get(check)
    if passed is True:
        return ("ok", "+")
    if passed is False:
        return ("bad", "x")
    return ("warn", "!") if check in unverifiable else ("dim", "-")


def verdict_line(verdict: Mapping[str, Any], lang: str = "zh") -> Line:
    """``判定 #2: 未达成 — <the first line of the reason>``."""
    state = str(verdict.get("verdict") or "unclear")
    key = f"state_{state}"
    shown = say(key, lang) if key in _STATE_KEYS else state
    style = "ok" if state == "achieved" else "bad"
    line: Line = [("dim", say("verdict", lang, round=verdict.get("round") or "?", state="")), (style, shown)]
    reason = str(verdict.get("reason") or "").strip()
    if reason:
        first = printable(reason.splitlines()[0])
        if len(first) > REASON_CHARS:
            first = first[:REASON_CHARS] + "…"
        line.append(("dim", " — " + first))
    return line


_STATE_KEYS = frozenset({"state_achieved", "state_not_yet", "state_unreachable", "state_unclear"})


def goal_lines(
    checks: Sequence[str],
    marks: Mapping[str, bool],
    lang: str = "zh",
    *,
    unverifiable: Iterable[str] = (),
    verdict: Mapping[str, Any] | None = None,
) -> list[Line]:
    """The goal list: a summary line, one line per check, then the latest verdict (if any).

    Args:
        checks: the checks of 目标.md, in order.
        marks: ``{check: passed}`` from the latest verdict; a check not in it is not judged yet.
        unverifiable: checks marked as impossible to verify here.
        verdict: the latest verdict event's payload (``verdict``, ``reason``, ``round``).

    Returns:
        [] when there are no checks.
    """
    if not checks:
        return []
    doubtful = set(unverifiable)
    passed = sum(1 for c in checks if marks.get(c) is True)
    failed = sum(1 for c in checks if marks.get(c) is False)
    summary = say("goal_summary", lang, passed=passed, failed=failed, pending=len(checks) - passed - failed)
    lines: list[Line] = [[("bold", say("goals", lang, n=len(checks))), ("dim", " · " + summary)]]
    for check in checks:
        lines.append([_mark(check, marks, doubtful), ("", " " + printable(check))])
    if verdict:
        lines.append(verdict_line(verdict, lang))
    return lines
