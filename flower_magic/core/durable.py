"""Durable, atomic file writes, bounded reads, and keeping unreadable files aside.

Guarantees:
    - ``write_atomic`` leaves either the old file or the new one, never a mix: it writes a unique
      temp file in the same folder, fsyncs it, ``os.replace``s it over the target and fsyncs the
      folder, so the new content survives a power cut once the call returns.
    - A temp file is named ``.<target>.<pid>.<random>.tmp``; ``sweep_temps`` removes those whose
      writer process is gone (a ``kill -9`` mid-write) or that are older than ``STALE_TEMP_AGE_S``
      (the pid was reused), and never a fresh one a live process is writing.
    - ``read_capped`` never blocks on a FIFO and never reads more than ``max_bytes + 1`` bytes.
    - ``set_aside`` moves a file to a new, unused name and never overwrites anything; ``copy_aside``
      writes a durable copy under such a name and leaves the file where it is.
    - Nothing here writes through a symbolic link: ``write_atomic`` renames its temp over the name (a
      link there is replaced, its target untouched), temps and copies are created ``O_EXCL`` (which
      never follows a link), and ``open_own`` opens a file flower appends to or locks with
      ``O_NOFOLLOW`` (an lstat first where the system has no such flag), refusing a link with
      ``IsALink``.
Not guaranteed:
    - Durability on filesystems that ignore fsync (some network mounts).
    - Liveness checks across machines: a temp written through a shared mount by a process on
      another host is judged by its pid on this host (and by its age).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from flower_magic.core.pid import is_alive

_TEMP_RE = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp$")

# Windows opens a descriptor in text mode ("\n" written as "\r\n", a read stopping at Ctrl-Z)
# unless told otherwise; the flag does not exist elsewhere.
BINARY = getattr(os, "O_BINARY", 0)
# Opening a symbolic link with this fails (ELOOP) instead of opening its target; Windows has no such flag.
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

# A live writer holds its temp for milliseconds (the whole write of a 10 MB manifest takes well
# under a second); a temp an hour old belongs to a dead writer whose pid was reused.
STALE_TEMP_AGE_S = 3600.0
TEMP_NAME_CHARS = 40  # at most 160 bytes of UTF-8, leaving room for the pid, the nonce and .tmp


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


class IsALink(OSError):
    """A file flower keeps is a symbolic link, which it never opens: nothing was written through it."""

    def __init__(self, path: Path) -> None:
        super().__init__(errno.ELOOP, "a symbolic link: flower never writes through one", str(path))


def refuse_link(path: Path) -> None:
    """Raise ``IsALink`` when ``path`` is a symbolic link (dangling or not)."""
    if os.path.islink(path):
        raise IsALink(path)


def open_own(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` of one of flower's own files, never through a symbolic link.

    A run dir cloned with ``run.lock -> ../../notes.md`` must not have the notes truncated, and a
    dangling link must not create its target.

    Raises:
        IsALink: ``path`` is a symbolic link; nothing was opened or created.
        OSError: as ``os.open``.
    """
    if not NOFOLLOW:
        refuse_link(path)  # no O_NOFOLLOW here: the lstat is all there is
    try:
        return os.open(path, flags | NOFOLLOW | BINARY, mode)
    except OSError as exc:
        if os.path.islink(path):  # ELOOP on Linux and macOS, EMLINK on FreeBSD
            raise IsALink(path) from exc
        raise


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably.

    Raises:
        OSError: the folder cannot be written; the target is untouched and no temp file remains.
    """
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    # The temp name carries only the start of the target's: a name near the filesystem's 255-byte limit
    # must still be writable (the temp file only has to share the target's folder).
    tmp = folder / f".{path.name[:TEMP_NAME_CHARS]}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | BINARY, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError) and exc.filename is None:  # a failed write names no file: name it
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    _fsync_dir(folder)


def read_capped(path: Path, max_bytes: int) -> bytes:
    """Read a regular file whole, refusing anything larger than ``max_bytes``.

    Opened non-blocking so a FIFO planted under the name cannot hang the caller.

    Raises:
        FileNotFoundError: there is no such file.
        OSError: it cannot be read, is not a regular file (``EINVAL``) or is too large (``EFBIG``).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | BINARY)
    too_big = OSError(errno.EFBIG, f"larger than {max_bytes} bytes", str(path))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        if st.st_size > max_bytes:
            raise too_big
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as fh:
        # Sized to the file (read(max_bytes) would allocate max_bytes first); one byte more notices
        # a file that grew since fstat, and the rest is then read too.
        data = fh.read(st.st_size + 1)
        if len(data) > st.st_size:
            data += fh.read(max_bytes + 1 - len(data))
    if len(data) > max_bytes:
        raise too_big
    return data


def _stale(cand: Path, pid: int) -> bool:
    # A pid no kernel can have (e.g. ".x.99999999999999999999.0badf00d.tmp"): nobody alive wrote it.
    if not is_alive(pid):
        return True
    try:
        age = time.time() - cand.lstat().st_mtime
    except OSError:
        return False
    return age > STALE_TEMP_AGE_S


def sweep_temps(path: Path) -> list[Path]:
    """Remove temp files of ``path`` left by writers that died mid-write. Returns what was removed."""
    removed: list[Path] = []
    try:
        candidates = list(path.parent.iterdir())
    except OSError:
        return removed
    for cand in candidates:
        m = _TEMP_RE.match(cand.name)
        if not m or m.group("name") != path.name[:TEMP_NAME_CHARS] or not _stale(cand, int(m.group("pid"))):
            continue
        with contextlib.suppress(OSError):
            cand.unlink()
            removed.append(cand)
    return removed


def _aside_names(path: Path, reason: str) -> Iterator[Path]:
    """``<name>.<reason>-<YYYYmmdd-HHMMSS>[-N]`` beside ``path``, N counting up (at most 1000 names)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        yield path.with_name(f"{path.name}.{reason}-{stamp}{f'-{n}' if n else ''}")


def set_aside(path: Path, reason: str = "unreadable") -> Path | None:
    """Move ``path`` to ``<name>.<reason>-<YYYYmmdd-HHMMSS>[-N]`` beside it. Returns the new path.

    Returns None when the file is gone or cannot be moved (the caller goes on either way).
    """
    for target in _aside_names(path, reason):
        if os.path.lexists(target):
            continue
        try:
            # os.link + unlink would refuse to overwrite even against a racing renamer, but between
            # the two calls a writer may os.replace a good file onto ``path`` and the unlink would
            # delete it; a same-second collision among our own writers is handled by this walk.
            os.rename(path, target)
        except OSError:
            return None
        return target
    return None


def copy_aside(path: Path, data: bytes, reason: str) -> Path:
    """Keep ``data`` (what was read from ``path``) durably under a new ``set_aside``-style name beside it.

    ``path`` itself is left alone, so a caller that replaces it next never has a moment without it.

    Raises:
        OSError: no copy could be written (the caller must not replace ``path`` then).
    """
    for target in _aside_names(path, reason):
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | BINARY, 0o644)
        except FileExistsError:
            continue
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                target.unlink()
            raise
        _fsync_dir(path.parent)
        return target
    raise OSError(errno.EEXIST, "no free name to keep a copy under", str(path))
