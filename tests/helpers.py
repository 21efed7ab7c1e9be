"""Helpers for tests that run flows in separate OS processes, and for waiting on what they do."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import threading
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


NO_POSIX = Path(__file__).with_name("no_posix")  # its sitecustomize.py takes fcntl & co. away from flower_magic


def without_posix(env: dict[str, str], log: Path, *, everyone: bool = False) -> dict[str, str]:
    """``env`` for a Python process in which flower_magic's code cannot import ``fcntl`` or any other
    POSIX-only module (``tests/no_posix/sitecustomize.py``); each refusal is written to ``log``."""
    path = os.pathsep.join(p for p in (str(NO_POSIX), env.get("PYTHONPATH", "")) if p)
    extra = {"PYTHONPATH": path, "NO_POSIX_LOG": str(log)}
    return {**env, **extra, **({"NO_POSIX_FOR": "everyone"} if everyone else {})}


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


def no_key_env(tmp_path: Path, lang: str) -> dict[str, str]:
    """This environment without any credential and with an empty HOME (no ``claude login`` either),
    in ``lang``: what a newcomer without a key has."""
    from flower_magic.core.errors import CLOUD_VARS, CREDENTIAL_VARS

    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    drop = (*CREDENTIAL_VARS, *CLOUD_VARS, "ANTHROPIC_BASE_URL", "CLAUDE_CONFIG_DIR", "ANTHROPIC_MODEL")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(HOME=str(home), FLOWER_LANG=lang, PYTHONUNBUFFERED="1")
    return env


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under ``root``: equal snapshots = nothing was written."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


# Holds a run dir's lock in its own process until its stdin closes (or it is killed); argv: run dir,
# front end, step. Says HELD once it holds it, and the pid of a child it started when asked to.
HOLDER = """
import subprocess, sys
from flower_magic.core import runlock
lock = runlock.acquire(sys.argv[1], front_end=sys.argv[2], step=sys.argv[3])
if len(sys.argv) > 4:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print("CHILD", child.pid, flush=True)
print("HELD", flush=True)
sys.stdin.read()
lock.release()
"""


# Tries the lock from another process: prints GOT (and releases) or REFUSED <pid> <step>.
TRY = """
import sys
from flower_magic.core import runlock
from flower_magic.core.errors import RunLocked
try:
    runlock.acquire(sys.argv[1], front_end="api").release()
except RunLocked as exc:
    print("REFUSED", exc.pid, exc.step)
else:
    print("GOT")
"""


def other_process_tries(run_dir: Path) -> str:
    """``GOT`` when another process could take ``run_dir``'s lock now, else ``REFUSED <pid> <step>``."""
    out = subprocess.run([sys.executable, "-c", TRY, str(run_dir)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


class LockHolder:
    """Another process holding a run dir's lock (a real process: flock is per open file)."""

    def __init__(self, run_dir: Path, front_end: str = "terminal", step: str = "干活", *, with_child: bool = False):
        argv = [sys.executable, "-c", HOLDER, str(run_dir), front_end, step] + (["child"] if with_child else [])
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.child: int | None = None
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("CHILD "):
                self.child = int(line.split()[1])
            if line.strip() == "HELD":
                break
        else:
            raise AssertionError(f"the lock holder ended before holding it (exit {self.proc.wait()})")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def release(self) -> None:
        """Let it release the lock and exit."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)

    def __enter__(self) -> LockHolder:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.__exit__(None, None, None)  # closes the pipes and waits
        with contextlib.suppress(OSError, TypeError):
            os.kill(self.child, 9)  # type: ignore[arg-type]


def running_in(workspace: Path, needle: str) -> bool:
    """A process whose working directory is ``workspace`` and whose command line holds ``needle`` is
    alive (Linux /proc): how a test knows a tool call is running, rather than sleeping and hoping."""
    import os

    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if Path(os.readlink(proc / "cwd")) != workspace.resolve():
                continue
            if needle.encode() in (proc / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


WALK_CHILD = Path(__file__).with_name("walk_child.py")  # runs what `flower` runs, printing every event


class FlowChild:
    """``tests/walk_child.py`` (the ``flower`` workflow) in its own process; its events, read on a thread."""

    def __init__(self, ws: Path, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(WALK_CHILD), *args],
            cwd=ws,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: list[dict[str, Any]] = []
        self.err = ""
        self._out = threading.Thread(target=self._read, daemon=True)
        self._err = threading.Thread(target=self._read_err, daemon=True)
        self._out.start()
        self._err.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self.events.append(json.loads(line))

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        self.err = self.proc.stderr.read()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def in_step(self, step: str, kind: str) -> bool:
        """An event of ``kind`` has come while ``step`` (a step name prefix) was running."""
        current = ""
        for event in list(self.events):
            if event.get("kind") == "step":
                current = str(event.get("text", ""))
            elif event.get("kind") == kind and current.startswith(step):
                return True
        return False

    def wait_for(self, happened: Callable[[], object], what: str, *, give_up_s: float = 120) -> None:
        wait_until(lambda: happened() or self.proc.poll() is not None, what, give_up_s=give_up_s)
        if not happened():
            raise AssertionError(f"the run ended (rc {self.proc.returncode}) before {what}:\n{self.err[-2000:]}")

    def wait(self, timeout: float = 240) -> int:
        rc = self.proc.wait(timeout=timeout)
        self._out.join(timeout=30)
        self._err.join(timeout=30)
        return rc

    def __enter__(self) -> FlowChild:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait()
        self.proc.__exit__(None, None, None)


def claude_processes(workspace: Path) -> dict[int, int]:
    """Live Claude Code CLI processes (the bundled binary) working in ``workspace``: pid -> parent pid."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if Path(os.readlink(entry / "cwd")) != workspace:
                continue
            argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0]
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if argv0.endswith(b"/claude") and stat[0] != "Z":
            found[int(entry.name)] = int(stat[1])
    return found


def command_line(pid: int) -> str:
    """The argv of ``pid`` joined by spaces ("" once it is gone)."""
    try:
        return (Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")).decode(errors="replace")
    except OSError:
        return ""


def is_running(pid: int) -> bool:
    """``pid`` exists and is not a zombie (Linux /proc)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def runners_under(root: Path) -> list[int]:
    """Live background runners (``python -m flower_magic.runner``) working under ``root`` (Linux /proc)."""
    found = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"flower_magic.runner" not in (entry / "cmdline").read_bytes():
                continue
            cwd = os.readlink(entry / "cwd").removesuffix(" (deleted)")
        except OSError:
            continue
        if (cwd == str(root) or cwd.startswith(f"{root}/")) and is_running(int(entry.name)):
            found.append(int(entry.name))
    return found


def stored_session(run_dir: Path, session_id: str, workspace: Path | None = None) -> list[Any] | None:
    """The main transcript of ``session_id`` as the run dir's store holds it (sessions.db, or the
    PostgreSQL its store.json names), read-only; None when nothing is stored."""
    from flower_magic.core.project import project_key
    from flower_magic.stores import open_reader

    store = open_reader(run_dir)
    if store is None:
        return None
    try:
        key: Any = {"project_key": project_key(workspace or run_dir.parent), "session_id": session_id}
        return list(store.load_sync(key) or []) or None
    finally:
        store.close()


# -- a run's files naming a process that does not run it (issue 23, build 5) ---------------------------


class Stranger:
    """A live process that has nothing to do with flower (``sleep``): what a reused pid names."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def __enter__(self) -> Stranger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


def plant_holder(run_dir: Path, pid: int) -> None:
    """``run.lock``'s record and ``live.json`` naming ``pid`` as the run's process, live.json saying the
    run goes on (what was there is kept, only the pid and, for an ended run, the state change).

    After ``kill -9`` of a run's process this is exactly what its pid being reused leaves (the record and
    live.json stay as the dead process wrote them, and their pid now names ``pid``); in a directory
    whose run ended it is a forgery. Each file is written as its own writer writes it: the record in
    place (the lock file is never replaced), live.json whole. Holds no lock.
    """
    import socket
    from dataclasses import replace

    from flower_magic.core import live, runlock

    lock = run_dir / runlock.LOCK_NAME
    found = runlock._decode(lock.read_bytes()) if lock.exists() else None
    since = "2026-01-01T10:00:00+08:00"
    record = (
        replace(found, pid=pid) if found else runlock.Holder(pid, socket.gethostname(), since, "干活", "background")
    )
    with open(lock, "r+b" if lock.exists() else "wb") as f:
        f.write(runlock._encode(record))
        f.truncate()
    path = run_dir / live.LIVE_NAME
    state = (
        json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"front_end": "background", "step": "干活"}
    )
    state.update(pid=pid, boot=live.boot_id())
    if state.get("state") in (None, live.ENDED):
        state["state"] = live.RUNNING
    path.write_text(json.dumps(state, ensure_ascii=False), encoding="utf-8")


# The CSV-cleaning run most end-to-end tests drive: a complete brief, one check, a verdict of "reached".
CSV_BRIEF = (
    "确认书。\n\n## 目标\n清洗 CSV。\n\n## 验收标准\n- clean.py 能运行\n\n## 边界\n不联网。\n\n## 未知与假设\n无\n"
)
CSV_GOAL = "## 目标\nclean.py 能用\n\n## 判定清单\n- clean.py 能运行\n"
CSV_ACHIEVED = "## 结论\n达成\n\n## 理由\n看过了。\n\n## 未通过\n(无)\n"


class CsvModel:
    """A fake model for that run: the clarifier, the goal setter and the judge answer at once; what the
    worker is told is the test's (``work``)."""

    def __call__(self, request: Any) -> Any:
        from flower_magic.testing import text
        from flower_magic.testing.roles import role_of

        canned = {"clarifier": CSV_BRIEF, "goal": CSV_GOAL, "judge": CSV_ACHIEVED}.get(role_of(request))
        return text(canned) if canned is not None else self.work(request)

    def work(self, request: Any) -> Any:
        raise NotImplementedError
