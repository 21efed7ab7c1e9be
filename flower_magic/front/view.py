"""One mapping from a run's events to what a person reads, for every front end.

``shown(event, ...)`` turns an ``Event`` into a ``Shown``: the lines (styled runs of text, see
``front.phrases.Line``) and what they are (a step header, agent text, a tool call, a question …),
or None when the event shows nothing at this verbosity. The terminal (``terminal.py``) prints the
lines with ANSI colours; the notebook (``display/state.py``) keeps them in its log, renders HTML, and
updates a question or a tool call in place by ``key``. Neither decides on its own what an event says.

Invariants:
    - Every text that came from the agent passes through ``clip`` (the view's sanitiser and length
      limit) before it is in a line.
    - Subagent events carry ``sub=True``; the view indents them (the lines themselves are not padded).
    - ``result`` events show nothing: their cost goes to the view's running total.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flower_magic.core.events import Event
from flower_magic.core.human import ASK_TOOL
from flower_magic.core.words import say
from flower_magic.front.phrases import Line, ask_state_line, handoff_block, round_header, step_header
from flower_magic.stores.prune import stopped_while_running

Clip = Callable[[str, int], str]

TEXT_CHARS = 4000  # one agent message in a live view; the full text stays in the session
THINKING_CHARS = 400
TOOL_CHARS = 300
NOTE_CHARS = 600
NOTICE_CHARS = 1000
QUESTION_CHARS = 2000
SYSTEM_CHARS = 200
MAIL_CHARS = 80


@dataclass
class Shown:
    """What one event shows.

    Attributes:
        lines: the lines, in order.
        kind: ``step``, ``round``, ``text``, ``thinking``, ``tool``, ``tool_result``, ``retry``,
            ``notice``, ``error``, ``handoff``, ``ask``, ``mail``, ``task``, ``system``.
        sub: from a subagent.
        key: for ``ask`` the question's id, for ``tool`` / ``tool_result`` the tool call's id: a view
            that can update in place replaces the earlier entry with the same key.
        head: for ``ask``, how many of ``lines`` are the question and its options (the rest is its
            state): a view that cannot update in place prints the head once.
        state: for ``ask``, the question's state (``asked`` while it waits for an answer).
    """

    lines: list[Line]
    kind: str
    sub: bool = False
    key: str | None = None
    head: int = 0
    state: str = ""
    payload: dict[str, Any] = field(default_factory=dict)


def shown(
    ev: Event, *, lang: str, verbose: bool, width: int, clip: Clip, base: str | Path | None = None
) -> Shown | None:
    """What ``ev`` shows in a view of ``width`` columns, or None. ``clip(text, limit)`` sanitises (and
    says the paths in the agent's text as the view does: ``core.words.short_paths_in``); ``base`` is
    the workspace, which the paths flower names itself are relative to (``core.words.short_path``)."""
    p = ev.payload if isinstance(ev.payload, dict) else {}
    sub = bool(p.get("subagent"))
    kind = ev.kind
    if kind == "step" and "index" not in p:
        return Shown([round_header(clip(ev.text, 200), judge=bool(p.get("judge")), width=width, lang=lang)], "round")
    if kind == "step":
        header = step_header(
            clip(ev.text, 200),
            int(p.get("index") or 0),
            int(p.get("total") or 0),
            resumed=bool(p.get("resumed")),
            woke=int(p.get("woke") or 1),
            width=width,
            lang=lang,
        )
        return Shown([header], "step")
    if kind == "text":
        return None if sub and not verbose else Shown([[("", clip(ev.text, TEXT_CHARS))]], "text", sub)
    if kind == "thinking":
        return Shown([[("dim", "~ " + clip(ev.text, THINKING_CHARS))]], "thinking", sub) if verbose else None
    if kind == "tool_call":
        if ev.tool == ASK_TOOL:
            return None  # the question is shown by its own ask events, once
        key = p.get("id") if isinstance(p.get("id"), str) else None
        line: Line = [("dim", f"* [{clip(ev.tool or '', 100)}] {clip(ev.text, TOOL_CHARS)}")]
        return Shown([line], "tool", sub, key=key, payload=p)
    if kind == "tool_result":
        is_error = bool(p.get("is_error"))
        key = str(p.get("tool_use_id")) if p.get("tool_use_id") is not None else None
        said = clip(ev.text, TOOL_CHARS)
        if is_error and stopped_while_running(ev.text):  # the CLI's note to the model: say it for a person
            said = say("tool_stopped", lang)
        lines = [[("bad" if is_error else "dim", "  -> " + said)]] if is_error or verbose else []
        return Shown(lines, "tool_result", sub, key=key, payload={"text": ev.text})
    if kind == "retry":
        return Shown([[("warn", "~ " + clip(ev.text, NOTE_CHARS))]], "retry")
    if kind == "notice":
        return Shown([[("warn", clip(ev.text, NOTICE_CHARS))]], "notice")
    if kind == "error":
        return Shown([[("bad", "! " + clip(ev.text, NOTE_CHARS))]], "error")
    if kind == "handoff":
        if p.get("phase") == "done":
            block = [
                [(style, clip(text, NOTICE_CHARS)) for style, text in line]
                for line in handoff_block(p, lang, base=base)
            ]
            return Shown(block, "handoff")
        return Shown([[("warn", "# " + clip(ev.text, NOTE_CHARS))]], "handoff")
    if kind == "ask":
        return _ask(ev, p, lang, clip)
    if kind == "task":
        if not ev.text:
            return Shown([], "task", payload=p)
        style = "warn" if p.get("unverifiable") else "note"
        return Shown([[(style, "! " + clip(ev.text, TEXT_CHARS))]], "task", payload=p)
    if kind in ("system", "prompt", "reset", "unknown") and verbose:
        return Shown([[("dim", f"<{clip(kind, 20)}> {clip(ev.text, SYSTEM_CHARS)}")]], "system", sub)
    return None


def _ask(ev: Event, p: dict[str, Any], lang: str, clip: Clip) -> Shown | None:
    if p.get("kind") == "mail":
        if p.get("state") != "delivered":
            return None
        return Shown([[("dim", f"+ ({clip(str(p.get('id')), 40)}) {clip(ev.text, MAIL_CHARS)}")]], "mail")
    state = str(p.get("state") or "")
    lines: list[Line] = [[("warn", say("question", lang, question=clip(ev.text, QUESTION_CHARS)))]]
    for i, option in enumerate(p.get("options") or [], start=1):
        lines.append([("", f"  {i}. {clip(str(option), TOOL_CHARS)}")])
    head = len(lines)
    if state == "asked":
        lines.append([("dim", say("waiting", lang))])
    elif state == "answered":
        lines.append([("ok", "  + " + clip(str(p.get("answer") or ""), QUESTION_CHARS))])
    elif state == "declined" and p.get("answer"):
        lines.append(ask_state_line("cancelled", lang))  # declined with a reason: the run stopped asking
    elif state:
        lines.append(ask_state_line(state, lang))
    return Shown(lines, "ask", key=str(p.get("id")), head=head, state=state)
