"""What the fake API received: one logged ``POST /v1/messages``, credentials removed."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

# Never kept in the log: a test log is printed on failure and may be attached to a bug report.
SECRET_HEADERS = frozenset({"x-api-key", "authorization", "proxy-authorization", "cookie"})


def block_text(block: Any) -> str:
    """All human-readable text inside one content block (tool results included)."""
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return ""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "tool_result":
        return content_text(block.get("content"))
    if kind == "tool_use":
        return json.dumps(block.get("input", {}), ensure_ascii=False)
    if kind == "thinking":
        return str(block.get("thinking", ""))
    return ""


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(block_text(b) for b in content)
    return ""


@dataclass
class Request:
    """One request as the model would see it.

    Attributes:
        index: 0-based position in the server's log.
        path: request path (``/v1/messages?beta=true``).
        body: the decoded JSON body.
        headers: request headers, lower-cased, without credentials.
        reply_kind: what the server answered (``message``, ``error:529``, ``reject:400`` ...).
        at: when it arrived (``time.time()``: comparable with another process's clock).
    """

    index: int
    path: str
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    reply_kind: str = ""
    at: float = field(default_factory=time.time)

    @property
    def messages(self) -> list[dict[str, Any]]:
        msgs = self.body.get("messages")
        return msgs if isinstance(msgs, list) else []

    @property
    def n_messages(self) -> int:
        return len(self.messages)

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def system_text(self) -> str:
        system = self.body.get("system")
        return content_text(system) if not isinstance(system, str) else system

    @property
    def last_user_text(self) -> str:
        """Text of the newest user message (the prompt, tool results, reminders)."""
        for msg in reversed(self.messages):
            if msg.get("role") == "user":
                return content_text(msg.get("content"))
        return ""

    @property
    def first_user_text(self) -> str:
        for msg in self.messages:
            if msg.get("role") == "user":
                return content_text(msg.get("content"))
        return ""

    @property
    def all_text(self) -> str:
        """Every message's text, in order: what to search for "did the model see X?"."""
        return "\n".join(content_text(m.get("content")) for m in self.messages)

    def roles(self) -> list[str]:
        return [str(m.get("role")) for m in self.messages]

    def tool_results(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for msg in self.messages:
            content = msg.get("content")
            if isinstance(content, list):
                out += [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "path": self.path,
            "headers": self.headers,
            "reply": self.reply_kind,
            "body": self.body,
        }
