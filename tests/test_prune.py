"""prune(): what a resume must not send, on the transcript shapes CLI 2.1.332 really writes.

The reference's ``denial`` cases first, then each 2.1.332 shape (sdk-notes A5), then a property test
over generated transcripts, then the store that applies it on ``load()``.
"""

from __future__ import annotations

import copy
import gc
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flower_magic.stores.prune import (
    SEAL_TEXT,
    SYNTHETIC_MODEL,
    PrunePolicy,
    PruneResult,
    denial_ids,
    is_api_error,
    prune,
    relink,
)
from flower_magic.stores.resume import PruningSessionStore, resume_view
from flower_magic.stores.trim import EphemeralPolicy, TrimPolicy

Entry = dict[str, Any]

SESSION = "5f0c2a44-7d1e-4c55-9a4e-2b1f6e0d9c31"
CWD = "/work/ws"

# Exact texts written by CLI 2.1.332 (sdk-notes A5).
ECONNREFUSED = "API Error: Connection refused — a firewall or proxy may be blocking it (ECONNREFUSED)"
OVERLOADED = (
    "API Error: 529 Overloaded. This is a server-side issue, usually temporary — try again in a moment. "
    "If it persists, check your inference gateway (127.0.0.1:41234)."
)
DROPPED = "API Error: Connection dropped (ECONNRESET). Check the gateway set in ANTHROPIC_BASE_URL, then try again."
NEEDS_APPROVAL = "This command requires approval"
TOUCH_NEEDS_APPROVAL = (
    f"touch in '{CWD}/created.txt' needs approval. The path is inside the working directories for this session "
    f"('{CWD}'), and Claude Code asks before a shell command creates, changes or removes files there."
)
WRITE_NOT_GRANTED = f"Claude requested permissions to write to {CWD}/notes.md, but you haven't granted it yet."
POLICY_DENIED = "Denied by test policy"
DONT_ASK = (
    "Permission to use Bash has been denied because Claude Code is running in don't ask mode. IMPORTANT: You "
    "*may* attempt to accomplish this action using other tools … Let the user decide how to proceed."
)
HOOK_DENIED = "PreToolUse:Bash hook error: blocked by hook"
DISALLOWED = (
    "<tool_use_error>Error: No such tool available: Bash. Bash is disabled for this session, "
    "in subagents as well as here.</tool_use_error>"
)
INTERRUPTED = (
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a file edit, "
    "the new_string was NOT written to the file). STOP what you are doing and wait for the user to tell you how to "
    "proceed. Correction to the text above: this call was stopped while running, not refused before it ran. It may "
    "have run in part or in full, and its changes may have been written. No permission prompt was involved. Work "
    "it started elsewhere (a remote command, a background process) may still be running, so check before starting "
    "the same work again. The instruction to stop and wait still stands."
)
TOOL_INTERRUPT_NOTICE = "[Request interrupted by user for tool use]"
STREAM_INTERRUPT_NOTICE = "[Request interrupted by user]"
DENIALS = {
    "user-rejected": (NEEDS_APPROVAL, TOUCH_NEEDS_APPROVAL, WRITE_NOT_GRANTED),
    "permission-rule": (POLICY_DENIED, DONT_ASK, HOOK_DENIED),
}
OUTAGE_DEBRIS = ("API Error", "ECONNREFUSED", "ECONNRESET", "Connection refused", "No response requested")


class Transcript:
    """Builds a main-chain transcript the way CLI 2.1.332 writes it, and records what each entry is.

    Attributes:
        entries: the lines, in file order.
        kind: uuid -> what the entry is (``prompt``, ``block``, ``result``, ``denial``, ``interrupted``,
            ``notice``, ``api_error``, ``retry``, ``attachment``).
        denied: tool_use ids of denied calls, oldest first.
        holder: tool_use id -> uuids of the entries holding its call and its result.
    """

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.kind: dict[str, str] = {}
        self.denied: list[str] = []
        self.holder: dict[str, list[str]] = {}
        self.tip: str | None = None
        self._n = 0
        self._msg = 0

    def __repr__(self) -> str:
        # What hypothesis prints for a failing example: one line per entry.
        lines = []
        for entry in self.entries:
            uid = entry.get("uuid")
            content = (entry.get("message") or {}).get("content")
            lines.append(f"  {uid or '-'} {self.kind.get(uid or '', entry['type'])}: {json.dumps(content)[:80]}")
        return "Transcript(\n" + "\n".join(lines) + f"\n  denied={self.denied})"

    def _link(self, type_: str, kind: str, **fields: Any) -> Entry:
        self._n += 1
        uid = f"u-{self._n:04d}"
        entry: Entry = {
            "parentUuid": self.tip,
            "isSidechain": False,
            "type": type_,
            "uuid": uid,
            "timestamp": f"2026-03-01T10:{self._n // 60 % 60:02d}:{self._n % 60:02d}.000Z",
            "sessionId": SESSION,
            "cwd": CWD,
            "version": "2.1.332",
            "gitBranch": "main",
            "userType": "external",
            "entrypoint": "sdk-py",
            **fields,
        }
        self.entries.append(entry)
        self.kind[uid] = kind
        self.tip = uid
        return entry

    def prompt(self, text: str) -> str:
        return self._link(
            "user",
            "prompt",
            message={"role": "user", "content": text},
            promptId=f"p-{self._n}",
            permissionMode="default",
            promptSource="sdk",
        )["uuid"]

    def attachment(self, what: str = "date") -> str:
        return self._link("attachment", "attachment", attachment={"type": what, "content": "2026-03-01"})["uuid"]

    def assistant(self, *blocks: dict[str, Any], stop_reason: str | None = "tool_use") -> list[str]:
        """One entry per block, sharing ``message.id`` (and chained), as 2.1.332 writes a reply."""
        self._msg += 1
        msg_id = f"msg_{self._msg:04d}"
        uids = []
        for index, block in enumerate(blocks):
            entry = self._link(
                "assistant",
                "block",
                message={
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-opus-5-5",
                    "content": [block],
                    "stop_reason": stop_reason,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 5},
                },
                apiBlockIndex=index,
                requestId=f"req_{self._msg:04d}",
            )
            if block.get("type") == "tool_use":
                self.holder[block["id"]] = [entry["uuid"]]
            uids.append(entry["uuid"])
        return uids

    def _result(self, tid: str, kind: str, content: Any, *, is_error: bool, **fields: Any) -> str:
        entry = self._link(
            "user",
            kind,
            message={
                "role": "user",
                "content": [{"tool_use_id": tid, "type": "tool_result", "content": content, "is_error": is_error}],
            },
            sourceToolAssistantUUID=self.holder[tid][0],
            **fields,
        )
        self.holder[tid].append(entry["uuid"])
        return str(entry["uuid"])

    def result(self, tid: str, content: Any = "hi") -> str:
        stdout = {"stdout": content, "stderr": "", "interrupted": False, "isImage": False, "noOutputExpected": False}
        return self._result(tid, "result", content, is_error=False, toolUseResult=stdout)

    def denial(self, tid: str, text: str = NEEDS_APPROVAL, kind: str = "user-rejected") -> str:
        self.denied.append(tid)
        return self._result(tid, "denial", text, is_error=True, toolUseResult=f"Error: {text}", toolDenialKind=kind)

    def disallowed(self, tid: str) -> str:
        """A call to a disabled tool: an error, but no refusal (no ``toolDenialKind``)."""
        return self._result(tid, "result", DISALLOWED, is_error=True, toolUseResult=f"Error: {DISALLOWED}")

    def interrupted(self, tid: str) -> str:
        return self._result(
            tid,
            "interrupted",
            INTERRUPTED,
            is_error=True,
            toolUseResult="User rejected tool use",
            toolDenialKind="user-rejected",
        )

    def notice(self, text: str = TOOL_INTERRUPT_NOTICE) -> str:
        return self._link(
            "user", "notice", message={"role": "user", "content": [{"type": "text", "text": text}]}, rowSource="harness"
        )["uuid"]

    def retry(self, attempt: int = 1) -> str:
        return self._link(
            "system",
            "retry",
            subtype="api_error",
            level="error",
            error={
                "message": "Connection error.",
                "formatted": "Connection refused — a firewall or proxy may be blocking it (ECONNREFUSED)",
                "connection": {"code": "ECONNREFUSED", "message": "connect ECONNREFUSED", "isSSLError": False},
                "isNetworkDown": True,
            },
            retryInMs=543,
            retryAttempt=attempt,
            maxRetries=2,
            source="request_retry",
        )["uuid"]

    def api_error(self, text: str = ECONNREFUSED, *, status: int | None = None) -> str:
        fields: dict[str, Any] = {"apiErrorStatus": status} if status else {"apiError": "connection_failed"}
        return self._link(
            "assistant",
            "api_error",
            message={
                "diagnostics": None,
                "id": f"0e3c-{self._n}",
                "container": None,
                "model": SYNTHETIC_MODEL,
                "role": "assistant",
                "stop_reason": "stop_sequence",
                "stop_sequence": "",
                "type": "message",
                "usage": {"input_tokens": 0, "output_tokens": 0},
                "content": [{"type": "text", "text": text}],
                "context_management": None,
            },
            error="server_error",
            isApiErrorMessage=True,
            failedResponseHadNoToolCall=True,
            **fields,
        )["uuid"]

    def last_prompt(self, text: str = "go on") -> None:
        self.entries.append({"type": "last-prompt", "lastPrompt": text, "leafUuid": self.tip, "sessionId": SESSION})

    def queue(self, operation: str = "enqueue", text: str = "go on") -> None:
        self.entries.append(
            {"type": "queue-operation", "operation": operation, "timestamp": "t", "sessionId": SESSION, "content": text}
        )

    def cost(self) -> None:
        self.entries.append({"type": "cost-state", "totalCostUSD": 0.01, "sessionId": SESSION})


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def bash(tid: str, command: str = "ls") -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": command}}


def blocks(entries: list[Entry], kind: str) -> list[dict[str, Any]]:
    out = []
    for entry in entries:
        content = (entry.get("message") or {}).get("content")
        if isinstance(content, list):
            out += [b for b in content if isinstance(b, dict) and b.get("type") == kind]
    return out


def use_ids(entries: list[Entry]) -> list[str]:
    return [b["id"] for b in blocks(entries, "tool_use")]


def result_ids(entries: list[Entry]) -> list[str]:
    return [b["tool_use_id"] for b in blocks(entries, "tool_result")]


def uuids(entries: list[Entry]) -> list[str]:
    return [e["uuid"] for e in entries if e.get("uuid")]


def by_uuid(entries: list[Entry]) -> dict[str, Entry]:
    return {e["uuid"]: e for e in entries if e.get("uuid")}


def is_sealed(entry: Entry) -> bool:
    """The CLI's own test for a message it never sends: ``isApiErrorMessage===true && model==="<synthetic>"``."""
    return entry.get("isApiErrorMessage") is True and (entry.get("message") or {}).get("model") == SYNTHETIC_MODEL


def last_message(entries: list[Entry]) -> Entry:
    return [e for e in entries if e.get("type") in ("user", "assistant") and not e.get("isSidechain")][-1]


def assert_chain(entries: list[Entry]) -> None:
    """Every parentUuid names a surviving entry, and walking up from the tip reaches every chain entry."""
    present = by_uuid(entries)
    for entry in entries:
        assert entry.get("parentUuid") is None or entry["parentUuid"] in present, entry
        if entry.get("type") == "last-prompt":
            assert entry.get("leafUuid") is None or entry["leafUuid"] in present, entry
        if "sourceToolAssistantUUID" in entry:
            assert entry["sourceToolAssistantUUID"] in present, entry
    walked = []
    node: str | None = uuids(entries)[-1]
    while node is not None:
        walked.append(node)
        assert len(walked) <= len(present), "cycle in parentUuid"
        node = present[node].get("parentUuid")
    assert set(walked) == set(present), "the chain from the leaf does not reach every entry"


def wire(entries: list[Entry]) -> list[tuple[str, list[Any]]]:
    """The messages a resume sends, as the CLI builds them: walk up from the tip, skip what it never sends
    (attachments, system records, sealed entries), merge consecutive turns of one role."""
    present = by_uuid(entries)
    chain: list[Entry] = []
    node: str | None = uuids(entries)[-1]
    while node is not None:
        chain.append(present[node])
        node = present[node].get("parentUuid")
    messages: list[tuple[str, list[Any]]] = []
    for entry in reversed(chain):
        if entry.get("type") not in ("user", "assistant") or is_sealed(entry):
            continue
        content = entry["message"]["content"]
        content = [text(content)] if isinstance(content, str) else list(content)
        if messages and messages[-1][0] == entry["type"]:
            messages[-1][1].extend(content)
        else:
            messages.append((entry["type"], content))
    return messages


def assert_request_valid(entries: list[Entry]) -> None:
    """What the Messages API demands: each tool_use answered in the very next user message, each
    tool_result answering a tool_use of the message just before it."""
    messages = wire(entries)
    for i, (role, content) in enumerate(messages):
        calls = {b["id"] for b in content if b.get("type") == "tool_use"}
        if role == "assistant" and calls:
            assert i + 1 < len(messages), f"unanswered tool calls at the end: {calls}"
            answers = {b["tool_use_id"] for b in messages[i + 1][1] if b.get("type") == "tool_result"}
            assert calls <= answers, f"tool calls {calls - answers} have no result in the next message"
        if role == "user":
            answers = {b["tool_use_id"] for b in content if b.get("type") == "tool_result"}
            before = {b["id"] for b in messages[i - 1][1] if b.get("type") == "tool_use"} if i else set()
            assert answers <= before, f"results {answers - before} answer no call of the previous message"


def assert_paired(entries: list[Entry]) -> None:
    uses, results = use_ids(entries), result_ids(entries)
    assert sorted(uses) == sorted(set(uses))
    assert sorted(results) == sorted(uses), "every tool_use has exactly one tool_result, and vice versa"


def assert_no_debris(entries: list[Entry]) -> None:
    dumped = json.dumps(entries, ensure_ascii=False)
    for debris in OUTAGE_DEBRIS:
        assert debris not in dumped


# -- the reference's `denial` cases -----------------------------------------------------------------


def denial_transcript() -> Transcript:
    """A normal call t1 and denials t2 (default mode) and t4 (a permission rule) in mid-chain."""
    t = Transcript()
    t.prompt("tidy the repo")
    t.assistant(text("Looking first."), bash("t1", "git status"), bash("t2", "touch created.txt"))
    t.result("t1", "On branch main")
    t.denial("t2", TOUCH_NEEDS_APPROVAL)
    t.assistant(bash("t3", "ls"))
    t.result("t3", "a.txt")
    t.assistant(bash("t4", "rm a.txt"))
    t.denial("t4", POLICY_DENIED, kind="permission-rule")
    t.assistant(text("I could not remove it."), stop_reason="end_turn")
    return t


@pytest.mark.parametrize(("keep", "remaining"), [(0, []), (1, ["t4"]), (5, ["t2", "t4"])])
def test_keep_denials_keeps_the_newest_calls_paired_and_chained(keep: int, remaining: list[str]) -> None:
    t = denial_transcript()
    out = prune(t.entries, PrunePolicy(keep_denials=keep))

    assert denial_ids(out.entries) == remaining
    assert out.denials_dropped == 2 - len(remaining)
    assert {"t1", "t3"} <= set(use_ids(out.entries))
    assert set(use_ids(out.entries)) - {"t1", "t3"} == set(remaining)
    assert_paired(out.entries)
    assert_chain(out.entries)
    assert_request_valid(out.entries)
    assert not out.added  # the transcript ends with the model's answer: no seal, nothing healed


def test_keep_zero_keeps_the_non_denied_call_of_the_same_message_and_drops_the_denial_copies() -> None:
    """The reference's shape: both calls in one assistant entry, both results in one user entry that carries
    the denial's ``toolDenialKind`` and ``toolUseResult``. Guards against dropping t1 with its neighbour."""
    t = Transcript()
    t.prompt("go")
    [holder] = t.assistant(bash("t1", "git status"))
    t.entries[-1]["message"]["content"].append(bash("t2", "touch x"))
    t.holder["t2"] = [holder]
    t.result("t1", "clean")
    both = t.entries[-1]
    both["message"]["content"].append(
        {"tool_use_id": "t2", "type": "tool_result", "content": POLICY_DENIED, "is_error": True}
    )
    both.update(toolDenialKind="permission-rule", toolUseResult=f"Error: {POLICY_DENIED}")
    t.assistant(text("ok"), stop_reason="end_turn")

    out = prune(t.entries, PrunePolicy(keep_denials=0))

    assert use_ids(out.entries) == ["t1"] and result_ids(out.entries) == ["t1"]
    assert out.denials_dropped == 1
    assert uuids(out.entries) == uuids(t.entries)  # both entries survive, rewritten
    assert set(out.rewritten) == {holder, both["uuid"]}
    assert POLICY_DENIED not in json.dumps(out.entries)
    assert "toolUseResult" not in by_uuid(out.entries)[both["uuid"]]
    assert_chain(out.entries)


def test_keep_zero_on_2_1_332_shapes_drops_the_denied_block_entries_and_every_copy_of_the_refusal() -> None:
    t = denial_transcript()
    out = prune(t.entries, PrunePolicy(keep_denials=0))

    gone = {uid for tid in ("t2", "t4") for uid in t.holder[tid]}
    assert set(out.dropped) == gone
    assert "t1" in use_ids(out.entries) and "t1" in result_ids(out.entries)
    dumped = json.dumps(out.entries)
    assert "needs approval" not in dumped and POLICY_DENIED not in dumped


def test_synthetic_error_in_the_middle_of_a_three_entry_chain_is_dropped_and_the_chain_reconnected() -> None:
    t = Transcript()
    first = t.prompt("hello")
    error = t.api_error()
    answer = t.assistant(text("hi"), stop_reason="end_turn")[0]

    out = prune(t.entries)

    assert uuids(out.entries) == [first, answer]
    assert out.dropped == [error]
    assert by_uuid(out.entries)[answer]["parentUuid"] == first
    assert_chain(out.entries)


def test_heal_orphans_gives_an_orphan_exactly_one_neutral_result_after_its_entry() -> None:
    """The reference's case: K1 and K2 in one entry o1, K2 without a result."""
    t = Transcript()
    t.prompt("go")
    [o1] = t.assistant(bash("K1"))
    t.entries[-1]["message"]["content"].append(bash("K2", "sleep 20"))
    r1 = t.result("K1")
    t.assistant(text("done"), stop_reason="end_turn")

    out = prune(t.entries)

    heals = [e for e in out.entries if e["uuid"].startswith("heal-")]
    assert len(heals) == 1 and out.added == [heals[0]["uuid"]]
    [heal] = heals
    assert heal["parentUuid"] == o1
    assert heal["message"]["content"] == [
        {"type": "tool_result", "tool_use_id": "K2", "content": PrunePolicy().orphan_text, "is_error": False}
    ]
    assert {k: heal[k] for k in ("sessionId", "cwd", "version", "gitBranch")} == {
        "sessionId": SESSION,
        "cwd": CWD,
        "version": "2.1.332",
        "gitBranch": "main",
    }
    assert by_uuid(out.entries)[r1]["parentUuid"] == heal["uuid"]
    assert_paired(out.entries)
    assert_chain(out.entries)
    assert_request_valid(out.entries)


def test_clean_transcript_gets_nothing_added_and_comes_back_equal() -> None:
    t = Transcript()
    t.queue("enqueue")
    t.queue("dequeue")
    t.prompt("hello")
    t.attachment()
    t.assistant(text("Checking."), bash("t1"))
    t.result("t1", "a.txt")
    t.assistant(text("There is a.txt."), stop_reason="end_turn")
    t.last_prompt()
    t.cost()

    out = prune(t.entries)

    assert out == PruneResult(entries=t.entries)


def test_transcript_ending_in_a_user_entry_gets_exactly_one_seal_and_no_heal() -> None:
    """CLI 2.1.332 answers a user leaf with an invented "No response requested." that it sends to the model."""
    t = Transcript()
    t.prompt("hello")
    t.assistant(bash("t1"))
    last = t.result("t1", "a.txt")

    out = prune(t.entries)

    assert out.entries[:-1] == t.entries
    seal = out.entries[-1]
    assert out.added == [seal["uuid"]] and seal["uuid"].startswith("seal-")
    assert is_sealed(seal) and seal["type"] == "assistant"
    assert seal["parentUuid"] == last
    assert seal["message"]["content"] == [text(SEAL_TEXT)]
    assert last_message(out.entries) is seal
    assert_chain(out.entries)
    assert wire(out.entries)[-1][0] == "user"  # the seal is never sent: the next prompt joins this message


def test_without_seal_leaf_a_user_leaf_stays_the_leaf() -> None:
    t = Transcript()
    t.prompt("hello")
    out = prune(t.entries, PrunePolicy(seal_leaf=False))
    assert out.entries == t.entries and not out.added


# -- CLI 2.1.332 shapes -----------------------------------------------------------------------------


def test_interrupted_result_is_neutralised_and_never_counted_as_a_denial() -> None:
    t = Transcript()
    t.prompt("wait a bit")
    t.assistant(bash("t1", "sleep 20"))
    hit = t.interrupted("t1")
    notice = t.notice()
    nxt = t.prompt("continue please")
    t.assistant(text("Continuing."), stop_reason="end_turn")

    out = prune(t.entries, PrunePolicy(keep_denials=0))

    assert out.denials_dropped == 0 and denial_ids(t.entries) == []
    entry = by_uuid(out.entries)[hit]
    assert entry["message"]["content"] == [
        {"tool_use_id": "t1", "type": "tool_result", "content": PrunePolicy().interrupt_text, "is_error": False}
    ]
    assert "toolUseResult" not in entry
    assert out.rewritten == [hit]
    assert out.dropped == [notice]
    assert by_uuid(out.entries)[nxt]["parentUuid"] == hit
    assert "doesn't want to proceed" not in json.dumps(out.entries)
    assert_paired(out.entries)
    assert_chain(out.entries)
    assert_request_valid(out.entries)


def test_parallel_calls_interrupted_keep_finished_results_and_drop_the_one_notice() -> None:
    """Three parallel calls interrupted: the finished one keeps its result, the two running ones are
    neutralised, and the single notice that follows them goes."""
    t = Transcript()
    t.prompt("three at once")
    t.assistant(bash("a", "ls"), bash("b", "sleep 20"), bash("c", "sleep 30"))
    done = t.result("a", "a.txt")
    t.interrupted("b")
    t.interrupted("c")
    notice = t.notice()

    out = prune(t.entries)

    assert by_uuid(out.entries)[done] == by_uuid(t.entries)[done]
    assert [b["content"] for b in blocks(out.entries, "tool_result")] == ["a.txt", *[PrunePolicy().interrupt_text] * 2]
    assert out.dropped == [notice]
    assert is_sealed(out.entries[-1])  # the neutralised result is now the last message: sealed
    assert_paired(out.entries)
    assert_chain(out.entries)
    assert_request_valid(out.entries)


def test_streaming_interrupt_keeps_the_partial_answer_and_drops_its_notice() -> None:
    t = Transcript()
    t.prompt("write a poem")
    partial = t.assistant(text("Roses are"), stop_reason=None)[0]
    notice = t.notice(STREAM_INTERRUPT_NOTICE)
    nxt = t.prompt("shorter please")
    t.assistant(text("Roses."), stop_reason="end_turn")

    out = prune(t.entries)

    assert out.dropped == [notice]
    assert by_uuid(out.entries)[nxt]["parentUuid"] == partial
    assert_chain(out.entries)


def test_user_words_after_a_notice_are_not_an_interrupt_notice() -> None:
    """Guards against dropping a person's message because it starts with, or comes with, a notice."""
    t = Transcript()
    t.prompt("go")
    t.assistant(text("ok"), stop_reason="end_turn")
    merged = t._link(
        "user",
        "prompt",
        message={"role": "user", "content": [text(TOOL_INTERRUPT_NOTICE), text("now do it differently")]},
    )["uuid"]
    t.assistant(text("ok"), stop_reason="end_turn")
    typed = t.prompt(f"{STREAM_INTERRUPT_NOTICE} was what the CLI said; why?")
    t.assistant(text("Because you pressed Esc."), stop_reason="end_turn")

    out = prune(t.entries)

    assert not out.dropped
    assert {merged, typed} <= set(uuids(out.entries))


def test_every_denial_shape_is_recognised_and_a_disabled_tool_is_not_a_denial() -> None:
    t = Transcript()
    t.prompt("go")
    n = 0
    for kind, texts in DENIALS.items():
        for reason in texts:
            n += 1
            t.assistant(bash(f"d{n}", "touch x"))
            t.denial(f"d{n}", reason, kind=kind)
    t.assistant(bash("x1"))
    t.disallowed("x1")
    t.assistant(text("giving up"), stop_reason="end_turn")

    assert denial_ids(t.entries) == [f"d{i}" for i in range(1, n + 1)]
    out = prune(t.entries, PrunePolicy(keep_denials=0))
    assert use_ids(out.entries) == ["x1"] and result_ids(out.entries) == ["x1"]
    assert out.denials_dropped == n
    assert_chain(out.entries)
    assert_request_valid(out.entries)


def test_retry_records_and_a_mid_chain_error_are_dropped_and_the_prompts_relinked() -> None:
    """sdk-notes B-c: P1, retries, the synthetic error, then P2 (whose parent is the error) and A2."""
    t = Transcript()
    p1 = t.prompt("first prompt during outage")
    retries = [t.retry(1), t.retry(2)]
    error = t.api_error()
    p2 = t.prompt("second prompt after recovery")
    t.assistant(text("back online"), stop_reason="end_turn")

    out = prune(t.entries)

    assert out.dropped == [*retries, error]
    assert by_uuid(out.entries)[p2]["parentUuid"] == p1
    assert_no_debris(out.entries)
    assert_chain(out.entries)
    assert wire(out.entries) == [
        ("user", [text("first prompt during outage"), text("second prompt after recovery")]),
        ("assistant", [text("back online")]),
    ]


@pytest.mark.parametrize("failure", [ECONNREFUSED, OVERLOADED, DROPPED])
def test_trailing_synthetic_error_is_kept_as_the_seal_with_its_text_replaced(failure: str) -> None:
    """Dropping a trailing error would leave a user leaf, and with it "No response requested."."""
    t = Transcript()
    t.prompt("hello")
    t.assistant(text("hi"), stop_reason="end_turn")
    p2 = t.prompt("do the thing")
    t.retry(1)
    t.retry(2)
    error = t.api_error(failure, status=529 if "529" in failure else None)
    t.last_prompt("do the thing")

    out = prune(t.entries)

    seal = by_uuid(out.entries)[error]
    assert last_message(out.entries) is seal and is_sealed(seal)
    assert seal["parentUuid"] == p2
    assert seal["message"]["content"] == [text(SEAL_TEXT)]
    assert out.rewritten == [error] and not out.added
    assert out.entries[-1] == {
        "type": "last-prompt",
        "lastPrompt": "do the thing",
        "leafUuid": error,
        "sessionId": SESSION,
    }
    assert_no_debris(out.entries)
    assert_chain(out.entries)


def test_two_outages_in_a_row_keep_only_the_last_error_as_the_seal() -> None:
    t = Transcript()
    p1 = t.prompt("one")
    first = t.api_error()
    p2 = t.prompt("two")
    last = t.api_error(DROPPED)

    out = prune(t.entries)

    assert uuids(out.entries) == [p1, p2, last]
    assert out.dropped == [first]
    assert by_uuid(out.entries)[p2]["parentUuid"] == p1
    assert_no_debris(out.entries)


def test_a_kept_leaf_always_passes_the_clis_never_send_check() -> None:
    """Guards against a seal the CLI would send: the leaf is kept only because 2.1.332 skips entries with
    ``isApiErrorMessage === true`` AND ``model === "<synthetic>"``; one without the flag would reach the model."""
    t = Transcript()
    t.prompt("hello")
    error = t.api_error()
    del t.entries[-1]["isApiErrorMessage"]  # a synthetic message the CLI wrote without the flag

    out = prune(t.entries)

    assert last_message(out.entries) is by_uuid(out.entries)[error]
    assert is_sealed(by_uuid(out.entries)[error])


def test_parallel_tool_calls_heal_after_the_last_block_of_the_message() -> None:
    t = Transcript()
    t.prompt("three at once")
    *_, third = t.assistant(text("Running two."), bash("a"), bash("b", "sleep 99"))
    done = t.result("a", "a.txt")
    t.assistant(text("a is done"), stop_reason="end_turn")

    out = prune(t.entries)

    [heal] = [e for e in out.entries if e["uuid"] in out.added]
    order = uuids(out.entries)
    assert order.index(heal["uuid"]) == order.index(third) + 1
    assert heal["parentUuid"] == third and result_ids([heal]) == ["b"]
    assert by_uuid(out.entries)[done]["parentUuid"] == heal["uuid"]
    assert_paired(out.entries)
    assert_chain(out.entries)
    assert_request_valid(out.entries)


def test_killed_mid_tool_call_is_healed_then_sealed() -> None:
    """The last thing written was the call itself: heal it, and since the heal is a user leaf, seal it."""
    t = Transcript()
    t.prompt("run the suite")
    [call] = t.assistant(bash("t1", "pytest"))
    t.last_prompt("run the suite")

    out = prune(t.entries)

    heal, seal = (e for e in out.entries if e.get("uuid") in out.added)
    assert heal["parentUuid"] == call and seal["parentUuid"] == heal["uuid"]
    assert is_sealed(seal) and last_message(out.entries) is seal
    assert_paired(out.entries)
    assert_chain(out.entries)
    assert_request_valid(out.entries)


def test_last_prompt_leaf_pointing_at_a_dropped_entry_follows_its_nearest_survivor() -> None:
    t = Transcript()
    t.prompt("go")
    t.assistant(bash("t1", "sleep 5"))
    hit = t.interrupted("t1")
    t.notice()
    t.last_prompt()

    out = prune(t.entries)

    [lp] = [e for e in out.entries if e.get("type") == "last-prompt"]
    assert lp["leafUuid"] == hit
    assert_chain(out.entries)


def test_prune_does_not_modify_its_input() -> None:
    t = denial_transcript()
    t.assistant(bash("t5", "sleep 9"))
    t.interrupted("t5")
    t.notice()
    t.prompt("again")
    t.api_error()
    before = copy.deepcopy(t.entries)
    prune(t.entries, PrunePolicy(keep_denials=0))
    assert t.entries == before


def test_rules_can_be_switched_off_one_by_one() -> None:
    t = Transcript()
    t.prompt("go")
    t.api_error()
    t.prompt("again")
    t.assistant(bash("t1", "sleep 9"))
    t.interrupted("t1")
    t.notice()
    t.assistant(bash("t2"))
    t.prompt("after the kill")
    t.assistant(text("ok"), stop_reason="end_turn")

    off = PrunePolicy(drop_api_errors=False, neutralize_interrupts=False, heal_orphans=False, seal_leaf=False)
    assert prune(t.entries, off).entries == t.entries
    kept_errors = prune(t.entries, PrunePolicy(drop_api_errors=False))
    assert any(is_api_error(e) for e in kept_errors.entries)
    unhealed = prune(t.entries, PrunePolicy(heal_orphans=False))
    assert "t2" not in result_ids(unhealed.entries)


def test_is_api_error_knows_the_retry_record_and_both_markers() -> None:
    t = Transcript()
    t.prompt("go")
    t.retry()
    t.api_error()
    t.assistant(text("real"), stop_reason="end_turn")
    assert [is_api_error(e) for e in t.entries] == [False, True, True, False]


def test_relink_skips_chains_of_dropped_entries_survives_cycles_and_leaves_its_input_alone() -> None:
    entries: list[Entry] = [
        {"uuid": "a", "parentUuid": None},
        {"uuid": "b", "parentUuid": "a"},
        {"uuid": "c", "parentUuid": "b"},
        {"uuid": "d", "parentUuid": "c"},
        {"uuid": "x", "parentUuid": "y"},
        {"uuid": "y", "parentUuid": "x"},
        {"uuid": "z", "parentUuid": "y"},
        {"type": "last-prompt", "leafUuid": "c"},
    ]
    before = copy.deepcopy(entries)

    kept = relink(entries, {"b", "c", "x", "y"})

    assert kept == [
        {"uuid": "a", "parentUuid": None},
        {"uuid": "d", "parentUuid": "a"},
        {"uuid": "z", "parentUuid": None},
        {"type": "last-prompt", "leafUuid": "a"},
    ]
    assert entries == before
    assert relink(entries, set()) == entries


# -- the property test ------------------------------------------------------------------------------

ERROR_TEXTS = (ECONNREFUSED, OVERLOADED, DROPPED)
OUTCOMES = ("ok", "ok", "ok", "user-rejected", "permission-rule", "interrupted", "orphan", "disallowed")


@st.composite
def transcripts(draw: st.DrawFn) -> Transcript:
    """Chains of prompts, replies of one or more blocks, tool results, both kinds of denial, interrupted
    results and their notices, outages (retry records and synthetic errors, mid-chain and at the end),
    attachments and the metadata lines that carry no uuid."""
    t = Transcript()
    tid = 0
    if draw(st.booleans()):
        t.queue("enqueue")
        t.queue("dequeue")
    t.prompt("start")
    for _ in range(draw(st.integers(0, 10))):
        step = draw(st.sampled_from(("reply", "reply", "reply", "prompt", "outage", "stream", "attach", "meta")))
        if step == "reply":
            shapes = draw(st.lists(st.sampled_from(("text", "thinking", "tool", "tool")), min_size=1, max_size=4))
            out: list[dict[str, Any]] = []
            calls: list[tuple[str, str]] = []
            for shape in shapes:
                if shape == "tool":
                    tid += 1
                    out.append(bash(f"toolu_{tid:03d}", draw(st.sampled_from(("ls", "touch x", "sleep 9")))))
                    calls.append((f"toolu_{tid:03d}", draw(st.sampled_from(OUTCOMES))))
                elif shape == "thinking":
                    out.append({"type": "thinking", "thinking": "hmm", "signature": "sig"})
                else:
                    out.append(text("Let me see."))
            t.assistant(*out, stop_reason="tool_use" if calls else "end_turn")
            for call, outcome in calls:
                if outcome == "ok":
                    t.result(call, draw(st.sampled_from(("a.txt", [text("b.txt")]))))
                elif outcome in DENIALS:
                    t.denial(call, draw(st.sampled_from(DENIALS[outcome])), kind=outcome)
                elif outcome == "interrupted":
                    t.interrupted(call)
                elif outcome == "disallowed":
                    t.disallowed(call)
            if any(o == "interrupted" for _, o in calls) and draw(st.booleans()):
                t.notice()
        elif step == "prompt":
            t.prompt(draw(st.sampled_from(("go on", "try again", "what now?"))))
        elif step == "outage":
            for attempt in range(draw(st.integers(0, 2))):
                t.retry(attempt + 1)
            t.api_error(draw(st.sampled_from(ERROR_TEXTS)))
        elif step == "stream":
            t.assistant(text("Half a"), stop_reason=None)
            t.notice(STREAM_INTERRUPT_NOTICE)
        elif step == "attach":
            t.attachment(draw(st.sampled_from(("date", "environment", "skill_listing"))))
        elif draw(st.booleans()):
            t.last_prompt()
        else:
            draw(st.sampled_from((t.cost, t.queue)))()
    ending = draw(st.sampled_from(("as is", "outage", "prompt", "killed")))
    if ending == "outage":
        t.retry(1)
        t.api_error(draw(st.sampled_from(ERROR_TEXTS)))
    elif ending == "prompt":
        t.prompt("are you there?")
    elif ending == "killed":
        tid += 1
        t.assistant(bash(f"toolu_{tid:03d}", "pytest"))
    if draw(st.booleans()):
        t.last_prompt()
    return t


ONLY_CHAIN_FIELDS = ("parentUuid", "leafUuid")


def _without_links(entry: Entry) -> Entry:
    return {k: v for k, v in entry.items() if k not in ONLY_CHAIN_FIELDS}


# A failing example makes hypothesis import mypy_extensions, whose DeprecationWarning (an error here)
# would turn the failure report into an INTERNALERROR.
@pytest.mark.filterwarnings("ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning")
@settings(max_examples=400, deadline=None, database=None)
@given(t=transcripts(), keep=st.integers(0, 3))
def test_property_pruned_transcripts_are_valid_complete_and_stable(t: Transcript, keep: int) -> None:
    before = copy.deepcopy(t.entries)
    policy = PrunePolicy(keep_denials=keep)

    out = prune(t.entries, policy)

    assert t.entries == before, "the input was modified"
    assert_chain(out.entries)
    assert_paired(out.entries)
    assert_request_valid(out.entries)
    assert_no_debris(out.entries)

    # The leaf is a real answer or a seal the CLI never sends; no other API-error entry survives.
    leaf = last_message(out.entries)
    assert leaf["type"] == "assistant"
    errors = [e for e in out.entries if is_api_error(e)]
    assert all(e is leaf and is_sealed(e) for e in errors)

    # Removed: exactly the four kinds, and nothing else.
    dead = set(t.denied if keep == 0 else t.denied[: max(0, len(t.denied) - keep)])
    leaf_in = last_message(t.entries)["uuid"]
    expected = {uid for uid, kind in t.kind.items() if kind in ("retry", "notice")}
    expected |= {uid for uid, kind in t.kind.items() if kind == "api_error" and uid != leaf_in}
    expected |= {uid for call in dead for uid in t.holder[call]}
    assert set(out.dropped) == expected
    assert out.denials_dropped == len(dead)
    assert denial_ids(out.entries) == [d for d in t.denied if d not in dead]

    # Kept entries are unchanged but for their links, unless reported as rewritten for a reason.
    originals = by_uuid(t.entries)
    allowed = {uid for uid, kind in t.kind.items() if kind == "interrupted"} | {leaf_in}
    assert set(out.rewritten) <= allowed
    for entry in out.entries:
        uid = entry.get("uuid")
        if uid in out.added:
            assert uid.startswith(("heal-", "seal-"))
        elif uid not in out.rewritten:
            assert _without_links(entry) == _without_links(originals[uid] if uid else entry)
    assert [_without_links(e) for e in out.entries if not e.get("uuid")] == [
        _without_links(e) for e in t.entries if not e.get("uuid")
    ]
    assert len(out.entries) == len(t.entries) - len(out.dropped) + len(out.added)

    # Pruning is idempotent: a second pass finds nothing to do.
    again = prune(out.entries, policy)
    assert again.entries == out.entries
    assert (again.dropped, again.added, again.denials_dropped) == ([], [], 0)


# -- resume_view and the store ----------------------------------------------------------------------


def _glances(t: Transcript, n: int) -> None:
    for i in range(n):
        t.assistant(bash(f"g{i}", "git status"))
        t.result(f"g{i}", f"status {i}")


def test_resume_view_expires_trims_and_prunes_in_order_without_writing(tmp_path: Path) -> None:
    t = Transcript()
    t.prompt("go")
    _glances(t, 8)
    t.assistant(bash("big", "cat big.log"))
    t.result("big", "x" * 5000)
    t.api_error()
    before = copy.deepcopy(t.entries)

    view = resume_view(
        t.entries,
        workspace=tmp_path,
        trim=TrimPolicy(keep_recent=0),
        ephemeral=EphemeralPolicy(keep_recent=6),
        write=False,
    )

    assert t.entries == before
    assert view.report["expired"] == 2 and view.report["cleared"] == 1
    assert view.report["pruned"] == 0  # the trailing error is the seal, rewritten, not dropped
    assert not (tmp_path / ".flower").exists()
    assert {t.holder["g0"][1], t.holder["g1"][1], t.holder["big"][1], t.tip} == view.rewritten
    assert_no_debris(view.entries)
    assert_chain(view.entries)


def test_resume_view_always_turns_the_garbage_collector_back_on(tmp_path: Path) -> None:
    """resume_view pauses the cyclic collector while it rewrites; guards against leaving it off for the
    rest of the kernel's life, also when a step raises."""
    t = denial_transcript()
    assert gc.isenabled()
    resume_view(t.entries, workspace=tmp_path, trim=True)
    assert gc.isenabled()
    t.assistant(bash("big", "cat big.log"))
    t.result("big", "x" * 5000)
    with pytest.raises(ValueError):  # a spill folder outside the workspace
        resume_view(t.entries, workspace=tmp_path, trim=TrimPolicy(keep_recent=0, spill_dirname="/elsewhere"))
    assert gc.isenabled()
    gc.disable()
    try:
        resume_view(t.entries, workspace=tmp_path)
        assert not gc.isenabled(), "a collector the caller had turned off stays off"
    finally:
        gc.enable()


@pytest.mark.anyio
async def test_pruning_store_prunes_on_load_only_and_keeps_sqlite_verbatim(tmp_path: Path) -> None:
    key: Any = {"project_key": "proj", "session_id": SESSION}
    t = denial_transcript()
    t.prompt("again")
    t.retry()
    t.api_error()
    store = PruningSessionStore(tmp_path / "runs" / "sessions.db", workspace=tmp_path, keep_denials=0)
    try:
        await store.append(key, t.entries)
        loaded = await store.load(key)
        stored = store.load_sync(key)
        missing = await store.load({"project_key": "proj", "session_id": "nope"})
    finally:
        store.close()

    assert loaded == prune(t.entries, PrunePolicy(keep_denials=0)).entries
    assert stored == t.entries
    assert missing is None
    assert store.last_report["denials_dropped"] == 2 and store.last_report["pruned"] == 5
