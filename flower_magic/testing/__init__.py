"""Test flower workflows offline: a scripted fake of the Anthropic Messages API.

The real Claude Code CLI (bundled in ``claude-agent-sdk``) talks to it on 127.0.0.1, so a workflow
runs end to end — sessions, resume, tool calls, outages — without a key or a network::

    from flower_magic.testing import FakeAnthropic, text, tool_use

    with FakeAnthropic([tool_use("Bash", {"command": "ls"}), text("done")]) as api:
        os.environ.update(api.env(home=tmp_path))
        ...                               # run your workflow
        assert "done" in api.requests[-1].all_text or api.requests

Stdlib only; importing this module does not import the SDK.
"""

from flower_magic.testing.replies import (
    Reply,
    drop,
    drop_mid_stream,
    error,
    hang,
    overloaded,
    text,
    thinking_then_text,
    tool_use,
    tool_uses,
)
from flower_magic.testing.request import Request
from flower_magic.testing.server import FAKE_API_KEY, FakeAnthropic, tool_pairing_error

__all__ = [
    "FAKE_API_KEY",
    "FakeAnthropic",
    "Reply",
    "Request",
    "drop",
    "drop_mid_stream",
    "error",
    "hang",
    "overloaded",
    "text",
    "thinking_then_text",
    "tool_pairing_error",
    "tool_use",
    "tool_uses",
]
