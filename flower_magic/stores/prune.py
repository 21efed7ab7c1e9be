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
      never deleted). An entry that only *starts* with a notice (a person's words follow) is kept.
    - A kept leaf is one the CLI never sends: it carries both ``isApiErrorMessage: true`` and
      ``message.model == "<synthetic>"`` (the CLI's own test), whatever the original entry had.
    - Pruning is idempotent: pruning the result again changes nothing.
    - The input is never modified. The result shares what did not change with it (copying only what
      changes keeps a 100K-entry load fast), so treat both as read-only.
Not guaranteed:
    - Shapes written by CLIs older than 2.1.3xx are recognised only through the reference's rules
      (``[Request interrupted`` inside a tool result, ``toolDenialKind == "permission-rule"``).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from flower_magic.core.entries import HEAL, SEAL, made_up_id

Entry = dict[str, Any]

SYNTHETIC_MODEL = "<synthetic>"
INTERRUPT_TEXT = "[这一步在运行中被打断了,没有留下结果]"
ORPHAN_TEXT = "[这个工具调用没有结果:会话在它完成前结束了。需要的话重新执行。]"
SEAL_TEXT = "(上一轮到这里就停了)"
# Markers of an interrupted call in CLI 2.1.332 (sdk-notes A5); the last one is the older CLIs' rule.
INTERRUPTED_TOOL_RESULT = "User rejected tool use"
INTERRUPTED_MARKERS = ("Correction to the text above: this call was stopped while running", "[Request interrupted")
INTERRUPT_NOTICES = ("[Request interrupted by user", "[Request interrupted:", "[Tool call did not complete")
# A notice is one bracketed line and nothing else; a person's words after it make it a prompt.
_NOTICE = re.compile("(?:" + "|".join(re.escape(n) for n in INTERRUPT_NOTICES) + r")[^\]]*\]")
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
    content = msg.get("content") if isinstance(msg, dict) else None
    return content if isinstance(content, list) else None


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
    if not block.get("is_error") or block.get("type") != "tool_result":
        return False
    if entry.get("toolUseResult") == INTERRUPTED_TOOL_RESULT:
        return True
    return stopped_while_running(_text_of(block.get("content")))


def stopped_while_running(text: str) -> bool:
    """``text`` is what the CLI writes as the result of a tool call stopped while it ran (an interrupt):
    words for the model (to stop and wait), not for a person."""
    return any(marker in text for marker in INTERRUPTED_MARKERS)


def denial_ids(entries: Iterable[Entry]) -> list[str]:
    """tool_use ids of denied calls, oldest first (a refusal, not an interrupt or a missing tool).

    A refusal is an error result in an entry with a ``toolDenialKind``: a normal result sharing the
    entry (the reference's shape) and a neutralised interrupted one (pruned before) do not count.
    """
    return [
        str(b["tool_use_id"])
        for e in entries
        if e.get("toolDenialKind") in ("permission-rule", "user-rejected")
        for b in _content(e) or ()
        if isinstance(b, dict) and b.get("tool_use_id") and b.get("is_error") and not _is_interrupted_result(e, b)
    ]


def _is_interrupt_notice(entry: Entry) -> bool:
    msg = entry.get("message")
    content = msg.get("content") if isinstance(msg, dict) else None
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    return (
        entry.get("type") == "user"
        and isinstance(blocks, list)
        and bool(blocks)
        and all(
            isinstance(b, dict) and b.get("type") == "text" and _NOTICE.fullmatch(str(b.get("text", "")).strip())
            for b in blocks
        )
    )


def _own(entry: Entry) -> Entry:
    """A copy of ``entry`` that may be changed: the entry, its message, the content list and its blocks
    are new; anything deeper is shared (prune never changes it)."""
    mine = dict(entry)
    msg = entry.get("message")
    if isinstance(msg, dict):
        mine["message"] = msg = dict(msg)
        if isinstance(msg.get("content"), list):
            msg["content"] = [dict(b) if isinstance(b, dict) else b for b in msg["content"]]
    return mine


def _is_dead(block: Any, dead: set[str]) -> bool:
    kind = block.get("type") if isinstance(block, dict) else None
    return (kind == "tool_use" and block.get("id") in dead) or (
        kind == "tool_result" and block.get("tool_use_id") in dead
    )


def _as_seal(entry: Entry) -> Entry:
    """The trailing error turned into the seal: neutral text, and both of the CLI's never-send markers."""
    seal = dict(entry)
    msg = entry.get("message")
    seal["message"] = {
        **(msg if isinstance(msg, dict) else {"type": "message", "role": "assistant"}),
        "model": SYNTHETIC_MODEL,
        "content": [{"type": "text", "text": SEAL_TEXT}],
    }
    seal["isApiErrorMessage"] = True
    return seal


def prune(entries: list[Entry], policy: PrunePolicy | None = None) -> PruneResult:
    """Remove or rewrite debris; see the module docstring. ``entries`` is not modified."""
    policy = policy or PrunePolicy()
    out = list(entries)
    result = PruneResult(entries=[])
    drop: set[str] = set()
    rewritten: set[str] = set()

    ids = denial_ids(out)
    dead = set(ids if policy.keep_denials <= 0 else ids[: max(0, len(ids) - policy.keep_denials)])
    result.denials_dropped = len(dead)
    leaf = _last_message_index(out)
    # One pass with the cheap tests first: this loop runs over every entry of every resume (100K+).
    for i, entry in enumerate(out):
        uid, etype = entry.get("uuid"), entry.get("type")
        blocks: list[Any] = _content(entry) or []
        if dead:
            for block in blocks:
                # A tool_use has an "id", a tool_result a "tool_use_id"; _is_dead confirms the kind.
                if isinstance(block, dict) and (block.get("id") in dead or block.get("tool_use_id") in dead):
                    entry = out[i] = _own(entry)
                    blocks = [b for b in entry["message"]["content"] if not _is_dead(b, dead)]
                    entry["message"]["content"] = blocks
                    entry.pop("toolUseResult", None)
                    if uid:
                        (rewritten if blocks else drop).add(uid)
                    break
        if policy.drop_api_errors and uid and is_api_error(entry):
            if i == leaf and etype == "assistant" and policy.seal_leaf:
                # Kept as the seal: the CLI never sends it, and dropping it would leave a user leaf.
                out[i] = _as_seal(entry)
                rewritten.add(uid)
            else:
                drop.add(uid)
            continue
        if not policy.neutralize_interrupts or etype != "user":
            continue
        hits = [j for j, b in enumerate(blocks) if isinstance(b, dict) and _is_interrupted_result(entry, b)]
        if hits:
            mine = out[i] = entry if entry is not entries[i] else _own(entry)
            for j in hits:
                mine["message"]["content"][j].update(content=policy.interrupt_text, is_error=False)
            mine.pop("toolUseResult", None)
            if uid:
                rewritten.add(uid)
        elif uid and _is_interrupt_notice(entry):
            drop.add(uid)

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
    ``leafUuid``) past dropped entries to the nearest surviving ancestor.

    Returns a new list; an entry whose link changes is copied, ``entries`` is not modified.
    """
    if not drop:
        return list(entries)
    parent_of = {e["uuid"]: e.get("parentUuid") for e in entries if e.get("uuid") in drop}

    def survivor(uid: str) -> str | None:
        node: str | None = uid
        seen: set[str] = set()
        while node in drop and node not in seen:  # None is never in drop; seen guards a cycle
            seen.add(node)
            node = parent_of.get(node)
        return None if node in drop else node

    kept: list[Entry] = []
    for entry in entries:
        if entry.get("uuid") in drop:
            continue
        parent, leaf = entry.get("parentUuid"), entry.get("leafUuid")
        if parent in drop or leaf in drop:
            entry = dict(entry)
            if parent in drop:
                entry["parentUuid"] = survivor(parent)
            if leaf in drop:
                entry["leafUuid"] = survivor(leaf)
        kept.append(entry)
    return kept


def _outer(entry: Entry) -> Entry:
    return {k: entry[k] for k in OUTER_FIELDS if k in entry}


def _heal(entries: list[Entry], text: str, added: list[str]) -> list[Entry]:
    """Give every unanswered tool_use a neutral result, in a user entry right after the last block of
    its assistant message; that entry's first child is re-pointed to the heal."""
    answered: set[Any] = set()
    calls: list[tuple[int, Any]] = []
    for i, entry in enumerate(entries):
        is_assistant = entry.get("type") == "assistant"
        for block in _content(entry) or ():
            if isinstance(block, dict):
                kind = block.get("type")
                if kind == "tool_result":
                    answered.add(block.get("tool_use_id"))
                elif kind == "tool_use" and is_assistant:
                    calls.append((i, block.get("id")))
    orphans: dict[int, list[str]] = {}
    for i, tid in calls:
        if tid not in answered:
            orphans.setdefault(i, []).append(str(tid))
    if not orphans:
        return list(entries)

    entries = list(entries)
    out: list[Entry] = []
    done = 0  # entries[:done] are in out
    holders = sorted(orphans)
    k = 0
    while k < len(holders):
        i = holders[k]
        pending = orphans[i]
        k += 1
        # Heal after the last block of this assistant message, gathering its other blocks' orphans.
        while i + 1 < len(entries) and _same_message(entries[i], entries[i + 1]):
            i += 1
            if k < len(holders) and holders[k] == i:
                pending = pending + orphans[i]
                k += 1
        holder = entries[i]
        uid = holder.get("uuid")
        heal: Entry = {
            **_outer(holder),
            "type": "user",
            # Named after its parent, so a CLI entry written under it is stored under the real one.
            "uuid": made_up_id(HEAL, uid) if isinstance(uid, str) and uid else f"{HEAL}-{secrets.token_hex(6)}",
            "parentUuid": holder.get("uuid"),
            "timestamp": holder.get("timestamp"),
            "message": {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": tid, "content": text, "is_error": False} for tid in pending
                ],
            },
        }
        # Its first child is almost always the next entry; orphans are rare, so a scan is cheap.
        child = next((j for j in range(i + 1, len(entries)) if entries[j].get("parentUuid") == uid), None)
        if child is not None:
            entries[child] = {**entries[child], "parentUuid": heal["uuid"]}
        out.extend(entries[done : i + 1])
        out.append(heal)
        done = i + 1
        added.append(heal["uuid"])
    out.extend(entries[done:])
    return out


def _same_message(entry: Entry, nxt: Entry) -> bool:
    """``nxt`` is another block of ``entry``'s assistant message (2.1.332 writes one entry per block)."""
    return nxt.get("type") == "assistant" and _msg_id(nxt) is not None and _msg_id(nxt) == _msg_id(entry)


def _msg_id(entry: Entry) -> str | None:
    msg = entry.get("message")
    return msg.get("id") if isinstance(msg, dict) and isinstance(msg.get("id"), str) else None


def _last_message_index(entries: list[Entry]) -> int | None:
    for i in range(len(entries) - 1, -1, -1):
        entry = entries[i]
        if entry.get("type") in MESSAGE_TYPES and entry.get("uuid") and not entry.get("isSidechain"):
            return i
    return None


def _seal(entries: list[Entry], added: list[str]) -> list[Entry]:
    last = _last_message_index(entries)
    leaf = entries[last] if last is not None else None
    if leaf is None or leaf.get("type") != "user":
        return entries
    tail = next(
        (e for e in reversed(entries) if e.get("uuid") and "parentUuid" in e and not e.get("isSidechain")), leaf
    )
    parent = tail.get("uuid")
    # Named after its parent: the CLI writes its next entry under the seal, and the store keeps that
    # entry under the parent instead (stores/chain.py), so the stored chain never names the seal.
    seal_id = made_up_id(SEAL, parent) if isinstance(parent, str) and parent else f"{SEAL}-{secrets.token_hex(6)}"
    seal: Entry = {
        **_outer(leaf),
        "type": "assistant",
        "uuid": seal_id,
        "parentUuid": parent,
        "timestamp": leaf.get("timestamp"),
        "isApiErrorMessage": True,
        "message": {
            "id": seal_id,
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
