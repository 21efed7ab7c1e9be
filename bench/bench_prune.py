"""How fast pruning rewrites a long transcript on resume (target: >= 100K entries/s).

``PruningSessionStore.load`` runs ``resume_view`` (expiry, then ``prune`` with ``relink``) over the whole
session every time the CLI resumes it, so a ten-hour run's 100K entries are rewritten on every resume.
The transcript is generated in CLI 2.1.332's shapes: one entry per assistant block, tool results,
attachments, metadata lines, and the debris pruning exists for (denials, interrupts, outages, a call
cut off by a kill). Prints numbers; asserts nothing.

    python bench/bench_prune.py [--entries 100000] [--repeat 5] [--seed 1]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flower_magic.stores.prune import prune, relink
from flower_magic.stores.resume import resume_view

Entry = dict[str, Any]

SESSION = "5f0c2a44-7d1e-4c55-9a4e-2b1f6e0d9c31"
COMMANDS = ("git status", "ls -la src", "pytest -q tests/test_x.py", "cat README.md", "touch out.txt", "make build")
ECONNREFUSED = "API Error: Connection refused — a firewall or proxy may be blocking it (ECONNREFUSED)"
INTERRUPTED = (
    "The user doesn't want to proceed with this tool use. … Correction to the text above: this call was "
    "stopped while running, not refused before it ran. … The instruction to stop and wait still stands."
)


class _Writer:
    def __init__(self, rng: random.Random, result_chars: tuple[int, int]) -> None:
        self.rng = rng
        self.result_chars = result_chars
        self.entries: list[Entry] = []
        self.tip: str | None = None
        self.calls = 0

    def link(self, type_: str, **fields: Any) -> Entry:
        uid = f"{len(self.entries):08x}-1111-4222-8333-{self.rng.getrandbits(48):012x}"
        entry: Entry = {
            "parentUuid": self.tip,
            "isSidechain": False,
            "type": type_,
            "uuid": uid,
            "timestamp": "2026-03-01T10:00:00.000Z",
            "sessionId": SESSION,
            "cwd": "/work/ws",
            "version": "2.1.332",
            "gitBranch": "main",
            "userType": "external",
            "entrypoint": "sdk-py",
            **fields,
        }
        self.entries.append(entry)
        self.tip = uid
        return entry

    def assistant(self, block: dict[str, Any], msg_id: str, index: int) -> Entry:
        message = {
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "model": "claude-opus-5-5",
            "content": [block],
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 1200, "cache_read_input_tokens": 90000, "output_tokens": 80},
        }
        return self.link("assistant", message=message, apiBlockIndex=index, requestId=f"req_{msg_id}")

    def result(self, tid: str, content: str, **fields: Any) -> Entry:
        block = {"tool_use_id": tid, "type": "tool_result", "content": content, "is_error": False}
        return self.link("user", message={"role": "user", "content": [block]}, **fields)

    def turn(self) -> None:
        rng = self.rng
        msg_id = f"msg_{len(self.entries):08d}"
        blocks: list[dict[str, Any]] = [{"type": "text", "text": "Let me look at that. " * rng.randint(1, 6)}]
        tids = []
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            self.calls += 1
            tid = f"toolu_{self.calls:08d}"
            tids.append(tid)
            blocks.append({"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": rng.choice(COMMANDS)}})
        for index, block in enumerate(blocks):
            self.assistant(block, msg_id, index)
        for tid in tids:
            roll = rng.random()
            if roll < 0.03:
                text = "This command requires approval"
                self.result(tid, text, toolUseResult=f"Error: {text}", toolDenialKind="user-rejected")
                self.entries[-1]["message"]["content"][0]["is_error"] = True
            elif roll < 0.04:
                self.result(tid, INTERRUPTED, toolUseResult="User rejected tool use", toolDenialKind="user-rejected")
                self.entries[-1]["message"]["content"][0]["is_error"] = True
                self.link(
                    "user",
                    message={
                        "role": "user",
                        "content": [{"type": "text", "text": "[Request interrupted by user for tool use]"}],
                    },
                )
            elif roll < 0.045:
                pass  # killed mid-call: an orphan
            else:
                size = rng.randint(*self.result_chars)
                self.result(
                    tid, ("line of output\n" * (size // 15 + 1))[:size], toolUseResult={"stdout": "…", "stderr": ""}
                )

    def outage(self) -> None:
        for attempt in (1, 2):
            self.link(
                "system",
                subtype="api_error",
                level="error",
                error={"formatted": ECONNREFUSED[11:]},
                retryAttempt=attempt,
            )
        message = {
            "id": "0e3c",
            "model": "<synthetic>",
            "role": "assistant",
            "type": "message",
            "content": [{"type": "text", "text": ECONNREFUSED}],
        }
        self.link(
            "assistant", message=message, isApiErrorMessage=True, apiError="connection_failed", error="server_error"
        )


def transcript(n: int, *, seed: int = 1, result_chars: tuple[int, int] = (80, 1500)) -> list[Entry]:
    """A realistic main-chain transcript of about ``n`` entries (CLI 2.1.332 shapes)."""
    rng = random.Random(seed)
    w = _Writer(rng, result_chars)
    while len(w.entries) < n:
        w.entries.append({"type": "queue-operation", "operation": "enqueue", "sessionId": SESSION, "content": "go"})
        w.link(
            "user",
            message={"role": "user", "content": "Carry on with the plan."},
            promptId="p",
            permissionMode="default",
        )
        w.link("attachment", attachment={"type": "date", "content": "2026-03-01"})
        for _ in range(rng.randint(3, 30)):
            w.turn()
            if rng.random() < 0.01:
                w.outage()
        w.link(
            "assistant",
            message={
                "id": "m",
                "role": "assistant",
                "model": "claude-opus-5-5",
                "content": [{"type": "text", "text": "Done for now."}],
            },
        )
        w.entries.append({"type": "last-prompt", "lastPrompt": "Carry on", "leafUuid": w.tip, "sessionId": SESSION})
    return w.entries[:n]


def _time(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    entries = transcript(args.entries, seed=args.seed)
    n = len(entries)
    size_mb = len(json.dumps(entries)) / 1e6
    out = prune(entries)
    print(f"transcript: {n} entries, {size_mb:.1f} MB of JSON")
    print(
        f"prune removed {len(out.dropped)}, rewrote {len(out.rewritten)}, added {len(out.added)}"
        f" ({out.denials_dropped} denied calls)"
    )

    drop = set(out.dropped)
    rows = [
        ("prune (default policy, relink included)", lambda: prune(entries)),
        ("relink alone (the same dropped set)", lambda: relink(entries, drop)),
        ("resume_view: expiry + prune (load() path)", lambda: resume_view(entries, workspace=Path("."))),
        ("for scale: deepcopy of every entry", lambda: [copy.deepcopy(e) for e in entries]),
    ]
    for label, fn in rows:
        seconds = _time(fn, args.repeat)
        print(f"{label:44s} {seconds * 1000:8.1f} ms   {n / seconds / 1000:8.0f}K entries/s")
    print("target: prune + relink >= 100K entries/s")


if __name__ == "__main__":
    main()
