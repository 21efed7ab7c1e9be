"""What trimming costs on resume and what it saves in every request after it.

Part 1: trim a session holding 1K large tool results (all but the newest 20 are spilled): the time
with a fresh spill folder (every file written, each durably), again with the files already there
(nothing written), and as the read-only panel computes it (``write=False``).
Part 2: the request-size effect for a session with 30 large results: the JSON size of the entries
and of the message contents the CLI sends, before and after trimming. Prints numbers; asserts nothing.

    python bench/bench_trim.py [--results 1000] [--chars 2000:20000] [--dir PATH] [--repeat 3]

``--dir`` picks the filesystem to measure (default: a temp folder under the current directory, which
is where a notebook's ``.flower/spill`` lives, rather than /tmp, which may be RAM).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from flower_magic.stores.resume import resume_view
from flower_magic.stores.trim import TrimPolicy, trim

Entry = dict[str, Any]


def session(results: int, chars: tuple[int, int], *, seed: int = 1) -> list[Entry]:
    """A prompt, then ``results`` tool calls with large distinct results, then a closing answer."""
    rng = random.Random(seed)
    entries: list[Entry] = [
        {"type": "user", "uuid": "u-0", "parentUuid": None, "message": {"role": "user", "content": "go"}}
    ]

    def add(type_: str, content: list[dict[str, Any]]) -> None:
        uid = f"u-{len(entries)}"
        entries.append(
            {
                "type": type_,
                "uuid": uid,
                "parentUuid": entries[-1]["uuid"],
                "message": {"role": type_, "content": content},
            }
        )

    for n in range(results):
        tid = f"toolu_{n:05d}"
        add("assistant", [{"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": f"cat logs/{n}.log"}}])
        size = rng.randint(*chars)
        line = f"{n:05d} {rng.getrandbits(64):016x} INFO request handled in 12 ms\n"
        add(
            "user",
            [
                {
                    "tool_use_id": tid,
                    "type": "tool_result",
                    "content": (line * (size // len(line) + 1))[:size],
                    "is_error": False,
                }
            ],
        )
    add("assistant", [{"type": "text", "text": "Done."}])
    return entries


def _sent(entries: list[Entry]) -> list[Any]:
    """What the CLI puts in the request: the messages' contents."""
    return [e["message"]["content"] for e in entries if e.get("type") in ("user", "assistant")]


def _kb(obj: Any) -> float:
    return len(json.dumps(obj, ensure_ascii=False).encode("utf-8")) / 1000


def _median_ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:8.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=1000)
    parser.add_argument("--chars", default="2000:20000", help="size range of each large result, MIN:MAX")
    parser.add_argument("--dir", type=Path, default=Path.cwd())
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    low, high = (int(x) for x in args.chars.split(":"))
    policy = TrimPolicy()

    entries = session(args.results, (low, high))
    print(f"part 1: {args.results} large results ({low}-{high} chars), keep_recent={policy.keep_recent}")
    fresh, again, viewer = [], [], []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(dir=args.dir, prefix=".bench-trim-") as tmp:
            workspace = Path(tmp)
            started = time.perf_counter()
            _, report = trim(entries, policy, workspace)
            fresh.append(time.perf_counter() - started)
            folder = workspace / policy.spill_dirname
            files = sorted(folder.iterdir())
            written = sum(p.stat().st_size for p in files)
            started = time.perf_counter()
            trim(entries, policy, workspace)
            again.append(time.perf_counter() - started)
            started = time.perf_counter()
            trim(entries, policy, workspace / "nowhere", write=False)
            viewer.append(time.perf_counter() - started)
    print(f"  fresh spill folder    {_median_ms(fresh)}   {len(files)} files, {written / 1e6:.1f} MB written")
    print(f"  files already there   {_median_ms(again)}   0 files written")
    print(f"  write=False (panel)   {_median_ms(viewer)}")
    print(f"  cleared {report['cleared']}, kept {report['kept']}, ~{report['chars_saved'] // 4} tokens saved")

    small = session(30, (2000, 8000), seed=2)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix=".bench-trim-") as tmp:
        view = resume_view(small, workspace=Path(tmp), trim=True, write=True)
    print("part 2: 30 large results (2000-8000 chars), resumed with trimming on")
    print(f"  entries JSON           {_kb(small):8.1f} KB -> {_kb(view.entries):8.1f} KB")
    print(f"  request message bodies {_kb(_sent(small)):8.1f} KB -> {_kb(_sent(view.entries)):8.1f} KB")
    print(f"  report: { ({k: v for k, v in view.report.items() if v}) }")


if __name__ == "__main__":
    main()
