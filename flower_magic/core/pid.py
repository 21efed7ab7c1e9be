"""Whether a process id names a live process on this host, asked the same way on every platform.

``os.kill(pid, 0)`` is the POSIX question; on Windows the same call *terminates* the process (any
signal other than the two console events becomes ``TerminateProcess``), so a liveness check written
that way would kill the holder it asked about. This module asks Windows with ``OpenProcess`` and
``GetExitCodeProcess`` instead.

Guarantees:
    - ``is_alive`` never signals, stops or changes the process it asks about, and never raises.
    - A process owned by someone else counts as alive (it exists; we may not touch it).
Not guaranteed:
    - Telling a reused pid from the original process. Whether a run is live is therefore not asked
      here but of its lock (``core.runlock.held``); a pid only says a recorded holder is gone.
    - A zombie (dead, not yet reaped by its parent) counts as dead on Linux (``/proc``), as alive on
      other POSIX systems.
"""

from __future__ import annotations

import os
import sys


def is_alive(pid: int) -> bool:
    """``pid`` names a process that exists on this host (a pid no process can have: False)."""
    if pid <= 0:
        return False
    if pid == os.getpid():
        return True
    return _exists(pid)


if sys.platform == "win32":
    _PROCESS_QUERY_LIMITED_INFORMATION = 0x1000
    _STILL_ACTIVE = 259
    _ERROR_ACCESS_DENIED = 5

    def _exists(pid: int) -> bool:
        import ctypes
        from ctypes import wintypes

        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        kernel32.OpenProcess.argtypes = [wintypes.DWORD, wintypes.BOOL, wintypes.DWORD]
        kernel32.OpenProcess.restype = wintypes.HANDLE
        kernel32.GetExitCodeProcess.argtypes = [wintypes.HANDLE, ctypes.POINTER(wintypes.DWORD)]
        kernel32.GetExitCodeProcess.restype = wintypes.BOOL
        kernel32.CloseHandle.argtypes = [wintypes.HANDLE]
        if pid > 0xFFFFFFFF:
            return False
        handle = kernel32.OpenProcess(_PROCESS_QUERY_LIMITED_INFORMATION, False, pid)
        if not handle:
            return ctypes.get_last_error() == _ERROR_ACCESS_DENIED
        try:
            code = wintypes.DWORD()
            if not kernel32.GetExitCodeProcess(handle, ctypes.byref(code)):
                return True
            # A process that exited with 259 looks alive: the API's own ambiguity, and rare.
            return code.value == _STILL_ACTIVE
        finally:
            kernel32.CloseHandle(handle)

else:

    def _exists(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        except (OverflowError, ValueError):
            return False  # e.g. a pid read from a file name: no kernel hands out one that large
        return not _zombie(pid)

    def _zombie(pid: int) -> bool:
        """Dead but not yet reaped (Linux ``/proc``): it holds no file, no lock, and never runs
        again. Containers whose first process reaps nobody keep such zombies for good."""
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except (OSError, IndexError):
            return False
