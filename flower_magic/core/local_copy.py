"""The CLI's own transcript files, as a second source for what the store may have missed.

The SDK mirrors transcript entries into sessions.db a moment after the CLI writes them to its local
JSONL file (about 0.1 s with eager flushing). A process killed inside that window leaves the newest
entries — an answered question, a tool result — only in the local file: in ``CLAUDE_CONFIG_DIR``
for a session's first process, or in the ``claude-resume-*`` folder a store-backed resume
materialises (which a ``kill -9`` never gets to delete). ``backfill`` copies what the store lacks
back into it before a resume, so no answer is lost and nobody is asked twice.

Guarantees:
    - Only entries the store does not have (by ``uuid``) are appended, in file order, after the
      store's own; entries the pruning layer made up on an earlier resume (``seal-``/``heal-``) and
      the CLI's local-only request records are never copied.
    - It never raises: an unreadable file is skipped.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from flower_magic.core.entries import is_made_up
from flower_magic.core.project import local_transcript, project_key

LOCAL_ONLY_TYPES = frozenset({"api-request", "api-request-shape", "api-request-blob"})  # never mirrored
RESUME_DIR_GLOB = "claude-resume-*"
NOTICE_PREFIX = "[Request interrupted"  # the CLI's own interrupt notices are not prompts


def candidate_files(workspace: Path, session_id: str, env: dict[str, str]) -> list[Path]:
    """The local transcript copies of a session, oldest first."""
    found = [local_transcript(workspace, session_id, env)]
    pk = project_key(workspace)
    with contextlib.suppress(OSError):
        found += Path(tempfile.gettempdir()).glob(f"{RESUME_DIR_GLOB}/projects/{pk}/{session_id}.jsonl")
    existing = [p for p in found if p.is_file()]
    return sorted(existing, key=lambda p: p.stat().st_mtime)


def read_entries(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if isinstance(entry, dict):
                        out.append(entry)
    except OSError:
        return []
    return out


def missing_entries(stored: list[dict[str, Any]], local: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Local entries with a uuid the store lacks (and no made-up or local-only ones)."""
    have = {e.get("uuid") for e in stored if e.get("uuid")}
    out = []
    for entry in local:
        uid = entry.get("uuid")
        if not isinstance(uid, str) or not uid or uid in have or is_made_up(uid):
            continue
        if entry.get("type") in LOCAL_ONLY_TYPES:
            continue
        have.add(uid)
        out.append(entry)
    return out


async def backfill(store: Any, workspace: Path, session_id: str, env: dict[str, str]) -> int:
    """Append to the store what the local copies of ``session_id`` hold and it lacks. Returns how many."""
    files = candidate_files(workspace, session_id, env)
    if not files:
        return 0
    key = {"project_key": project_key(workspace), "session_id": session_id}
    try:
        stored = store.load_sync(key) or []
        added = 0
        for path in files:
            extra = missing_entries(stored, read_entries(path))
            if extra:
                await store.append(key, extra)
                stored += extra
                added += len(extra)
        return added
    except Exception:
        return 0


def has_answer(entries: list[dict[str, Any]]) -> bool:
    """The transcript holds at least one real model reply (not just the prompt)."""
    for entry in entries:
        msg = entry.get("message")
        if entry.get("type") == "assistant" and isinstance(msg, dict) and msg.get("model") != "<synthetic>":
            return True
    return False


def has_prompt(entries: list[dict[str, Any]]) -> bool:
    """The transcript holds a prompt the model was given: a user entry with text of its own (not a tool
    result, not the CLI's meta lines, not an interrupt notice)."""
    for entry in entries:
        if entry.get("type") != "user" or entry.get("isMeta") or entry.get("isSidechain"):
            continue
        msg = entry.get("message")
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, str):
            texts = [content]
        elif isinstance(content, list):
            texts = [str(b.get("text") or "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        else:
            continue
        if any(t.strip() and not t.lstrip().startswith(NOTICE_PREFIX) for t in texts):
            return True
    return False


def set_aside_local_copy(workspace: Path, session_id: str, env: dict[str, str]) -> None:
    """Rename the CLI's local copy of a session so a new session can start under the same id: the CLI
    refuses ``--session-id`` for an id it has a local transcript of ("already in use")."""
    path = local_transcript(workspace, session_id, env)
    if path.exists():
        with contextlib.suppress(OSError):
            path.rename(path.with_name(f"{path.name}.stale-{time.strftime('%Y%m%d-%H%M%S')}"))
