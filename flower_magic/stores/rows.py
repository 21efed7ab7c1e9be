"""How a transcript entry is stored as a row of sessions.db and read back, exactly.

Guarantees:
    - ``ENCODER`` writes ASCII JSON with ``\\u`` escapes (as the original flower did), so a lone
      surrogate — the CLI's JavaScript strings can carry one — is storable.
    - ``decode`` returns what was stored, deep-equal: integers past 64 bits, NaN and surrogates included,
      whether or not the optional ``orjson`` is there to speed it up.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Self

from flower_magic.core.bulk import gc_paused, orjson_is_exact

if TYPE_CHECKING:
    from claude_agent_sdk.types import (
        SessionKey,
        SessionListSubkeysKey,
        SessionStoreEntry,
        SessionStoreListEntry,
        SessionSummaryEntry,
    )

log = logging.getLogger("flower_magic.stores.sqlite")

# ASCII with \u escapes, as the original wrote: a lone surrogate (the CLI's JavaScript strings can
# carry one) would make raw UTF-8 text unstorable. Compact separators keep rows small.
ENCODER = json.JSONEncoder(separators=(",", ":"))


def _orjson_loads() -> Callable[[bytes | str], Any] | None:
    try:
        import orjson
    except ImportError:
        return None
    return orjson.loads


# Optional: orjson parses a big session 2-3 times faster than the json module, most of it by reading
# the UTF-8 bytes SQLite holds without making a str of each row first (bench/bench_store.py).
_FAST_LOADS = _orjson_loads()
# What the reads select: UTF-8 bytes for orjson, text for the json module.
PAYLOAD_SQL = "CAST(payload AS BLOB)" if _FAST_LOADS else "payload"


def decode(payloads: Iterable[tuple[str | bytes]]) -> list[Any]:
    out: list[Any] = []
    append, fast = out.append, _FAST_LOADS
    with gc_paused():
        for (payload,) in payloads:
            if (
                fast is not None
                and isinstance(payload, bytes)
                and orjson_is_exact(payload)  # else the json module keeps big integers exact
            ):
                try:
                    append(fast(payload))
                    continue
                except ValueError:
                    pass  # NaN, Infinity, lone surrogates: the json module reads them
            try:
                append(json.loads(payload))
            except (ValueError, TypeError):
                log.warning("sessions.db: skipped an entry that is not valid JSON: %.80r", payload)
    return out


def context_tokens(payloads: Iterable[str]) -> int:
    """Tokens the model last saw: the first non-zero ``input + cache_read + cache_creation`` usage among
    ``payloads`` (stored entries, newest first), else 0."""
    for payload in payloads:
        if '"usage"' not in payload:
            continue
        try:
            usage = json.loads(payload).get("message", {}).get("usage", {})
        except (ValueError, AttributeError):
            continue
        if not isinstance(usage, dict):
            continue
        total = sum(
            value
            for name in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
            if isinstance(value := usage.get(name), int) and not isinstance(value, bool)
        )
        if total:
            return total
    return 0


def summary_from_row(session_id: str, mtime: int, data: str) -> SessionSummaryEntry | None:
    try:
        decoded = json.loads(data)
    except ValueError:
        return None
    if not isinstance(decoded, dict):
        return None
    # A sidecar may hold the whole summary entry (as written here) or only its ``data`` dict.
    inner = decoded["data"] if isinstance(decoded.get("data"), dict) else decoded
    return {"session_id": session_id, "mtime": mtime, "data": inner}


class ThreadedReads:
    """The SDK's asynchronous ``SessionStore`` reads and deletes of a store whose work is synchronous
    (SQLite, psycopg's pool): each runs the store's own method in a worker thread, so the event loop
    never waits on a disk or a socket. A store defines ``load_sync``, ``_list_sessions``,
    ``_list_session_summaries``, ``_delete``, ``_list_subkeys`` and ``close`` (``with`` closes it)."""

    def load_sync(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        raise NotImplementedError

    def _list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        raise NotImplementedError

    def _list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        raise NotImplementedError

    def _delete(self, key: SessionKey) -> None:
        raise NotImplementedError

    def _list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """Every entry of ``key`` in append order, or ``None`` if nothing was ever stored under it."""
        return await asyncio.to_thread(self.load_sync, key)

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """Main transcripts of ``project_key`` (subagent transcripts excluded), with their mtime."""
        return await asyncio.to_thread(self._list_sessions, project_key)

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """Summary sidecars of ``project_key``'s main transcripts, as ``fold_session_summary`` left them."""
        return await asyncio.to_thread(self._list_session_summaries, project_key)

    async def delete(self, key: SessionKey) -> None:
        """Remove ``key``; a main key takes its subagent transcripts and its summary with it."""
        await asyncio.to_thread(self._delete, key)

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """Subpaths stored under a session (its subagent transcripts), sorted."""
        return await asyncio.to_thread(self._list_subkeys, key)
