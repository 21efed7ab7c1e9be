"""The terminal view of a run: the same phrases as the notebook, printed as lines with ANSI colour.

Guarantees:
    - No absolute path under the workspace or the home directory is printed: every text passes
      ``core.words.short_paths_in`` in ``TerminalView.line`` and ``echo`` (``runs/manifest.json``,
      ``~/x``), whoever built it (the agent's tool calls, a replayed log, an error).
    - Every text printed here passes through ``core.printable.printable`` on its way out: in
      ``TerminalView.line`` (each segment, before the view's own colours are added) and in ``echo``
      (what a front end prints itself). So the model, a file it read, a remark someone sent or an
      event log on disk cannot move the cursor, clear the screen, retitle the window, write the
      clipboard or overwrite a line; the only escape sequences written are the view's colours, and
      only to a terminal that takes them (``use_color``).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from flower_magic.core.errors import logged
from flower_magic.core.events import Event
from flower_magic.core.printable import printable
from flower_magic.core.words import short_paths_in
from flower_magic.front.phrases import Line, result_line, status_line
from flower_magic.front.view import shown

_SGR = {"": "", "dim": "2", "bold": "1", "head": "1;36", "ok": "32", "bad": "31", "warn": "33", "note": "36"}
log = logging.getLogger(__name__)
PROMPT = "  > "  # under a question: type the answer (or a number) and Enter


def _clip(text: str, limit: int) -> str:
    """Agent text for a terminal line: printable; cut at ``limit`` characters, saying how much was cut."""
    text = printable(str(text))
    return text if len(text) <= limit else f"{text[:limit]} …(+{len(text) - limit})"


def use_color(stream: TextIO) -> bool:
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def echo(text: object = "", *, err: bool = False) -> None:
    """Print one text a front end says itself (an error, a notice) to stdout or (``err``) stderr,
    made printable: an error may quote a path, a step's error or a model's words. Paths are said
    relative to the working folder (``short_paths_in``)."""
    print(printable(short_paths_in(str(text))), file=sys.stderr if err else sys.stdout, flush=True)


class TerminalView:
    """An event sink that prints a run.

    Args:
        lang: ``zh`` or ``en``.
        verbose: also show subagent text, thinking, successful tool results and system events.
        out: where to print (stdout by default).
        workspace: the run's folder, which the paths printed are relative to (default: the working folder).
    """

    def __init__(
        self,
        lang: str = "zh",
        *,
        verbose: bool = False,
        out: TextIO | None = None,
        workspace: str | Path | None = None,
    ) -> None:
        self.lang = lang
        self.workspace = workspace
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
        """Print one line; its text is made printable here, whoever built it (a heard remark, a
        replayed log line, the wake banner), and only then coloured."""
        safe = [(s, printable(short_paths_in(str(t), self.workspace))) for s, t in segments]
        if self.color:
            text = "".join(f"\x1b[{_SGR[s]}m{t}\x1b[0m" if _SGR.get(s) else t for s, t in safe)
        else:
            text = "".join(t for _, t in safe)
        with self._lock:
            self.out.write(text + "\n")
            self.out.flush()

    def say(self, style: str, text: str) -> None:
        self.line([(style, text)])

    def width(self) -> int:
        return shutil.get_terminal_size((80, 24)).columns

    # -- the sink -------------------------------------------------------------------------------------

    def __call__(self, ev: Event) -> None:
        with logged(log, "showing an event"):  # a display problem must never fail the step
            self._show(ev)

    def _show(self, ev: Event) -> None:
        p = ev.payload
        sub = bool(p.get("subagent"))
        if isinstance(p.get("context"), int) and not sub:
            self.context = p["context"]
        if ev.kind == "result":
            self.cost += float(p.get("cost_usd") or 0.0)
            return
        what = shown(ev, lang=self.lang, verbose=self.verbose, width=self.width(), clip=_clip, base=self.workspace)
        if what is None:
            return
        lines = what.lines
        if what.kind == "ask":
            # A terminal cannot change what it printed: the question once, then each new state.
            if what.key in self._shown_asks:
                lines = lines[what.head :]
            self._shown_asks.add(what.key)
            if what.state == "asked":  # the terminal's input prompt: the answer is typed after it
                lines = [*lines[:-1], [("dim", PROMPT)]]
        if what.kind == "step":
            self.say("", "")
        pad = "    " if what.sub else ""
        for line in lines:
            if pad:
                line = [(style, text.replace("\n", "\n" + pad)) for style, text in line]
                line[:1] = [(line[0][0], pad + line[0][1])] if line else []
            self.line(line)
        if what.kind == "step":
            self.say("", "")
        elif what.kind == "text" and not what.sub:
            self.line(status_line(self.context, self.cost, time.monotonic() - self.started, self.lang))

    def on_step(self, step: Any, result: Any) -> None:
        self.line(
            result_line(
                bool(result.ok), int(result.num_turns), float(result.cost_usd), float(result.duration_s), self.lang
            )
        )
