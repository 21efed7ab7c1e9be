"""How soon a person sees a run begin (issue 24, d), in real kernels on the demo model:

- **first paint**: from sending the ``%flower`` cell's ``execute_request`` to the first
  ``display_data`` / ``update_display_data`` of that cell on the kernel's iopub channel (read with
  jupyter_client), in three cases: a fresh kernel with ``%load_ext flower_magic`` in the same cell; a
  fresh kernel, ``%flower`` 3 s after ``%load_ext`` (as a person types); a warm kernel (its second
  run). Target ≤ 300 ms. What that first display says is printed too: it must be the run's header,
  saying what it waits for;
- **``%flower --bg``**: from ``execute_request`` to the cell's reply (the cell has returned), in a fresh
  kernel (same cell as ``%load_ext``) and for a second ``--new --bg`` in it. Target ≤ 1 s;
- **``flower --detach``**: the command's wall time in a fresh folder, and the runner's pid in what it
  says. Target ≤ 1 s.

Stdin is allowed, as in JupyterLab (the widget view). flower_magic's bytecode is compiled first, as
an install does. Prints numbers; asserts nothing about time.

    python bench/bench_first_paint.py [--repeat 3] [--only paint,bg,detach]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from queue import Empty
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.kernel import Kernel  # noqa: E402

TASK = "write a short note about CSV cleaning"
RUN = f'%flower --demo --timeout 0 "{TASK}"'
TYPING_S = 3.0
# The installed command itself (not a version manager's shim in front of it, which adds its own time).
_INSTALLED = Path(sys.executable).with_name("flower")
FLOWER = str(_INSTALLED) if _INSTALLED.exists() else "flower"


def _env(home: Path, ws: Path) -> dict[str, str]:
    env = dict(os.environ, HOME=str(home), PYTHONPATH=str(ROOT))
    env.pop("ANTHROPIC_API_KEY", None)
    # An installed package has its bytecode compiled (``main`` compiles it first); without this a
    # machine that sets PYTHONDONTWRITEBYTECODE would measure compiling flower_magic at every import.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # As JupyterLab names a kernel's notebook: no "bound to the starting folder" line comes first.
    env["JPY_SESSION_NAME"] = str(ws / "bench.ipynb")
    return env


def _said(data: dict[str, Any]) -> str:
    return " ".join(str(data.get("text/plain", "")).split())[:90]


def cell(kernel: Kernel, code: str, *, timeout: float = 180) -> tuple[float | None, float, str]:
    """Run ``code``; returns (seconds to its first display or update, seconds to its reply, what the
    first display said). Answers any input prompt with an empty line."""
    kc = kernel.kc
    t0 = time.perf_counter()
    msg_id = kc.execute(code, allow_stdin=True)
    first: float | None = None
    what = ""
    deadline = t0 + timeout
    while time.perf_counter() < deadline:
        try:
            req = kc.get_stdin_msg(timeout=0.001)
            if req["msg_type"] == "input_request":
                kc.input("")
        except Empty:
            pass
        try:
            msg = kc.get_iopub_msg(timeout=0.005)
        except Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind = msg["msg_type"]
        if first is None and kind in ("display_data", "update_display_data"):
            first = time.perf_counter() - t0
            what = _said(msg["content"]["data"])
        if kind == "status" and msg["content"]["execution_state"] == "idle":
            reply = kc.get_shell_msg(timeout=30)
            while reply["parent_header"].get("msg_id") != msg_id:
                reply = kc.get_shell_msg(timeout=30)
            if reply["content"]["status"] != "ok":
                raise SystemExit(f"the cell failed: {reply['content']}")
            return first, time.perf_counter() - t0, what
    raise SystemExit(f"the cell did not end in {timeout} s: {code}")


def drain(kernel: Kernel, quiet_s: float = 0.5) -> None:
    while True:
        try:
            kernel.kc.get_iopub_msg(timeout=quiet_s)
        except Empty:
            return


def _wait_ended(ws: Path, give_up_s: float = 120) -> None:
    """Until the background run in ``ws`` has ended (its run lock is free)."""
    from flower_magic.core.live import live_pid

    deadline = time.monotonic() + give_up_s
    while live_pid(ws / "runs") is not None and time.monotonic() < deadline:
        time.sleep(0.2)


def first_paint(base: Path, repeat: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"same cell as %load_ext": [], f"{TYPING_S:.0f} s after %load_ext": [], "warm": []}
    said: dict[str, str] = {}
    for i in range(repeat):
        for fresh in ("same", "typed"):
            ws = base / f"paint-{fresh}-{i}"
            ws.mkdir(parents=True)
            kernel = Kernel(ws, _env(base / "home", ws))
            try:
                if fresh == "same":
                    label = "same cell as %load_ext"
                    took, _, what = cell(kernel, f"%load_ext flower_magic\n{RUN}")
                else:
                    label = f"{TYPING_S:.0f} s after %load_ext"
                    cell(kernel, "%load_ext flower_magic")
                    time.sleep(TYPING_S)
                    took, _, what = cell(kernel, RUN)
                out[label].append(took if took is not None else float("nan"))
                said.setdefault(label, what)
                if fresh == "typed":
                    drain(kernel)
                    took, _, what = cell(kernel, RUN.replace("%flower ", "%flower --new "))
                    out["warm"].append(took if took is not None else float("nan"))
                    said.setdefault("warm", what)
            finally:
                kernel.close()
    for label, what in said.items():
        print(f"  first paint, {label}, says: {what!r}")
    return out


def bg(base: Path, repeat: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"--bg, same cell as %load_ext": [], "--new --bg, second in the kernel": []}
    for i in range(repeat):
        ws = base / f"bg-{i}"
        ws.mkdir(parents=True)
        kernel = Kernel(ws, _env(base / "home", ws))
        try:
            _, took, _ = cell(kernel, f"%load_ext flower_magic\n{RUN.replace('%flower ', '%flower --bg ')}")
            out["--bg, same cell as %load_ext"].append(took)
            _wait_ended(ws)
            drain(kernel)
            _, took, _ = cell(kernel, RUN.replace("%flower ", "%flower --new --bg "))
            out["--new --bg, second in the kernel"].append(took)
            _wait_ended(ws)
        finally:
            kernel.close()
    return out


def detach(base: Path, repeat: int) -> list[float]:
    times: list[float] = []
    for i in range(repeat):
        ws = base / f"detach-{i}"
        ws.mkdir(parents=True)
        t0 = time.perf_counter()
        done = subprocess.run(
            [FLOWER, "--demo", "--timeout", "0", "--detach", TASK],
            cwd=ws,
            env=_env(base / "home", ws),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        times.append(time.perf_counter() - t0)
        pid = re.search(r"\d{2,}", done.stdout)
        if done.returncode != 0 or pid is None:
            raise SystemExit(f"flower --detach failed: {done.stdout} {done.stderr}")
        if i == 0:
            print(f"  flower --detach says: {done.stdout.strip()!r}")
        _wait_ended(ws)
        if Path(f"/proc/{pid.group()}").exists():
            os.kill(int(pid.group()), signal.SIGTERM)
    return times


def _line(label: str, times: list[float], target_s: float) -> None:
    ms = [t * 1000 for t in times]
    print(
        f"{label}: median {statistics.median(ms):.0f} ms "
        f"({', '.join(f'{x:.0f}' for x in ms)}; target ≤ {target_s * 1000:.0f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="paint,bg,detach", help="which parts, comma-separated")
    args = parser.parse_args()
    parts = set(args.only.split(","))
    base = Path(tempfile.mkdtemp(prefix="bench-paint-"))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "flower_magic")], check=True)
    (base / "home").mkdir()
    if "paint" in parts:
        for label, times in first_paint(base, args.repeat).items():
            _line(f"first paint, {label}", times, 0.3)
    if "bg" in parts:
        for label, times in bg(base, args.repeat).items():
            _line(f"{label}: the cell returned", times, 1.0)
    if "detach" in parts:
        _line("flower --detach returned", detach(base, args.repeat), 1.0)


if __name__ == "__main__":
    main()
