"""What the engine needs of a session store, and how it gets one without knowing which.

The runtime is handed its store (``Runtime(store=...)``). A store is the SDK's ``SessionStore``
(``append`` / ``load`` ...) plus the few synchronous reads the engine and the front ends make
(``RunStore`` below): ``flower_magic.stores`` has the SQLite one in the run dir and the PostgreSQL one;
another backend plugs in by implementing the same methods.

A front end always hands the runtime the store it opened (``front.launch``: opened in ``plan``, so a
store that cannot be reached is said before a byte is written). Only the Python API's
``Runtime(workspace=...)`` without ``store=`` asks for a default, and core cannot import
``flower_magic.stores`` to make one (the layers point one way: stores import core). So the default is
a hole core declares (``register_default`` / ``default_store``) and the package's face fills,
explicitly, the first time ``flower_magic.Runtime`` is asked for (``flower_magic.__getattr__``).
Importing a module registers nothing: ``import flower_magic.stores`` has no side effect, and
``flower_magic.core.runtime.Runtime`` used directly must be given its store.

Which store a run uses is one setting (``StoreLocation``): ``FLOWER_SESSIONS`` in the environment,
``flower --sessions URL``, ``%config FlowerMagics.sessions``; empty means the SQLite file in the run
dir. A run dir whose sessions live elsewhere says where in ``store.json`` (``record_store``): kind,
host, port, database, user, never a password, so every reader (``--status``, the panel, the next run
on another machine) finds them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from flower_magic.core import lineage as lineage_file
from flower_magic.core.durable import write_atomic
from flower_magic.core.errors import UserError
from flower_magic.core.redaction import remember
from flower_magic.core.words import say, short_path

SESSIONS_ENV = "FLOWER_SESSIONS"
# The run dir's files this module owns (``core.rundir.RunDir`` names them from here): the default
# store's SQLite file, and the record of which store a run uses (never its credentials).
SESSIONS_DB = "sessions.db"
STORE_RECORD = "store.json"
SQLITE, POSTGRES = "sqlite", "postgresql"
_POSTGRES_SCHEMES = ("postgresql", "postgres")
# Fields of a store record (store.json); a password is never one of them.
_RECORD_FIELDS = ("kind", "host", "port", "database", "user", "query")


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
        LookupError: nothing registered one (use ``flower_magic.Runtime``, or pass a store).
    """
    if not _default:
        raise LookupError("no session store: pass Runtime(store=...), or use flower_magic.Runtime (it registers one)")
    return _default[0](sessions_db, **kw)


@dataclass(frozen=True)
class StoreLocation:
    """Where a run's transcripts live. Its ``repr`` and ``redacted`` never carry the password.

    Attributes:
        kind: ``sqlite`` (the run dir's sessions.db) or ``postgresql``.
        host, port, database, user: the server's, for ``postgresql`` ("" / None when left to libpq).
        query: the URL's other parameters (``sslmode=require``), without any password.
    """

    kind: str = SQLITE
    host: str = ""
    port: int | None = None
    database: str = ""
    user: str = ""
    query: str = ""
    password: str = field(default="", repr=False, compare=False)

    @classmethod
    def parse(cls, setting: str) -> StoreLocation:
        """A location from a setting: "" or ``sqlite`` (the default), or ``postgresql://user:pass@host:port/db``.

        Raises:
            ValueError: anything else; the message shows the scheme only (the rest may hold a password).
        """
        text = (setting or "").strip()
        if text in ("", SQLITE):
            return cls()
        scheme = text.split("://", 1)[0].lower() if "://" in text else ""
        try:
            parts = urlsplit(text)
            port = parts.port
        except ValueError:
            raise ValueError(f"not a postgresql:// URL: {scheme or '?'}://…") from None
        if scheme not in _POSTGRES_SCHEMES or parts.fragment:
            raise ValueError(f"not a postgresql:// URL: {scheme or '?'}://…")
        params = parse_qsl(parts.query, keep_blank_values=True)
        password = unquote(parts.password or "")
        for name, value in params:
            if name == "password":
                password = value
        query = urlencode([(n, v) for n, v in params if n != "password"])
        # Whatever this process serves or writes from now on is scrubbed of it (core.redaction).
        remember(password)
        return cls(
            POSTGRES,
            host=parts.hostname or "",
            port=port,
            database=unquote(parts.path.lstrip("/")),
            user=unquote(parts.username or ""),
            query=query,
            password=password,
        )

    @property
    def is_default(self) -> bool:
        return self.kind == SQLITE

    def url(self, *, with_password: bool = False) -> str:
        """The location as a URL; the password only when asked for (to connect, never to show)."""
        if self.kind == SQLITE:
            return SQLITE
        auth = quote(self.user, safe="") if self.user else ""
        if with_password and self.password:
            auth += ":" + quote(self.password, safe="")
        host = f"[{self.host}]" if ":" in self.host else self.host
        netloc = (auth + "@" if auth else "") + host + (f":{self.port}" if self.port else "")
        tail = f"?{self.query}" if self.query else ""
        return f"postgresql://{netloc}/{quote(self.database, safe='')}{tail}"

    @property
    def redacted(self) -> str:
        """What may be shown and logged: the URL without its password."""
        return self.url()

    def conninfo(self) -> str:
        """What the driver connects with (carries the password: hand it to nothing else)."""
        return self.url(with_password=True)

    def record(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _RECORD_FIELDS}

    @classmethod
    def from_record(cls, data: Any) -> StoreLocation | None:
        if not isinstance(data, dict) or data.get("kind") not in (SQLITE, POSTGRES):
            return None
        port = data.get("port")
        return cls(
            str(data["kind"]),
            host=str(data.get("host") or ""),
            port=port if isinstance(port, int) and not isinstance(port, bool) else None,
            database=str(data.get("database") or ""),
            user=str(data.get("user") or ""),
            query=str(data.get("query") or ""),
        )

    def with_password_of(self, other: StoreLocation) -> StoreLocation:
        """This location with ``other``'s password when both name the same place (else unchanged)."""
        if self == other and other.password and not self.password:
            return StoreLocation(**{**self.record(), "password": other.password})
        return self


class StoreMismatch(UserError, ValueError):
    """A run dir's transcripts live in one store and another was chosen: continuing would lose them.

    Attributes:
        recorded: where they live (redacted); chosen: what was asked for (redacted).
    """

    def __init__(self, run_dir: Path, recorded: str, chosen: str, lang: str = "") -> None:
        from flower_magic.core.words import pick_lang_or_default

        self.recorded, self.chosen = recorded, chosen
        lang, where = pick_lang_or_default(lang), short_path(run_dir)
        super().__init__(say("sessions_mismatch", lang, path=where, recorded=recorded, chosen=chosen))


def recorded_store(run_dir: Path) -> StoreLocation | None:
    """What ``<run_dir>/store.json`` says (None when absent or unreadable: the run dir's sessions.db)."""
    try:
        data = json.loads((Path(run_dir) / STORE_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return StoreLocation.from_record(data)


def record_store(run_dir: Path, location: StoreLocation) -> None:
    """Say in the run dir where its transcripts live (only for a store other than its sessions.db)."""
    if location.is_default or recorded_store(run_dir) == location:
        return
    body = json.dumps(location.record(), indent=1, ensure_ascii=False) + "\n"
    write_atomic(Path(run_dir) / STORE_RECORD, body.encode("utf-8"))


def choose_store(run_dir: Path, setting: str | None, lang: str = "") -> StoreLocation:
    """The store a run in ``run_dir`` uses: ``setting`` (else ``FLOWER_SESSIONS``, else the one
    ``store.json`` records, else sessions.db). Reads only; writes nothing.

    Raises:
        ValueError: the setting is not a store URL.
        StoreMismatch: the run dir's transcripts are in another store than the one chosen.
    """
    import os

    text = setting if setting else os.environ.get(SESSIONS_ENV, "")
    recorded = recorded_store(run_dir)
    chosen = StoreLocation.parse(text) if text else None
    if chosen is None:
        return recorded or StoreLocation()
    if recorded is None:
        db = Path(run_dir) / SESSIONS_DB
        has_local = db.is_file() and (Path(run_dir) / lineage_file.FILENAME).is_file()
        if has_local and not chosen.is_default:
            raise StoreMismatch(run_dir, f"{SQLITE} ({short_path(db)})", chosen.redacted, lang)
        return chosen
    if recorded != chosen:
        raise StoreMismatch(run_dir, recorded.redacted, chosen.redacted, lang)
    return recorded.with_password_of(chosen)
