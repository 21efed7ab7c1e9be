"""Script the default workflow by role: which agent of ``starter_flow`` a request comes from.

Each role has its own system prompt, so a fake API can answer the clarifier, the goal setter, the
worker and the judge from separate scripts, whatever order the workflow asks them in::

    api.add(as_role("clarifier", tool_use("mcp__human__ask", {"question": "csv or json?"})),
            as_role("clarifier", text(BRIEF)), as_role("goal", text(GOAL)), ...)
"""

from __future__ import annotations

from flower_magic.testing.replies import Reply
from flower_magic.testing.request import Request

HANDOFF_ASK = "先停一下手上的活"  # the opening of flower_magic.core.handoff.HANDOFF_PROMPT
ROLES = ("clarifier", "goal", "worker", "judge", "handoff")

# Phrases that occur in exactly one role's system prompt (flower_magic.workflow.roles).
_MARKERS = (
    ("clarifier", "把需求问清楚"),
    ("goal", "可以判定的目标"),
    ("judge", "独立的判定者"),
)


def asks_for_handoff(request: Request) -> bool:
    """The runtime asked the session to write its hand-off (the five-section request). The successor's
    first prompt carries the written document, with the same headings, but not the request."""
    text = request.last_user_text
    return HANDOFF_ASK in text and "现在在做什么" in text and "走不通的路" in text and "下一步" in text


def role_of(request: Request) -> str:
    """``clarifier``, ``goal``, ``judge``, ``handoff`` or ``worker``."""
    if asks_for_handoff(request):
        return "handoff"
    system = request.system_text
    for role, marker in _MARKERS:
        if marker in system:
            return role
    return "worker"


def as_role(role: str, reply: Reply) -> Reply:
    """``reply``, answering only requests from ``role``."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; one of {ROLES}")
    reply.match = lambda request: role_of(request) == role
    return reply
