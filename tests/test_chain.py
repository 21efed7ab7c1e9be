"""The stored chain stays walkable whatever a resume copy adds (issue 10, build 1; acceptance b).

The failure this guards: a resume copy ended in a seal with a random id; the CLI wrote its next entry
under the seal; the store kept that entry, whose parent never existed; the next load walked back from
the leaf, stopped there, and the model lost every earlier turn.
"""

from __future__ import annotations

import copy
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flower_magic.core.entries import is_made_up, made_up_id, stands_for
from flower_magic.stores.chain import dangling, repair, to_stored
from flower_magic.stores.resume import PruningSessionStore, resume_view
from flower_magic.stores.sqlite import SqliteSessionStore
from tests.test_prune import Transcript, transcripts

Entry = dict[str, Any]
KEY = {"project_key": "-work-ws", "session_id": "5f0c2a44-7d1e-4c55-9a4e-2b1f6e0d9c31"}


def _tail(entries: list[Entry]) -> str:
    """The entry the CLI writes its next line under: the newest chained main-thread entry."""
    return next(
        str(e["uuid"]) for e in reversed(entries) if e.get("uuid") and "parentUuid" in e and not e.get("isSidechain")
    )


def _cli_turn(view: list[Entry], n: int, said: str) -> list[Entry]:
    """What the CLI writes after resuming ``view``: a prompt under its tail, then an answer."""
    prompt = {
        "type": "user",
        "uuid": f"p-{n:03d}",
        "parentUuid": _tail(view),
        "isSidechain": False,
        "message": {"role": "user", "content": said},
    }
    answer = {
        "type": "assistant",
        "uuid": f"a-{n:03d}",
        "parentUuid": prompt["uuid"],
        "isSidechain": False,
        "message": {"role": "assistant", "model": "claude", "content": [{"type": "text", "text": "ok"}]},
    }
    return [prompt, answer]


def _walk(entries: list[Entry]) -> list[str]:
    """uuids from the newest chained entry back to the root, as the CLI walks them."""
    by_id = {e["uuid"]: e for e in entries if e.get("uuid")}
    out: list[str] = []
    node: Any = _tail(entries)
    while isinstance(node, str) and node in by_id and node not in out:
        out.append(node)
        node = by_id[node].get("parentUuid")
    return out


# -- ids ------------------------------------------------------------------------------------------


def test_a_made_up_id_names_what_it_hangs_from() -> None:
    real = "8996ea51-e1ca-4f4e-9d6b-1c1b3f0e2a77"
    seal = made_up_id("seal", made_up_id("heal", real))
    assert is_made_up(seal) and not is_made_up(real) and not is_made_up(None)
    assert stands_for(seal) == real
    # 0.1.0 and the original runtime used 12 random hex characters: nothing to read from them.
    assert stands_for("seal-804e946ab34f") is None
    assert stands_for("heal-0123456789ab") is None


def test_to_stored_repoints_links_to_made_up_entries_and_nothing_else() -> None:
    real = "14feae82-f3cb-42fb-a7ff-8f58d129ec0d"
    batch = [
        {"type": "user", "uuid": "p2", "parentUuid": f"seal-{real}", "message": {"content": "two"}},
        {"type": "last-prompt", "leafUuid": f"seal-heal-{real}"},
        {"type": "user", "uuid": "p3", "parentUuid": "seal-804e946ab34f"},  # old random: left for repair
        {"type": "assistant", "uuid": "a2", "parentUuid": "p2"},
    ]
    before = copy.deepcopy(batch)

    out = to_stored(batch)

    assert batch == before, "the input was modified"
    assert out[0] == {**batch[0], "parentUuid": real}
    assert out[1] == {**batch[1], "leafUuid": real}
    assert out[2] is batch[2] and out[3] is batch[3]
    assert to_stored(out) == out


def test_repair_brings_back_the_turns_behind_an_old_random_seal() -> None:
    t = Transcript()
    t.prompt("one")
    t.attachment()
    leaf = t.tip
    t.tip = "seal-804e946ab34f"  # how 0.1.0 stored the next prompt: under a seal that was never stored
    t.prompt("two")
    t.assistant({"type": "text", "text": "answer"})
    assert dangling(t.entries)
    before = copy.deepcopy(t.entries)

    fixed, changes = repair(t.entries)

    assert t.entries == before
    assert dangling(fixed) == []
    assert [(c.old, c.new) for c in changes] == [("seal-804e946ab34f", leaf)]
    assert len(_walk(fixed)) == len([e for e in fixed if e.get("uuid")])
    assert repair(fixed) == (fixed, [])


def test_repair_leaves_a_walkable_chain_alone() -> None:
    t = Transcript()
    t.prompt("one")
    t.assistant({"type": "text", "text": "hi"})
    t.last_prompt()
    fixed, changes = repair(t.entries)
    assert fixed is t.entries and changes == []


# -- the invariant over sequences of resumes ------------------------------------------------------


@pytest.mark.filterwarnings("ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning")
@settings(max_examples=300, deadline=None, database=None)
@given(start=transcripts(), cycles=st.lists(st.sampled_from(("turn", "killed", "outage")), min_size=1, max_size=6))
def test_property_every_prompt_stays_reachable_after_any_number_of_resumes(
    start: Transcript, cycles: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Resume, let the CLI write under the copy's tail, store what it wrote, resume again: after every
    cycle the stored chain has no dangling parent and every prompt ever said is on the walk back."""
    stored = copy.deepcopy(start.entries)
    workspace = tmp_path_factory.mktemp("ws")
    said = [e["uuid"] for e in stored if start.kind.get(e.get("uuid", "")) == "prompt"]
    for n, what in enumerate(cycles):
        view = resume_view(stored, workspace=workspace, write=False).entries
        batch = _cli_turn(view, n, f"prompt {n}")
        if what == "killed":
            batch = batch[:1]  # the model never answered: the stored leaf is a user entry again
        elif what == "outage":
            batch[1]["isApiErrorMessage"] = True
            batch[1]["message"]["model"] = "<synthetic>"
        stored += to_stored(batch)
        said.append(batch[0]["uuid"])

        assert dangling(stored) == [], f"cycle {n}: a stored entry names a parent that does not exist"
        walked = set(_walk(stored))
        assert [p for p in said if p not in walked] == [], f"cycle {n}: a prompt fell off the chain"
        assert not any(is_made_up(e.get("uuid")) for e in stored)


# -- the store --------------------------------------------------------------------------------------


def _legacy_db(path: Path) -> tuple[list[Entry], str]:
    """A sessions.db as 0.1.0 left it: prompt two stored under a seal that was never stored."""
    t = Transcript()
    t.queue("enqueue")
    t.prompt("prompt one")
    t.attachment()
    real = t.tip
    t.tip = "seal-804e946ab34f"
    t.prompt("prompt two")
    t.assistant({"type": "text", "text": "answer two"})
    with SqliteSessionStore(path) as raw:
        raw._append(KEY, t.entries)  # type: ignore[arg-type]
    assert real is not None
    return t.entries, real


@pytest.mark.anyio
async def test_load_repairs_an_old_session_and_fixes_it_where_it_lies(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    entries, real = _legacy_db(db)
    assert len(_walk(entries)) < len([e for e in entries if e.get("uuid")])  # broken as stored

    store = PruningSessionStore(db, workspace=tmp_path)
    try:
        view = await store.load(KEY)  # type: ignore[arg-type]
    finally:
        store.close()

    assert view is not None
    texts = [str((e.get("message") or {}).get("content")) for e in view if e.get("type") == "user"]
    assert "prompt one" in texts and "prompt two" in texts
    assert store.last_report["relinked"] == 1
    # Fixed in the file too: a reader without this repair (the original runtime) walks it whole.
    with SqliteSessionStore(db, readonly=True) as raw:
        again = raw.load_sync(KEY)  # type: ignore[arg-type]
    assert again is not None
    assert dangling(again) == []  # type: ignore[arg-type]
    assert next(e for e in again if e.get("message", {}).get("content") == "prompt two")["parentUuid"] == real
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    con.close()


@pytest.mark.anyio
async def test_append_stores_the_real_parent_of_an_entry_written_under_a_seal(tmp_path: Path) -> None:
    t = Transcript()
    t.prompt("prompt one")  # a user leaf: the copy ends in a seal
    store = PruningSessionStore(tmp_path / "sessions.db", workspace=tmp_path)
    try:
        await store.append(KEY, t.entries)  # type: ignore[arg-type]
        view = await store.load(KEY)  # type: ignore[arg-type]
        assert view is not None and is_made_up(view[-1]["uuid"])
        await store.append(KEY, _cli_turn(view, 1, "prompt two"))  # type: ignore[arg-type]
        stored = store.load_sync(KEY)
    finally:
        store.close()
    assert stored is not None
    assert dangling(stored) == []  # type: ignore[arg-type]
    assert not any(is_made_up(e.get("parentUuid")) for e in stored)
