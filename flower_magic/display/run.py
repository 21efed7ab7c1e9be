"""``RunView``: the live view of one run in a notebook cell, fed from the workflow's thread.

Three ways to show the same ``RunState``, picked when the view is made:

- ``widget`` (a kernel with ipywidgets, ``interactive=True``): the tree of ``widgets.ViewWidgets``
  (header, goal checklist, a collapsible section per step, the agent's question as buttons and a
  text box) whose values change as the run goes (comm messages; safe from the render thread). The
  displayed object also carries ``text/html`` and ``text/plain`` of the current state.
- ``html`` (a kernel without ipywidgets, or ``interactive=False`` for nbclient / papermill): one
  display handle updated with the ``text/html`` + ``text/plain`` bundle.
- ``terminal`` (terminal IPython, or no IPython): lines printed by ``terminal.TerminalView``.

Guarantees:
    - ``sink`` is thread-safe, never raises and never blocks on the frontend: it updates the state
      under a lock and returns. A daemon thread re-renders at most every ``interval_s`` (4 a second
      by default) while something changed, and moves the status line's clock once a second.
    - ``close`` stops that thread, renders the final state, and replaces the live widget with a
      static ``text/html`` + ``text/plain`` bundle, so a saved notebook and an nbconvert export
      carry the final state and no widget model that would be missing on reopening.
    - One render at a time: the render thread and ``close`` share ``_render_lock``.
    - ``show`` in widget mode displays the static bundle first and then puts the widgets in its place
      (an update of the same display): the header appears before ipywidgets is imported, which takes
      a tenth of a second or more in a fresh kernel.
Not guaranteed:
    - Events after ``close`` are ignored.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flower_magic.core.errors import logged
from flower_magic.core.events import Event
from flower_magic.core.rundir import Snapshot
from flower_magic.display.state import RunState
from flower_magic.front.outcome import Outcome
from flower_magic.front.phrases import Line

if TYPE_CHECKING:
    from flower_magic.display.widgets import ViewWidgets

log = logging.getLogger(__name__)

RENDER_INTERVAL_S = 0.25  # at most 4 re-renders a second: live to a reader, never a flood of comm messages
CLOCK_S = 1.0  # the elapsed time in the status line moves once a second
HANDLE_CLOCK_S = 5.0  # a display handle re-sends the whole view, so its clock moves less often
HANDLE_INTERVAL_S = 1.0  # ... and it re-renders at most once a second
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
MODES = ("widget", "html", "terminal")


def pick_mode(*, interactive: bool = True) -> str:
    """``terminal`` outside a kernel, ``html`` without widgets or without a person, else ``widget``."""
    try:
        from IPython.core.getipython import get_ipython
    except ImportError:
        return "terminal"
    shell = get_ipython()  # type: ignore[no-untyped-call,unused-ignore]  # untyped before IPython 9
    if shell is None or getattr(shell, "kernel", None) is None:
        return "terminal"
    if not interactive:
        return "html"
    # Found, not imported: its import (a tenth of a second or more) waits until the header is shown.
    if importlib.util.find_spec("ipywidgets") is None:
        return "html"
    return "widget"


def _clock(ref: weakref.ref[RunView], stop: threading.Event, interval_s: float) -> None:
    while not stop.wait(interval_s):
        view = ref()
        if view is None:  # dropped without close(): nothing left to render
            return
        view._tick()
        del view


class RunView:
    """The live view of one run.

    Args:
        lang: ``zh`` or ``en``.
        verbose: also show subagent text, thinking, successful tool results and system events.
        rounds: the judge's round budget (the status line's N; 0 hides the round counter).
        goal_checks: the checks of 目标.md at the start (see ``set_goal_checks``).
        banner_facts: what the run dir holds (``front.options.snapshot``) when waking: the view starts
            with the wake banner.
        interactive: a person watches a frontend that renders widgets; False (nbclient, papermill)
            shows a display handle with static HTML instead.
        mode: force ``widget``, ``html`` or ``terminal`` (default: ``pick_mode``).
        interval_s: the shortest time between two re-renders.
        window: the model's context window in tokens (the header's context bar; 0 shows no bar).
        workspace: the run's folder: the paths shown are relative to it (``RunState``).
    """

    def __init__(
        self,
        lang: str = "zh",
        *,
        verbose: bool = False,
        rounds: int = 0,
        goal_checks: Sequence[str] = (),
        banner_facts: Snapshot | None = None,
        interactive: bool = True,
        mode: str | None = None,
        interval_s: float = RENDER_INTERVAL_S,
        window: int = 0,
        workspace: str | Path | None = None,
    ) -> None:
        if mode is not None and mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of: {', '.join(MODES)}")
        self.state = RunState(
            lang,
            verbose=verbose,
            rounds=rounds,
            goal_checks=goal_checks,
            banner_facts=banner_facts,
            window=window,
            workspace=workspace,
        )
        self.mode = mode or pick_mode(interactive=interactive)
        self.renders = 0
        self.render_errors: list[str] = []
        self._widgets: ViewWidgets | None = None  # built on first need (``_tree``)
        self._tree_lock = threading.Lock()
        self._answer: Callable[[str, str], Any] | None = None
        self._in_place = False
        self._terminal: Any = None
        self._handle: Any = None
        self._closed = False
        self._render_lock = threading.Lock()
        self._last_clock = 0.0
        if self.mode == "terminal":
            from flower_magic.terminal import TerminalView

            self._terminal = TerminalView(lang, verbose=verbose, workspace=workspace)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.mode != "terminal":
            self._thread = threading.Thread(
                target=_clock, args=(weakref.ref(self), self._stop, interval_s), name="flower-view", daemon=True
            )
            self._thread.start()

    # -- what the magic calls -------------------------------------------------------------------------

    def show(self) -> None:
        """Display the view in the current cell (once). In terminal mode, print the banner."""
        if self._terminal is not None:
            for line in self.state.head:
                self._terminal.line(line)
            return
        if self._handle is not None or self._closed:
            return
        from IPython.core.interactiveshell import InteractiveShell

        if not InteractiveShell.initialized():
            return
        from IPython.display import display

        if self.mode == "widget" and self._widgets is None:
            # The view at once as static HTML (the same header); the widgets take its place as soon as
            # ipywidgets is imported, which in a fresh kernel takes longer than a person should wait.
            self._handle = display(self.bundle(), raw=True, display_id=True)  # type: ignore[no-untyped-call]
            self._render()
            if self._widgets is not None:
                self._handle.update(self)
            return
        self._render()
        self._handle = display(self, display_id=True)  # type: ignore[no-untyped-call]

    def wait_for(self, what: str) -> None:
        """Say in the header what the run waits for (``say("hdr_wait_agent")``) until its first event."""
        with self.state.lock:
            self.state.waiting, self.state.changed = what, True

    def attach(self, answer: Callable[[str, str], Any], *, in_place: bool | None = None) -> None:
        """Show the agent's questions as widgets answered with ``answer(ask_id, text)``
        (``HumanChannel.answer``), when this view can take a click while the cell is busy.

        Args:
            in_place: force whether it can (default: ``ask.can_tap()``, in widget mode only).
        """
        if self.mode != "widget":
            return
        if in_place is None:
            from flower_magic.display.ask import can_tap

            in_place = can_tap()
        with self._tree_lock:
            self._answer, self._in_place = answer, in_place
            if self._widgets is not None:
                self._widgets.answer, self._widgets.in_place = answer, in_place
        with self.state.lock:
            self.state.answers_in_place = in_place

    @property
    def answers_in_place(self) -> bool:
        """Questions are answered in the view (buttons, a text box); nobody needs to ask with input()."""
        return self.state.answers_in_place

    def sink(self, event: Event) -> None:
        """The workflow's ``on_event``: thread-safe, cheap, never raises."""
        if self._closed:
            return
        with logged(log, "sink"):
            if self._terminal is not None:
                self._terminal(event)
            self.state.feed(event)

    __call__ = sink

    def on_step(self, step: Any, result: Any) -> None:
        """The workflow's ``on_step``: the result line (ok or failed, turns, cost, duration)."""
        if self._closed:
            return
        with logged(log, "on step"):
            if self._terminal is not None:
                self._terminal.on_step(step, result)
            self.state.step_done(result)

    def line(self, segments: Line) -> Any:
        """Add one phrase line to the log (e.g. ``phrases.say("archived")`` from the magic); returns its
        entry, for ``restate`` (None when it could not be added)."""
        with logged(log, "line"):
            if self._terminal is not None:
                self._terminal.line(segments)
            return self.state.add(segments)
        return None

    def restate(self, entry: Any, segments: Line) -> None:
        """Say a line added with ``line`` in other words (e.g. once the run it speaks of has ended)."""
        if entry is not None:
            with logged(log, "restate"):
                self.state.restate(entry, segments)

    def say(self, style: str, text: str) -> None:
        self.line([(style, text)])

    def set_goal_checks(self, checks: Sequence[str]) -> None:
        """Show a new goal list (after the goal step wrote 目标.md); marks of unchanged checks stay."""
        with logged(log, "set goal checks"):
            self.state.set_goals(checks)

    def close(self, outcome: Outcome | None = None, cmd: str = "%flower") -> None:
        """Final render: the total line and how the run ended (``front.outcome``); stops the render thread.

        Args:
            outcome: how the run ended (None: the view closes without an ending, e.g. a refused start).
            cmd: how the person continues here (``%flower``; ``flower`` in a terminal IPython's view of
                a terminal run is still said as the run's front end says it).
        """
        if not self._closing():
            return
        self.state.finish(outcome, cmd)
        self._final()

    def let_go(self, lines: Sequence[Line]) -> None:
        """Stop showing a run that goes on without this view (the kernel is going): the view is left
        static, as it stands, with ``lines`` (the run goes on, how to follow it again) at its end and no
        question card, whose buttons would reach nobody once the kernel is gone. The other widgets are
        not closed: a frontend that took the closing of their models but not the static update (it
        may drop either as the kernel goes) would show an empty cell rather than a stale view."""
        if not self._closing():
            return
        self.state.let_go(lines)
        self._final(close_widgets=False)

    def _closing(self) -> bool:
        """The first call of ``close`` / ``let_go``: the render thread is stopped. False after."""
        with self._tree_lock:
            if self._closed:
                return False
            self._closed = True
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        return True

    def _final(self, *, close_widgets: bool = True) -> None:
        if self._terminal is not None:
            self._terminal.say("", "")
            for line in self.state.closing:
                self._terminal.line(line)
            return
        self._render()  # without widgets this is the display's last update: no second, identical one
        if self._handle is not None and self._widgets is not None:
            with logged(log, "close"):
                self._handle.update(self.bundle(), raw=True)
        if self._widgets is not None and close_widgets:
            self._widgets.close()

    # -- rendering --------------------------------------------------------------------------------------

    def bundle(self) -> dict[str, str]:
        """``text/plain`` and ``text/html`` of the current state."""
        now = time.monotonic()
        return {"text/plain": self.state.to_text(now), "text/html": self.state.to_html(now)}

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        data: dict[str, Any] = self.bundle()
        tree = None if self._closed else self._tree()
        if tree is not None:
            data[WIDGET_MIME] = {"version_major": 2, "version_minor": 0, "model_id": tree.root.model_id}
        return data

    def _tree(self) -> ViewWidgets | None:
        """The widget tree in widget mode, built the first time it is needed (None in another mode)."""
        with self._tree_lock:
            if self._widgets is None and self.mode == "widget":
                try:
                    from flower_magic.display.widgets import ViewWidgets as Tree

                    tree = Tree()
                except Exception:  # no ipywidgets after all: the same view as static HTML
                    self.mode = "html"
                    return None
                tree.answer, tree.in_place = self._answer, self._in_place
                self._widgets = tree
            return self._widgets

    def _tick(self) -> None:
        now = time.monotonic()
        if self._widgets is None and now - self._last_clock < HANDLE_INTERVAL_S:
            return
        clock = HANDLE_CLOCK_S if self._widgets is None else CLOCK_S
        if self.state.changed or any(s.log.is_dirty() for s in self.state.sections) or now - self._last_clock >= clock:
            self._render()

    def _render(self) -> None:
        with self._render_lock:
            now = time.monotonic()
            self.state.changed = False
            self._last_clock = now
            try:
                tree = self._tree()
                if tree is not None:
                    tree.update(self.state, now)
                elif self._handle is not None:
                    self._handle.update(self.bundle(), raw=True)
                else:
                    return
                self.renders += 1
            except Exception as exc:  # the run goes on; the next render tries again
                self.render_errors.append(f"{type(exc).__name__}: {exc}")
                del self.render_errors[:-10]
