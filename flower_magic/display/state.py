"""What one run's view shows, as data: events in, phrase lines and escaped HTML out. No widgets.

``RunState`` mirrors ``terminal.TerminalView`` event by event (same phrases, same marks, same
rules for what verbose adds), but keeps the result instead of printing it: a bounded log, the goal
list with the judge's latest marks, and a status line. ``RunView`` renders it.

Guarantees:
    - Thread-safe: every public method holds ``lock`` (an ``RLock``); callers that render several
      parts hold it around all of them to get one consistent snapshot.
    - Agent text is sanitised (terminal escapes and control characters removed) when it arrives
      and escaped when rendered; a single text is capped at ``MAX_TEXT_CHARS``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from flower_magic.core.events import Event
from flower_magic.core.rundir import Snapshot
from flower_magic.core.words import say
from flower_magic.display import html
from flower_magic.display.goals import goal_lines, marks_of
from flower_magic.display.log import Entry, RunLog
from flower_magic.terminal import sanitize
from flower_magic.workflow.phrases import (
    Line,
    explain_error,
    problem_line,
    result_line,
    status_line,
    total_line,
    wake_banner,
)
from flower_magic.workflow.view import Shown, shown

MAX_TEXT_CHARS = 4000  # one agent message in the live view; the full text stays in the session
TOOL_INPUT_CHARS = 2000  # the collapsed details of a tool call
MAX_TRACKED = 400  # tool calls and asks remembered for later updates (more than the log window holds)
HEADER_COLS = 80  # the step header's text width in text/plain (HTML stretches the rule instead)


def clip(text: str, limit: int) -> str:
    """``text`` sanitised and cut at ``limit`` characters, saying how much was cut."""
    text = sanitize(str(text))
    return text if len(text) <= limit else f"{text[:limit]} …(+{len(text) - limit})"


def _tool_details(tool_input: Any) -> str:
    if tool_input is None:
        return ""
    try:
        text = json.dumps(tool_input, ensure_ascii=False, indent=2, default=str)
    except (TypeError, ValueError):
        text = str(tool_input)
    return clip(text, TOOL_INPUT_CHARS)


def _remember(table: dict[str, Entry], key: str, entry: Entry) -> None:
    table[key] = entry
    while len(table) > MAX_TRACKED:
        table.pop(next(iter(table)))


class RunState:
    """The content of a run's view.

    Args:
        lang: ``zh`` or ``en``.
        verbose: also show subagent text, thinking, successful tool results and system events.
        rounds: the judge's round budget N (0: no round counter in the status line).
        goal_checks: the checks of 目标.md when the run starts.
        banner_facts: what the run dir holds (``workflow.go.snapshot``) when waking (shows the wake banner), else None.
        log: the log (default: ``RunLog()``).
    """

    def __init__(
        self,
        lang: str = "zh",
        *,
        verbose: bool = False,
        rounds: int = 0,
        goal_checks: Sequence[str] = (),
        banner_facts: Snapshot | None = None,
        log: RunLog | None = None,
    ) -> None:
        self.lock = threading.RLock()
        self.lang, self.verbose, self.rounds = lang, verbose, max(0, int(rounds))
        self.log = log or RunLog()
        self.head: list[Line] = []
        if banner_facts is not None:
            self.head.append(wake_banner(banner_facts, lang))
            problem = problem_line(banner_facts, lang)
            if problem:
                self.head.append(problem)
        self.goals: list[str] = [sanitize(str(c)) for c in goal_checks]
        self.marks: dict[str, bool] = {}
        self.unverifiable: set[str] = set()
        self.verdict: dict[str, Any] | None = None
        self.rounds_seen = 0
        self.context = 0
        self.cost = 0.0
        self.started = time.monotonic()
        self.ended: float | None = None
        self.closing: list[Line] = []
        self.events = 0
        self._asks: dict[str, Entry] = {}
        self._tools: dict[str, Entry] = {}
        self.changed = True  # anything but the clock changed since the last render

    # -- input ------------------------------------------------------------------------------------------

    def feed(self, ev: Event) -> None:
        """Take one event (any kind; unknown kinds are ignored)."""
        with self.lock:
            if self.ended is not None:
                return
            self.events += 1
            self._feed(ev)

    def add(self, line: Line) -> None:
        """Append one phrase line to the log (a notice from the front end, e.g. "archived")."""
        with self.lock:
            if self.ended is None:
                self._add(Entry([[(style, sanitize(text)) for style, text in line]]))

    def step_done(self, result: Any) -> None:
        """The result line of a finished step (``StepResult``: ok, num_turns, cost_usd, duration_s)."""
        with self.lock:
            if self.ended is not None:
                return
            ok = bool(getattr(result, "ok", False))
            line = result_line(
                ok,
                int(getattr(result, "num_turns", 0) or 0),
                float(getattr(result, "cost_usd", 0.0) or 0.0),
                float(getattr(result, "duration_s", 0.0) or 0.0),
                self.lang,
            )
            lines = [line]
            error = getattr(result, "error", None)
            if not ok and error:
                explained = explain_error(str(error), self.lang, cmd="%flower")
                lines.append(explained or [("dim", "  " + clip(str(error), 300))])
            self._add(Entry(lines))

    def set_goals(self, checks: Sequence[str]) -> None:
        """Replace the goal list (a re-derived 目标.md); marks of unchanged checks are kept."""
        with self.lock:
            self.goals = [sanitize(str(c)) for c in checks]
            self.changed = True

    def finish(self, ctx: Mapping[str, Any] | None, total_cost: float, manifest: str) -> None:
        """Stop the clock; add the total line and, if a step stopped the run, why. Input after this
        is ignored, so the final render is final."""
        with self.lock:
            if self.ended is not None:
                return
            self.ended = time.monotonic()
            if manifest or total_cost:
                self.closing.append(total_line(total_cost or self.cost, sanitize(manifest) or "-", self.lang))
            failed = (ctx or {}).get("_failed_at")
            if failed:
                why = (ctx or {}).get("_aborted")
                if why:
                    self.closing.append([("bad", "! " + clip(str(why), 600))])
                self.closing.append([("bad", say("aborted", self.lang, step=sanitize(str(failed))))])
            self.changed = True

    # -- events -----------------------------------------------------------------------------------------

    def _add(self, entry: Entry) -> None:
        self.log.append(entry)
        self.changed = True

    def _say(self, style: str, text: str, *, sub: bool = False) -> None:
        self._add(Entry([[(style, text)]], sub=sub))

    def _feed(self, ev: Event) -> None:
        p = ev.payload if isinstance(ev.payload, dict) else {}
        sub = bool(p.get("subagent"))
        if isinstance(p.get("context"), int) and not sub:
            self.context = p["context"]
            self.changed = True
        if ev.kind == "result":
            self.cost += float(p.get("cost_usd") or 0.0)
            self.changed = True
            return
        what = shown(ev, lang=self.lang, verbose=self.verbose, width=HEADER_COLS, clip=clip)
        if what is None:
            return
        if what.kind == "tool":
            entry = Entry(what.lines, kind="tool", details=_tool_details(p.get("input")), sub=what.sub)
            self._add(entry)
            if what.key is not None:
                _remember(self._tools, what.key, entry)
        elif what.kind == "tool_result":
            self._tool_result(ev, what)
        elif what.kind == "ask":
            self._ask(what)
        elif what.kind == "task":
            self._task(p, what)
        else:
            kind = {"step": "step", "handoff": "handoff"}.get(what.kind, "line")
            self._add(Entry(what.lines, kind=kind, sub=what.sub))

    def _tool_result(self, ev: Event, what: Shown) -> None:
        call = self._tools.get(str(what.key))
        if call is not None and self.log.holds(call):
            call.details = (call.details + "\n" if call.details else "") + "-> " + clip(ev.text, 600)
            self.log.touch(call)
            self.changed = True
        if what.lines:
            self._add(Entry(what.lines, sub=what.sub))

    def _ask(self, what: Shown) -> None:
        entry = self._asks.get(str(what.key))
        if entry is not None and self.log.holds(entry):
            entry.lines = what.lines
            self.log.touch(entry)
            self.changed = True
        else:
            entry = Entry(what.lines)
            self._add(entry)
            if what.key is not None:
                _remember(self._asks, what.key, entry)

    def _task(self, p: dict[str, Any], what: Shown) -> None:
        if p.get("kind") == "verdict":
            self.verdict = {k: p.get(k) for k in ("verdict", "reason", "round")}
            self.rounds_seen += 1
            checks = [c for c in p.get("checks") or [] if isinstance(c, Mapping)]
            marks = {sanitize(k): v for k, v in marks_of(checks).items()}
            if marks and list(marks) != self.goals:
                self.goals = list(marks)  # the goal the judge judged is the goal now
            self.marks.update(marks)
            self.changed = True
        if isinstance(p.get("unverifiable"), list):
            self.unverifiable = {sanitize(str(c)) for c in p["unverifiable"]}
            self.changed = True
        if what.lines:
            self._add(Entry(what.lines))

    # -- output (hold ``lock`` around several calls for one snapshot) -------------------------------------

    def elapsed(self, now: float | None = None) -> float:
        end = self.ended if self.ended is not None else (time.monotonic() if now is None else now)
        return max(0.0, end - self.started)

    def footer_lines(self, now: float | None = None) -> list[Line]:
        """The status line (context, cost, elapsed, round n/N), then the closing lines."""
        if self.ended is None:
            round_n, rounds = min(self.rounds_seen + 1, self.rounds), self.rounds
        else:
            round_n, rounds = min(self.rounds_seen, self.rounds), self.rounds if self.rounds_seen else 0
        status = status_line(self.context, self.cost, self.elapsed(now), self.lang, round_n=round_n, rounds=rounds)
        return [status, *self.closing]

    def goal_list(self) -> list[Line]:
        return goal_lines(self.goals, self.marks, self.lang, unverifiable=self.unverifiable, verdict=self.verdict)

    def note_lines(self) -> list[Line]:
        return [[("dim", say("earlier", self.lang, n=self.log.dropped))]] if self.log.dropped else []

    def head_html(self) -> str:
        return html.lines_html(self.head)

    def goals_html(self) -> str:
        goals = self.goal_list()
        return f'<div class="fm-box">{html.lines_html(goals)}</div>' if goals else ""

    def footer_html(self, now: float | None = None) -> str:
        return f'<div class="fm-box">{html.lines_html(self.footer_lines(now))}</div>'

    def to_html(self, now: float | None = None) -> str:
        """The whole view as one self-contained HTML fragment (with its style block)."""
        with self.lock:
            body = (
                self.head_html()
                + html.lines_html(self.note_lines())
                + self.log.to_html()
                + self.goals_html()
                + self.footer_html(now)
            )
        return html.wrap(body)

    def to_text(self, now: float | None = None) -> str:
        """The whole view as plain text."""
        with self.lock:
            parts = [
                html.lines_text(self.head),
                html.lines_text(self.note_lines()),
                self.log.to_text(),
                html.lines_text(self.goal_list()),
                html.lines_text(self.footer_lines(now)),
            ]
        return "\n".join(p for p in parts if p)
