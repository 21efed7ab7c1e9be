"""Windows: a Job object that kills the Claude Code CLI when the process holding it dies.

Windows has no parent-death signal and the SDK runs only an executable as the CLI (no launcher
script in between), so flower ties the CLI to its own process once it has started: it puts the CLI
into a Job object created with ``JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE``, whose only handle this process
holds (not inheritable). When the process ends, however it ends, Windows closes the handle and
terminates every process in the job: the CLI, and the processes the CLI started after it joined.

Guarantees:
    - One job per process, created on first use; ``assign`` never raises (it returns False when the
      CLI could not be put in the job: already gone, or in a job that forbids nesting on Windows 7).
    - Importable on every platform: the structures are plain ``ctypes`` (a test checks their sizes
      against the Windows x64 ABI); only ``assign`` calls ``kernel32``, and only on Windows.
Not guaranteed:
    - The moment between the CLI's start and ``assign`` (the SDK's connect, about 0.3 s): a parent
      that dies then leaves a CLI that has had no prompt yet, and that exits on its stdin's end.
"""

from __future__ import annotations

import ctypes
import sys
from ctypes import wintypes

JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x2000
JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS = 9  # JobObjectExtendedLimitInformation
PROCESS_SET_QUOTA = 0x0100
PROCESS_TERMINATE = 0x0001


# DWORD is spelled c_uint32 (wintypes.DWORD is a C long: 8 bytes on 64-bit Linux and macOS), so the
# layout is Windows' on every platform and a test here can check it.


class IoCounters(ctypes.Structure):
    _fields_ = [
        ("ReadOperationCount", ctypes.c_uint64),
        ("WriteOperationCount", ctypes.c_uint64),
        ("OtherOperationCount", ctypes.c_uint64),
        ("ReadTransferCount", ctypes.c_uint64),
        ("WriteTransferCount", ctypes.c_uint64),
        ("OtherTransferCount", ctypes.c_uint64),
    ]


class BasicLimitInformation(ctypes.Structure):
    _fields_ = [
        ("PerProcessUserTimeLimit", ctypes.c_int64),  # LARGE_INTEGER
        ("PerJobUserTimeLimit", ctypes.c_int64),
        ("LimitFlags", ctypes.c_uint32),
        ("MinimumWorkingSetSize", ctypes.c_size_t),
        ("MaximumWorkingSetSize", ctypes.c_size_t),
        ("ActiveProcessLimit", ctypes.c_uint32),
        ("Affinity", ctypes.c_size_t),  # ULONG_PTR
        ("PriorityClass", ctypes.c_uint32),
        ("SchedulingClass", ctypes.c_uint32),
    ]


class ExtendedLimitInformation(ctypes.Structure):
    _fields_ = [
        ("BasicLimitInformation", BasicLimitInformation),
        ("IoInfo", IoCounters),
        ("ProcessMemoryLimit", ctypes.c_size_t),
        ("JobMemoryLimit", ctypes.c_size_t),
        ("PeakProcessMemoryUsed", ctypes.c_size_t),
        ("PeakJobMemoryUsed", ctypes.c_size_t),
    ]


def kill_on_close_limits() -> ExtendedLimitInformation:
    """The limits the job is created with: kill every process in it when its last handle closes."""
    info = ExtendedLimitInformation()
    info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
    return info


if sys.platform == "win32":
    import threading

    _job: list[int] = []
    _job_lock = threading.Lock()

    def _kernel32() -> ctypes.WinDLL:
        k = ctypes.WinDLL("kernel32", use_last_error=True)
        k.CreateJobObjectW.argtypes = [ctypes.c_void_p, wintypes.LPCWSTR]
        k.CreateJobObjectW.restype = wintypes.HANDLE
        k.SetInformationJobObject.argtypes = [wintypes.HANDLE, ctypes.c_int, ctypes.c_void_p, wintypes.DWORD]
        k.SetInformationJobObject.restype = wintypes.BOOL
        k.OpenProcess.argtypes = [wintypes.DWORD, wintypes.BOOL, wintypes.DWORD]
        k.OpenProcess.restype = wintypes.HANDLE
        k.AssignProcessToJobObject.argtypes = [wintypes.HANDLE, wintypes.HANDLE]
        k.AssignProcessToJobObject.restype = wintypes.BOOL
        k.CloseHandle.argtypes = [wintypes.HANDLE]
        k.CloseHandle.restype = wintypes.BOOL
        return k

    def _this_process_job(k: ctypes.WinDLL) -> int | None:
        with _job_lock:
            if _job:
                return _job[0]
            handle = k.CreateJobObjectW(None, None)  # no security attributes: the handle is not inherited
            if not handle:
                return None
            info = kill_on_close_limits()
            if not k.SetInformationJobObject(
                handle, JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS, ctypes.byref(info), ctypes.sizeof(info)
            ):
                k.CloseHandle(handle)
                return None
            _job.append(int(handle))  # held until this process ends: that is what kills the CLI
            return _job[0]

    def assign(pid: int) -> bool:
        """Put process ``pid`` in this process's kill-on-close job. Never raises."""
        try:
            k = _kernel32()
            job = _this_process_job(k)
            if job is None:
                return False
            process = k.OpenProcess(PROCESS_SET_QUOTA | PROCESS_TERMINATE, False, pid)
            if not process:
                return False
            try:
                return bool(k.AssignProcessToJobObject(job, process))
            finally:
                k.CloseHandle(process)
        except (OSError, AttributeError, ValueError):
            return False

else:

    def assign(pid: int) -> bool:
        """Windows only; elsewhere nothing to do (False)."""
        return False
