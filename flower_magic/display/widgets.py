"""The widget tree of a live run: the banner, the header, the goal checklist, one collapsible section
per step, the waiting questions, and the closing lines.

::

    VBox .flower-magic
      HTML   banner (with the one style block)
      HTML   header: status, step n/N, round, elapsed, cost, context bar
      HTML   goal checklist with a verdict badge per check
      VBox   sections: the lines before the first step, then an Accordion per step
             (open while it runs, collapsed to its summary line once it ended); inside, the
             step's log in chunks (an HTML widget each) and its waiting question (``AskWidget``)
      HTML   closing lines (total, where it stopped)

Guarantees:
    - ``update`` reads the state under its lock once and then only sets widget values; values that
      did not change send nothing (traitlets compares), and a log chunk is sent again only when it
      changed.
    - A section is collapsed once, when its step ends; a person who opens it again keeps it open.
    - ``close`` closes every model it made, so a finished run leaves no comm open.
Not guaranteed:
    - Thread safety: ``RunView`` calls ``update`` and ``close`` under its render lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flower_magic.core.errors import logged
from flower_magic.display import html
from flower_magic.display.ask import AskWidget
from flower_magic.display.state import OpenAsk, RunState, Section

log = logging.getLogger(__name__)


def _html(name: str) -> Any:
    import ipywidgets as w

    return w.HTML(value="", layout=w.Layout(margin="0", width="100%")).add_class(f"fm-part-{name}")


@dataclass
class _SectionView:
    """The widgets of one section."""

    body: Any  # VBox: note, chunks, questions
    box: Any  # what the sections' VBox holds: the Accordion (a step) or the body (before any step)
    note: Any
    slots: dict[int, Any] = field(default_factory=dict)  # chunk number -> HTML
    collapsed: bool = False


@dataclass
class _Snapshot:
    """One section's data, read under the state's lock."""

    number: int
    is_step: bool
    title: str
    is_running: bool
    note: str
    numbers: list[int]
    chunks: dict[int, str]


class ViewWidgets:
    """The widget tree of one ``RunView``.

    Attributes:
        answer: settles a question (``HumanChannel.answer``); None until the run's channel is known,
            and then no question widget is shown.
        in_place: questions are answered by clicks while the cell is busy (``ask.tap``).
    """

    def __init__(self) -> None:
        import ipywidgets as w

        self.head = _html("head")
        self.header = _html("header")
        self.goals = _html("goals")
        self.closing = _html("closing")
        self.sections = w.VBox(layout=w.Layout(width="100%")).add_class("fm-sections")
        self.root = w.VBox([self.head, self.header, self.sections], layout=w.Layout(width="100%")).add_class(
            html.ROOT_CLASS
        )
        self.answer: Callable[[str, str], Any] | None = None
        self.in_place = False
        self._views: dict[int, _SectionView] = {}
        self._asks: dict[str, tuple[int, AskWidget]] = {}  # question id -> (section number, widget)

    def update(self, state: RunState, now: float) -> None:
        """Copy the state into the widgets."""
        with state.lock:
            head = html.wrap(state.head_html())  # the one style block rides with the banner
            header = html.wrap(state.header_html(now, live=True), style=False)
            goals = state.goals_html()
            closing = state.closing_html()
            sections = [_snapshot(s, state.lang) for s in state.sections]
            asks = list(state.open_asks.values())
            lang = state.lang
        self.head.value = head
        self.header.value = header
        self.goals.value = html.wrap(goals, style=False) if goals else ""
        self.closing.value = html.wrap(closing, style=False) if closing else ""
        self._place_asks(asks, lang)
        shown = [self._section(s) for s in sections if s.is_step or s.numbers or s.note]
        children = [self.head, self.header]
        if goals:
            children.append(self.goals)
        children.append(self.sections)
        if closing:
            children.append(self.closing)
        self.sections.children = tuple(shown)
        self.root.children = tuple(children)

    def _section(self, snap: _Snapshot) -> Any:
        import ipywidgets as w

        view = self._views.get(snap.number)
        if view is None:
            note = _html("note")
            body = w.VBox([note], layout=w.Layout(width="100%")).add_class("fm-section-body")
            box = body
            if snap.is_step:
                box = w.Accordion(children=[body], titles=(snap.title,), selected_index=0).add_class("fm-section")
            view = self._views[snap.number] = _SectionView(body=body, box=box, note=note)
        if snap.is_step:
            if tuple(view.box.titles) != (snap.title,):
                view.box.titles = (snap.title,)
            if not snap.is_running and not view.collapsed:
                view.box.selected_index = None
                view.collapsed = True
        view.note.value = html.wrap(snap.note, style=False) if snap.note else ""
        for number in [n for n in view.slots if n not in snap.numbers]:  # dropped from the window
            with logged(log, "close"):
                view.slots.pop(number).close()
        for number in snap.numbers:
            if number not in view.slots:
                view.slots[number] = _html("log")
            if number in snap.chunks:
                view.slots[number].value = html.wrap(snap.chunks[number], style=False)
        asks = [a.box for number, a in self._asks.values() if number == snap.number]
        parts = ([view.note] if snap.note else []) + [view.slots[n] for n in snap.numbers] + asks
        if tuple(view.body.children) != tuple(parts):
            view.body.children = tuple(parts)
        return view.box

    def _place_asks(self, asks: list[OpenAsk], lang: str) -> None:
        """A widget for each waiting question; a settled one is closed (its answer is in the log)."""
        waiting = {a.id for a in asks}
        for ask_id in [i for i in self._asks if i not in waiting]:
            self._asks.pop(ask_id)[1].close()
        for ask in asks:
            if ask.id not in self._asks and self.answer is not None:
                widget = AskWidget(ask.id, ask.question, ask.options, lang, self.answer, in_place=self.in_place)
                self._asks[ask.id] = (ask.section, widget)

    def close(self) -> None:
        """Close every model (layouts and styles too), so a finished run leaves no comm open."""
        for _, ask in self._asks.values():
            ask.close()
        models: list[Any] = [self.head, self.header, self.goals, self.closing]
        for view in self._views.values():
            models += [*view.slots.values(), view.note, view.body]
            if view.box is not view.body:
                models.append(view.box)
        models += [self.sections, self.root]
        for widget in models:
            for model in (widget, getattr(widget, "layout", None), getattr(widget, "style", None)):
                with logged(log, "close"):
                    if model is not None:
                        model.close()


def _snapshot(section: Section, lang: str) -> _Snapshot:
    dirty = section.log.take_dirty()
    return _Snapshot(
        number=section.number,
        is_step=section.header is not None,
        title=html.line_text(section.summary(lang)),
        is_running=section.is_running,
        note=html.lines_html(section.note_lines(lang)),
        numbers=section.log.numbers(),
        chunks={n: section.log.chunk_html(n) for n in dirty},
    )
