"""Scripted replies for the fake Anthropic Messages API.

A reply is what the fake server answers to one ``POST /v1/messages``: a model message (text, tool
calls, thinking), an HTTP error, a hang, or a dropped connection. Replies are plain data so a script
can be written in Python or loaded from JSON (``Reply.from_dict``).

Matching: a reply with ``match`` answers only requests it accepts. ``match`` is a substring looked
for in the request's last user turn (or, with ``in_system=True``, in the system prompt), or any
callable ``(Request) -> bool``. ``times`` says how many requests it answers (``None`` = forever).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flower_magic.testing.request import Request

Matcher = Callable[["Request"], bool]


@dataclass
class Reply:
    """One scripted answer.

    Attributes:
        kind: ``message``, ``error``, ``hang``, ``drop`` (close before answering) or
            ``drop_mid_stream`` (send part of a streamed message, then close).
        content: content blocks of a ``message`` reply, in Anthropic wire form.
        stop_reason: ``end_turn`` or ``tool_use`` (derived from ``content`` when omitted).
        usage: the ``usage`` object to report; missing token counts are estimated from the request.
        status: HTTP status of an ``error`` reply.
        error_type: Anthropic error type (``overloaded_error``, ``api_error`` ...).
        message: error message text.
        headers: extra response headers (``retry-after`` ...).
        seconds: how long a ``hang`` lasts (it also ends when the server stops).
        delay_s: wait this long before answering (any kind).
        hold: an event the reply waits for before it is sent (a test's ``set()`` lets it go); the
            server stopping lets it go too, as a dropped connection.
        match: which requests this reply may answer (see module docstring).
        in_system: look for a string ``match`` in the system prompt instead of the last user turn.
        times: how many requests this reply answers; ``None`` = every matching request.
        model: the model name reported back (default: the requested one).
    """

    kind: str = "message"
    content: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    status: int = 200
    error_type: str = ""
    message: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    delay_s: float = 0.0
    hold: threading.Event | None = field(default=None, repr=False, compare=False)
    match: str | Matcher | None = None
    in_system: bool = False
    times: int | None = 1
    model: str | None = None

    def accepts(self, request: Request) -> bool:
        if self.match is None:
            return True
        if callable(self.match):
            return bool(self.match(request))
        haystack = request.system_text if self.in_system else request.last_user_text
        return self.match in haystack

    def final_stop_reason(self) -> str:
        if self.stop_reason:
            return self.stop_reason
        if any(block.get("type") == "tool_use" for block in self.content):
            return "tool_use"
        return "end_turn"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (callable matchers cannot be saved and are dropped)."""
        out = {k: v for k, v in self.__dict__.items() if v not in (None, "", 0, 0.0, [], {})}
        if callable(self.match):
            out.pop("match", None)
        out["kind"] = self.kind
        out["times"] = self.times
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reply:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(f"unknown reply field(s) {unknown}; known: {sorted(cls.__dataclass_fields__)}")
        return cls(**known)


def _tool_id() -> str:
    return "toolu_" + uuid.uuid4().hex[:24]


def text(body: str, **kw: Any) -> Reply:
    """A plain text answer that ends the turn."""
    return Reply(content=[{"type": "text", "text": body}], **kw)


def tool_use(name: str, input: dict[str, Any], *, say: str = "", id: str | None = None, **kw: Any) -> Reply:
    """One tool call (optionally preceded by a text block)."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": say}] if say else []
    blocks.append({"type": "tool_use", "id": id or _tool_id(), "name": name, "input": input})
    return Reply(content=blocks, **kw)


def tool_uses(calls: Iterable[tuple[str, dict[str, Any]]], *, say: str = "", **kw: Any) -> Reply:
    """Several tool calls in one assistant message (parallel tool use)."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": say}] if say else []
    blocks += [{"type": "tool_use", "id": _tool_id(), "name": n, "input": i} for n, i in calls]
    return Reply(content=blocks, **kw)


def thinking_then_text(thought: str, body: str, **kw: Any) -> Reply:
    return Reply(
        content=[
            {"type": "thinking", "thinking": thought, "signature": "fake-signature"},
            {"type": "text", "text": body},
        ],
        **kw,
    )


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def error(status: int, message: str = "", *, error_type: str = "", **kw: Any) -> Reply:
    """An HTTP error in Anthropic's error envelope."""
    etype = error_type or _ERROR_TYPES.get(status, "api_error")
    return Reply(kind="error", status=status, error_type=etype, message=message or etype.replace("_", " "), **kw)


def overloaded(**kw: Any) -> Reply:
    return error(529, "Overloaded", **kw)


def hang(seconds: float = 3600.0, **kw: Any) -> Reply:
    """Accept the request and say nothing for ``seconds`` (or until the server stops)."""
    return Reply(kind="hang", seconds=seconds, **kw)


def drop(**kw: Any) -> Reply:
    """Close the connection without answering."""
    return Reply(kind="drop", **kw)


def drop_mid_stream(partial: str = "I was about to", **kw: Any) -> Reply:
    """Start a streamed answer, then close the connection."""
    return Reply(kind="drop_mid_stream", content=[{"type": "text", "text": partial}], **kw)
