"""What the engine needs of a session store, and how it gets one without knowing which.

The runtime is handed its store (``Runtime(store=...)``). A store is the SDK's ``SessionStore``
(``append`` / ``load`` ...) plus the few synchronous reads the engine and the front ends make
(``RunStore`` below): ``flower_magic.stores`` has the SQLite one in the run dir; another backend
plugs in by implementing the same methods. When no store is passed, the default registered by
``flower_magic.stores`` (imported by ``flower_magic.Runtime``) is used — core never imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol


class RunStore(Protocol):
    """A ``SessionStore`` with the reads the engine makes between steps."""

    async def append(self, key: Any, entries: list[Any]) -> None: ...

    async def load(self, key: Any) -> list[Any] | None: ...

    def load_sync(self, key: Any) -> list[Any] | None: ...

    def load_range(self, key: Any, offset: int, limit: int) -> list[Any]: ...

    def has_session(self, project_key: str, session_id: str) -> bool: ...

    def last_context(self, project_key: str, session_id: str) -> int: ...

    def holds_text(self, key: Any, text: str) -> bool: ...

    def close(self) -> None: ...

    # Making room before a hand-off (core.succession): a store that does not trim says ``trims`` False
    # and is never asked the rest.
    @property
    def trims(self) -> bool: ...

    def large_results(self, key: Any) -> list[Any]: ...

    def squeezable(self, key: Any) -> list[Any]: ...

    def squeeze(self, key: Any, tool_use_ids: set[str]) -> None: ...


StoreFactory = Callable[..., RunStore]
_default: list[StoreFactory] = []


def register_default(factory: StoreFactory) -> None:
    """Make ``factory(sessions_db, workspace=, trim=, ephemeral=, keep_denials=, line=)`` the default store
    (``line``: the runtime's hand-off line in tokens, which a trimming budget is sized from)."""
    _default[:] = [factory]


def default_store(sessions_db: Path, **kw: Any) -> RunStore:
    """The registered default store for a run dir's ``sessions.db``.

    Raises:
        LookupError: nothing registered one (import ``flower_magic.stores``, or pass a store).
    """
    if not _default:
        raise LookupError(
            "no session store: pass Runtime(store=...), or import flower_magic.stores (flower_magic.Runtime does)"
        )
    return _default[0](sessions_db, **kw)
