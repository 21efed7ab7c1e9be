"""What resumed context must not contain, removed on load: the debris of outages and interrupts.

SQLite keeps every entry verbatim; ``prune`` rewrites only the copy handed to the CLI on resume.

Guarantees (for the list ``prune`` returns):
    - Every surviving ``parentUuid`` is None or names a surviving entry: an entry that is dropped
      hands its children to its nearest surviving ancestor, so the chain never breaks (a break would
      silently cut off all earlier history).
    - Every ``tool_use`` has exactly one ``tool_result`` (orphans get a neutral result), so a resumed
      request is never rejected for an unpaired tool call.
    - The conversation's last message is never a user entry: the CLI (2.1.332) answers a user leaf by
      inventing an assistant "No response requested." and sending it to the model. A synthetic
      "seal" is left as the leaf instead (an API-error-shaped entry, which the CLI never sends), so
      the next prompt joins the last user message as the real API expects.
    - Only four kinds of thing are removed or rewritten: synthetic API-error entries (and the CLI's
      ``api_error`` retry records), all but the newest ``keep_denials`` denied tool calls (call and
      result together), interrupted tool results and interrupt notices, and orphan tool calls (healed,
      never deleted).
Not guaranteed:
    - Shapes written by CLIs older than 2.1.3xx are recognised only through the reference's rules
      (``[Request interrupted`` inside a tool result, ``toolDenialKind == "permission-rule"``).
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flower_magic.stores.sqlite import SqliteSessionStore

Entry = dict[str, Any]

SYNTHETIC_MODEL = "<synthetic>"
INTERRUPT_TEXT = "[这一步在运行中被打断了,没有留下结果]"
ORPHAN_TEXT = "[这个工具调用没有结果:会话在它完成前结束了。需要的话重新执行。]"
SEAL_TEXT = "(上一轮到这里就停了)"
# Markers of an interrupted call in CLI 2.1.332 (sdk-notes A5); the last one is the older CLIs' rule.
INTERRUPTED_TOOL_RESULT = "User rejected tool use"
INTERRUPTED_MARKERS = ("Correction to the text above: this call was stopped while running", "[Request interrupted")
INTERRUPT_NOTICES = ("[Request interrupted by user", "[Request interrupted:", "[Tool call did not complete")
# Entry fields copied onto entries we add, so they look like the CLI's own.
OUTER_FIELDS = ("sessionId", "cwd", "gitBranch", "version", "agentId", "isSidechain", "userType", "entrypoint")
MESSAGE_TYPES = ("user", "assistant")


@dataclass
class PrunePolicy:
    """What ``prune`` does. Every rule is on by default.

    Attributes:
        keep_denials: denied calls kept (newest first); one teaches the model not to repeat the
            same blocked command, more teach it to stop trying even what is allowed.
    """

    drop_api_errors: bool = True
    neutralize_interrupts: bool = True
    interrupt_text: str = INTERRUPT_TEXT
    heal_orphans: bool = True
    orphan_text: str = ORPHAN_TEXT
    keep_denials: int = 1
    seal_leaf: bool = True


@dataclass
class PruneResult:
    """The pruned transcript and what happened to it (uuids of affected entries)."""

    entries: list[Entry]
    dropped: list[str] = field(default_factory=list)
    rewritten: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    denials_dropped: int = 0


def _content(entry: Entry) -> list[Any] | None:
    msg = entry.get("message")
    if isinstance(msg, dict) and isinstance(msg.get("content"), list):
        return msg["content"]
    return None


def _blocks(entry: Entry, kind: str) -> list[dict[str, Any]]:
    return [b for b in (_content(entry) or []) if isinstance(b, dict) and b.get("type") == kind]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def is_api_error(entry: Entry) -> bool:
    """A synthetic assistant message the CLI writes when a request failed, or its retry record."""
    if entry.get("type") == "system" and entry.get("subtype") == "api_error":
        return True
    msg = entry.get("message")
    return bool(entry.get("isApiErrorMessage")) or (isinstance(msg, dict) and msg.get("model") == SYNTHETIC_MODEL)


def _is_interrupted_result(entry: Entry, block: dict[str, Any]) -> bool:
    if not block.get("is_error"):
        return False
    if entry.get("toolUseResult") == INTERRUPTED_TOOL_RESULT:
        return True
    text = _text_of(block.get("content"))
    return any(marker in text for marker in INTERRUPTED_MARKERS)


def denial_ids(entries: Iterable[Entry]) -> list[str]:
    """tool_use ids of denied calls, oldest first (a refusal, not an interrupt or a missing tool)."""
    ids: list[str] = []
    for entry in entries:
        kind = entry.get("toolDenialKind")
        if kind not in ("permission-rule", "user-rejected"):
            continue
        for block in _blocks(entry, "tool_result"):
            if block.get("tool_use_id") and not _is_interrupted_result(entry, block):
                ids.append(str(block["tool_use_id"]))
    return ids


def _is_interrupt_notice(entry: Entry) -> bool:
    if entry.get("type") != "user":
        return False
    content = entry.get("message", {}).get("content") if isinstance(entry.get("message"), dict) else None
    text = _text_of(content).strip()
    return bool(text) and text.startswith(INTERRUPT_NOTICES) and not _blocks(entry, "tool_result")


def prune(entries: list[Entry], policy: PrunePolicy | None = None) -> PruneResult:
    """Remove or rewrite debris; see the module docstring. ``entries`` is not modified."""
    policy = policy or PrunePolicy()
    out = [copy.deepcopy(e) for e in entries]
    result = PruneResult(entries=[])
    drop: set[str] = set()
    rewritten: set[str] = set()

    ids = denial_ids(out)
    dead = set(ids if policy.keep_denials <= 0 else ids[: max(0, len(ids) - policy.keep_denials)])
    result.denials_dropped = len(dead)
    leaf_error = _last_message(out)
    for entry in out:
        uid = entry.get("uuid")
        content = _content(entry)
        if dead and content is not None:
            kept = [
                b
                for b in content
                if not (
                    isinstance(b, dict)
                    and (
                        (b.get("type") == "tool_use" and b.get("id") in dead)
                        or (b.get("type") == "tool_result" and b.get("tool_use_id") in dead)
                    )
                )
            ]
            if len(kept) != len(content):
                entry["message"]["content"] = kept
                entry.pop("toolUseResult", None)
                if not kept and uid:
                    drop.add(uid)
                elif uid:
                    rewritten.add(uid)
        if policy.drop_api_errors and is_api_error(entry) and uid:
            if entry is leaf_error and entry.get("type") == "assistant" and policy.seal_leaf:
                # Kept as the seal: the CLI never sends it, and dropping it would leave a user leaf.
                entry["message"]["content"] = [{"type": "text", "text": SEAL_TEXT}]
                rewritten.add(uid)
            else:
                drop.add(uid)
            continue
        if policy.neutralize_interrupts:
            if _is_interrupt_notice(entry) and uid:
                drop.add(uid)
                continue
            for block in _blocks(entry, "tool_result"):
                if _is_interrupted_result(entry, block):
                    block["content"] = policy.interrupt_text
                    block["is_error"] = False
                    entry.pop("toolUseResult", None)
                    if uid:
                        rewritten.add(uid)

    kept_entries = relink(out, drop)
    if policy.heal_orphans:
        kept_entries = _heal(kept_entries, policy.orphan_text, result.added)
    if policy.seal_leaf:
        kept_entries = _seal(kept_entries, result.added)
    result.entries = kept_entries
    result.dropped = [e["uuid"] for e in out if e.get("uuid") in drop]
    result.rewritten = sorted(rewritten - drop)
    return result


def relink(entries: list[Entry], drop: set[str]) -> list[Entry]:
    """Remove ``drop`` uuids, re-pointing each survivor's ``parentUuid`` (and ``last-prompt``'s
    ``leafUuid``) past dropped entries to the nearest surviving ancestor."""
    if not drop:
        return list(entries)
    parent_of = {e["uuid"]: e.get("parentUuid") for e in entries if e.get("uuid")}

    def survivor(uid: str | None) -> str | None:
        seen: set[str] = set()
        while uid is not None and uid in drop and uid not in seen:
            seen.add(uid)
            uid = parent_of.get(uid)
        return None if uid in drop else uid

    kept: list[Entry] = []
    for entry in entries:
        if entry.get("uuid") in drop:
            continue
        if entry.get("parentUuid") in drop:
            entry["parentUuid"] = survivor(entry["parentUuid"])
        if entry.get("leafUuid") in drop:
            entry["leafUuid"] = survivor(entry["leafUuid"])
        kept.append(entry)
    return kept


def _outer(entry: Entry) -> Entry:
    return {k: entry[k] for k in OUTER_FIELDS if k in entry}


def _heal(entries: list[Entry], text: str, added: list[str]) -> list[Entry]:
    answered = {b.get("tool_use_id") for e in entries for b in _blocks(e, "tool_result")}
    out: list[Entry] = []
    pending: list[str] = []
    for i, entry in enumerate(entries):
        out.append(entry)
        if entry.get("type") == "assistant":
            pending += [str(b["id"]) for b in _blocks(entry, "tool_use") if b.get("id") not in answered]
        if not pending:
            continue
        nxt = entries[i + 1] if i + 1 < len(entries) else None
        same_message = (
            nxt is not None
            and nxt.get("type") == "assistant"
            and _msg_id(nxt) is not None
            and _msg_id(nxt) == _msg_id(entry)
        )
        if same_message:
            continue  # heal after the last block of this assistant message
        heal: Entry = {
            **_outer(entry),
            "type": "user",
            "uuid": "heal-" + secrets.token_hex(6),
            "parentUuid": entry.get("uuid"),
            "timestamp": entry.get("timestamp"),
            "message": {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": tid, "content": text, "is_error": False} for tid in pending
                ],
            },
        }
        for later in entries[i + 1 :]:
            if later.get("parentUuid") == entry.get("uuid"):
                later["parentUuid"] = heal["uuid"]
                break
        out.append(heal)
        added.append(heal["uuid"])
        answered.update(pending)
        pending = []
    return out


def _msg_id(entry: Entry) -> str | None:
    msg = entry.get("message")
    return msg.get("id") if isinstance(msg, dict) and isinstance(msg.get("id"), str) else None


def _last_message(entries: list[Entry]) -> Entry | None:
    for entry in reversed(entries):
        if entry.get("type") in MESSAGE_TYPES and entry.get("uuid") and not entry.get("isSidechain"):
            return entry
    return None


def _seal(entries: list[Entry], added: list[str]) -> list[Entry]:
    leaf = _last_message(entries)
    if leaf is None or leaf.get("type") != "user":
        return entries
    tail = next(
        (e for e in reversed(entries) if e.get("uuid") and "parentUuid" in e and not e.get("isSidechain")), leaf
    )
    seal: Entry = {
        **_outer(leaf),
        "type": "assistant",
        "uuid": "seal-" + secrets.token_hex(6),
        "parentUuid": tail.get("uuid"),
        "timestamp": leaf.get("timestamp"),
        "isApiErrorMessage": True,
        "message": {
            "id": "seal-" + secrets.token_hex(6),
            "type": "message",
            "role": "assistant",
            "model": SYNTHETIC_MODEL,
            "content": [{"type": "text", "text": SEAL_TEXT}],
            "stop_reason": "stop_sequence",
            "stop_sequence": "",
            "usage": {"input_tokens": 0, "output_tokens": 0},
        },
    }
    added.append(seal["uuid"])
    return [*entries, seal]


# -- the store the Runtime uses -----------------------------------------------------------------------


@dataclass
class ResumeView:
    """A transcript as the model would get it on resume, and what changed (entry uuids)."""

    entries: list[Entry]
    dropped: set[str] = field(default_factory=set)
    rewritten: set[str] = field(default_factory=set)
    added: set[str] = field(default_factory=set)
    report: dict[str, Any] = field(default_factory=dict)


def resume_view(
    entries: list[Entry],
    *,
    workspace: Path,
    trim: Any = False,
    ephemeral: Any = True,
    prune_policy: PrunePolicy | None = None,
    write: bool = False,
) -> ResumeView:
    """Apply expiry, trimming (when on) and pruning, in that order, to a copy of ``entries``.

    Args:
        trim: a ``TrimPolicy`` or a bool.
        ephemeral: an ``EphemeralPolicy`` or a bool.
        write: write spill files (a resume does; a read-only viewer does not).
    """
    from flower_magic.stores.trim import EphemeralPolicy, TrimPolicy, expire
    from flower_magic.stores.trim import trim as trim_entries

    work = [copy.deepcopy(e) for e in entries]
    eph = ephemeral if isinstance(ephemeral, EphemeralPolicy) else EphemeralPolicy(enabled=bool(ephemeral))
    tp = trim if isinstance(trim, TrimPolicy) else TrimPolicy(enabled=bool(trim))
    rewritten: set[str] = set()
    report: dict[str, Any] = {"expired": 0, "cleared": 0, "kept": 0, "chars_saved": 0}
    if eph.enabled:
        work, expired = expire(work, eph)
        rewritten.update(expired)
        report["expired"] = len(expired)
    if tp.enabled:
        work, trim_report = trim_entries(work, tp, workspace, write=write)
        rewritten.update(trim_report.pop("rewritten"))
        report.update(trim_report)
    pruned = prune(work, prune_policy)
    report.update(pruned=len(pruned.dropped), denials_dropped=pruned.denials_dropped, healed=len(pruned.added))
    dropped = set(pruned.dropped)
    return ResumeView(
        entries=pruned.entries,
        dropped=dropped,
        rewritten=(rewritten | set(pruned.rewritten)) - dropped,
        added=set(pruned.added),
        report=report,
    )


class PruningSessionStore(SqliteSessionStore):
    """sessions.db with pruning (and expiry, and optional trimming) applied on ``load()`` only.

    Args:
        path: the SQLite file.
        workspace: where spill files go (``<workspace>/.flower/spill``).
        trim: ``TrimPolicy`` or bool (off by default; the ``flower`` front ends turn it on).
        ephemeral: ``EphemeralPolicy`` or bool (on by default).
        keep_denials: denied calls kept in resumed context.
        prune: a full ``PrunePolicy`` (overrides ``keep_denials``).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        workspace: str | Path,
        trim: Any = False,
        ephemeral: Any = True,
        keep_denials: int = 1,
        prune: PrunePolicy | None = None,
    ) -> None:
        super().__init__(path)
        self.workspace = Path(workspace)
        self.trim_policy = trim
        self.ephemeral_policy = ephemeral
        self.prune_policy = prune or PrunePolicy(keep_denials=keep_denials)
        self.last_report: dict[str, Any] = {}

    async def load(self, key: Any) -> list[Entry] | None:
        entries = await super().load(key)
        if entries is None:
            return None
        view = resume_view(
            entries,
            workspace=self.workspace,
            trim=self.trim_policy,
            ephemeral=self.ephemeral_policy,
            prune_policy=self.prune_policy,
            write=True,
        )
        self.last_report = view.report
        return view.entries
