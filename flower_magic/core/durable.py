"""Durable, atomic file writes and keeping unreadable files aside.

Guarantees:
    - ``write_atomic`` leaves either the old file or the new one, never a mix: it writes a unique
      temp file in the same folder, fsyncs it, ``os.replace``s it over the target and fsyncs the
      folder, so the new content survives a power cut once the call returns.
    - A temp file is named ``.<target>.<pid>.<random>.tmp``; ``sweep_temps`` removes those whose
      writer process is gone (a ``kill -9`` mid-write), and never one a live process is writing.
    - ``set_aside`` moves a file to a new, unused name and never overwrites anything.
Not guaranteed:
    - Durability on filesystems that ignore fsync (some network mounts).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import time
from pathlib import Path

_TEMP_RE = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp$")


def _fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable; not all platforms let a directory be opened.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably.

    Raises:
        OSError: the folder cannot be written; the target is untouched and no temp file remains.
    """
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(folder)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_temps(path: Path) -> list[Path]:
    """Remove temp files of ``path`` left by writers that died mid-write. Returns what was removed."""
    removed: list[Path] = []
    try:
        candidates = list(path.parent.iterdir())
    except OSError:
        return removed
    for cand in candidates:
        m = _TEMP_RE.match(cand.name)
        if not m or m.group("name") != path.name or _alive(int(m.group("pid"))):
            continue
        with contextlib.suppress(OSError):
            cand.unlink()
            removed.append(cand)
    return removed


def set_aside(path: Path, reason: str = "unreadable") -> Path | None:
    """Move ``path`` to ``<name>.<reason>-<YYYYmmdd-HHMMSS>[-N]`` beside it. Returns the new path.

    Returns None when the file is gone or cannot be moved (the caller goes on either way).
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        suffix = f"-{n}" if n else ""
        target = path.with_name(f"{path.name}.{reason}-{stamp}{suffix}")
        if target.exists():
            continue
        try:
            # os.link + unlink would be race-free against another renamer, but not every filesystem
            # has hard links; a same-second collision is already handled by the exists() walk.
            os.rename(path, target)
        except FileNotFoundError:
            return None
        except OSError:
            return None
        return target
    return None
