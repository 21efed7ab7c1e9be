"""What a resume is handed: the stored transcript with reminders collapsed, expiry, trimming and
pruning applied.

``resume_view`` makes the copy (for the CLI on resume, and for the panel's "as the model would get
it"); ``PruningSessionStore`` wraps a store (sessions.db, or PostgreSQL) with that view on ``load()``
— the store a ``Runtime`` uses, and the one to plug into your own ``ClaudeAgentOptions(session_store=...)``.

Guarantees:
    - ``load()`` never changes what the model was told: the store keeps every entry verbatim. The
      one in-place change it makes is to re-point a stored link that names an entry which never
      existed in the store (stores/chain.py), so the chain is walkable by every reader.
    - ``append()`` stores links to the copy's own made-up entries as links to the real ones.
    - One workspace, one key: where the SDK's ``project_key`` for the workspace differs from Claude
      Code's (a path with an emoji; ``core.project``), a key the SDK computed is read and written as
      Claude Code's, under which the mirror stores every entry.
    - A session marked with ``squeeze()`` has those results spilled on every later ``load()`` by this
      store, whatever the trimming rule says (the mark lives as long as the store object).
"""

from __future__ import annotations

import asyncio
import gc
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from flower_magic.core.project import project_key, sdk_project_key
from flower_magic.stores.chain import Relink, repair, to_stored
from flower_magic.stores.prune import Entry, PrunePolicy, prune
from flower_magic.stores.reminder import collapse
from flower_magic.stores.sqlite import SqliteSessionStore

if TYPE_CHECKING:
    from claude_agent_sdk.types import (
        SessionKey,
        SessionListSubkeysKey,
        SessionStoreEntry,
        SessionStoreListEntry,
        SessionSummaryEntry,
    )


@dataclass
class ResumeView:
    """A transcript as the model would get it on resume, and what changed (entry uuids)."""

    entries: list[Entry]
    dropped: set[str] = field(default_factory=set)
    rewritten: set[str] = field(default_factory=set)
    added: set[str] = field(default_factory=set)
    report: dict[str, Any] = field(default_factory=dict)
    relinks: list[Relink] = field(default_factory=list)
    spilled: set[str] = field(default_factory=set)


def resume_view(
    entries: list[Entry],
    *,
    workspace: Path,
    trim: Any = False,
    ephemeral: Any = True,
    prune_policy: PrunePolicy | None = None,
    write: bool = False,
    force: frozenset[str] | set[str] = frozenset(),
) -> ResumeView:
    """Collapse repeated reminders, then apply expiry, trimming (when on) and pruning, in that order;
    ``entries`` is not modified.

    Args:
        trim: a ``TrimPolicy`` or a bool.
        ephemeral: an ``EphemeralPolicy`` or a bool.
        write: write spill files (a resume does; a read-only viewer does not).
        force: tool_use ids whose large results are spilled whatever the rule (see ``trim``).
    """
    from flower_magic.stores.trim import EphemeralPolicy, TrimPolicy, expire
    from flower_magic.stores.trim import trim as trim_entries

    eph = ephemeral if isinstance(ephemeral, EphemeralPolicy) else EphemeralPolicy(enabled=bool(ephemeral))
    tp = trim if isinstance(trim, TrimPolicy) else TrimPolicy(enabled=bool(trim))
    report: dict[str, Any] = {"expired": 0, "cleared": 0, "kept": 0, "chars_saved": 0, "unspilled": 0}
    rewritten: set[str] = set()
    spilled: set[str] = set()
    # A chain broken by an earlier resume copy (0.1.0's random seals) is walked whole again first.
    work, relinks = repair(entries)  # expire, trim and prune copy what they change; ``entries`` is never modified
    rewritten.update(r.uuid for r in relinks if r.uuid)
    report["relinked"] = len(relinks)
    # Rewriting a 100K-entry session allocates tens of thousands of containers, and each collection
    # the cyclic collector starts walks the whole session again (a third of the time of a big load).
    # Nothing made here forms a cycle, so collecting afterwards loses nothing.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        work, collapsed = collapse(work)
        report["reminders_collapsed"] = len(collapsed)
        if eph.enabled:
            work, expired = expire(work, eph)
            rewritten.update(expired)
            report["expired"] = len(expired)
        if tp.enabled:
            work, trim_report = trim_entries(work, tp, workspace, write=write, force=force)
            rewritten.update(trim_report.pop("rewritten"))
            spilled.update(trim_report.pop("spilled"))
            report.update(trim_report)
        pruned = prune(work, prune_policy)
    finally:
        if was_enabled:
            gc.enable()
    healed = sum(1 for uid in pruned.added if uid.startswith("heal-"))
    report.update(pruned=len(pruned.dropped), denials_dropped=pruned.denials_dropped, healed=healed)
    report["sealed"] = len(pruned.added) - healed
    dropped = set(pruned.dropped) | set(collapsed)
    rewritten = (rewritten | set(pruned.rewritten)) - dropped
    return ResumeView(pruned.entries, dropped, rewritten, set(pruned.added), report, relinks, spilled)


class PruningSessionStore:
    """A store with pruning (and expiry, and optional trimming) applied on ``load()`` only.

    It wraps any ``core.storage.RunStore`` (the SQLite file, ``stores.postgres.PostgresSessionStore``)
    and knows nothing of which: everything but ``load`` and ``append`` goes to the store as it is.

    Args:
        store: the store to wrap, or the path of a SQLite file (``SqliteSessionStore(path)``).
        workspace: where spill files go (``<workspace>/.flower/spill``).
        trim: ``TrimPolicy`` or bool (off by default; the ``flower`` front ends turn it on).
        ephemeral: ``EphemeralPolicy`` or bool (on by default).
        keep_denials: denied calls kept in resumed context.
        prune: a full ``PrunePolicy`` (overrides ``keep_denials``).
        line: the hand-off line (tokens) of the runtime this store serves: a budget rule given no
            budget is sized from it (``stores.trim.budget_for_line``). None: the default window's.

    Attributes:
        store: the wrapped store.
    """

    def __init__(
        self,
        store: str | Path | Any,
        *,
        workspace: str | Path,
        trim: Any = False,
        ephemeral: Any = True,
        keep_denials: int = 1,
        prune: PrunePolicy | None = None,
        line: int | None = None,
    ) -> None:
        from flower_magic.stores.trim import sized

        self.store: Any = SqliteSessionStore(store) if isinstance(store, (str, Path)) else store
        self.workspace = Path(workspace)
        self.trim_policy = sized(trim, line)
        self.ephemeral_policy = ephemeral
        self.prune_policy = prune or PrunePolicy(keep_denials=keep_denials)
        self.last_report: dict[str, Any] = {}
        sdk_key, cli_key = sdk_project_key(self.workspace), project_key(self.workspace)
        # The SDK's resume asks under its own key; the entries are under Claude Code's.
        self._aliases = {sdk_key: cli_key} if sdk_key != cli_key else {}
        self._forced: dict[str, set[str]] = {}  # session id -> tool_use ids spilled whatever the rule
        self._spilled: dict[str, set[str]] = {}  # session id -> tool_use ids the last load() spilled

    def __getattr__(self, name: str) -> Any:
        # The wrapped store's own attributes (``path``, ``journal_mode``, ``location``, ``entry_count``).
        if name == "store":
            raise AttributeError(name)
        return getattr(self.store, name)

    def __repr__(self) -> str:
        return f"PruningSessionStore({self.store!r})"

    # -- the engine's reads go to the store as stored ------------------------------------------

    def load_sync(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        return cast("list[SessionStoreEntry] | None", self.store.load_sync(key))

    def load_range(self, key: SessionKey, offset: int, limit: int) -> list[SessionStoreEntry]:
        return cast("list[SessionStoreEntry]", self.store.load_range(key, offset, limit))

    def has_session(self, project_key: str, session_id: str) -> bool:
        return bool(self.store.has_session(project_key, session_id))

    def last_context(self, project_key: str, session_id: str) -> int:
        return int(self.store.last_context(project_key, session_id))

    def holds_text(self, key: SessionKey, text: str) -> bool:
        return bool(self.store.holds_text(key, text))

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> PruningSessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _own(self, project: str) -> str:
        return self._aliases.get(project, project)

    def _own_key(self, key: SessionKey) -> SessionKey:
        project = self._own(key["project_key"])
        return key if project == key["project_key"] else cast("SessionKey", {**key, "project_key": project})

    @property
    def trims(self) -> bool:
        """Whether loads trim (and so whether a session may be squeezed)."""
        return self.trim_policy.enabled

    def large_results(self, key: SessionKey) -> list[Any]:
        """The stored session's large tool results (``stores.trim.LargeResult``), oldest first."""
        from flower_magic.stores.trim import large_results

        stored = self.load_sync(self._own_key(key))
        return large_results(cast("list[Entry]", stored), self.trim_policy) if stored else []

    def squeezable(self, key: SessionKey) -> list[Any]:
        """The large results that the session's live context still holds in full: every one the last
        ``load()`` by this store did not spill (all of them for a session it never loaded)."""
        gone = self._spilled.get(key["session_id"], set()) | self._forced.get(key["session_id"], set())
        return [r for r in self.large_results(key) if r.tool_use_id not in gone]

    def squeeze(self, key: SessionKey, tool_use_ids: set[str]) -> None:
        """Spill these results of the session on every later ``load()``, the turn in progress included."""
        self._forced.setdefault(key["session_id"], set()).update(tool_use_ids)

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """The session as a resume must see it (see ``resume_view``); None for an unknown key."""
        key = self._own_key(key)
        stored = await self.store.load(key)
        if stored is None:
            return None
        # In a worker thread, like the read itself: a 100K-entry view must not stall the kernel's loop.
        view = await asyncio.to_thread(
            resume_view,
            cast("list[Entry]", stored),
            workspace=self.workspace,
            trim=self.trim_policy,
            ephemeral=self.ephemeral_policy,
            prune_policy=self.prune_policy,
            write=True,
            force=frozenset(() if key.get("subpath") else self._forced.get(key["session_id"], ())),
        )
        self.last_report = view.report
        if not key.get("subpath"):  # a subagent's transcript is not the main thread's context
            self._spilled[key["session_id"]] = view.spilled
        mended = [r for r in view.relinks if r.was_made_up and r.uuid]
        if mended:
            # Stored entries that name a made-up parent (0.1.0) are fixed where they lie, so every later
            # reader, the original runtime included, walks the whole chain without this repair.
            await asyncio.to_thread(self.store.relink_stored, key, mended)
        return cast("list[SessionStoreEntry]", view.entries)

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Store a batch, with links to the resume copy's own entries re-pointed to real ones."""
        fixed = to_stored(cast("list[Entry]", entries))
        await self.store.append(self._own_key(key), cast("list[SessionStoreEntry]", fixed))

    async def delete(self, key: SessionKey) -> None:
        await self.store.delete(self._own_key(key))

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        project = self._own(key["project_key"])
        found = await self.store.list_subkeys(cast("SessionListSubkeysKey", {**key, "project_key": project}))
        return cast("list[str]", found)

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        return cast("list[SessionStoreListEntry]", await self.store.list_sessions(self._own(project_key)))

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        found = await self.store.list_session_summaries(self._own(project_key))
        return cast("list[SessionSummaryEntry]", found)
