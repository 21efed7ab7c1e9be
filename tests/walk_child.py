"""One run of the default workflow, as ``flower`` runs it, for the continuity walk (tests/walk.py).

It parses the ``flower`` command's own flags and runs what ``flower`` runs (``go.build`` and
``go.make_runtime`` on the same files), with two differences a test needs: outage waits are short
(probes every 0.2 s instead of 15 s) and an interrupt comes by ``SIGUSR1``, with the words in the file
named by ``WALK_INTERRUPT_FILE`` (the terminal's Ctrl-C and typed line, without a terminal).
Every engine event is printed as one JSON line, so the walk knows when to strike.

Exit codes as ``flower``: 0 done, 1 stopped; killed by a signal otherwise. A directory ``flower``
would take for live (``core.live.live_pid``, what ``flower`` asks first) is not run: it says ``live``
and exits ``LIVE_EXIT``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from flower_magic.cli import build_parser, options_from
from flower_magic.core.live import live_pid
from flower_magic.core.resilience import Resilience
from flower_magic.workflow.go import build, hold_run_dir, make_runtime

LIVE_EXIT = 3
FAST = Resilience(base_delay=0.2, max_delay=1.0, probe_interval=0.2, probe_timeout=1.0, max_offline_wait=120.0)


def emit(kind: str, **fields: Any) -> None:
    print(json.dumps({"kind": kind, **fields}, ensure_ascii=False, default=str), flush=True)


def sink(event: Any) -> None:
    payload = {k: v for k, v in event.payload.items() if isinstance(v, (str, int, float, bool, type(None)))}
    emit(event.kind, text=str(event.text)[:200], **payload)


async def main(argv: list[str]) -> int:
    opts = options_from(build_parser().parse_args(argv))
    pid = live_pid(opts.rundir.path)
    if pid is not None and not opts.new:  # flower would attach to it instead of running
        emit("live", pid=pid)
        return LIVE_EXIT
    lock = hold_run_dir(opts, front_end="terminal")  # as flower does: before anything is written
    try:
        return await _run(opts)
    finally:
        lock.release()


async def _run(opts: Any) -> int:
    starter = build(opts, on_event=sink)
    rt = make_runtime(opts, resilience=FAST)
    starter.channel.nobody_answers()

    def on_usr1(signum: int, frame: Any) -> None:
        words = Path(os.environ["WALK_INTERRUPT_FILE"]).read_text(encoding="utf-8")
        rt.interrupt(words.strip())

    def on_term(signum: int, frame: Any) -> None:
        rt.rescue()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGTERM, on_term)
    emit("started", pid=os.getpid())
    try:
        ctx = await starter.workflow.run(rt, on_event=sink)
    finally:
        starter.channel.cancel_all()
        rt.close()
    failed = ctx.get("_failed_at")
    emit("done", failed=failed, error=getattr(ctx["_results"].get(failed), "error", None) if failed else None)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
