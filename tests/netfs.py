"""A real network filesystem for tests: SFTP (sshfs) from an sshd on loopback, mounted with FUSE.

The kernel here has no NFS client or server (no ``nfs``/``nfsd`` in /proc/filesystems, no modules),
so an NFS export on loopback cannot be mounted; sshfs needs only FUSE, and is as much a network
filesystem to SQLite and flock as NFS is: the files live behind a socket, the kernel sees
``fuse.sshfs``. Needs root, ``sshd``, ``sshfs`` and ``/dev/fuse`` (Debian: ``apt-get install
openssh-server sshfs``); ``loopback_sshfs`` skips the test otherwise.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

MOUNT_GIVE_UP_S = 30.0  # only keeps a broken sshd from hanging the suite


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _why_not() -> str | None:
    sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    if os.geteuid() != 0:
        return "needs root (sshd on loopback)"
    if sshd is None or shutil.which("sshfs") is None or shutil.which("ssh-keygen") is None:
        return "needs sshd and sshfs (apt-get install openssh-server sshfs)"
    if not os.path.exists("/dev/fuse"):
        return "needs /dev/fuse"
    return None


@contextlib.contextmanager
def loopback_sshfs(root: Path) -> Iterator[Path]:
    """Mount ``root/export`` at ``root/mnt`` through sshfs from an sshd on 127.0.0.1; yield the mount."""
    why = _why_not()
    if why:
        pytest.skip(why)
    etc, export, mnt = root / "sshd", root / "export", root / "mnt"
    for folder in (etc, export, mnt):
        folder.mkdir(parents=True)
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(etc / key)], check=True)
    (etc / "authorized_keys").write_text((etc / "client_key.pub").read_text())
    port = _free_port()
    config = etc / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {etc / 'host_key'}\n"
        f"AuthorizedKeysFile {etc / 'authorized_keys'}\nPasswordAuthentication no\n"
        "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n"
        f"PidFile {etc / 'sshd.pid'}\nSubsystem sftp internal-sftp\n"
    )
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege-separation directory
    sshd_path = shutil.which("sshd") or "/usr/sbin/sshd"
    sshd = subprocess.Popen([sshd_path, "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL)
    mounted = False
    try:
        give_up = time.monotonic() + MOUNT_GIVE_UP_S
        while True:
            out = subprocess.run(
                [
                    "sshfs",
                    "-p",
                    str(port),
                    f"{getpass.getuser()}@127.0.0.1:{export}",
                    str(mnt),
                    "-o",
                    f"IdentityFile={etc / 'client_key'},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null",
                ],
                capture_output=True,
                text=True,
            )
            if out.returncode == 0:
                mounted = True
                break
            if time.monotonic() > give_up or sshd.poll() is not None:
                pytest.skip(f"could not mount sshfs on loopback: {out.stderr.strip()[:200]}")
            time.sleep(0.2)
        yield mnt
    finally:
        if mounted and subprocess.run(["fusermount", "-u", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["fusermount", "-uz", str(mnt)], capture_output=True)  # busy: detach it lazily
        sshd.terminate()
        sshd.wait(timeout=30)
