"""trim() and expire(): resumed context gets smaller, and nothing is lost.

Trimming spills large old tool results to ``<workspace>/.flower/spill/<sha256[:16]>.txt`` and leaves a
pointer, by the budget rule (the default) or the reference's count rule (``keep_recent``); expiry marks
old results of read-only Bash glances stale. Both keep every tool_result block.
"""

from __future__ import annotations

import copy
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from flower_magic.stores.resume import resume_view
from flower_magic.stores.trim import (
    BUDGET_SHARE,
    CHARS_PER_TOKEN,
    REFERENCE_KEEP_RECENT,
    SPILL_POINTER,
    EphemeralPolicy,
    TrimPolicy,
    budget_for_line,
    expire,
    sized,
    spill_path,
    trim,
    turn_start,
)

Entry = dict[str, Any]
COUNT = TrimPolicy(keep_recent=REFERENCE_KEEP_RECENT)  # the reference's rule, kept for compatibility


class Session:
    """A main chain of tool calls and their results, in CLI 2.1.332's shapes (one block per entry)."""

    def __init__(self) -> None:
        self.entries: list[Entry] = [
            {"type": "user", "uuid": "u-0", "parentUuid": None, "message": {"role": "user", "content": "go"}}
        ]
        self.n = 0

    def _add(self, type_: str, message: dict[str, Any], **fields: Any) -> str:
        self.n += 1
        uid = f"u-{self.n}"
        self.entries.append(
            {"type": type_, "uuid": uid, "parentUuid": self.entries[-1]["uuid"], "message": message, **fields}
        )
        return uid

    def call(self, tool: str, content: Any, *, command: str = "", is_error: bool | None = None, **fields: Any) -> str:
        """A tool call and its result; returns the result entry's uuid."""
        tid = f"toolu_{self.n:03d}"
        tool_input = {"command": command} if tool == "Bash" else {"file_path": "/ws/f.txt"}
        self._add(
            "assistant",
            {
                "id": f"msg_{self.n}",
                "role": "assistant",
                "content": [{"type": "tool_use", "id": tid, "name": tool, "input": tool_input}],
            },
        )
        block: dict[str, Any] = {"tool_use_id": tid, "type": "tool_result", "content": content}
        if is_error is not None:
            block["is_error"] = is_error
        return self._add("user", {"role": "user", "content": [block]}, **fields)

    def answer(self, text: str = "done") -> str:
        """The model's closing text, so that the session does not end on a user entry (which prune seals)."""
        return self._add(
            "assistant", {"id": f"msg_{self.n}", "role": "assistant", "content": [{"type": "text", "text": text}]}
        )


def results_of(entries: list[Entry]) -> list[dict[str, Any]]:
    return [
        b
        for e in entries
        if isinstance(e.get("message", {}).get("content"), list)
        for b in e["message"]["content"]
        if b.get("type") == "tool_result"
    ]


def big(i: int, size: int = 2400) -> str:
    """A large, distinct result; non-ASCII, tabs and newlines so that byte-identity means something."""
    head = f"{i}\tRésultat n°{i} — 结果 ✓ 🌸\r\n"
    return (head + "x" * size)[:size]


def thirty_large(session: Session) -> list[str]:
    texts = [big(i, 2000 + i) for i in range(30)]
    for i, t in enumerate(texts):
        session.call("Read" if i % 2 else "Bash", t, command="cat big.log")
    return texts


def skeleton(entries: list[Entry]) -> list[tuple[str | None, str | None, Any]]:
    """Every tool_result block's identity: which entry, which call, and its is_error."""
    return [
        (e.get("uuid"), b.get("tool_use_id"), b.get("is_error", "absent"))
        for e in entries
        if isinstance(e.get("message", {}).get("content"), list)
        for b in e["message"]["content"]
        if b.get("type") == "tool_result"
    ]


def spilled(workspace: Path) -> dict[str, bytes]:
    folder = workspace / ".flower" / "spill"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.exists() else {}


# -- trimming ---------------------------------------------------------------------------------------


def test_count_rule_keeps_the_newest_twenty_and_spills_the_rest_byte_for_byte(tmp_path: Path) -> None:
    session = Session()
    texts = thirty_large(session)
    before = copy.deepcopy(session.entries)

    out, report = trim(session.entries, COUNT, tmp_path)

    assert session.entries == before, "the input was modified"
    contents = [b["content"] for b in results_of(out)]
    assert contents[10:] == texts[10:]
    for text, content in zip(texts[:10], contents[:10], strict=True):
        name = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16] + ".txt"
        assert content == SPILL_POINTER.format(n=len(text), path=f".flower/spill/{name}")
    assert spilled(tmp_path) == {
        hashlib.sha256(t.encode("utf-8")).hexdigest()[:16] + ".txt": t.encode("utf-8") for t in texts[:10]
    }
    assert report["cleared"] == 10 and report["kept"] == 20 and report["unspilled"] == 0
    assert report["chars_saved"] == sum(len(t) for t in texts[:10]) - sum(len(c) for c in contents[:10])
    holders = [e["uuid"] for e in session.entries if e["type"] == "user" and isinstance(e["message"]["content"], list)]
    assert report["rewritten"] == holders[:10]
    assert skeleton(out) == skeleton(session.entries), "every tool_result block stays, with its id and is_error"


def test_spill_file_is_written_once_and_shared_by_equal_results(tmp_path: Path) -> None:
    session = Session()
    same = big(7, 5000)
    session.call("Bash", same, command="cat a.log")
    session.call("Bash", same, command="cat a.log")
    session.call("Bash", big(8, 3000), command="cat b.log")
    policy = TrimPolicy(keep_recent=1)

    trim(session.entries, policy, tmp_path)
    path = spill_path(tmp_path, same, policy)
    first = os.stat(path)
    out, _ = trim(session.entries, policy, tmp_path)
    again = os.stat(path)

    assert list(spilled(tmp_path)) == [path.name]
    assert (again.st_ino, again.st_mtime_ns) == (first.st_ino, first.st_mtime_ns), "rewritten"
    assert [b["content"] for b in results_of(out)][:2] == [
        SPILL_POINTER.format(n=5000, path=f".flower/spill/{path.name}")
    ] * 2


def test_write_false_gives_the_same_view_and_writes_nothing(tmp_path: Path) -> None:
    session = Session()
    thirty_large(session)
    viewer = tmp_path / "viewer"
    writer = tmp_path / "writer"

    seen, seen_report = trim(session.entries, COUNT, viewer, write=False)
    written, written_report = trim(session.entries, COUNT, writer)

    assert not viewer.exists()
    assert seen == written and seen_report == written_report


def test_compact_summaries_meta_entries_images_and_small_results_are_left_alone(tmp_path: Path) -> None:
    session = Session()
    summary = session.call("Bash", big(1, 9000), command="cat x", isCompactSummary=True)
    meta = session.call("Bash", big(2, 9000), command="cat x", isMeta=True)
    image = [{"type": "text", "text": big(3, 9000)}, {"type": "image", "source": {"type": "base64", "data": "iVBO"}}]
    session.call("Read", image)
    session.call("Bash", "x" * 1999, command="cat small")
    for i in range(3):
        session.call("Bash", big(10 + i), command="cat y")
    before = copy.deepcopy(session.entries)

    out, report = trim(session.entries, TrimPolicy(keep_recent=0), tmp_path)

    assert report["cleared"] == 3 and report["rewritten"] == [e["uuid"] for e in session.entries[-5::2]]
    assert out[:-6] == before[:-6]
    assert {summary, meta} <= {e["uuid"] for e in out[:-6]}
    assert len(spilled(tmp_path)) == 3


def test_text_block_lists_spill_their_joined_text(tmp_path: Path) -> None:
    session = Session()
    parts = [big(1, 1500), big(2, 1500)]
    session.call("Read", [{"type": "text", "text": p} for p in parts])

    out, _ = trim(session.entries, TrimPolicy(keep_recent=0), tmp_path)

    [content] = [b["content"] for b in results_of(out)]
    assert isinstance(content, str) and content.startswith("[")
    assert list(spilled(tmp_path).values()) == ["\n".join(parts).encode("utf-8")]


def test_a_spill_that_cannot_be_written_leaves_the_result_in_context(tmp_path: Path) -> None:
    """Guards against a pointer to a file that does not exist (the result would be gone from context),
    and against a load() that raises because the disk is full or read-only."""
    (tmp_path / ".flower").mkdir()
    (tmp_path / ".flower" / "spill").write_text("not a folder")
    session = Session()
    texts = [big(i) for i in range(3)]
    for t in texts:
        session.call("Bash", t, command="cat z")

    out, report = trim(session.entries, TrimPolicy(keep_recent=1), tmp_path)

    assert [b["content"] for b in results_of(out)] == texts
    assert report["cleared"] == 0 and report["unspilled"] == 2 and report["kept"] == 3


def test_trim_disabled_or_within_the_budget_changes_nothing(tmp_path: Path) -> None:
    session = Session()
    for i in range(20):
        session.call("Bash", big(i), command="cat q")
    out, report = trim(session.entries, COUNT, tmp_path)
    assert out == session.entries and report["cleared"] == 0 and not spilled(tmp_path)
    view = resume_view(session.entries, workspace=tmp_path, trim=False, write=True)
    assert view.report["cleared"] == 0 and not spilled(tmp_path)


def test_resume_view_spills_only_when_asked_to_write(tmp_path: Path) -> None:
    session = Session()
    texts = thirty_large(session)
    session.answer()
    viewer = resume_view(session.entries, workspace=tmp_path, trim=COUNT, write=False)
    assert not spilled(tmp_path)
    resumed = resume_view(session.entries, workspace=tmp_path, trim=COUNT, write=True)
    assert viewer.entries == resumed.entries
    assert len(spilled(tmp_path)) == 10 and set(spilled(tmp_path).values()) == {t.encode() for t in texts[:10]}
    assert resumed.report["cleared"] == 10


# -- expiry -----------------------------------------------------------------------------------------


def test_only_old_small_bash_glances_expire_with_their_command_and_age() -> None:
    session = Session()
    glances = [session.call("Bash", f"On branch main {i}", command="git status") for i in range(8)]
    session.call("Bash", "3 passed", command="pytest -q")
    session.call("Read", "1\tsecret")
    session.call("Bash", "y" * 2001, command="cat long.log")
    before = copy.deepcopy(session.entries)

    out, rewritten = expire(session.entries, EphemeralPolicy(keep_recent=6))

    assert session.entries == before, "the input was modified"
    assert rewritten == glances[:2]
    contents = [b["content"] for b in results_of(out)]
    policy = EphemeralPolicy()
    assert contents[:2] == [policy.placeholder("git status", 8), policy.placeholder("git status", 7)]
    assert "`git status`" in contents[0] and "8" in contents[0]
    assert contents[2:] == [b["content"] for b in results_of(session.entries)][2:]
    assert skeleton(out) == skeleton(session.entries)


def test_expiry_skips_protected_entries_images_and_writing_commands() -> None:
    session = Session()
    session.call("Bash", "meta", command="ls", isMeta=True)
    session.call("Bash", "summary", command="ls", isCompactSummary=True)
    session.call("Bash", [{"type": "image", "source": {"type": "base64", "data": "iVBO"}}], command="ls")
    session.call("Bash", "done", command="ls > files.txt")
    session.call("Bash", "a.txt", command="ls")
    session.call("Bash", "b.txt", command="ls")

    out, rewritten = expire(session.entries, EphemeralPolicy(keep_recent=1))

    assert rewritten == [session.entries[-3]["uuid"]]
    assert out[:-3] == session.entries[:-3] and out[-1] == session.entries[-1]


def test_expired_text_is_a_list_of_text_blocks_too_and_is_error_is_kept() -> None:
    session = Session()
    session.call("Bash", [{"type": "text", "text": "fatal: not a git repository"}], command="git log", is_error=True)
    session.call("Bash", "x", command="git log")

    out, _ = expire(session.entries, EphemeralPolicy(keep_recent=1))

    first = results_of(out)[0]
    assert first["content"] == EphemeralPolicy().placeholder("git log", 2) and first["is_error"] is True


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("git status", "`git status`"),
        ("git status\ngit log -1", "`git status`"),
        ("   ls -la   ", "`ls -la`"),
        ("grep -rn " + "x" * 80, "`grep -rn " + "x" * 51 + "`"),
        ("", "``"),
    ],
)
def test_placeholder_shows_the_first_line_cut_to_sixty_characters_and_the_age(command: str, shown: str) -> None:
    text = EphemeralPolicy().placeholder(command, 4)
    assert shown in text and "4" in text
    assert len(shown) <= 62


def test_expiry_disabled_in_resume_view_changes_nothing(tmp_path: Path) -> None:
    session = Session()
    for i in range(10):
        session.call("Bash", f"clean {i}", command="git status")
    session.answer()
    assert resume_view(session.entries, workspace=tmp_path, ephemeral=False).entries == session.entries
    assert resume_view(session.entries, workspace=tmp_path).report["expired"] == 4


# -- the budget rule (issue 13) ---------------------------------------------------------------------


def _budget(chars: int) -> TrimPolicy:
    assert chars % CHARS_PER_TOKEN == 0
    return TrimPolicy(budget_tokens=chars // CHARS_PER_TOKEN)


def test_budget_keeps_the_newest_stretch_that_fits_and_spills_the_rest(tmp_path: Path) -> None:
    session = Session()
    texts = [big(i, size) for i, size in enumerate([2100, 3000, 9000, 4500, 2400, 3000])]
    for t in texts:
        session.call("Read", t)
    session.answer()

    out, report = trim(session.entries, _budget(12000), tmp_path)

    contents = [b["content"] for b in results_of(out)]
    # Newest first: 3000 + 2400 + 4500 = 9900 fit; 9000 would not, so it and everything older go,
    # though 2100 alone would still fit (what stays is the newest stretch, not a packing).
    assert contents[3:] == texts[3:]
    assert all(c.startswith("[") and "spill" in c for c in contents[:3])
    assert report["cleared"] == 3 and report["kept"] == 3 and report["protected"] == 0
    assert spilled(tmp_path) == {spill_path(tmp_path, t, TrimPolicy()).name: t.encode("utf-8") for t in texts[:3]}


def test_the_turn_in_progress_is_never_trimmed_by_the_rule_only_by_force(tmp_path: Path) -> None:
    """A resume after an interrupt, an outage or a kill: the model is in the middle of using these."""
    session = Session()
    old = [big(i, 5000) for i in range(3)]
    for t in old:
        session.call("Read", t)
    session.answer()
    session._add("user", {"role": "user", "content": "下一轮"})
    current = [big(10 + i, 6000) for i in range(3)]
    for t in current:
        session.call("Read", t)  # no answer after them: the turn is in progress

    out, report = trim(session.entries, _budget(3000), tmp_path)
    contents = [b["content"] for b in results_of(out)]
    assert contents[3:] == current and report["protected"] == 3
    assert all("spill" in c for c in contents[:3])

    ids = {b["tool_use_id"] for b in results_of(session.entries)[3:5]}
    forced, report = trim(session.entries, _budget(3000), tmp_path, force=ids)
    contents = [b["content"] for b in results_of(forced)]
    assert contents[5] == current[2] and all("spill" in c for c in contents[:5])
    assert set(report["spilled"]) >= ids and report["protected"] == 1


@pytest.mark.parametrize(
    ("tail", "in_progress"),
    [
        ({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "好"}]}}, False),
        (
            {
                "type": "assistant",
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "好"}],
                    "stop_reason": "end_turn",
                },
            },
            False,
        ),
        (  # cut while streaming
            {
                "type": "assistant",
                "message": {"role": "assistant", "content": [{"type": "text", "text": "我先"}], "stop_reason": None},
            },
            True,
        ),
        ({"type": "user", "message": {"role": "user", "content": "[Request interrupted by user]"}}, True),
        (
            {
                "type": "assistant",
                "isApiErrorMessage": True,
                "message": {"role": "assistant", "model": "<synthetic>", "content": [{"type": "text", "text": "API"}]},
            },
            True,
        ),
        ({"type": "attachment", "attachment": {"type": "task_reminder"}}, True),
    ],
)
def test_what_counts_as_a_turn_in_progress(tail: Entry, in_progress: bool) -> None:
    session = Session()
    session.call("Read", big(1))
    session.entries.append({"uuid": "tail", "parentUuid": session.entries[-1]["uuid"], **tail})
    assert (turn_start(session.entries) == 0) == in_progress


def test_the_budget_is_a_share_of_the_hand_off_line_unless_a_policy_names_its_own() -> None:
    """The rule scales with the window; a budget or the count rule given by the caller is kept."""
    assert budget_for_line(150_000) == 150_000 * BUDGET_SHARE and budget_for_line(750_000) == 5 * budget_for_line(
        150_000
    )
    assert sized(True, 150_000) == TrimPolicy(budget_tokens=budget_for_line(150_000))
    assert sized(False, 150_000).enabled is False
    assert sized(TrimPolicy(budget_tokens=123), 150_000).budget_tokens == 123
    count = TrimPolicy(keep_recent=REFERENCE_KEEP_RECENT)
    assert sized(count, 150_000) == count and count.budget_tokens is None
    assert TrimPolicy(budget_tokens=100).budget_chars() == 100 * CHARS_PER_TOKEN


def test_the_store_sizes_its_budget_from_the_line_it_is_given(tmp_path: Path) -> None:
    from flower_magic.stores.resume import PruningSessionStore

    small = PruningSessionStore(tmp_path / "a.db", workspace=tmp_path, trim=True, line=10_000)
    large = PruningSessionStore(tmp_path / "b.db", workspace=tmp_path, trim=True, line=750_000)
    try:
        assert small.trim_policy.budget_tokens == budget_for_line(10_000)
        assert large.trim_policy.budget_tokens == budget_for_line(750_000)
        assert small.trims and large.trims
    finally:
        small.close()
        large.close()
