"""SessionStore implementations for claude-agent-sdk (``runs/sessions.db`` and what ``load()`` rewrites).

Importing this package does not import ``claude_agent_sdk``.
"""

from flower_magic.core.storage import register_default
from flower_magic.stores.resume import PruningSessionStore
from flower_magic.stores.sqlite import SqliteSessionStore

__all__ = ["PruningSessionStore", "SqliteSessionStore"]

# The store a Runtime gets when it is given none: sessions.db, pruned (and trimmed) on load.
register_default(PruningSessionStore)
