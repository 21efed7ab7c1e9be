"""``<run_dir>/run.lock``: one agent per run directory.

Whichever process runs a workflow in a run dir holds an exclusive, non-blocking OS lock on
``run.lock`` for as long as the workflow runs; a second front end (another notebook, a terminal
``flower``, another script using the Python API) is refused with ``RunLocked`` before it writes a
byte. The file is a separate one from the manifest's ``.lock`` (which is held for milliseconds
around each manifest write) and says, while held, who holds it.

Guarantees:
    - At most one process at a time holds the run lock of a run dir. ``acquire`` never waits: it
      holds the lock or raises ``RunLocked`` naming the holder.
    - The OS releases the lock when the holder dies, however it dies (``kill -9`` included): there
      is never a stale lock to clean up. The file descriptor is not inherited by child processes
      (the Claude Code CLI), so a child that outlives its parent does not keep the lock.
    - ``run.lock`` is created once and never replaced, renamed or deleted (a replaced lock file
      would let two processes lock two different files under one name).
    - ``run.lock`` is never opened through a symbolic link: ``acquire`` refuses one (``LinkRefused``,
      nothing created or written, the link's target untouched) and ``holder`` reads none.
    - Re-entry in one process: ``acquire(..., join=True)`` (what ``Workflow.run`` does) joins a lock
      this process already holds, so a workflow started by a front end, or nested in another one,
      never deadlocks on its own lock; the lock is released when the last holder in the process
      releases it. ``acquire(..., join=False)`` (what the front ends do) is exclusive even within
      the process: a second ``%flower`` in a kernel whose previous run is still winding down is
      refused too.
    - The holder record (pid, host, since, the step now running, the front end) is one JSON line
      carrying a CRC of its fields. It is rewritten in place under the lock (at acquire, as steps
      start) and emptied on release. A reader that catches a rewrite half-done sees a CRC mismatch
      and reads again; ``holder`` therefore returns a whole record or None, never a torn one.
    - Whether the lock is held is tried, never read from the record: ``held`` and ``holder`` take a
      shared lock on a read-only descriptor of their own and let it go at once (a holder's exclusive
      lock refuses it). So a holder killed with ``kill -9`` whose pid now names another process, or
      a ``run.lock`` record forged with a live pid, is never taken for a holder; and the holding
      process itself is answered without a try.
    - Nothing that only reads (``held``, ``holder``, ``%flower --status``, the wake banner, the panel
      and its server) waits for the lock, holds it for longer than its try, creates ``run.lock`` or
      changes its bytes, or needs write access to the run dir.
    - A start that meets a reader's try is not refused for it: ``acquire`` tries again for ~150 ms
      (``LOCK_ATTEMPTS``) before it refuses.
    - A clean end empties the record, so a record found when the lock is taken was left by a holder
      that ended without releasing it (killed, crashed, its terminal or kernel gone). ``died_before``
      says so for as long as this process holds the lock; a normal exit is never reported as one.
Not guaranteed:
    - Exclusion across hosts on network filesystems (``flock`` may be local to one host there), nor,
      there, that a run on another host is seen as holding the lock (``held`` tries it as ``acquire``
      does, so both see the same).
    - Exclusion among threads of one process using ``join=True``: the lock is per process.
    - A record that is current after ``kill -9``: the dead holder's record stays in the file until
      the next acquire (``holder`` does not return it: the lock is free).
    - A start refused while a reader that tried the lock was descheduled for longer than
      ``acquire``'s retries (it holds its shared lock between two system calls).
    - A process that forks after acquiring (``multiprocessing`` with fork) shares the lock with its
      child until both have closed it.
Platforms:
    The OS lock is ``core.oslock`` (``flock`` on POSIX, ``LockFileEx`` on Windows, where it covers a
    byte far past the record so the record stays readable); the record is written with a seek and
    a write, which every platform has.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import threading
import time
import zlib
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from types import TracebackType

from flower_magic.core import oslock
from flower_magic.core.durable import BINARY, NOFOLLOW, IsALink, open_own
from flower_magic.core.errors import LinkRefused, RunLocked, ensure_dir
from flower_magic.core.pid import is_alive

LOCK_NAME = "run.lock"
FRONT_ENDS = ("notebook", "terminal", "api", "background")

# A record is a few hundred bytes; anything past this is not ours and is not read further.
MAX_RECORD_BYTES = 64 * 1024

# A refused process reads the holder's record. A holder writes it within a millisecond of taking
# the lock (and a rewrite lasts microseconds), so ten looks 50 ms apart outlast both without making
# the refusal feel slow.
READ_ATTEMPTS = 10
READ_PAUSE_S = 0.05

# A start that finds the lock taken tries again, 10, 20, 40 and 80 ms later, before it is refused: a
# reader asking whether a run is live (``held``: the panel polls) holds it for a few microseconds.
LOCK_ATTEMPTS = 5
LOCK_PAUSE_S = 0.01


@dataclass(frozen=True)
class Holder:
    """Who holds a run lock.

    Attributes:
        pid: the holding process.
        host: its host name.
        since: when it took the lock (ISO 8601, local time with offset).
        step: the step running now ("" before the first one starts).
        front_end: ``notebook``, ``terminal``, ``api`` or ``background`` (``flower_magic.runner``).
    """

    pid: int
    host: str
    since: str
    step: str
    front_end: str


@dataclass
class _Held:
    fd: int
    holder: Holder
    count: int
    found: Holder | None = None  # what a holder that did not release left behind


_held: dict[str, _Held] = {}
_held_lock = threading.Lock()


def lock_path(run_dir: str | os.PathLike[str]) -> Path:
    """``<run_dir>/run.lock`` (the run dir resolved)."""
    return Path(run_dir).expanduser().resolve() / LOCK_NAME


def _encode(holder: Holder) -> bytes:
    fields = asdict(holder)
    fields["check"] = _check(fields)
    return (json.dumps(fields, ensure_ascii=False) + "\n").encode("utf-8")


def _check(fields: dict[str, object]) -> str:
    body = json.dumps({k: v for k, v in fields.items() if k != "check"}, ensure_ascii=False, sort_keys=True)
    return f"{zlib.crc32(body.encode('utf-8')):08x}"


def _decode(data: bytes) -> Holder | None:
    line = data.split(b"\n", 1)[0]
    try:
        fields = json.loads(line.decode("utf-8"))
        if not isinstance(fields, dict) or fields.get("check") != _check(fields):
            return None
        holder = Holder(
            pid=fields["pid"],
            host=fields["host"],
            since=fields["since"],
            step=fields["step"],
            front_end=fields["front_end"],
        )
    except (ValueError, KeyError, TypeError):
        return None
    ok = isinstance(holder.pid, int) and all(
        isinstance(v, str) for v in (holder.host, holder.since, holder.step, holder.front_end)
    )
    return holder if ok else None


def _write(fd: int, holder: Holder) -> None:
    data = _encode(holder)
    # Longer-over-shorter or shorter-over-longer: the first line is whole either way once the write
    # returns, and the truncate only drops an old tail after it. (Seek and write rather than pwrite,
    # which Windows lacks; the descriptor is only ever written under _held_lock.)
    os.lseek(fd, 0, os.SEEK_SET)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.ftruncate(fd, len(data))


_FREE = object()  # what _look says of a lock nobody holds


def _look(path: Path, *, record: bool) -> Holder | object | None:
    """Try the lock of ``path`` from here: ``_FREE`` when nobody holds it, else (``record``) the
    record it carries, or None (held, but its record unreadable or not written yet).

    The try is a shared lock on a descriptor of our own, opened read-only, let go at once: a holder's
    exclusive lock refuses it, other lookers' shared ones do not. It writes nothing and creates
    nothing, so it works in a folder this process may only read. A ``run.lock`` that is missing, a
    link, not a regular file, unreadable, or on a filesystem that refuses locks is free: nobody can
    hold it either (``acquire`` would refuse or fail the same way).
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | BINARY | NOFOLLOW)
    except OSError:
        return _FREE
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return _FREE
        if oslock.try_lock(fd, shared=True):
            oslock.unlock(fd)
            return _FREE
        return _decode(os.read(fd, MAX_RECORD_BYTES)) if record else None
    except OSError:
        return _FREE
    finally:
        os.close(fd)


def _alive_here(holder: Holder) -> bool:
    if holder.host != socket.gethostname():
        return True  # another host's pid cannot be checked from here
    return is_alive(holder.pid)


def held(run_dir: str | os.PathLike[str]) -> bool:
    """Some process holds the run lock of ``run_dir`` now: tried (``_look``), not read from the record.

    Never takes the lock for longer than the try, never creates or changes a file, never raises,
    never blocks. True in the holding process itself (without a try: ``held_here``).
    """
    path = lock_path(run_dir)
    with _held_lock:  # no thread of this process is between taking the lock and saying so
        return str(path.parent) in _held or _look(path, record=False) is not _FREE


def holder(run_dir: str | os.PathLike[str], *, attempts: int = 1) -> Holder | None:
    """The current holder's record, or None: nobody holds the lock (``held`` is False; whatever
    record a killed holder left, a reused pid or a forged file included, is not read), or the
    record is unreadable, or it names a process gone from this host.

    Never creates or changes a file, never raises, never blocks (``attempts`` > 1 pauses
    ``READ_PAUSE_S`` between looks, for a holder still writing its record).
    """
    path = lock_path(run_dir)
    key = str(path.parent)
    for n in range(max(1, attempts)):
        if n:
            time.sleep(READ_PAUSE_S)
        with _held_lock:
            entry = _held.get(key)
            found = entry.holder if entry is not None else _look(path, record=True)
        if isinstance(found, Holder) and _alive_here(found):
            return found
    return None


def _refusal(path: Path, found: Holder | None, lang: str) -> RunLocked:
    if found is None:
        return RunLocked(path, pid=None, host="", since="", step="", front_end="", lang=lang)
    return RunLocked(
        path,
        pid=found.pid,
        host=found.host,
        since=found.since,
        step=found.step,
        front_end=found.front_end,
        lang=lang,
    )


class RunLock:
    """This process's hold on a run dir's lock. Release it once (``release`` or ``with``)."""

    def __init__(self, key: str, path: Path) -> None:
        self.path = path
        self._key = key
        self._released = False

    @property
    def held(self) -> bool:
        return not self._released

    def note_step(self, step: str) -> None:
        """Record the step now running in the holder record. Never raises."""
        note_step(self.path.parent, step)

    def release(self) -> None:
        """Give up this hold; the last one in the process unlocks. A second call does nothing."""
        if self._released:
            return
        self._released = True
        with _held_lock:
            entry = _held.get(self._key)
            if entry is None:
                return
            entry.count -= 1
            if entry.count > 0:
                return
            del _held[self._key]
            # Emptied while still locked, so a reader never takes a clean exit's record for a holder.
            with contextlib.suppress(OSError):
                os.ftruncate(entry.fd, 0)
            with contextlib.suppress(OSError):
                os.close(entry.fd)

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def acquire(
    run_dir: str | os.PathLike[str], *, front_end: str, lang: str = "zh", join: bool = False, step: str = ""
) -> RunLock:
    """Take the run lock of ``run_dir`` (created if missing) for this process.

    Args:
        run_dir: the run dir.
        front_end: who runs the workflow: ``notebook``, ``terminal`` or ``api``.
        lang: the language of the ``RunLocked`` message.
        join: when this process already holds the lock, share it instead of refusing.
        step: the step about to run, if known.

    Raises:
        RunLocked: another process holds it (or this one does and ``join`` is False).
        LinkRefused: ``run.lock`` is a symbolic link.
        PathError: the run dir cannot be created or written.
        ValueError: ``front_end`` is not one of ``FRONT_ENDS``.
    """
    if front_end not in FRONT_ENDS:
        raise ValueError(f"front_end must be one of {FRONT_ENDS}, not {front_end!r}")
    folder = ensure_dir("run dir", Path(run_dir).expanduser().resolve())
    path = folder / LOCK_NAME
    key = str(folder)
    for n in range(LOCK_ATTEMPTS):
        if n:
            # Taken: by a holder, or for a moment by a reader asking whether one is there (``held``).
            time.sleep(LOCK_PAUSE_S * 2 ** (n - 1))
        with _held_lock:
            entry = _held.get(key)
            if entry is not None:
                if not join:
                    raise _refusal(path, entry.holder, lang)
                entry.count += 1
                return RunLock(key, path)
            try:
                # Never through a link: a cloned ``run.lock -> ../../notes.md`` would get the holder record
                # and then be truncated to nothing at release; a dangling one would create its target.
                fd = open_own(path, os.O_RDWR | os.O_CREAT)
            except IsALink:
                raise LinkRefused(path, lang) from None
            try:
                locked = oslock.try_lock(fd)
            except BaseException:
                os.close(fd)
                raise
            if locked:
                found = _left_behind(fd)
                since = datetime.now().astimezone().isoformat(timespec="seconds")
                record = Holder(os.getpid(), socket.gethostname(), since, step, front_end)
                with contextlib.suppress(OSError):
                    _write(fd, record)
                _held[key] = _Held(fd, record, 1, found)
                return RunLock(key, path)
            os.close(fd)
    raise _refusal(path, holder(folder, attempts=READ_ATTEMPTS), lang)


def _left_behind(fd: int) -> Holder | None:
    """The record in a lock file just taken: a previous holder's that was never emptied, or None."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return _decode(os.read(fd, MAX_RECORD_BYTES))
    except OSError:
        return None


def died_before(run_dir: str | os.PathLike[str]) -> Holder | None:
    """The record of the previous holder of ``run_dir``'s lock when it ended without releasing it
    (killed, crashed), as found when this process took the lock; None after a clean end, or when this
    process does not hold the lock."""
    with _held_lock:
        entry = _held.get(str(Path(run_dir).expanduser().resolve()))
        return entry.found if entry is not None else None


def held_here(run_dir: str | os.PathLike[str]) -> bool:
    """This process holds the run lock of ``run_dir``."""
    with _held_lock:
        return str(Path(run_dir).expanduser().resolve()) in _held


def note_step(run_dir: str | os.PathLike[str], step: str) -> None:
    """If this process holds the run lock of ``run_dir``, record ``step`` as the one running. Never raises."""
    with contextlib.suppress(OSError, ValueError), _held_lock:
        entry = _held.get(str(Path(run_dir).expanduser().resolve()))
        if entry is None or entry.holder.step == step:
            return
        entry.holder = replace(entry.holder, step=step)
        _write(entry.fd, entry.holder)
