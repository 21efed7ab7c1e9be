"""The top of a run's view as escaped HTML: the header (status, step n/N, round, elapsed, cost, the
context against the window as a bar) and the goal checklist with a verdict badge per check.

The same HTML is the live widget's and the static fallback's (nbconvert, a saved notebook), so all
three renderings show one header. Pure functions of data; every piece of text goes through
``html.esc`` and every word comes from the phrase tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flower_magic.core.words import human_elapsed, human_tokens, say, step_name
from flower_magic.display import html
from flower_magic.display.goals import FAIL, PASS, PENDING, UNVERIFIABLE
from flower_magic.front.phrases import Line

STATUS_KEYS = {
    "running": "run_running",
    "asking": "run_asking",
    "done": "run_done",
    "stopped": "run_failed",
    "failed": "run_failed",
    "let_go": "run_let_go",
}
BADGE_KEYS = {PASS: "badge_pass", FAIL: "badge_fail", PENDING: "badge_pending", UNVERIFIABLE: "badge_unverifiable"}
BADGE_MARKS = {PASS: "✓", FAIL: "✗", PENDING: "·", UNVERIFIABLE: "!"}
# Past this share of the window the bar turns to the warning colour: the hand-off line is near.
CONTEXT_WARN_SHARE = 0.8


@dataclass(frozen=True)
class Header:
    """What the header shows (``RunState.header``).

    Attributes:
        status: ``running``, ``asking`` (a question waits), ``done``, ``stopped`` (an ending a person
            chose or can act on: interrupted, stopped, goals not reached), ``failed`` or ``let_go`` (the
            view stopped following a run that goes on elsewhere: its kernel went).
        ending: once ended, how (``front.outcome.Ending``'s value): the pill says it (``pill_<ending>``).
        step, index, total: the newest step's name and its n/N (0/0 before any step).
        steps_done: steps that ended.
        round_n, rounds: the judge's round n/N (rounds 0: no round counter).
        elapsed_s, cost: time and money so far.
        context: the running step's main-session context in tokens; context_step names that step.
        window: the model's context window in tokens (0: unknown, no bar).
        waiting: what the run waits for before its first event ("starting the agent…"), "" after.
    """

    status: str
    ending: str = ""
    step: str = ""
    index: int = 0
    total: int = 0
    steps_done: int = 0
    round_n: int = 0
    rounds: int = 0
    elapsed_s: float = 0.0
    cost: float = 0.0
    context: int = 0
    context_step: str = ""
    window: int = 0
    waiting: str = ""

    @property
    def context_share(self) -> float:
        """The context as a share of the window, 0..1."""
        return min(1.0, self.context / self.window) if self.window > 0 else 0.0


def human_window(tokens: int) -> str:
    """``200K``, ``1M``: a context window, as people name it."""
    if tokens >= 1_000_000:
        return f"{tokens / 1_000_000:g}M"
    return f"{tokens // 1000}K" if tokens >= 1000 else str(tokens)


def _steps_bar(h: Header) -> str:
    """One segment per step: ended, running, to come (the words beside it say the same)."""
    if h.total <= 1:
        return ""
    segments = []
    for i in range(1, h.total + 1):
        if i < h.index:
            state = "done"
        elif i == h.index:
            state = "done" if h.status in ("done", "stopped", "failed") else "run"
        else:
            state = "todo"
        segments.append(f'<span class="fm-seg fm-seg-{state}"></span>')
    return f'<span class="fm-steps" aria-hidden="true">{"".join(segments)}</span>'


def _context_words(h: Header, lang: str) -> str:
    ctx = human_tokens(h.context)
    if not h.window:
        return say("hdr_context_only", lang, step=h.context_step, ctx=ctx)
    return say("hdr_context", lang, step=h.context_step, ctx=ctx, window=human_window(h.window))


def _context(h: Header, lang: str) -> str:
    if not h.window and not h.context:
        return ""
    words = _context_words(h, lang)
    bar = ""
    if h.window:
        share = h.context_share
        warn = " fm-fill-warn" if share >= CONTEXT_WARN_SHARE else ""
        bar = (
            f'<span class="fm-bar" role="progressbar" aria-valuemin="0" aria-valuemax="{h.window}"'
            f' aria-valuenow="{min(h.context, h.window)}" aria-label="{html.esc(words)}">'
            f'<span class="fm-fill{warn}" style="width:{share * 100:.1f}%"></span></span>'
        )
    tip = html.esc(say("hdr_context_tip", lang))
    shown = f'<span class="fm-ctx-words">{html.esc(words)}</span>'
    return f'<span class="fm-hitem fm-ctx" title="{tip}">{bar}{shown}</span>'


def header_html(h: Header, lang: str, *, live: bool = False) -> str:
    """The header as one escaped ``<div class="fm-header">``.

    Args:
        live: the live widget's header: it also carries, hidden, what it says once the frontend marks
            it disconnected (its kernel went): a pill and a line in place of the live pill, which would
            go on saying "running" or "waiting for you" (``html.STYLE`` shows them then).
    """
    status = h.status if h.status in STATUS_KEYS else "running"
    pill = say(f"pill_{h.ending}", lang) if h.ending else say(STATUS_KEYS[status], lang)
    items = [f'<span class="fm-chip fm-st-{status}">{html.esc(pill)}</span>']
    if live:
        items.append(f'<span class="fm-chip fm-gone">{html.esc(say("run_let_go", lang))}</span>')
        items.append(f'<span class="fm-hitem fm-gone fm-gone-words">{html.esc(say("view_gone", lang))}</span>')
    if h.waiting:
        items.append(f'<span class="fm-hitem fm-wait">{html.esc(h.waiting)}</span>')
    if h.step:
        name = step_name(h.step, lang)
        step = say("hdr_step", lang, n=h.index, total=h.total, name=name) if h.total else name
        items.append(f'<span class="fm-hitem fm-hstep">{_steps_bar(h)}<span>{html.esc(step)}</span></span>')
    if h.rounds:
        items.append(f'<span class="fm-hitem">{html.esc(say("round", lang, n=h.round_n, total=h.rounds))}</span>')
    clock = say("hdr_elapsed", lang, elapsed=human_elapsed(h.elapsed_s))
    items.append(f'<span class="fm-hitem fm-clock">{html.esc(clock)}</span>')
    items.append(f'<span class="fm-hitem">{html.esc(say("hdr_cost", lang, cost=h.cost))}</span>')
    context = _context(h, lang)
    if context:
        items.append(context)
    # Spaces between the items: the flex row drops them, a page without the style block (GitHub) needs them.
    return f'<div class="fm-header" data-status="{status}">{" ".join(items)}</div>'


def badge_html(state: str, lang: str) -> str:
    """A verdict badge: a mark and a word (colour only repeats what they say)."""
    state = state if state in BADGE_KEYS else PENDING
    word = html.esc(say(BADGE_KEYS[state], lang))
    return f'<span class="fm-badge fm-badge-{state}"><span aria-hidden="true">{BADGE_MARKS[state]}</span> {word}</span>'


def checklist_html(summary: Line, states: Sequence[tuple[str, str]], verdict: Sequence[Line], lang: str) -> str:
    """The goal checklist: its summary line, one row per check with its badge, the latest verdict."""
    rows = "".join(
        f'<li class="fm-check" data-state="{state}">{badge_html(state, lang)} '
        f'<span class="fm-check-text">{html.esc(check)}</span></li>'
        for check, state in states
    )
    return (
        f'<div class="fm-goals">{html.line_html(summary)}<ul class="fm-checks">{rows}</ul>'
        f"{html.lines_html(verdict)}</div>"
    )
