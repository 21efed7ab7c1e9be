"""Helpers for tests that run flows in separate OS processes, and for waiting on what they do."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_script(path: Path, body: str) -> Path:
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def run_script(script: Path, *, cwd: Path, env: dict[str, str], timeout: float = 120) -> dict[str, Any]:
    """Run a Python script in a new OS process; its last stdout line must be a JSON object."""
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise AssertionError(f"{script.name} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    last = proc.stdout.strip().splitlines()[-1]
    return dict(json.loads(last))


def wait_until(happened: Callable[[], object], what: str, *, give_up_s: float = 60) -> None:
    """Poll until ``happened()`` is true; fail naming ``what`` if it never does.

    ``give_up_s`` only keeps a broken run from hanging the suite: nothing is asserted about how long
    the wait took (timings belong in bench/).
    """
    give_up = time.monotonic() + give_up_s
    while not happened():
        if time.monotonic() > give_up:
            raise AssertionError(f"{what} never happened")
        time.sleep(0.05)
