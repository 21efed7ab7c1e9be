"""What an agent is (``AgentSpec``) and the one place that turns it into SDK options.

``build_options`` is the only function in flower_magic that constructs ``ClaudeAgentOptions``; the
SDK is imported inside it, so importing this module (and ``AgentSpec``) stays cheap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from claude_agent_sdk import ClaudeAgentOptions


class EnvPolicy(Protocol):
    """Anything that contributes environment variables to the CLI (e.g. ``CompactPolicy``)."""

    def env(self) -> dict[str, str]: ...


DEFAULT_TOOLS = ("Read", "Glob", "Grep")

# The longest line of the CLI's stream-json output the SDK reads (its default, 1 MiB, ends the stream
# on a 1 MB reply or a 1.1 MB Write). One line is one message, or one ``transcript_mirror`` frame that
# carries a Write's content twice (its input and its echoed result: 2.8 MB for a 1.1 MB Write, measured).
# No message can outgrow what the Messages API accepts in one request, 32 MB, so twice that covers the
# largest frame a real session writes. The SDK counts the characters of the decoded line (never more
# than its bytes); the memory is held only while that one line is read and parsed.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


@dataclass
class AgentSpec:
    """One agent role: instructions, tools and limits.

    Attributes:
        name: the role's name (shown in logs; not the step name).
        instructions: appended after Claude Code's own system prompt.
        allowed_tools: tools that run without asking (``"Bash"``, ``"Bash(git:*)"``, MCP tool names).
        disallowed_tools: tools removed from the session.
        model, effort, max_turns, max_budget_usd: passed to the CLI when set.
        permission_mode: ``default``, ``acceptEdits``, ``plan``, ``dontAsk`` ...
        agents: subagent definitions (``claude_agent_sdk.AgentDefinition`` by name).
        mcp_servers: MCP servers, including in-process SDK servers.
        hooks: SDK hook matchers by event.
        compact: a compaction policy; ``None`` lets the runtime choose (hand-off on → no auto-compact).
        env: extra environment for the CLI.
    """

    name: str
    instructions: str
    allowed_tools: list[str] = field(default_factory=lambda: list(DEFAULT_TOOLS))
    disallowed_tools: list[str] = field(default_factory=list)
    model: str | None = None
    effort: str | None = None
    max_turns: int | None = None
    max_budget_usd: float | None = None
    permission_mode: str = "default"
    agents: dict[str, Any] | None = None
    mcp_servers: dict[str, Any] = field(default_factory=dict)
    hooks: dict[str, list[Any]] | None = None
    compact: EnvPolicy | None = None
    env: dict[str, str] = field(default_factory=dict)


def build_options(
    spec: AgentSpec,
    *,
    cwd: Path | str,
    session_store: Any = None,
    resume: str | None = None,
    fork: bool = False,
    session_id: str | None = None,
    env: dict[str, str] | None = None,
    hooks: dict[str, list[Any]] | None = None,
    portable: bool = True,
    add_dirs: list[str] | None = None,
    flush: str = "eager",
    cli_path: str | None = None,
    stderr: Any = None,
) -> ClaudeAgentOptions:
    """Map a spec to ``ClaudeAgentOptions``.

    Args:
        spec: the role.
        cwd: the agent's working directory (the workspace).
        session_store: where transcripts are mirrored (flushed eagerly so a kill loses little).
        resume: a session id to continue; ``fork`` only applies with it.
        session_id: start a NEW session under this id (used to keep an id that lineage already
            recorded when its transcript never reached the store). Ignored when resuming.
        env: environment from the runtime; the spec's ``env`` and compaction settings go on top.
        hooks: hooks to use instead of ``spec.hooks`` (the runtime merges its own).
        portable: ignore the user's ``~/.claude`` settings (``setting_sources=[]``).
    """
    from claude_agent_sdk import ClaudeAgentOptions

    merged_env = dict(env or {})
    merged_env.update(spec.env)
    if spec.compact is not None:
        merged_env.update(spec.compact.env())

    kw: dict[str, Any] = {
        "system_prompt": {"type": "preset", "preset": "claude_code", "append": spec.instructions},
        "allowed_tools": list(spec.allowed_tools),
        "disallowed_tools": list(spec.disallowed_tools),
        "permission_mode": spec.permission_mode,
        "setting_sources": [] if portable else ["project"],
        "cwd": str(cwd),
        "env": merged_env,
        "max_buffer_size": MAX_MESSAGE_BYTES,
    }
    if session_store is not None:
        kw["session_store"] = session_store
        kw["session_store_flush"] = flush
    if add_dirs:
        kw["add_dirs"] = list(add_dirs)
    for name in ("model", "effort", "max_turns", "max_budget_usd", "agents"):
        value = getattr(spec, name)
        if value is not None:
            kw[name] = value
    if spec.mcp_servers:
        kw["mcp_servers"] = dict(spec.mcp_servers)
    chosen_hooks = hooks if hooks is not None else spec.hooks
    if chosen_hooks:
        kw["hooks"] = chosen_hooks
    if resume:
        kw["resume"] = resume
        kw["fork_session"] = fork
    elif session_id:
        kw["session_id"] = session_id
    if cli_path:
        kw["cli_path"] = cli_path
    if stderr is not None:
        kw["stderr"] = stderr
    return ClaudeAgentOptions(**kw)
