"""The Windows Job object (issue 16, build item 2): it cannot run here, so its structures are checked
against the Windows x64 ABI (sizes and offsets from the Windows SDK headers), and the module imports
and does nothing elsewhere. ``mypy --platform win32`` (scripts/test) type-checks the kernel32 calls."""

from __future__ import annotations

import ctypes
import os
import struct

import pytest

from flower_magic.core import winjob


@pytest.mark.skipif(struct.calcsize("P") != 8, reason="the x64 layout")
def test_the_limit_structures_have_windows_x64_layout() -> None:
    assert ctypes.sizeof(winjob.IoCounters) == 48
    assert ctypes.sizeof(winjob.BasicLimitInformation) == 64
    assert ctypes.sizeof(winjob.ExtendedLimitInformation) == 144
    assert winjob.BasicLimitInformation.LimitFlags.offset == 16
    assert winjob.BasicLimitInformation.Affinity.offset == 48
    assert winjob.ExtendedLimitInformation.IoInfo.offset == 64
    assert winjob.ExtendedLimitInformation.ProcessMemoryLimit.offset == 112


def test_the_job_kills_its_processes_when_its_last_handle_closes() -> None:
    limits = winjob.kill_on_close_limits()
    assert limits.BasicLimitInformation.LimitFlags == 0x2000  # JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
    raw = bytes(limits)
    assert raw[16:20] == (0x2000).to_bytes(4, "little") and raw.count(0) == len(raw) - 1


def test_elsewhere_assign_does_nothing() -> None:
    assert winjob.assign(os.getpid()) is False
