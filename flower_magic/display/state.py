"""What one run's view shows, as data: events in, phrase lines and escaped HTML out. No widgets.

``RunState`` mirrors ``terminal.TerminalView`` event by event (same phrases, same marks, same
rules for what verbose adds), but keeps the result instead of printing it: one ``Section`` per step
(its header, a bounded log, its result line once it ended), the goal list with the judge's latest
verdict on each check, the header's facts (step n/N, round, status, elapsed, cost, context against
the window), and the questions still waiting. ``RunView`` renders it.

Guarantees:
    - Thread-safe: every public method holds ``lock`` (an ``RLock``); callers that render several
      parts hold it around all of them to get one consistent snapshot.
    - Agent text is made printable (``core.printable``: no escape sequence, no control character)
      when it arrives and escaped when rendered; a single text is capped at ``MAX_TEXT_CHARS``. In
      HTML the agent's words are Markdown rendered with raw HTML escaped (``display.markdown``); the
      text views keep them as written.
    - A judge's round is one log entry (``kind="judge"``) from its header to its verdict: what the
      judge says and does in between goes into it (shown folded under the ruling in HTML, in order in
      text), so its ruling never reads as the worker's words.
    - No absolute path under the workspace or the home directory is kept: agent text, tool input and
      results, errors and the lines added pass ``core.words.short_paths_in`` (``clip``, ``add``), and
      the total line names the manifest with ``short_path``.
    - The context the header shows is the main session's of the step that runs (never a judge's or
      a subagent's), named for that step: from its start, what that step last reported (the work
      session's as the wake banner said it), else 0 until it reports.
    - With ``answers_in_place`` (a widget answers questions), a waiting question is in ``open_asks``
      only, not in the log: it is shown once, by the widget; once settled it is one log entry.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flower_magic.core.events import Event
from flower_magic.core.printable import printable
from flower_magic.core.rundir import WORK_STEP, Snapshot
from flower_magic.core.words import say, short_paths_in, step_name
from flower_magic.display import html
from flower_magic.display.goals import check_states, goal_lines, marks_of, verdict_line
from flower_magic.display.header import Header, checklist_html, header_html
from flower_magic.display.log import Entry, RunLog
from flower_magic.front.outcome import Outcome
from flower_magic.front.phrases import (
    Line,
    ending_lines,
    explain_error,
    problem_line,
    result_line,
    status_line,
    total_line,
    wake_banner,
)
from flower_magic.front.view import Clip, Shown, shown

MAX_TEXT_CHARS = 4000  # one agent message in the live view; the full text stays in the session
TOOL_INPUT_CHARS = 2000  # the collapsed details of a tool call
MAX_TRACKED = 400  # tool calls and asks remembered for later updates (more than the log window holds)
HEADER_COLS = 80  # the step header's text width in text/plain (HTML stretches the rule instead)
# What a judge says and does while it rules: kept in its round's element, under the ruling.
JUDGE_SAYS = frozenset({"text", "thinking", "system"})


def clip(text: str, limit: int) -> str:
    """``text`` made printable and cut at ``limit`` characters, saying how much was cut."""
    text = printable(str(text))
    return text if len(text) <= limit else f"{text[:limit]} …(+{len(text) - limit})"


def _tool_details(tool_input: Any, clip: Clip = clip) -> str:
    if tool_input is None:
        return ""
    try:
        text = json.dumps(tool_input, ensure_ascii=False, indent=2, default=str)
    except (TypeError, ValueError):
        text = str(tool_input)
    return clip(text, TOOL_INPUT_CHARS)


@dataclass(eq=False)
class Section:
    """One step of the run as the view shows it.

    Attributes:
        number: its position in the run (0 is what came before the first step header).
        name: the step's name ("" for the part before the first step).
        index, total: the step's n/N in the workflow (0 when unknown).
        header: the step header line (None for the part before the first step).
        log: what the step showed, newest last (its result line last once it ended).
        result: the result line once the step ended (None while it runs).
        ok: whether it ended well (None while it runs).
        tools: tool calls made in it.
    """

    number: int
    name: str = ""
    index: int = 0
    total: int = 0
    header: Line | None = None
    log: RunLog = field(default_factory=RunLog)
    result: Line | None = None
    ok: bool | None = None
    tools: int = 0

    @property
    def is_running(self) -> bool:
        return self.header is not None and self.result is None

    def summary(self, lang: str) -> Line:
        """The section's title: ``✓ 确认需求 · 1/3 · 完成 · 2 轮 · $0.0100 · 用时 0:12 · 工具调用 4 次`` once
        it ended; while it runs, the mark, the name and the header's tail (n/N, carried on)."""
        mark = "…" if self.ok is None else "✓" if self.ok else "✗"
        line: Line = [("bold", f"{mark} {step_name(self.name, lang)}")]
        if self.result is None:
            tail = "".join(text for style, text in self.header or [] if style == "dim")
            return line + ([("dim", " · " + tail)] if tail else [])
        if self.index and self.total:
            line.append(("dim", f" · {self.index}/{self.total}"))
        outcome = self.result[0][1].lstrip("+x ")
        rest = "".join(text for _, text in self.result[1:]).strip()
        line.append(("dim", f" · {outcome} · {rest}"))
        if self.tools:
            line.append(("dim", " · " + say("step_tools", lang, n=self.tools)))
        return line

    def note_lines(self, lang: str) -> list[Line]:
        return [[("dim", say("earlier", lang, n=self.log.dropped))]] if self.log.dropped else []

    def to_html(self, lang: str, *, is_open: bool = True) -> str:
        """The section as static HTML: a step is a ``<details>`` whose summary is its header with the
        result in its tail (collapsed unless ``is_open``), so an export reads like the live view."""
        body = html.lines_html(self.note_lines(lang)) + self.log.to_html()
        if self.header is None:
            return body
        line = self.header
        if self.result is not None:  # the header's tail, then how the step ended
            line = [*line[:-1], ("dim", line[-1][1] + "".join(text for _, text in self.summary(lang)[2:]))]
        head = html.step_html(line)
        return html.section_html(head, body, is_open=is_open)

    def to_text(self, lang: str) -> str:
        parts = [f"\n{html.line_text(self.header)}\n"] if self.header is not None else []
        parts += [html.lines_text(self.note_lines(lang)), self.log.to_text()]
        return "\n".join(p for p in parts if p)


@dataclass
class OpenAsk:
    """A question waiting for an answer, for a widget to show (data only, sanitised)."""

    id: str
    question: str
    options: list[str]
    section: int


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
        banner_facts: what the run dir holds (``front.options.snapshot``) when waking (shows the wake
            banner), else None.
        log: the log of what comes before the first step (default: ``RunLog()``).
        window: the model's context window in tokens (0: unknown, the header shows no bar).
        workspace: the run's folder (the notebook's): every path shown is relative to it, or ``~/…``
            (``core.words.short_path``; the agent's text through ``short_paths_in``), so a saved
            notebook carries no absolute path. Default: the kernel's working folder.
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
        window: int = 0,
        workspace: str | Path | None = None,
    ) -> None:
        self.lock = threading.RLock()
        self.workspace = workspace
        self.lang, self.verbose, self.rounds = lang, verbose, max(0, int(rounds))
        self.window = max(0, int(window))
        self.sections: list[Section] = [Section(0, log=log or RunLog())]
        self.head: list[Line] = []
        # The work session's context as the banner says it, until the running step reports its own.
        self.context = banner_facts.work_context if banner_facts is not None else 0
        self.context_step = WORK_STEP if self.context else ""
        # Each step's last known context: a step that starts shows its own (0 until it reports), never
        # the step before's under its own name (设定目标 said "确认需求上下文").
        self._contexts: dict[str, int] = {WORK_STEP: self.context} if self.context else {}
        if banner_facts is not None:
            self.head.append(wake_banner(banner_facts, lang))
            problem = problem_line(banner_facts, lang)
            if problem:
                self.head.append(problem)
        self.goals: list[str] = [self.said(c) for c in goal_checks]
        self.marks: dict[str, bool] = {}
        self.unverifiable: set[str] = set()
        self.verdict: dict[str, Any] | None = None
        self.rounds_seen = 0
        self.judging = False  # the events now come from a judge's session
        self.cost = 0.0
        self.started = time.monotonic()
        self.ended: float | None = None
        self.failed = False
        self.outcome: Outcome | None = None
        self.closing: list[Line] = []
        self.events = 0
        self.answers_in_place = False
        self.open_asks: dict[str, OpenAsk] = {}
        self._asks: dict[str, Entry] = {}
        self._tools: dict[str, Entry] = {}
        self._judge: Entry | None = None  # the judge round being ruled: what it says goes into its element
        self.changed = True  # anything but the clock changed since the last render
        self.waiting = ""  # what the run waits for before its first event (the header says it)
        self.let_go_at: float | None = None  # the view stopped following a run that goes on (``let_go``)

    def clip(self, text: str, limit: int) -> str:
        """Agent text as this view shows it: paths said relative to the workspace, printable, cut."""
        return clip(short_paths_in(str(text), self.workspace), limit)

    def said(self, text: object) -> str:
        """A goal check or a verdict's reason as this view shows it: paths relative, printable."""
        return printable(short_paths_in(str(text), self.workspace))

    @property
    def log(self) -> RunLog:
        """The log of the section that runs (the newest)."""
        return self.sections[-1].log

    @property
    def section(self) -> Section:
        return self.sections[-1]

    # -- input ------------------------------------------------------------------------------------------

    def feed(self, ev: Event) -> None:
        """Take one event (any kind; unknown kinds are ignored)."""
        with self.lock:
            if self.ended is not None:
                return
            self.events += 1
            if self.waiting:  # the run has begun: it no longer waits for the agent to start
                self.waiting, self.changed = "", True
            self._feed(ev)

    def add(self, line: Line) -> Entry | None:
        """Append one phrase line to the log (a notice from the front end, e.g. "archived"); returns its
        entry (None once the run ended)."""
        with self.lock:
            if self.ended is not None:
                return None
            entry = Entry([[(style, self.said(text)) for style, text in line]])
            self._add(entry)
            return entry

    def restate(self, entry: Entry, line: Line) -> None:
        """Say a line added before in other words (a lead line that holds only while the run goes, once
        it has ended); a line the log no longer holds stays dropped."""
        with self.lock:
            for section in self.sections:
                if section.log.holds(entry):
                    entry.lines = [[(style, self.said(text)) for style, text in line]]
                    section.log.touch(entry)
                    self.changed = True
                    return

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
                lines.append(explained or [("dim", "  " + self.clip(str(error), 300))])
            self._judge = None
            self._add(Entry(lines))
            if self.section.header is not None:
                self.section.result, self.section.ok = line, ok
            self.judging = False

    def set_goals(self, checks: Sequence[str]) -> None:
        """Replace the goal list (a re-derived 目标.md); marks of unchanged checks are kept."""
        with self.lock:
            self.goals = [self.said(c) for c in checks]
            self.changed = True

    def finish(self, outcome: Outcome | None, cmd: str = "%flower") -> None:
        """Stop the clock; add the total line and how the run ended (``front.outcome``), with how to
        continue as ``cmd``. Input after this is ignored, so the final render is final."""
        with self.lock:
            if self.ended is not None:
                return
            self.ended = time.monotonic()
            self.waiting = ""
            self.open_asks.clear()
            self.outcome = outcome
            if outcome is not None:
                if outcome.manifest or outcome.cost_usd:
                    cost = outcome.cost_usd or self.cost
                    line = total_line(
                        cost, outcome.manifest, self.lang, base=self.workspace, run_cost=outcome.run_cost_usd
                    )
                    self.closing.append(line)
                self.closing.extend(ending_lines(outcome, self.lang, cmd))
            self.failed = outcome is not None and not outcome.ok
            self.changed = True

    def let_go(self, lines: Sequence[Line]) -> None:
        """No longer shown live (the kernel is going) while the run goes on elsewhere: the clock stops,
        ``lines`` close the view, no question waits here; the header says it is not followed."""
        with self.lock:
            if self.ended is not None:
                return
            for ask in self.open_asks.values():  # the question stays on the page, without its buttons
                self._add(Entry([[("warn", say("question", self.lang, question=ask.question))]]))
            self.ended = time.monotonic()
            self.let_go_at = self.ended
            self.waiting = ""
            self.open_asks.clear()
            self.closing.extend([[(style, printable(text)) for style, text in line] for line in lines])
            self.changed = True

    # -- events -----------------------------------------------------------------------------------------

    def _add(self, entry: Entry) -> None:
        self.log.append(entry)
        self.changed = True

    def _feed(self, ev: Event) -> None:
        p = ev.payload if isinstance(ev.payload, dict) else {}
        sub = bool(p.get("subagent"))
        if ev.kind == "step":
            self.judging = bool(p.get("judge"))
        if isinstance(p.get("context"), int) and not sub and not self.judging and self.section.header is not None:
            self.context, self.context_step = p["context"], self.section.name
            self._contexts[self.section.name] = p["context"]
            self.changed = True
        if ev.kind == "result":
            self.cost += float(p.get("cost_usd") or 0.0)
            self.changed = True
            return
        what = shown(ev, lang=self.lang, verbose=self.verbose, width=HEADER_COLS, clip=self.clip, base=self.workspace)
        if what is None:
            return
        if what.kind == "step":
            self._judge = None
            self._step(ev, p, what)
        elif what.kind == "round":
            self._judge = None
            entry = Entry(what.lines, kind="judge" if p.get("judge") else "round", lang=self.lang)
            self._add(entry)
            if entry.kind == "judge":
                self._judge = entry
        elif what.kind == "tool":
            tool = clip(ev.tool or "", 100)
            details = _tool_details(p.get("input"), self.clip)
            entry = Entry(what.lines, kind="tool", details=details, sub=what.sub, tool=tool)
            self._put(entry)
            if not what.sub:
                self.section.tools += 1
            if what.key is not None:
                _remember(self._tools, what.key, entry)
        elif what.kind == "tool_result":
            self._tool_result(ev, what)
        elif what.kind == "ask":
            self._ask(ev, p, what)
        elif what.kind == "task":
            self._task(p, what)
        elif what.kind in JUDGE_SAYS:
            self._put(Entry(what.lines, kind="text" if what.kind == "text" else "line", sub=what.sub))
        else:
            kind = {"handoff": "handoff"}.get(what.kind, "line")
            self._add(Entry(what.lines, kind=kind, sub=what.sub))

    def _put(self, entry: Entry) -> None:
        """Add ``entry`` to the log, or, while a judge rules, to its round (folded under its ruling)."""
        judge = self._judge
        if judge is None or not self.log.holds(judge):
            self._add(entry)
            return
        entry.chunk = judge.chunk
        judge.parts.append(entry)
        self.log.touch(judge)
        self.changed = True

    def _step(self, ev: Event, p: dict[str, Any], what: Shown) -> None:
        section = Section(
            len(self.sections),
            name=self.clip(ev.text, 200),
            index=int(p.get("index") or 0),
            total=int(p.get("total") or 0),
            header=what.lines[0],
        )
        self.sections.append(section)
        self.context, self.context_step = self._contexts.get(section.name, 0), section.name
        self.changed = True

    def _tool_result(self, ev: Event, what: Shown) -> None:
        call = self._tools.get(str(what.key))
        if call is not None and any(s.log.holds(call) for s in self.sections[-2:]):
            call.details = (call.details + "\n" if call.details else "") + "-> " + self.clip(ev.text, 600)
            for s in self.sections[-2:]:
                s.log.touch(call)
            self.changed = True
        if what.lines:
            self._put(Entry(what.lines, sub=what.sub))

    def _ask(self, ev: Event, p: dict[str, Any], what: Shown) -> None:
        key = str(what.key)
        if what.state == "asked" and self.answers_in_place:
            options = [self.clip(str(o), 300) for o in p.get("options") or []]
            self.open_asks[key] = OpenAsk(key, self.clip(ev.text, 2000), options, self.section.number)
            self.changed = True
            return
        self.open_asks.pop(key, None)
        entry = self._asks.get(key)
        if entry is not None and any(s.log.holds(entry) for s in self.sections):
            entry.lines = what.lines
            for s in self.sections:
                s.log.touch(entry)
            self.changed = True
        else:
            entry = Entry(what.lines)
            self._add(entry)
            if what.key is not None:
                _remember(self._asks, key, entry)

    def _task(self, p: dict[str, Any], what: Shown) -> None:
        if p.get("kind") == "verdict":
            self.verdict = {k: p.get(k) for k in ("verdict", "reason", "round")}
            if isinstance(self.verdict["reason"], str):
                self.verdict["reason"] = self.said(self.verdict["reason"])
            self.rounds_seen += 1
            checks = [c for c in p.get("checks") or [] if isinstance(c, Mapping)]
            marks = {self.said(k): v for k, v in marks_of(checks).items()}
            if marks and list(marks) != self.goals:
                self.goals = list(marks)  # the goal the judge judged is the goal now
            self.marks.update(marks)
            self.changed = True
            judge = self._judge
            if judge is not None and self.log.holds(judge):  # the ruling joins its round's element
                judge.verdict = {k: p.get(k) for k in ("verdict", "failed", "round", "checks")}
                judge.verdict["reason"] = self.clip(str(p.get("reason") or ""), MAX_TEXT_CHARS)
                if what.lines:
                    self._put(Entry(what.lines, kind="verdict"))
                self.log.touch(judge)
                self._judge = None
                return
        if isinstance(p.get("unverifiable"), list):
            self.unverifiable = {self.said(c) for c in p["unverifiable"]}
            self.changed = True
        if what.lines:
            self._add(Entry(what.lines))

    # -- output (hold ``lock`` around several calls for one snapshot) -------------------------------------

    def elapsed(self, now: float | None = None) -> float:
        end = self.ended if self.ended is not None else (time.monotonic() if now is None else now)
        return max(0.0, end - self.started)

    def _round(self) -> tuple[int, int]:
        """The judge's round n/N; (0, 0) before the judged step (the last one) has started."""
        step = self.section
        if not self.rounds_seen and not (step.header is not None and step.total and step.index == step.total):
            return 0, 0
        if self.ended is None:
            return min(self.rounds_seen + 1, self.rounds), self.rounds
        return min(self.rounds_seen, self.rounds), self.rounds if self.rounds_seen else 0

    def header(self, now: float | None = None) -> Header:
        """What the header shows now."""
        step = next((s for s in reversed(self.sections) if s.header is not None), None)
        outcome = self.outcome if self.ended is not None else None
        ending = outcome.ending.value if outcome is not None else ""
        if self.let_go_at is not None:
            status = "let_go"
        elif self.ended is not None:
            warn = outcome is not None and outcome.style == "warn"
            status = "done" if not self.failed else ("stopped" if warn else "failed")
        else:
            status = "asking" if self.open_asks else "running"
        round_n, rounds = self._round()
        return Header(
            status=status,
            ending=ending,
            step=step.name if step is not None else "",
            index=step.index if step is not None else 0,
            total=step.total if step is not None else 0,
            steps_done=sum(1 for s in self.sections if s.ok is not None),
            round_n=round_n,
            rounds=rounds,
            elapsed_s=self.elapsed(now),
            cost=self.cost,
            context=self.context,
            context_step=self.context_step,
            window=self.window,
            waiting=self.waiting,
        )

    def footer_lines(self, now: float | None = None) -> list[Line]:
        """What the run waits for (before its first event), the status line (context, cost, elapsed,
        round n/N), then the closing lines."""
        round_n, rounds = self._round()
        status = status_line(self.context, self.cost, self.elapsed(now), self.lang, round_n=round_n, rounds=rounds)
        waiting: list[Line] = [[("note", f"… {self.waiting}")]] if self.waiting else []
        return [*waiting, status, *self.closing]

    def goal_list(self) -> list[Line]:
        return goal_lines(self.goals, self.marks, self.lang, unverifiable=self.unverifiable, verdict=self.verdict)

    def note_lines(self) -> list[Line]:
        """What the log window no longer holds (the section that runs)."""
        return self.section.note_lines(self.lang)

    def head_html(self) -> str:
        return html.lines_html(self.head)

    def header_html(self, now: float | None = None, *, live: bool = False) -> str:
        return header_html(self.header(now), self.lang, live=live)

    def goals_html(self) -> str:
        if not self.goals:
            return ""
        states = check_states(self.goals, self.marks, self.unverifiable)
        verdict = [verdict_line(self.verdict, self.lang)] if self.verdict else []
        return checklist_html(self.goal_list()[0], states, verdict, self.lang)

    def closing_html(self) -> str:
        return f'<div class="fm-box">{html.lines_html(self.closing)}</div>' if self.closing else ""

    def to_html(self, now: float | None = None) -> str:
        """The whole view as one self-contained HTML fragment (with its style block)."""
        with self.lock:
            body = (
                self.head_html()
                + self.header_html(now)
                + self.goals_html()
                + "".join(s.to_html(self.lang, is_open=s is self.sections[-1] or s.ok is False) for s in self.sections)
                + self.closing_html()
            )
        return html.wrap(body)

    def to_text(self, now: float | None = None) -> str:
        """The whole view as plain text."""
        with self.lock:
            parts = [
                html.lines_text(self.head),
                *(s.to_text(self.lang) for s in self.sections),
                html.lines_text(self.goal_list()),
                html.lines_text(self.footer_lines(now)),
            ]
        return "\n".join(p for p in parts if p)
