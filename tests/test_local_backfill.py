"""What the CLI wrote locally but the store missed is taken back before a resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flower_magic.core.local_copy import backfill, has_answer, missing_entries, set_aside_local_copy
from flower_magic.core.project import local_transcript, project_key
from flower_magic.stores.sqlite import SqliteSessionStore

pytestmark = pytest.mark.anyio
SID = "11111111-2222-4333-8444-555555555555"


def _entry(uid: str, kind: str = "user", **extra: object) -> dict[str, object]:
    return {"type": kind, "uuid": uid, "parentUuid": None, "message": {"role": kind, "content": uid}, **extra}


def test_missing_entries_skips_known_made_up_and_local_only() -> None:
    stored = [_entry("a"), _entry("b", "assistant")]
    local = [
        _entry("a"),
        _entry("b", "assistant"),
        _entry("c"),
        _entry("seal-1", "assistant"),
        _entry("heal-2"),
        _entry("d", "api-request"),
        {"type": "queue-operation"},
        _entry("c"),
    ]
    assert [e["uuid"] for e in missing_entries(stored, local)] == ["c"]


async def test_backfill_appends_the_unflushed_tail(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {"CLAUDE_CONFIG_DIR": str(tmp_path / "config")}
    store = SqliteSessionStore(tmp_path / "sessions.db")
    key = {"project_key": project_key(ws), "session_id": SID}
    await store.append(key, [_entry("p1"), _entry("a1", "assistant", message={"model": "m", "content": []})])
    local = local_transcript(ws, SID, env)
    local.parent.mkdir(parents=True)
    lines = [_entry("p1"), _entry("a1", "assistant"), _entry("q-answer"), _entry("r1", "api-request")]
    local.write_text("\n".join(json.dumps(e) for e in lines) + "\nnot json\n", encoding="utf-8")
    assert await backfill(store, ws, SID, env) == 1
    assert [e["uuid"] for e in store.load_sync(key) or []] == ["p1", "a1", "q-answer"]
    assert await backfill(store, ws, SID, env) == 0  # nothing twice
    assert has_answer(store.load_sync(key) or [])
    set_aside_local_copy(ws, SID, env)
    assert not local.exists() and list(local.parent.glob(f"{SID}.jsonl.stale-*"))
    store.close()
