"""The agent's question as a widget: the question once, its options as buttons, a free-text box, and a
button that leaves the choice to the agent (an empty answer means the same).

A ``%flower`` cell keeps the kernel's main thread busy until the run ends, so the kernel handles the
frontend's widget messages (a click, typed text) only after the cell, too late for a waiting
question. ipykernel 7 reads every widget message first on its shell-channel thread, to route it
(``Comm._reply_subshell_for``); ``tap`` hooks that step, so a click settles the question at once.
The message still goes on to the widget afterwards as usual (its ``on_click`` handlers run when the
kernel is free, and find the question settled). Where the hook does not exist (another kernel, an
older ipykernel), ``tap`` says so and the notebook asks through ``input()`` instead.

Guarantees:
    - ``answer(ask_id, text)`` is called at most once per widget, from whichever thread saw the
      message first; the channel takes the first settlement only, so a late duplicate is harmless.
    - Nothing here raises into ipykernel's routing thread: a failing handler is logged and the
      message is routed on as if untouched.
    - Every text shown is escaped (the question in ``HTML``) or set as plain text (button labels,
      tooltips, the placeholder).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from flower_magic.core.errors import logged
from flower_magic.core.words import say
from flower_magic.display import html

log = logging.getLogger(__name__)

OPTION_LABEL_CHARS = 60  # a button's label; the whole option is its tooltip
SEND_STYLE = "primary"  # the theme's accent: the button that sends what was typed


def can_tap() -> bool:
    """Whether the kernel routes widget messages through a thread that a busy cell does not block."""
    try:
        from ipykernel.comm.comm import BaseComm
        from ipykernel.kernelbase import Kernel
    except ImportError:
        return False
    if not Kernel.initialized() or not callable(getattr(BaseComm, "_reply_subshell_for", None)):
        return False
    return getattr(Kernel.instance(), "shell_channel_thread", None) is not None


def tap(widget: Any, on_message: Callable[[Mapping[str, Any]], None]) -> bool:
    """Let ``on_message(data)`` see each message the frontend sends ``widget`` as it arrives.

    Returns:
        False when this kernel offers no such hook (nothing was changed).
    """
    comm = getattr(widget, "comm", None)
    route = getattr(comm, "_reply_subshell_for", None)
    if comm is None or not callable(route):
        return False

    def routed(data: Any, default: Any) -> Any:
        if isinstance(data, Mapping):
            with logged(log, "widget message"):
                on_message(data)
        return route(data, default)

    comm._reply_subshell_for = routed
    return True


def _label(option: str) -> str:
    return option if len(option) <= OPTION_LABEL_CHARS else option[: OPTION_LABEL_CHARS - 1] + "…"


class AskWidget:
    """One waiting question.

    Args:
        ask_id: the question's id (``q1``).
        question: the question (sanitised text).
        options: the answers the agent offered (sanitised text).
        lang: ``zh`` or ``en``.
        answer: settles the question: ``answer(ask_id, text)``; empty text lets the agent decide.
        in_place: also take clicks while the cell's thread is busy (``tap``).
    """

    def __init__(
        self,
        ask_id: str,
        question: str,
        options: list[str],
        lang: str,
        answer: Callable[[str, str], Any],
        *,
        in_place: bool = True,
    ) -> None:
        import ipywidgets as w

        self.id = ask_id
        self._answer = answer
        self._lock = threading.Lock()
        self._typed = ""
        self.answered: str | None = None
        asked = say("question", lang, question=question)
        self.question = w.HTML(value=html.question_html(asked, say("ask_gone", lang)))
        self.options = [
            w.Button(description=_label(o), tooltip=o, layout=w.Layout(width="auto")).add_class("fm-ask-option")
            for o in options
        ]
        self.text = w.Text(placeholder=say("ask_placeholder", lang), continuous_update=True).add_class("fm-ask-text")
        self.send = w.Button(description=say("ask_send", lang), button_style=SEND_STYLE).add_class("fm-ask-send")
        self.decide = w.Button(description=say("ask_decide", lang), layout=w.Layout(width="auto")).add_class(
            "fm-ask-decide"
        )
        rows: list[Any] = [self.question]
        if self.options:
            rows.append(w.HBox(self.options, layout=w.Layout(flex_flow="row wrap")).add_class("fm-ask-row"))
        answer_row = w.HBox([self.text, self.send, self.decide], layout=w.Layout(flex_flow="row wrap"))
        rows.append(answer_row.add_class("fm-ask-row"))
        self.box = w.VBox(rows, layout=w.Layout(width="100%")).add_class("fm-ask")
        for button, option in zip(self.options, options, strict=True):
            button.on_click(lambda _b, o=option: self._settle(o))
        self.send.on_click(lambda _b: self._settle(self.text.value))
        self.decide.on_click(lambda _b: self._settle(""))
        self.tapped = False
        if in_place:
            taps = [tap(b, self._on_click(o)) for b, o in zip(self.options, options, strict=True)]
            taps.append(tap(self.send, self._on_send))
            taps.append(tap(self.decide, self._on_click("")))
            taps.append(tap(self.text, self._on_text))
            self.tapped = all(taps)

    # -- messages seen on the routing thread -----------------------------------------------------------

    def _on_click(self, text: str) -> Callable[[Mapping[str, Any]], None]:
        def seen(data: Mapping[str, Any]) -> None:
            if _event(data) == "click":
                self._settle(text)

        return seen

    def _on_send(self, data: Mapping[str, Any]) -> None:
        if _event(data) == "click":
            with self._lock:
                typed = self._typed
            self._settle(typed)

    def _on_text(self, data: Mapping[str, Any]) -> None:
        state = data.get("state")
        if data.get("method") == "update" and isinstance(state, Mapping) and isinstance(state.get("value"), str):
            with self._lock:
                self._typed = state["value"]
        elif _event(data) == "submit":
            with self._lock:
                typed = self._typed
            self._settle(typed)

    # -- settling ---------------------------------------------------------------------------------------

    def _settle(self, text: str) -> None:
        with self._lock:
            if self.answered is not None:
                return
            self.answered = text
        self._answer(self.id, text)

    def close(self) -> None:
        """Close every model of the widget (a settled question leaves no comm open)."""
        for widget in (*self.options, self.text, self.send, self.decide, self.question, self.box):
            children = getattr(widget, "children", ())
            for model in (*children, widget, getattr(widget, "layout", None), getattr(widget, "style", None)):
                with logged(log, "close"):
                    if model is not None:
                        model.close()


def _event(data: Mapping[str, Any]) -> str:
    content = data.get("content")
    if data.get("method") == "custom" and isinstance(content, Mapping):
        return str(content.get("event") or "")
    return ""
