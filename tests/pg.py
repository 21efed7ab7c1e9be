"""A throw-away PostgreSQL server for the tests: ``initdb`` in a temp dir, a free port on 127.0.0.1,
its unix socket in the same dir, a password (the canary tests look for it), stopped at the end.

It finds ``initdb`` on PATH or where Debian's ``postgresql`` package puts it
(``/usr/lib/postgresql/<version>/bin``, not on PATH). As root, initdb refuses to run: the server
then runs as the ``postgres`` user, in a dir that user owns.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

USER = "flower"
# Loopback only, no durability needed for a server thrown away after the session: fast commits.
SERVER_OPTIONS = "-c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
START_TIMEOUT_S = 60


class NoServer(RuntimeError):
    """No PostgreSQL server could be started here; the message says why (the tests skip with it)."""


def find_bin(name: str) -> str | None:
    on_path = shutil.which(name)
    if on_path:
        return on_path
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4] or 0))
    return found[-1] if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """A running throw-away server. ``url(db)`` carries the password; ``fresh_url()`` makes a new database.

    Attributes:
        root: its temp dir (data dir, socket, log).
        port: its TCP port on 127.0.0.1.
        password: the superuser's password (random: a canary).
    """

    def __init__(self) -> None:
        initdb, pg_ctl = find_bin("initdb"), find_bin("pg_ctl")
        if initdb is None or pg_ctl is None:
            raise NoServer("no initdb/pg_ctl on PATH or under /usr/lib/postgresql/*/bin (apt-get install postgresql)")
        self._pg_ctl = pg_ctl
        self.password = "canary-" + secrets.token_hex(12)
        self.root = Path(tempfile.mkdtemp(prefix="flower-pg-"))
        self.port = free_port()
        self._as: list[str] = []
        self._made = 0
        if os.name == "posix" and os.geteuid() == 0:
            import pwd  # POSIX only: this module is imported by conftest on every platform

            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                raise NoServer("running as root and there is no postgres user for initdb to run as") from None
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        pwfile = self.root / "pw"
        pwfile.write_text(self.password + "\n", encoding="utf-8")
        if self._as:
            os.chown(pwfile, owner.pw_uid, -1)
        try:
            self._run(
                [
                    initdb,
                    "-D",
                    str(self.root / "data"),
                    "-E",
                    "UTF8",
                    "-U",
                    USER,
                    f"--pwfile={pwfile}",
                    "--auth=scram-sha-256",
                ],
                "initdb",
            )
        finally:
            pwfile.unlink(missing_ok=True)
        opts = f"{SERVER_OPTIONS} -p {self.port} -k {self.root}"
        self._run(
            [pg_ctl, "-D", str(self.root / "data"), "-l", str(self.root / "log"), "-w", "-t", str(START_TIMEOUT_S)],
            "pg_ctl start",
            "-o",
            opts,
            "start",
        )

    def _run(self, argv: list[str], what: str, *extra: str) -> None:
        out = subprocess.run(
            [*self._as, *argv, *extra],
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S + 30,
            env={**os.environ, "LC_ALL": "C"},
        )
        if out.returncode != 0:
            log = self.root / "log"
            tail = log.read_text(errors="replace")[-800:] if log.is_file() else ""
            self.stop()
            raise NoServer(f"{what} failed ({out.returncode}): {(out.stderr or out.stdout)[-800:]} {tail}")

    def url(self, database: str = "postgres", *, password: str | None = None) -> str:
        pw = self.password if password is None else password
        auth = f"{USER}:{pw}" if pw else USER
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}"

    def fresh_url(self) -> str:
        """A new empty database on this server, as a URL with the password."""
        import psycopg

        self._made += 1
        name = f"t{os.getpid()}_{self._made}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def halt(self) -> None:
        """Stop the server and keep its data: it is unreachable until ``resume``."""
        subprocess.run(
            [*self._as, self._pg_ctl, "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop"],
            capture_output=True,
            timeout=60,
        )

    def resume(self) -> None:
        """Start a halted server again on the same port, with the same data."""
        opts = f"{SERVER_OPTIONS} -p {self.port} -k {self.root}"
        self._run(
            [self._pg_ctl, "-D", str(self.root / "data"), "-l", str(self.root / "log"), "-w"],
            "pg_ctl start",
            "-o",
            opts,
            "start",
        )

    def stop(self) -> None:
        if (self.root / "data" / "postmaster.pid").exists():
            subprocess.run(
                [*self._as, self._pg_ctl, "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop"],
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(self.root, ignore_errors=True)
