"""The terminal view of a run: the same phrases as the notebook, printed as lines with ANSI colour.

Agent text is sanitised before it reaches the terminal: escape sequences and control characters
are removed, so a model (or a file it reads) cannot move the cursor, retitle the window or hide text.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import threading
import time
from typing import Any, TextIO

from flower_magic.core.events import Event
from flower_magic.core.words import say
from flower_magic.workflow.phrases import (
    Line,
    ask_state_line,
    handoff_block,
    result_line,
    round_header,
    status_line,
    step_header,
)

_SGR = {"": "", "dim": "2", "bold": "1", "head": "1;36", "ok": "32", "bad": "31", "warn": "33", "note": "36"}
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]|[\x00-\x08\x0b-\x1f\x7f]"
)


def sanitize(text: str) -> str:
    """Agent text made safe for a terminal: no escape sequences, no control characters but newline and tab."""
    return _ESCAPES.sub("", text)


def use_color(stream: TextIO) -> bool:
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


class TerminalView:
    """An event sink that prints a run.

    Args:
        lang: ``zh`` or ``en``.
        verbose: also show subagent text, thinking, successful tool results and system events.
        out: where to print (stdout by default).
    """

    def __init__(self, lang: str = "zh", *, verbose: bool = False, out: TextIO | None = None) -> None:
        self.lang = lang
        self.verbose = verbose
        self.out = out or sys.stdout
        self.color = use_color(self.out)
        self.started = time.monotonic()
        self.cost = 0.0
        self.context = 0
        self._lock = threading.Lock()
        self._shown_asks: set[object] = set()

    # -- printing -------------------------------------------------------------------------------------

    def line(self, segments: Line) -> None:
        if self.color:
            text = "".join(f"\x1b[{_SGR[s]}m{t}\x1b[0m" if _SGR.get(s) else t for s, t in segments)
        else:
            text = "".join(t for _, t in segments)
        with self._lock:
            self.out.write(text + "\n")
            self.out.flush()

    def say(self, style: str, text: str) -> None:
        self.line([(style, text)])

    def width(self) -> int:
        return shutil.get_terminal_size((80, 24)).columns

    # -- the sink -------------------------------------------------------------------------------------

    def __call__(self, ev: Event) -> None:
        with contextlib.suppress(Exception):  # a display problem must never fail the step
            self._show(ev)

    def _show(self, ev: Event) -> None:
        p = ev.payload
        sub = bool(p.get("subagent"))
        pad = "    " if sub else ""
        if isinstance(p.get("context"), int) and not sub:
            self.context = p["context"]
        if ev.kind == "step" and "index" not in p:
            self.line(round_header(sanitize(ev.text), judge=bool(p.get("judge")), width=self.width()))
        elif ev.kind == "step":
            self.say("", "")
            self.line(
                step_header(
                    ev.text,
                    p.get("index", 0),
                    p.get("total", 0),
                    resumed=bool(p.get("resumed")),
                    woke=int(p.get("woke") or 1),
                    width=self.width(),
                    lang=self.lang,
                )
            )
            self.say("", "")
        elif ev.kind == "text":
            if sub and not self.verbose:
                return
            self.say("", pad + sanitize(ev.text).replace("\n", "\n" + pad))
            if not sub:
                self.line(status_line(self.context, self.cost, time.monotonic() - self.started, self.lang))
        elif ev.kind == "thinking" and self.verbose:
            self.say("dim", pad + "~ " + sanitize(ev.text)[:400])
        elif ev.kind == "tool_call":
            self.say("dim", f"{pad}* [{ev.tool}] {sanitize(ev.text)}")
        elif ev.kind == "tool_result":
            if p.get("is_error") or self.verbose:
                self.say("bad" if p.get("is_error") else "dim", pad + "  -> " + sanitize(ev.text)[:300])
        elif ev.kind == "retry":
            self.say("warn", "~ " + sanitize(ev.text))
        elif ev.kind == "notice":
            self.say("warn", sanitize(ev.text))
        elif ev.kind == "error":
            self.say("bad", "! " + sanitize(ev.text))
        elif ev.kind == "handoff":
            self._handoff(ev)
        elif ev.kind == "ask":
            self._ask(ev)
        elif ev.kind == "task" and ev.text:
            self.say("warn" if p.get("unverifiable") else "note", "! " + sanitize(ev.text))
        elif ev.kind == "result":
            self.cost += float(p.get("cost_usd") or 0.0)
        elif ev.kind in ("system", "prompt", "reset", "unknown") and self.verbose:
            self.say("dim", f"{pad}<{ev.kind}> {sanitize(ev.text)[:200]}")

    def _handoff(self, ev: Event) -> None:
        phase = ev.payload.get("phase")
        if phase == "done":
            for line in handoff_block(ev.payload, self.lang):
                self.line(line)
        else:
            self.say("warn", "# " + sanitize(ev.text))

    def _ask(self, ev: Event) -> None:
        p = ev.payload
        if p.get("kind") == "mail":
            if p.get("state") == "delivered":
                self.say("dim", f"+ ({p.get('id')}) {sanitize(ev.text)[:80]}")
            return
        state, ask_id = p.get("state"), p.get("id")
        if ask_id not in self._shown_asks:
            self._shown_asks.add(ask_id)
            self.say("warn", say("question", self.lang, question=sanitize(ev.text)))
            for i, option in enumerate(p.get("options") or [], start=1):
                self.say("", f"  {i}. {sanitize(str(option))}")
        if state == "asked":
            self.say("dim", "  > ")
        elif state == "answered":
            self.say("ok", f"  + {sanitize(str(p.get('answer') or ''))}")
        elif state:
            self.line(ask_state_line(str(state), self.lang))

    def on_step(self, step: Any, result: Any) -> None:
        self.line(
            result_line(
                bool(result.ok), int(result.num_turns), float(result.cost_usd), float(result.duration_s), self.lang
            )
        )
