"""``RunView``: the live view of one run in a notebook cell, fed from the workflow's thread.

Three ways to show the same ``RunState``, picked when the view is made:

- ``widget`` (a kernel with ipywidgets, ``interactive=True``): a ``VBox`` of ``HTML`` widgets whose
  values change as the run goes (comm messages; safe from the render thread). The displayed object
  also carries ``text/html`` and ``text/plain`` of the current state.
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
Not guaranteed:
    - Events after ``close`` are ignored.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from flower_magic.core.errors import logged
from flower_magic.core.events import Event
from flower_magic.core.rundir import Snapshot
from flower_magic.display import html
from flower_magic.display.log import MAX_CHUNKS
from flower_magic.display.state import RunState
from flower_magic.workflow.phrases import Line

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
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return "html"
    return "widget"


class _Widgets:
    """The widget tree: banner, "earlier" note, a ring of log chunk slots, goal list, status."""

    def __init__(self) -> None:
        import ipywidgets as w

        def part(name: str) -> Any:
            return w.HTML(value="", layout=w.Layout(margin="0", width="100%")).add_class(f"fm-part-{name}")

        self.head = part("head")
        self.note = part("note")
        self.slots = [part("log") for _ in range(MAX_CHUNKS)]
        self.goals = part("goals")
        self.footer = part("status")
        self.root = w.VBox([self.head, self.footer], layout=w.Layout(width="100%")).add_class(html.ROOT_CLASS)

    def update(self, state: RunState, now: float) -> None:
        """Copy the state into the widgets; unchanged values send nothing (traitlets compares)."""
        with state.lock:
            head = html.wrap(state.head_html())  # the one style block rides with the banner
            note = html.lines_html(state.note_lines())
            numbers = state.log.numbers()
            chunks = {n: state.log.chunk_html(n) for n in state.log.take_dirty()}
            goals = state.goals_html()
            footer = state.footer_html(now)
        self.head.value = head
        self.note.value = html.wrap(note, style=False) if note else ""
        for number, body in chunks.items():
            self.slots[number % len(self.slots)].value = html.wrap(body, style=False)
        self.goals.value = html.wrap(goals, style=False) if goals else ""
        self.footer.value = html.wrap(footer, style=False)
        children = [self.head]
        if note:
            children.append(self.note)
        children += [self.slots[n % len(self.slots)] for n in numbers]
        if goals:
            children.append(self.goals)
        children.append(self.footer)
        self.root.children = tuple(children)

    def close(self) -> None:
        """Close every model (layouts and styles too), so a finished run leaves no comm open."""
        for widget in (self.head, self.note, *self.slots, self.goals, self.footer, self.root):
            for model in (widget, getattr(widget, "layout", None), getattr(widget, "style", None)):
                with logged(log, "close"):
                    if model is not None:
                        model.close()


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
        banner_facts: what the run dir holds (``workflow.go.snapshot``) when waking: the view starts
            with the wake banner.
        interactive: a person watches a frontend that renders widgets; False (nbclient, papermill)
            shows a display handle with static HTML instead.
        mode: force ``widget``, ``html`` or ``terminal`` (default: ``pick_mode``).
        interval_s: the shortest time between two re-renders.
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
    ) -> None:
        if mode is not None and mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of: {', '.join(MODES)}")
        self.state = RunState(lang, verbose=verbose, rounds=rounds, goal_checks=goal_checks, banner_facts=banner_facts)
        self.mode = mode or pick_mode(interactive=interactive)
        self.renders = 0
        self.render_errors: list[str] = []
        self._widgets: _Widgets | None = None
        self._terminal: Any = None
        self._handle: Any = None
        self._closed = False
        self._render_lock = threading.Lock()
        self._last_clock = 0.0
        if self.mode == "widget":
            try:
                self._widgets = _Widgets()
            except Exception:  # no ipywidgets after all: the same view as static HTML
                self.mode = "html"
        if self.mode == "terminal":
            from flower_magic.terminal import TerminalView

            self._terminal = TerminalView(lang, verbose=verbose)
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

        self._render()
        self._handle = display(self, display_id=True)  # type: ignore[no-untyped-call]

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

    def line(self, segments: Line) -> None:
        """Add one phrase line to the log (e.g. ``phrases.say("archived")`` from the magic)."""
        with logged(log, "line"):
            if self._terminal is not None:
                self._terminal.line(segments)
            self.state.add(segments)

    def say(self, style: str, text: str) -> None:
        self.line([(style, text)])

    def set_goal_checks(self, checks: Sequence[str]) -> None:
        """Show a new goal list (after the goal step wrote 目标.md); marks of unchanged checks stay."""
        with logged(log, "set goal checks"):
            self.state.set_goals(checks)

    def close(self, ctx: Mapping[str, Any] | None = None, total_cost: float = 0.0, manifest: str = "") -> None:
        """Final render: the total line (and where the run stopped, if it did); stops the render thread.

        Args:
            ctx: what ``Workflow.run`` returned (``_failed_at``, ``_aborted``), or None.
            total_cost: the runtime's total cost (``Runtime.total_cost()``); 0 uses the events' sum.
            manifest: the manifest's path, shown in the total line.
        """
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self.state.finish(ctx, total_cost, manifest)
        if self._terminal is not None:
            self._terminal.say("", "")
            for line in self.state.closing:
                self._terminal.line(line)
            return
        self._render()
        if self._handle is not None:
            with logged(log, "close"):
                self._handle.update(self.bundle(), raw=True)
        if self._widgets is not None:
            self._widgets.close()

    # -- rendering --------------------------------------------------------------------------------------

    def bundle(self) -> dict[str, str]:
        """``text/plain`` and ``text/html`` of the current state."""
        now = time.monotonic()
        return {"text/plain": self.state.to_text(now), "text/html": self.state.to_html(now)}

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        data: dict[str, Any] = self.bundle()
        if self._widgets is not None and not self._closed:
            data[WIDGET_MIME] = {"version_major": 2, "version_minor": 0, "model_id": self._widgets.root.model_id}
        return data

    def _tick(self) -> None:
        now = time.monotonic()
        if self._widgets is None and now - self._last_clock < HANDLE_INTERVAL_S:
            return
        clock = HANDLE_CLOCK_S if self._widgets is None else CLOCK_S
        if self.state.changed or self.state.log.is_dirty() or now - self._last_clock >= clock:
            self._render()

    def _render(self) -> None:
        with self._render_lock:
            now = time.monotonic()
            self.state.changed = False
            self._last_clock = now
            try:
                if self._widgets is not None:
                    self._widgets.update(self.state, now)
                elif self._handle is not None:
                    self._handle.update(self.bundle(), raw=True)
                else:
                    return
                self.renders += 1
            except Exception as exc:  # the run goes on; the next render tries again
                self.render_errors.append(f"{type(exc).__name__}: {exc}")
                del self.render_errors[:-10]
