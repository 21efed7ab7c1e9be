"""Which filesystem a path lives on, and whether it is a network filesystem.

A run dir on NFS, SMB or another network filesystem cannot keep ``sessions.db`` in WAL mode (WAL
needs shared memory that every reader maps, which a network filesystem does not provide), and file
locks there may be local to one client. ``stores.schema`` asks ``run_dir_mount`` and opens the
database with a rollback journal there; the runtime says so once (``core.words``: ``network_fs``).

How each platform is asked:
    - Linux: ``/proc/self/mountinfo``: the mount whose device is the path's (``st_dev``), the
      longest mount point over the path, with FUSE's subtype (``fuse.sshfs``) and the kernel's octal
      escapes (``\\040`` for a space) decoded; then ``statfs(2)``'s ``f_type`` (through ``ctypes``),
      which also answers where ``/proc`` cannot be read.
    - macOS: ``statfs(2)``'s ``f_fstypename`` (``nfs``, ``smbfs``, ``afpfs``, ``webdav``...).
    - Windows: ``GetDriveTypeW`` of the path's drive or share (``DRIVE_REMOTE``: a mapped drive or a
      ``\\\\server\\share`` path).

Guarantees:
    - ``run_dir_mount`` never raises and never blocks on the network beyond one ``stat``/``statfs``
      of the path (the mount table is a local file).
    - A path that does not exist yet is judged by its nearest existing parent.
Not guaranteed:
    - FUSE filesystems not in ``NETWORK_FS_TYPES`` count as local (``fuse`` alone says nothing about
      where the data is).
    - Other platforms (the BSDs): "cannot tell", treated as local.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

# Filesystem types (as /proc/self/mountinfo and macOS name them) whose files live on another machine,
# or are shared with one: SQLite's WAL and flock cannot be trusted across them.
NETWORK_FS_TYPES = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb",
        "smb2",
        "smb3",
        "smbfs",  # macOS, older Linux
        "ncpfs",
        "9p",  # WSL 2's Windows drives, Docker Desktop and VM shared folders
        "drvfs",  # WSL 1's Windows drives
        "afpfs",  # macOS: Apple Filing Protocol
        "webdav",  # macOS
        "davfs",
        "fuse.davfs2",
        "fuse.sshfs",
        "sshfs",
        "fuse.rclone",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "fuse.juicefs",
        "fuse.glusterfs",
        "glusterfs",
        "ceph",
        "fuse.ceph",
        "fuse.ceph-fuse",
        "cephfs",
        "lustre",
        "gpfs",
        "beegfs",
        "afs",
        "openafs",
        "coda",
        "ocfs2",
        "gfs2",
        "orangefs",
        "pvfs2",
        "vboxsf",  # VirtualBox shared folders
        "vmhgfs",  # VMware shared folders
        "fuse.vmhgfs-fuse",
        "prl_fs",  # Parallels shared folders
        "remote",  # Windows: GetDriveTypeW said DRIVE_REMOTE
    }
)

# statfs(2) f_type on Linux for the network filesystems among NETWORK_FS_TYPES (linux/magic.h and the
# filesystems' own headers). FUSE (0x65735546) is not here: its subtype is only in the mount table.
NETWORK_MAGIC = {
    0x6969: "nfs",
    0x517B: "smb",
    0xFF534D42: "cifs",
    0xFE534D42: "smb2",
    0x564C: "ncpfs",
    0x01021997: "9p",
    0x00C36400: "ceph",
    0x5346414F: "afs",
    0x6B414653: "afs",
    0x73757245: "coda",
    0x7461636F: "ocfs2",
    0x01161970: "gfs2",
    0x0BD00BD0: "lustre",
    0x47504653: "gpfs",
    0x786F4256: "vboxsf",
    0x20030528: "orangefs",
}

MOUNTINFO = Path("/proc/self/mountinfo")
_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Mount:
    """The filesystem a path is on.

    Attributes:
        point: its mount point ("" when not known, e.g. from ``statfs`` alone).
        fstype: its type as the OS names it (``ext4``, ``nfs4``, ``fuse.sshfs``, ``smbfs``; ``remote``
            for a Windows network drive).
        source: what is mounted (``server:/export``, ``//server/share``; "" when not known).
    """

    point: str
    fstype: str
    source: str = ""

    @property
    def is_network(self) -> bool:
        return self.fstype.lower() in NETWORK_FS_TYPES


@dataclass(frozen=True)
class MountLine:
    """One line of ``/proc/<pid>/mountinfo``."""

    device: tuple[int, int]
    point: str
    fstype: str
    source: str


class StatFs(ctypes.Structure):
    """macOS ``struct statfs`` (64-bit inodes: arm64's ``statfs``, x86_64's ``statfs$INODE64``)."""

    _fields_ = [
        ("f_bsize", ctypes.c_uint32),
        ("f_iosize", ctypes.c_int32),
        ("f_blocks", ctypes.c_uint64),
        ("f_bfree", ctypes.c_uint64),
        ("f_bavail", ctypes.c_uint64),
        ("f_files", ctypes.c_uint64),
        ("f_ffree", ctypes.c_uint64),
        ("f_fsid", ctypes.c_int32 * 2),
        ("f_owner", ctypes.c_uint32),
        ("f_type", ctypes.c_uint32),
        ("f_flags", ctypes.c_uint32),
        ("f_fssubtype", ctypes.c_uint32),
        ("f_fstypename", ctypes.c_char * 16),
        ("f_mntonname", ctypes.c_char * 1024),
        ("f_mntfromname", ctypes.c_char * 1024),
        ("f_flags_ext", ctypes.c_uint32),
        ("f_reserved", ctypes.c_uint32 * 7),
    ]


def _unescape(field: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[MountLine]:
    """The lines of a ``mountinfo`` file; malformed lines are skipped.

    Format (proc(5)): ``id parent major:minor root point options [optional...] - fstype source super``.
    """
    mounts: list[MountLine] = []
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or not rest:
            continue
        major, _, minor = fields[2].partition(":")
        if not (major.isdigit() and minor.isdigit()):
            continue
        source = _unescape(rest[1]) if len(rest) > 1 else ""
        mounts.append(MountLine((int(major), int(minor)), _unescape(fields[4]), _unescape(rest[0]), source))
    return mounts


def _covers(point: str, path: str) -> bool:
    return point == "/" or path == point or path.startswith(point.rstrip("/") + "/")


def mount_from_table(path: str, mounts: list[MountLine], device: tuple[int, int] | None = None) -> Mount | None:
    """The mount ``path`` (absolute, resolved) is on: among the mounts of its ``device`` when any
    matches, else among all, the longest mount point over it (the later of equal ones: it is on top)."""
    same_device = [m for m in mounts if device is not None and m.device == device]
    best: MountLine | None = None
    for m in same_device or mounts:
        if _covers(m.point, path) and (best is None or len(m.point) >= len(best.point)):
            best = m
    if best is None and same_device:
        best = same_device[-1]  # a bind mount of a subfolder: the device alone says which filesystem
    return None if best is None else Mount(best.point, best.fstype, best.source)


def _existing(path: Path) -> Path:
    """``path`` resolved, or its nearest existing parent (a run dir not created yet)."""
    here = Path(os.path.abspath(path))
    while not here.exists() and here.parent != here:
        here = here.parent
    return here.resolve()


def run_dir_mount(path: str | os.PathLike[str]) -> Mount | None:
    """The filesystem ``path`` is (or will be) on; None when it cannot be told. Never raises."""
    try:
        return _mount_of(_existing(Path(path)))
    except (OSError, ValueError, AttributeError):
        return None


def is_network(path: str | os.PathLike[str]) -> bool:
    """``path`` is on a network filesystem (False when it cannot be told)."""
    found = run_dir_mount(path)
    return found is not None and found.is_network


if sys.platform == "win32":
    _DRIVE_REMOTE = 4

    def _mount_of(path: Path) -> Mount | None:
        from ctypes import wintypes

        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        kernel32.GetDriveTypeW.argtypes = [wintypes.LPCWSTR]
        kernel32.GetDriveTypeW.restype = wintypes.UINT
        root = path.anchor  # "C:\\" or "\\\\server\\share\\"
        kind = kernel32.GetDriveTypeW(root)
        return Mount(root, "remote" if kind == _DRIVE_REMOTE else f"drive-type-{kind}", root)

elif sys.platform == "darwin":

    def _mount_of(path: Path) -> Mount | None:
        import platform

        libc = ctypes.CDLL(None, use_errno=True)
        call = getattr(libc, "statfs" if platform.machine() == "arm64" else "statfs$INODE64")
        info = StatFs()
        if call(os.fsencode(path), ctypes.byref(info)) != 0:
            return None
        return Mount(os.fsdecode(info.f_mntonname), os.fsdecode(info.f_fstypename), os.fsdecode(info.f_mntfromname))

else:

    def statfs_magic(path: Path) -> int | None:
        """``statfs(2)``'s ``f_type`` for ``path`` (Linux), or None."""
        # struct statfs starts with f_type, a C long (__fsword_t); the rest (120 bytes on x86_64) is
        # room the call fills.
        buffer = (ctypes.c_long * 32)()
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.statfs(os.fsencode(path), ctypes.byref(buffer)) != 0:
            return None
        return int(buffer[0]) & 0xFFFFFFFF

    def _mount_of(path: Path) -> Mount | None:
        if not sys.platform.startswith("linux"):
            return None
        magic = statfs_magic(path)
        found: Mount | None = None
        try:
            table = MOUNTINFO.read_bytes().decode("utf-8", "surrogateescape")
        except OSError:
            table = ""
        if table:
            st = os.stat(path)
            found = mount_from_table(
                os.fsdecode(path), parse_mountinfo(table), (os.major(st.st_dev), os.minor(st.st_dev))
            )
        if magic in NETWORK_MAGIC and (found is None or not found.is_network):
            # The kernel's word on the filesystem beats a table that lies about it (another namespace).
            return Mount(found.point if found else "", NETWORK_MAGIC[magic], found.source if found else "")
        return found
