"""Events: what a run says, in one small vocabulary every front end can render.

``normalize(message)`` turns one SDK message into zero or more ``Event``s. The runtime and workflow
add their own (``step``, ``retry``, ``handoff``, ``ask``). A sink is a synchronous callable that must
not block and must not raise; new kinds may appear, so sinks keep an ``else`` branch.

Kinds: text, thinking, prompt, tool_call, tool_result, result, error, reset, system, task, unknown,
ask, retry, step, handoff, notice (something about the run dir a person should know, said once).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Sink = Callable[["Event"], None]

log = logging.getLogger(__name__)

TOOL_SUMMARY_CHARS = 200  # enough to recognise a command or path, short enough for one line
TOOL_RESULT_CHARS = 500
SYNTHETIC_MODEL = "<synthetic>"  # the CLI's model name on its own API-error messages


@dataclass
class Event:
    """One thing that happened.

    Attributes:
        kind: one of the kinds in the module docstring.
        text: what to show.
        tool: the tool name of a ``tool_call``.
        payload: plain JSON-able facts (never SDK objects).
        raw: the SDK object or ``Ask`` behind it; never send it to a frontend.
    """

    kind: str
    text: str = ""
    tool: str = ""
    payload: dict[str, Any] = field(default_factory=dict)
    raw: Any = None

    def __str__(self) -> str:
        if self.kind == "tool_call":
            return f"[{self.tool}] {self.text}"
        return self.text or f"<{self.kind}>"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text, "tool": self.tool, "payload": self.payload}


def emit(sink: Sink | None, event: Event) -> None:
    """Hand ``event`` to ``sink`` (if any). A sink that raises is logged, never lets the run down: what
    shows a run must not end it."""
    if sink is None:
        return
    try:
        sink(event)
    except Exception:
        log.warning("showing a %s event failed", event.kind, exc_info=True)


def context_of(usage: dict[str, Any] | None) -> int:
    """Tokens the model had in front of it for one request (input + cache reads + cache writes)."""
    if not usage:
        return 0
    total = 0
    for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
        value = usage.get(key)
        if isinstance(value, int):
            total += value
    return total


def tool_summary(name: str, tool_input: Any) -> str:
    if isinstance(tool_input, dict):
        for key in ("file_path", "command", "pattern", "path", "url", "query", "description", "question"):
            value = tool_input.get(key)
            if isinstance(value, str) and value:
                return value[:TOOL_SUMMARY_CHARS]
        return json.dumps(tool_input, ensure_ascii=False)[:TOOL_SUMMARY_CHARS]
    return str(tool_input)[:TOOL_SUMMARY_CHARS]


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def _assistant(msg: Any) -> list[Event]:
    sub = msg.parent_tool_use_id is not None
    base: dict[str, Any] = {"subagent": sub}
    if sub:
        base["parent_tool_use_id"] = msg.parent_tool_use_id
    if msg.error or msg.model == SYNTHETIC_MODEL:
        text = "\n".join(getattr(b, "text", "") for b in msg.content if hasattr(b, "text")) or str(msg.error)
        return [Event("error", text, payload=dict(base, synthetic=True, error=msg.error or ""), raw=msg)]
    out: list[Event] = []
    first = dict(base, model=msg.model)
    ctx = context_of(msg.usage)
    if ctx:
        first["context"] = ctx
    for block in msg.content:
        payload = first if not out else dict(base)
        kind = type(block).__name__
        if kind == "TextBlock":
            out.append(Event("text", block.text, payload=payload, raw=msg))
        elif kind == "ThinkingBlock":
            out.append(Event("thinking", block.thinking, payload=payload, raw=msg))
        elif kind == "ToolUseBlock":
            out.append(
                Event(
                    "tool_call",
                    tool_summary(block.name, block.input),
                    tool=block.name,
                    payload=dict(payload, id=block.id, input=block.input),
                    raw=msg,
                )
            )
        else:
            out.append(Event("unknown", "", payload=dict(payload, block=kind), raw=msg))
    if not out and ctx:
        out.append(Event("system", "usage", payload=first, raw=msg))
    return out


def _user(msg: Any) -> list[Event]:
    sub = msg.parent_tool_use_id is not None
    base: dict[str, Any] = {"subagent": sub}
    if sub:
        base["parent_tool_use_id"] = msg.parent_tool_use_id
    if isinstance(msg.content, str):
        return [Event("prompt", msg.content, payload=base, raw=msg)]
    out: list[Event] = []
    for block in msg.content:
        kind = type(block).__name__
        if kind == "ToolResultBlock":
            out.append(
                Event(
                    "tool_result",
                    _result_text(block.content)[:TOOL_RESULT_CHARS],
                    payload=dict(base, tool_use_id=block.tool_use_id, is_error=bool(block.is_error)),
                    raw=msg,
                )
            )
        elif kind == "TextBlock":
            out.append(Event("prompt", block.text, payload=base, raw=msg))
    return out


def _system(msg: Any) -> list[Event]:
    name = type(msg).__name__
    data = msg.data if isinstance(msg.data, dict) else {}
    if name == "MirrorErrorMessage":
        return [
            Event(
                "error",
                f"session store: {data.get('error') or getattr(msg, 'error', '')}",
                payload={"mirror": True},
                raw=msg,
            )
        ]
    if name.startswith("Task") and name.endswith("Message"):
        return [Event("task", "", payload={"kind": name, **_plain(data)}, raw=msg)]
    if msg.subtype == "compact_boundary":
        meta = data.get("compact_metadata") or {}
        pre, post = meta.get("pre_tokens"), meta.get("post_tokens")
        trigger = meta.get("trigger", "")
        return [
            Event(
                "reset",
                f"⇣ {pre} → {post} tokens ({trigger})",
                payload={
                    "trigger": trigger,
                    "pre_tokens": pre,
                    "post_tokens": post,
                    "micro": False,
                    "subtype": msg.subtype,
                },
                raw=msg,
            )
        ]
    if msg.subtype == "init":
        keep = ("session_id", "model", "cwd", "permissionMode", "claude_code_version", "tools")
        return [Event("system", "init", payload={k: data.get(k) for k in keep if k in data}, raw=msg)]
    return [Event("system", str(msg.subtype), payload=_plain(data), raw=msg)]


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    """A JSON-able copy (drops anything that does not serialise)."""
    try:
        return dict(json.loads(json.dumps(data, default=str)))
    except (TypeError, ValueError):
        return {}


def _result(msg: Any) -> list[Event]:
    payload = {
        "session_id": msg.session_id,
        "cost_usd": msg.total_cost_usd or 0.0,
        "num_turns": msg.num_turns,
        "is_error": bool(msg.is_error),
        "terminal_reason": getattr(msg, "terminal_reason", None),
        "errors": list(getattr(msg, "errors", None) or []),
        "result": msg.result or "",
    }
    return [Event("result", msg.subtype, payload=payload, raw=msg)]


def normalize(message: Any) -> list[Event]:
    """Events for one SDK message (dispatching on the class name keeps the SDK import lazy)."""
    name = type(message).__name__
    if name == "AssistantMessage":
        return _assistant(message)
    if name == "UserMessage":
        return _user(message)
    if name == "ResultMessage":
        return _result(message)
    if name == "ConversationResetMessage":
        return [Event("reset", "conversation reset", payload={"subtype": "conversation_reset"}, raw=message)]
    if name == "StreamEvent":
        return []
    if hasattr(message, "subtype") and hasattr(message, "data"):
        return _system(message)
    if name == "RateLimitEvent":
        return [Event("system", "rate_limit", payload={}, raw=message)]
    return [Event("unknown", name, raw=message)]


def session_id_of(message: Any) -> str | None:
    """The session id a message carries, if any (the ``init`` system message has it first)."""
    sid = getattr(message, "session_id", None)
    if isinstance(sid, str) and sid:
        return sid
    data = getattr(message, "data", None)
    if isinstance(data, dict):
        value = data.get("session_id")
        if isinstance(value, str) and value:
            return value
    return None
