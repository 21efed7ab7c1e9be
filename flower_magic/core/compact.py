"""How the Claude Code CLI may compact a session's context, as environment variables.

Hand-off (``handoff.py``) replaces compaction: while it is on, the Runtime gives specs without an
explicit policy ``CompactPolicy("no_summary")`` so the CLI never summarises a session behind our back.

Guarantees:
    - An unknown mode is refused when the policy is built, naming the modes that exist, so a typo
      never silently leaves auto-compaction on.
"""

from __future__ import annotations

from dataclasses import dataclass

# mode -> the CLI variable that selects it ("auto" is the CLI's own default and sets nothing)
_MODE_ENV: dict[str, dict[str, str]] = {
    "auto": {},
    "no_summary": {"DISABLE_AUTO_COMPACT": "1"},
    "off": {"DISABLE_COMPACT": "1"},
}

MODES = tuple(_MODE_ENV)


@dataclass(frozen=True)
class CompactPolicy:
    """The CLI's compaction setting for one agent.

    Attributes:
        mode: ``"auto"`` (the CLI compacts near its window), ``"no_summary"`` (no automatic
            compaction; ``/compact`` still works) or ``"off"`` (no compaction at all).
        window: tokens the CLI should assume as its auto-compact window; None leaves its default.

    Raises:
        ValueError: ``mode`` is not one of ``MODES``.
    """

    mode: str = "auto"
    window: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in _MODE_ENV:
            raise ValueError(f"unknown compact mode {self.mode!r}; use one of {', '.join(MODES)}")

    def env(self) -> dict[str, str]:
        """The environment variables that put this policy into effect for the CLI."""
        out = dict(_MODE_ENV[self.mode])
        if self.window is not None:
            out["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(self.window)
        return out
