"""Which filesystem a run dir is on (issue 16, build item 3; acceptance c): the mount-table logic
against a mountinfo fixture with every trap a real table has, the real table and statfs(2) of
filesystems this machine can create (tmpfs, mounted here under a name with spaces), and a real network
filesystem (sshfs from sshd on loopback: the kernel here has no NFS; tests/netfs.py)."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from flower_magic.core import manifest, mount
from flower_magic.core.mount import Mount, mount_from_table, parse_mountinfo
from flower_magic.core.project import project_key
from flower_magic.core.words import network_fs_line
from flower_magic.stores.sqlite import SqliteSessionStore
from flower_magic.testing import FakeAnthropic
from tests.netfs import loopback_sshfs
from tests.walk import Model

# A mount table as /proc/self/mountinfo writes it: a space is \040, a backslash \134; FUSE names its
# subtype; later lines sit on top of earlier ones at the same point.
MOUNTINFO = r"""22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
30 27 0:40 / /home rw,relatime shared:5 - nfs4 filer:/export/home rw,vers=4.2,addr=10.0.0.2
31 30 0:41 / /home/jane\040doe rw,relatime - cifs //nas/jane\040doe rw,vers=3.1.1
32 27 0:42 / /mnt/ssh rw,nosuid,nodev - fuse.sshfs jane@box:/srv rw,user_id=0
33 27 0:43 / /mnt/local\134fuse rw - fuse.portal portal rw
34 27 0:44 / /net rw - autofs /etc/auto.net rw
35 34 0:45 / /net/srv rw - nfs srv:/data rw
36 27 0:40 /proj /srv/bound rw - nfs4 filer:/export/home rw
37 27 0:46 / /mnt/ssh rw - tmpfs tmpfs rw
38 27 0:47 / /mnt/mac rw - smbfs //mac/share rw
bad line without a separator
39 27 x:y / /mnt/broken rw - nfs srv:/broken rw
"""


@pytest.fixture
def table() -> list[mount.MountLine]:
    return parse_mountinfo(MOUNTINFO)


def test_the_table_is_read_as_the_kernel_writes_it(table: list[mount.MountLine]) -> None:
    points = [m.point for m in table]
    assert "/home/jane doe" in points and "/mnt/local\\fuse" in points  # \040 and \134 decoded
    assert "/mnt/broken" not in points and len(table) == 11  # malformed lines skipped
    cifs = next(m for m in table if m.fstype == "cifs")
    assert (cifs.device, cifs.source) == ((0, 41), "//nas/jane doe")


@pytest.mark.parametrize(
    ("path", "fstype", "network"),
    [
        ("/home/jane doe/数据 清洗 🌻 with spaces/runs", "cifs", True),  # the longest mount point wins
        ("/home/jane doe2/runs", "nfs4", True),  # "/home/jane doe" is a prefix, not a parent
        ("/home", "nfs4", True),
        ("/homework/runs", "ext4", False),
        ("/mnt/ssh/proj", "tmpfs", False),  # two mounts at one point: the later is on top
        ("/mnt/local\\fuse/x", "fuse.portal", False),  # FUSE that is not a network filesystem
        ("/net/srv/proj/runs", "nfs", True),  # NFS under an automounter
        ("/mnt/mac/p", "smbfs", True),
        ("/", "ext4", False),
    ],
)
def test_the_longest_mount_point_over_the_path(
    table: list[mount.MountLine], path: str, fstype: str, network: bool
) -> None:
    found = mount_from_table(path, table)
    assert found is not None and (found.fstype, found.is_network) == (fstype, network)


def test_the_device_beats_the_path(table: list[mount.MountLine]) -> None:
    """A bind mount (/srv/bound is a folder of the NFS home) is found by its device number, and so is a
    path reached through a symlink the mount table does not know."""
    found = mount_from_table("/srv/bound/runs", table, device=(0, 40))
    assert found == Mount("/srv/bound", "nfs4", "filer:/export/home")
    assert mount_from_table("/elsewhere/runs", table, device=(0, 45)) == Mount("/net/srv", "nfs", "srv:/data")
    assert mount_from_table("/srv/bound/runs", table, device=(9, 9)) == Mount(
        "/srv/bound", "nfs4", "filer:/export/home"
    )


def test_the_network_types() -> None:
    """The list the README names: NFS, SMB/CIFS, 9p (WSL 2, VM shares), AFP, WebDAV, sshfs, Ceph, Gluster,
    Lustre, GPFS, AFS, and VM shared folders."""
    for fstype in ("nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afpfs", "webdav", "fuse.sshfs", "ceph", "glusterfs"):
        assert Mount("/x", fstype).is_network, fstype
    for fstype in ("lustre", "gpfs", "afs", "vboxsf", "remote", "NFS4"):
        assert Mount("/x", fstype).is_network, fstype
    for fstype in ("ext4", "xfs", "btrfs", "apfs", "hfs", "ntfs", "tmpfs", "overlay", "zfs", "fuse", "drive-type-3"):
        assert not Mount("/x", fstype).is_network, fstype


def test_macos_statfs_has_the_darwin_layout() -> None:
    """struct statfs with 64-bit inodes (sys/mount.h): 2168 bytes, the type name at 72."""
    assert ctypes.sizeof(mount.StatFs) == 2168
    assert mount.StatFs.f_fstypename.offset == 72
    assert mount.StatFs.f_mntonname.offset == 88
    assert mount.StatFs.f_mntfromname.offset == 1112


# -- this machine's own table and statfs ------------------------------------------------------------

TMPFS_MAGIC = 0x01021994
EXT4_MAGIC = 0xEF53


@pytest.fixture
def tmpfs_dir(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs mounted here, under a name with spaces, CJK and an emoji (root only)."""
    where = tmp_path / "数据 清洗 🌻 with spaces"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(where)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.skipif(not Path("/proc/self/mountinfo").exists(), reason="Linux")
def test_a_filesystem_created_here_is_found_in_the_real_table(tmpfs_dir: Path) -> None:
    found = mount.run_dir_mount(tmpfs_dir / "runs")  # not created yet: judged by its parent
    assert found == Mount(str(tmpfs_dir), "tmpfs", "tmpfs")
    assert not found.is_network
    assert mount.statfs_magic(tmpfs_dir) == TMPFS_MAGIC
    under = mount.run_dir_mount(tmpfs_dir.parent)
    assert under is not None and under.point != str(tmpfs_dir)  # the folder holding the mount is elsewhere


@pytest.mark.skipif(not Path("/proc/self/mountinfo").exists(), reason="Linux")
def test_the_local_disk_is_local() -> None:
    found = mount.run_dir_mount(Path.cwd())
    assert found is not None and not found.is_network
    assert mount.statfs_magic(Path("/proc")) == 0x9FA0  # PROC_SUPER_MAGIC: statfs answers for real


def test_a_path_that_cannot_be_judged_is_not_an_error(tmp_path: Path) -> None:
    assert mount.run_dir_mount(tmp_path / "a" / "b" / "c") == mount.run_dir_mount(tmp_path)
    assert mount.is_network(tmp_path) is False


@pytest.mark.slow
def test_a_real_network_filesystem_is_found(tmp_path: Path) -> None:
    with loopback_sshfs(tmp_path / "net") as mnt:
        found = mount.run_dir_mount(mnt / "runs")
        assert found is not None and found.fstype == "fuse.sshfs" and found.is_network
        assert found.point == str(mnt) and found.source.endswith(str(tmp_path / "net" / "export"))
        assert mount.is_network(mnt)


# -- acceptance c: a whole run with its run dir on the network filesystem ---------------------------


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_run_dir_on_a_network_filesystem_takes_the_safe_mode_and_says_so_once(
    fake_api: FakeAnthropic, child_env: dict[str, str], tmp_path: Path
) -> None:
    """The ``flower`` command with ``-r`` on sshfs: sessions.db gets a rollback journal (never WAL), the
    run works as anywhere else, and the person is told once per run what that means and what to do."""
    fake_api.default = Model()
    ws = tmp_path / "ws"
    ws.mkdir()
    with loopback_sshfs(tmp_path / "net") as mnt:
        run_dir = mnt / "runs"
        argv = ["flower", "--rounds", "1", "--timeout", "0", "--lang", "en", "-r", str(run_dir)]
        notice = network_fs_line(run_dir, "fuse.sshfs", str(mnt), "en")
        for said in ("clean the CSV files", ""):  # a run, then a wake in the same run dir
            out = subprocess.run(
                [*argv, *([said] if said else [])], cwd=ws, env=child_env, capture_output=True, text=True, timeout=300
            )
            assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
            assert out.stdout.count(notice) == 1
        db = run_dir / "sessions.db"
        assert db.read_bytes()[18:20] == b"\x01\x01"  # the file format's journal bytes: rollback, not WAL (2, 2)
        assert not (run_dir / "sessions.db-wal").exists() and not (run_dir / "sessions.db-shm").exists()
        steps = [row["step"] for row in manifest.read_rows(run_dir)]
        assert {"确认需求", "设定目标", "干活"} <= set(steps) and any(s.startswith("干活·判定") for s in steps)
        store = SqliteSessionStore(db, readonly=True)  # what the panel and the banner open
        try:
            work = json.loads((run_dir / "lineage.json").read_text(encoding="utf-8"))["steps"]["干活"]
            assert store.has_session(project_key(ws), work)
        finally:
            store.close()
