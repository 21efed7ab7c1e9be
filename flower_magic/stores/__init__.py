"""SessionStore implementations for claude-agent-sdk (``runs/sessions.db`` and what ``load()`` rewrites).

Importing this package imports neither ``claude_agent_sdk`` nor the PostgreSQL driver
(``stores.postgres``, loaded only for a run dir that uses PostgreSQL).
"""

from flower_magic.core.storage import register_default
from flower_magic.stores.backend import open_reader, open_store
from flower_magic.stores.postgres import PostgresSessionStore
from flower_magic.stores.resume import PruningSessionStore
from flower_magic.stores.sqlite import SqliteSessionStore

__all__ = ["PostgresSessionStore", "PruningSessionStore", "SqliteSessionStore", "open_reader", "open_store"]

# The store a Runtime gets when it is given none: the one FLOWER_SESSIONS or the run dir's store.json
# names (sessions.db when neither does), pruned (and trimmed) on load.
register_default(open_store)
