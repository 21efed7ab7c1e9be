"""SessionStore implementations for claude-agent-sdk (``runs/sessions.db`` and what ``load()`` rewrites).

Importing this package imports neither ``claude_agent_sdk`` nor the PostgreSQL driver
(``stores.postgres``, loaded only for a run dir that uses PostgreSQL), and registers nothing: the
runtime's default store is wired by ``flower_magic.Runtime`` (see ``core.storage``).
"""

from flower_magic.stores.backend import open_reader, open_store
from flower_magic.stores.postgres import PostgresSessionStore
from flower_magic.stores.resume import PruningSessionStore
from flower_magic.stores.sqlite import SqliteSessionStore

__all__ = ["PostgresSessionStore", "PruningSessionStore", "SqliteSessionStore", "open_reader", "open_store"]
