"""The OS lock behind the run lock and the manifest's merge lock (issue 16, build item 1), in real
processes (a lock belongs to an open file, so threads of one process would prove little). Each side
runs either with ``fcntl`` or as on a Python without it (``tests/no_posix``), so the fallback a
non-Linux platform takes is held to the same semantics: exclusive, released when the holder dies
(``kill -9``), never stale, a try that never waits and a lock that waits."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from flower_magic.core import oslock
from tests.helpers import wait_until, without_posix

# argv: the lock file, "try", "wait", "share" (a shared try on a read-only descriptor) or "look" (a
# shared try let go at once, the descriptor kept open). Says GOT or BUSY, then holds what it got (and
# its descriptor) until stdin closes.
LOCKER = """
import os, sys
from flower_magic.core import oslock
how = sys.argv[2]
if how in ("share", "look"):
    fd = os.open(sys.argv[1], os.O_RDONLY)
else:
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
if how == "wait":
    oslock.lock(fd)
    print("GOT", flush=True)
else:
    got = oslock.try_lock(fd, shared=how in ("share", "look"))
    if got and how == "look":
        oslock.unlock(fd)
    print("GOT" if got else "BUSY", flush=True)
sys.stdin.read()
"""

IMPLS = ("fcntl", "no-fcntl")


class Locker:
    """A process that takes (or tries) the lock on ``path``, with or without ``fcntl``."""

    def __init__(self, path: Path, impl: str, log: Path, *, how: str = "try") -> None:
        env = dict(os.environ)
        if impl == "no-fcntl":
            env = without_posix(env, log, everyone=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LOCKER, str(path), how],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def said(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def let_go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)

    def __enter__(self) -> Locker:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.__exit__(None, None, None)


def _tries(path: Path, impl: str, log: Path, how: str = "try") -> str:
    with Locker(path, impl, log, how=how) as other:
        said = other.said()
        other.let_go()
    return said


@pytest.mark.parametrize("holder_impl", IMPLS)
@pytest.mark.parametrize("other_impl", IMPLS)
def test_a_held_lock_refuses_others_and_dies_with_its_holder(tmp_path: Path, holder_impl: str, other_impl: str) -> None:
    """Both ways of taking it are the same flock(2): they exclude each other, and kill -9 frees it at once."""
    path, log = tmp_path / "run.lock", tmp_path / "refused.log"
    with Locker(path, holder_impl, log) as holder:
        assert holder.said() == "GOT"
        assert _tries(path, other_impl, log) == "BUSY"
        os.kill(holder.proc.pid, signal.SIGKILL)
        holder.proc.wait(timeout=30)
        assert _tries(path, other_impl, log) == "GOT"  # no stale lock: free the moment the holder is gone
    refused = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    # The processes without fcntl really went without it: the lock asked, and took the other path.
    assert ("flower_magic.core.oslock fcntl" in refused) == ("no-fcntl" in (holder_impl, other_impl))


@pytest.mark.parametrize("impl", IMPLS)
def test_lock_waits_for_the_holder(tmp_path: Path, impl: str) -> None:
    path, log = tmp_path / ".lock", tmp_path / "refused.log"
    with Locker(path, "fcntl", log) as holder:
        assert holder.said() == "GOT"  # held before the waiter starts
        with Locker(path, impl, log, how="wait") as waiter:
            assert waiter.proc.stdout is not None
            # Room for a lock that does not wait to say GOT: it must stay silent while the holder holds.
            assert select.select([waiter.proc.stdout], [], [], 0.5)[0] == []
            holder.let_go()
            assert waiter.said() == "GOT"
            waiter.let_go()


def test_two_open_files_in_one_process_exclude_each_other(tmp_path: Path) -> None:
    """The run lock's refusal of a second ``%flower`` in the same kernel rests on this."""
    path = tmp_path / "run.lock"
    first = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    second = os.open(path, os.O_RDWR)
    try:
        assert oslock.try_lock(first)
        assert not oslock.try_lock(second)
        os.close(first)
        first = -1
        wait_until(lambda: oslock.try_lock(second), "the lock freed by closing its file")
    finally:
        for fd in (first, second):
            if fd >= 0:
                os.close(fd)


@pytest.mark.parametrize("impl", IMPLS)
def test_a_shared_try_is_refused_by_a_holder_and_by_nobody_else(tmp_path: Path, impl: str) -> None:
    """Issue 23, build 5: whether a run is live is a shared try of its lock on a read-only descriptor
    (``core.runlock.held``). A holder's exclusive lock refuses it; two lookers never refuse each
    other (one would take the other for a holder); and ``unlock`` lets go while the descriptor stays
    open, so a look never keeps a start out."""
    path, log = tmp_path / "run.lock", tmp_path / "refused.log"
    path.write_bytes(b"")
    with Locker(path, "fcntl", log) as holder:
        assert holder.said() == "GOT"
        assert _tries(path, impl, log, "share") == "BUSY"
    with Locker(path, impl, log, how="share") as reader, Locker(path, "fcntl", log, how="share") as other:
        assert (reader.said(), other.said()) == ("GOT", "GOT")
        assert _tries(path, impl, log) == "BUSY"  # a shared lock still keeps an exclusive one out
    with Locker(path, impl, log, how="look") as looker:
        assert looker.said() == "GOT"  # got, and let go at once: its descriptor is still open ...
        assert _tries(path, "fcntl", log) == "GOT"  # ... and holds nothing
    refused = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    assert ("flower_magic.core.oslock fcntl" in refused) == (impl == "no-fcntl")
