"""OS file locks: the one place flower asks the operating system for an exclusive lock on an open file.

The run lock (``run.lock``) and the manifest's merge lock (``.lock``) both come here, and so does
the question "is the run lock held?" (``core.runlock.held``: a shared lock tried and let go at once).
One call per platform, chosen when a lock is first taken, so ``import flower_magic`` never imports ``fcntl`` or
``msvcrt`` and the package imports on every platform:

- POSIX (Linux, macOS): ``flock(2)``, through the ``fcntl`` module, or through libc with ``ctypes``
  on a Python built without ``fcntl`` (the same system call, so the same guarantees).
- Windows: ``LockFileEx`` on one byte at ``LOCK_BYTE_OFFSET`` (``ctypes``; ``msvcrt`` maps the file
  descriptor to its handle).

Why not ``filelock`` or ``portalocker``: ``filelock`` opens its lock file with ``O_TRUNC`` (a refused
process would wipe the holder record ``run.lock`` carries), deletes the file on release (``run.lock``
must never be replaced, or two processes can lock two files under one name) and, where ``fcntl`` is
missing, falls back to a lock made of a file's existence, which ``kill -9`` leaves stale.
``portalocker`` needs ``pywin32`` on Windows and locks the file from byte 0; Windows locks are
mandatory, so the refused process could not read who holds the lock. Both would be a dependency for
three dozen lines.

Guarantees:
    - A lock belongs to the open file: closing the descriptor releases it, and so does the process
      ending however it ends (``kill -9``, a crash, TerminateProcess): a lock is never stale.
    - ``try_lock`` never waits; ``lock`` waits until the lock is free.
    - Two descriptors of the same file exclude each other, within one process too (an exclusive
      lock excludes every other lock; a shared one only an exclusive one: two shared locks coexist).
    - ``unlock`` lets go at once (Windows would otherwise release a closed handle's lock only "when
      resources allow").
    - On Windows the locked byte lies far past anything written to the file, so its contents stay
      readable by other processes while it is locked.
Not guaranteed:
    - Exclusion between hosts on a network filesystem (``flock`` may be local to one client there;
      see ``core.mount``).
    - The moment Windows releases a dead process's lock: it does so "when resources allow",
      normally at once.
"""

from __future__ import annotations

import errno
import sys
from typing import Any

# Windows locks are mandatory: a locked byte cannot be read by anyone else. The lock sits at 1 GiB
# (SQLite's "pending byte" does the same for the same reason), far past the few hundred bytes of a
# lock file's record; locking past the end of a file is allowed and does not grow it.
LOCK_BYTE_OFFSET = 1 << 30

_LOCK_SH = 1  # flock(2)'s operations: the same numbers on Linux, macOS and the BSDs
_LOCK_EX = 2
_LOCK_NB = 4
_LOCK_UN = 8


def try_lock(fd: int, *, shared: bool = False) -> bool:
    """Take an exclusive (or ``shared``) lock on the open file ``fd`` without waiting.

    A shared lock needs only read access (a descriptor opened ``O_RDONLY``), so a reader can ask
    whether an exclusive holder is there without write permission and without making one
    prober wait for another.

    Returns:
        True when this descriptor now holds the lock; False when another open file holds one that
        conflicts.

    Raises:
        OSError: the filesystem refuses locks altogether.
    """
    return _os_lock(fd, wait=False, shared=shared)


def unlock(fd: int) -> None:
    """Let go of the lock this descriptor holds (nothing happens when it holds none).

    Raises:
        OSError: the filesystem refuses locks altogether.
    """
    _os_unlock(fd)


def lock(fd: int) -> None:
    """Take an exclusive lock on the open file ``fd``, waiting as long as another open file holds it.

    Raises:
        OSError: the filesystem refuses locks altogether.
    """
    _os_lock(fd, wait=True)


def _libc_flock(fd: int, operation: int) -> bool:
    """``flock(2)`` through libc, for a POSIX Python without the ``fcntl`` module."""
    import ctypes
    import os

    libc = ctypes.CDLL(None, use_errno=True)
    wait = not operation & _LOCK_NB
    while libc.flock(fd, operation) != 0:
        code = ctypes.get_errno()
        if code == errno.EINTR:
            continue
        if code in (errno.EWOULDBLOCK, errno.EAGAIN) and not wait:
            return False
        raise OSError(code, os.strerror(code))
    return True


if sys.platform == "win32":
    _LOCKFILE_FAIL_IMMEDIATELY = 0x1
    _LOCKFILE_EXCLUSIVE_LOCK = 0x2
    _ERROR_LOCK_VIOLATION = 33  # another handle holds the byte
    _ERROR_IO_PENDING = 997  # the same, reported for a handle opened for overlapped I/O

    _ERROR_NOT_LOCKED = 158  # UnlockFileEx on a byte this handle does not hold

    def _kernel32() -> tuple[Any, Any]:
        """kernel32 and the OVERLAPPED structure that says which byte (``LOCK_BYTE_OFFSET``)."""
        import ctypes
        from ctypes import wintypes

        class Overlapped(ctypes.Structure):
            _fields_ = [
                ("Internal", ctypes.c_void_p),  # pointer-sized: the offsets land right on 64-bit Windows
                ("InternalHigh", ctypes.c_void_p),
                ("Offset", wintypes.DWORD),
                ("OffsetHigh", wintypes.DWORD),
                ("hEvent", wintypes.HANDLE),
            ]

        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        kernel32.LockFileEx.argtypes = [
            wintypes.HANDLE,
            wintypes.DWORD,
            wintypes.DWORD,
            wintypes.DWORD,
            wintypes.DWORD,
            ctypes.POINTER(Overlapped),
        ]
        kernel32.LockFileEx.restype = wintypes.BOOL
        kernel32.UnlockFileEx.argtypes = [
            wintypes.HANDLE,
            wintypes.DWORD,
            wintypes.DWORD,
            wintypes.DWORD,
            ctypes.POINTER(Overlapped),
        ]
        kernel32.UnlockFileEx.restype = wintypes.BOOL
        where = Overlapped()
        where.Offset = LOCK_BYTE_OFFSET & 0xFFFFFFFF
        where.OffsetHigh = LOCK_BYTE_OFFSET >> 32
        return kernel32, where

    def _os_lock(fd: int, *, wait: bool, shared: bool = False) -> bool:
        import ctypes
        import msvcrt

        kernel32, where = _kernel32()
        flags = (0 if shared else _LOCKFILE_EXCLUSIVE_LOCK) | (0 if wait else _LOCKFILE_FAIL_IMMEDIATELY)
        # A descriptor from os.open is a synchronous handle: without FAIL_IMMEDIATELY this call
        # returns only once the byte is ours. A shared lock needs GENERIC_READ (O_RDONLY gives it).
        if kernel32.LockFileEx(msvcrt.get_osfhandle(fd), flags, 0, 1, 0, ctypes.byref(where)):
            return True
        code = ctypes.get_last_error()
        if not wait and code in (_ERROR_LOCK_VIOLATION, _ERROR_IO_PENDING):
            return False
        raise ctypes.WinError(code)

    def _os_unlock(fd: int) -> None:
        import ctypes
        import msvcrt

        kernel32, where = _kernel32()
        if kernel32.UnlockFileEx(msvcrt.get_osfhandle(fd), 0, 1, 0, ctypes.byref(where)):
            return
        code = ctypes.get_last_error()
        if code != _ERROR_NOT_LOCKED:
            raise ctypes.WinError(code)

else:

    def _os_lock(fd: int, *, wait: bool, shared: bool = False) -> bool:
        operation = (_LOCK_SH if shared else _LOCK_EX) | (0 if wait else _LOCK_NB)
        try:
            import fcntl
        except ImportError:
            return _libc_flock(fd, operation)
        try:
            fcntl.flock(fd, operation)  # retries EINTR itself
        except BlockingIOError:
            return False
        return True

    def _os_unlock(fd: int) -> None:
        try:
            import fcntl
        except ImportError:
            _libc_flock(fd, _LOCK_UN)
            return
        fcntl.flock(fd, _LOCK_UN)
