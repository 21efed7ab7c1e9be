"""One run of the default workflow, as ``flower`` runs it, for the continuity walk (tests/walk.py).

It parses the ``flower`` command's own flags and runs what ``flower`` runs (a ``front.launch.Launch``
on the same files), with two differences a test needs: outage waits are short
(probes every 0.2 s instead of 15 s) and an interrupt comes by ``SIGUSR1``, with the words in the file
named by ``WALK_INTERRUPT_FILE`` (the terminal's Ctrl-C and typed line, without a terminal), and a
kernel's shutdown by ``SIGUSR2`` (what ``%flower`` does when its kernel goes: the cell's interrupt, then
``Launch.end_now(CLOSED)``, from another thread as the kernel's observer is). Nobody
answers a question (it settles at once), unless ``WALK_QUESTIONS_WAIT`` is set: then it waits.
Every engine event is printed as one JSON line, so the walk knows when to strike.

Exit codes as ``flower``: 0 done, 1 stopped or refused (one line on stderr, as ``flower`` says it);
killed by a signal otherwise. A directory ``flower``
would take for live (``core.live.live_pid``, what ``flower`` asks first) is not run: it says ``live``
and exits ``LIVE_EXIT``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from flower_magic.cli import build_parser, options_from
from flower_magic.core.errors import FlowerError
from flower_magic.core.live import live_pid
from flower_magic.core.resilience import Resilience
from flower_magic.front.launch import Launch, end_on_signals
from flower_magic.front.outcome import Ending

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
    launch = Launch(opts, front_end="terminal", resilience=FAST)
    try:
        launch.plan()
    except FlowerError as exc:
        print(f"flower: {exc}", file=sys.stderr)
        return 1
    starter = launch.apply(view_sink=sink)  # as flower does: the lock before anything is written
    if not os.environ.get("WALK_QUESTIONS_WAIT"):  # else a question waits until the walk kills the run
        starter.channel.nobody_answers()

    def on_usr1(signum: int, frame: Any) -> None:
        words = Path(os.environ["WALK_INTERRUPT_FILE"]).read_text(encoding="utf-8").strip()
        starter.channel.amend(words)  # as the terminal does with the words after a Ctrl-C
        launch.interrupt(words)

    def closed() -> None:
        launch.interrupt(cause=Ending.CLOSED)
        launch.end_now(Ending.CLOSED)

    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGUSR2, lambda signum, frame: threading.Thread(target=closed).start())
    end_on_signals(launch)
    emit("started", pid=os.getpid())
    outcome = await launch.drive()
    emit("done", failed=outcome.step if not outcome.ok else None, error=outcome.why or outcome.ending.value)
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
