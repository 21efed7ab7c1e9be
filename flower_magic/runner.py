"""A run that is not the kernel: the workflow in a process of its own, followed through its run dir.

``%flower --bg "task"`` and ``flower --detach "task"`` call ``start`` (or ``prepare`` before their
own checks, then ``Starting.begin`` / ``cancel`` and ``wait``: the runner imports the engine
meanwhile): it starts ``python -m flower_magic.runner`` detached from the caller (its own
session on POSIX, its own process group and no console on Windows, outside the caller's job), hands
it the checked options on stdin and waits for one line: ``ready <pid>`` once the runner holds the run
dir's lock and has begun its event log (``Launch.hold``, before the SDK is imported: the caller
returns in well under a second), or the one-line reason it could not start (a ``UserError`` in the
caller, nothing written). What goes wrong after ``ready`` ends the run's log ``failed`` with why, which
a following cell, ``flower --attach`` and ``--status`` say.

The runner then runs the same workflow as a foreground run, with ``core.live.LiveRun`` as its only
view: every event goes to ``events.jsonl``, its state to ``live.json``, and it takes answers, remarks
and stops from ``inbox/``. Its output goes to ``runner.log`` in the run dir. The Claude Code processes
it starts are tied to it (``core.launcher``: they die with it); it is tied to nobody, so a kernel
restart or a closed terminal leaves it running. SIGTERM / SIGHUP record the step in flight
(``Runtime.rescue``) before it goes; ``kill -9`` leaves the step for the next run to resume.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

from flower_magic.core.durable import open_own
from flower_magic.core.errors import FlowerError, UserError
from flower_magic.core.words import say
from flower_magic.front.options import GoOptions

READY = "ready"
START_TIMEOUT_S = 60.0  # the runner imports the engine before it answers; a cold disk can be slow
_children: list[subprocess.Popen[bytes]] = []


def _spec(opts: GoOptions, front_end: str) -> bytes:
    data = asdict(opts)
    data["workspace"] = str(opts.workspace)
    data["run_dir"] = str(opts.run_dir) if opts.run_dir is not None else None
    return json.dumps({"opts": data, "front_end": front_end}, ensure_ascii=False).encode()


def _detached() -> dict[str, Any]:
    if sys.platform == "win32":
        flags = subprocess.CREATE_NEW_PROCESS_GROUP | subprocess.DETACHED_PROCESS
        return {"creationflags": flags | subprocess.CREATE_BREAKAWAY_FROM_JOB}
    return {"start_new_session": True}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # Nothing of the kernel's goes with it: the runner is nobody's child once it has started.
    for name in ("JPY_PARENT_PID", "JPY_SESSION_NAME", "PYDEVD_USE_FRAME_EVAL"):
        env.pop(name, None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def start(opts: GoOptions, *, front_end: str) -> int:
    """Start a background run of ``opts`` (checked and preflighted); returns the runner's pid once it
    holds the run dir's lock and has begun its log (``prepare``, ``begin``, ``wait``).

    Raises:
        UserError: the runner could not start (its own one-line reason, e.g. the run dir is busy).
    """
    starting = prepare(opts)
    starting.begin(opts, front_end=front_end)
    return starting.wait()


class Starting:
    """A runner process started before its run is decided: it imports the engine while the caller
    still checks (``plan``), then ``begin`` hands it the checked options and ``wait`` returns its pid
    once it said ``ready``; ``cancel`` sends it away with nothing written (a mistake was found)."""

    def __init__(self, child: subprocess.Popen[bytes], lang: str) -> None:
        self.child, self.lang = child, lang
        self._said: list[str] = []
        self._done = threading.Event()
        threading.Thread(target=self._read, name="flower-runner-start", daemon=True).start()

    def _read(self) -> None:
        assert self.child.stdout is not None
        for raw in self.child.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self._said.append(line)
            if line.startswith(READY + " ") or line.startswith("error "):
                break
        self._done.set()

    def begin(self, opts: GoOptions, *, front_end: str) -> None:
        """Hand the runner the checked options of its run (``front_end``: who started it)."""
        stdin = self.child.stdin
        assert stdin is not None
        with contextlib.suppress(OSError):
            stdin.write(_spec(opts, front_end))
        with contextlib.suppress(OSError):
            stdin.close()

    def cancel(self) -> None:
        """No run after all: the runner reads no options and leaves, writing nothing. Never raises."""
        child = self.child
        with contextlib.suppress(OSError):
            if child.stdin is not None:
                child.stdin.close()

        def reap() -> None:
            try:
                child.wait(timeout=START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            self._done.wait(1.0)
            with contextlib.suppress(OSError):
                if child.stdout is not None:
                    child.stdout.close()

        threading.Thread(target=reap, name="flower-runner-cancel", daemon=True).start()

    def wait(self) -> int:
        """The runner's pid once it said ``ready``.

        Raises:
            UserError: the runner could not start (its own one-line reason, e.g. the run dir is busy).
        """
        child = self.child
        assert child.stdout is not None
        self._done.wait(START_TIMEOUT_S)
        last = self._said[-1] if self._said else ""
        if last.startswith(READY + " "):
            child.stdout.close()
            _children.append(child)
            # Reaped as soon as it ends: a dead runner left as a zombie would still look alive.
            threading.Thread(target=child.wait, name="flower-runner-reaper", daemon=True).start()
            return int(last.split()[1])
        if child.poll() is None:
            child.kill()
        child.wait()
        with contextlib.suppress(OSError):
            child.stdout.close()  # else a ResourceWarning when the pipe is collected
        why = last[len("error ") :] if last.startswith("error ") else (last or say("runner_silent", self.lang))
        raise UserError(why)


def prepare(opts: GoOptions) -> Starting:
    """Start a runner process for a run of ``opts`` (checked; not yet planned): it begins importing the
    engine at once, in parallel with the caller's own checks; ``begin`` or ``cancel`` it after them.

    Raises:
        UserError: the process could not be made (the OS refused).
    """
    argv = [sys.executable, "-m", "flower_magic.runner"]
    kw = _detached()
    try:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=str(opts.workspace),
            env=_env(),
            **kw,
        )
    except OSError as exc:
        if sys.platform == "win32" and "creationflags" in kw:  # a job that forbids breaking away
            kw["creationflags"] &= ~subprocess.CREATE_BREAKAWAY_FROM_JOB
            child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_env(), **kw)
        else:
            raise UserError(say("runner_failed", opts.lang, why=str(exc))) from None
    assert child.stdin is not None and child.stdout is not None
    return Starting(child, opts.lang)


# -- the runner itself ------------------------------------------------------------------------------


def _tell(line: str) -> None:
    sys.stdout.write(line.replace("\n", " ") + "\n")
    sys.stdout.flush()


def _to_log(path: Path) -> None:
    """From now on stdout and stderr go to ``runner.log``; stdin is nothing."""
    fd = open_own(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)  # never through a link (preflight refused one)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def _options(spec: dict[str, Any]) -> GoOptions:
    data = dict(spec["opts"])
    data["workspace"] = Path(data["workspace"])
    data["run_dir"] = Path(data["run_dir"]) if data.get("run_dir") else None
    return GoOptions(**data).check()


def main() -> int:
    # What planning needs, imported while the caller still checks (it sends the options after).
    import flower_magic.stores.backend
    import flower_magic.workflow.starter  # noqa: F401
    from flower_magic.front.launch import Launch, end_on_signals

    said = sys.stdin.read()
    if not said.strip():
        return 0  # the caller found a mistake and sent nothing (``Starting.cancel``): nothing to do
    try:
        spec = json.loads(said)
        opts = _options(spec)
        launch = Launch(opts, front_end="background", by=str(spec.get("front_end") or ""))
        launch.plan()
        launch.hold()
    except FlowerError as exc:
        _tell(f"error {exc}")
        return 1
    except (ValueError, KeyError, TypeError) as exc:
        _tell(f"error {type(exc).__name__}: {exc}")
        return 2
    # Said once the lock is held and the log begun, before the rest of apply (the SDK's import takes
    # seconds): the caller returns at once with the pid. What goes wrong from here ends the log
    # ``failed`` with why (``Launch.apply``), which the caller's cell and ``--status`` then say.
    _tell(f"{READY} {os.getpid()}")
    _to_log(launch.rundir.runner_log)
    try:
        launch.apply()
    except Exception as exc:
        if not isinstance(exc, FlowerError):
            import traceback

            traceback.print_exception(exc)  # into runner.log
        return 1
    end_on_signals(launch)  # until the process ends
    outcome = launch.run()
    if launch.error is not None and not isinstance(launch.error, FlowerError):
        import traceback

        traceback.print_exception(launch.error)  # into runner.log
    return outcome.exit_code


# jsonschema registers its "iri" / "iri-reference" format checkers when rfc3987_syntax imports, and that
# import builds some 35 Lark grammars: 1.5 s of the SDK's import (python-jsonschema/jsonschema#1428).
# A format checker only runs when a validator is given a FormatChecker; the SDK and mcp, the only users
# of jsonschema in this process, validate tool arguments and results without one, so nothing they check
# changes. Only here: the runner is a process of flower's own, running no person's code (a kernel, where
# a person may check "iri" formats, and Jupyter's own processes keep jsonschema as it is).
UNUSED_IN_RUNNER = ("rfc3987_syntax",)


def _skip_unused_imports() -> None:
    for name in UNUSED_IN_RUNNER:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None: "import name" raises ImportError


if __name__ == "__main__":
    _skip_unused_imports()
    sys.exit(main())
