"""A fresh Debian/Ubuntu machine, simulated on this one, for the set-up scripts (issue 12, acceptance a).

What a person meets there, and CI's own machine (a pyenv Python without the marker, Node installed)
does not:

- the system ``python3`` is *externally managed* (PEP 668): its stdlib directory carries an
  ``EXTERNALLY-MANAGED`` file and its pip refuses to install anything;
- venv's pip bootstrap (``ensurepip``) is missing until Debian's ``python3.X-venv`` is installed;
- there is no Node.js.

``Machine.make`` builds that out of this machine's own interpreter, without changing anything
outside its folder: a copy of the interpreter's binary beside a ``lib/python3.X`` whose entries
link to the real stdlib (so Python finds its prefix there, not in a venv, and pip really refuses),
a ``PATH`` of links to the system's commands less Node and every other Python, an ``apt-cache``
that offers Debian 12's nodejs (18, too old for the panel's build), and an ``apt-get`` that records
what it is asked for and "installs" ``nodejs`` (a link to this machine's Node) and ``python3.X-venv``
(a link to the real ``ensurepip``). Anything else it is asked for goes to the real ``apt-get``: a
package this machine really lacks is really installed, as on the fresh one.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV_SH = ROOT / "scripts" / "_env.sh"

# Where a Debian/Ubuntu machine keeps its commands, in PATH order.
SYSTEM_BIN_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# Left out of the simulated PATH: Node (the machine has none) and every other Python and its tools
# (the marked interpreter is the only python3, as on a stock Debian).
HIDDEN_COMMANDS = re.compile(r"^(node|nodejs|npm|npx|corepack|yarn|yarnpkg|jlpm|python.*|pip.*|pydoc.*|idle.*|2to3.*)$")
# Variables that would tell the scripts they run inside someone's environment.
ENV_VARIABLES_DROPPED = ("VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONPATH", "PYTHONHOME")
ENV_PREFIXES_DROPPED = ("PYENV", "JUPYTER", "ANTHROPIC", "XDG_", "CLAUDE")

# Debian's own text (python3.11 in bookworm), so pip's refusal reads as it does there.
MARKER_TEXT = """[externally-managed]
Error=To install Python packages system-wide, try apt install
 python3-xyz, where xyz is the package you are trying to
 install.
"""

FAKE_APT_GET = """#!/bin/sh
# The simulated machine's apt-get: records the request, "installs" what the simulation left out.
echo "$*" >> {log}
[ "$1" = install ] || exit 0
shift
for pkg in "$@"; do
  case "$pkg" in
    -*) ;;
    nodejs) ln -sf {node} {bin}/node ;;
    python3*-venv) ln -sfn {ensurepip} {stdlib}/ensurepip ;;
    *) {real_apt} install -y -qq "$pkg" || exit 100 ;;
  esac
done
"""

# Debian 12's own nodejs, the one a fresh Debian 12 would be offered (bookworm-security, 2026).
DEBIAN_12_NODEJS = "18.20.4+dfsg-1~deb12u3"

FAKE_APT_CACHE = """#!/bin/sh
# The simulated machine's apt-cache: Debian's nodejs is {nodejs}; any other question goes to the real one.
if [ "$1" = policy ] && [ "$2" = nodejs ]; then
  printf 'nodejs:\\n  Installed: (none)\\n  Candidate: %s\\n' {nodejs}
  exit 0
fi
exec {real_apt_cache} "$@"
"""

# As root there is no sudo; as anyone else the scripts call it, and the real one would bypass PATH.
FAKE_SUDO = '#!/bin/sh\nexec "$@"\n'


def _base_python() -> tuple[Path, Path]:
    """The binary and stdlib of the interpreter this one was made from (never a venv's)."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    binary = Path(sys.base_prefix) / "bin" / f"python{version}"
    if not binary.exists():
        binary = Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    return binary, Path(sysconfig.get_path("stdlib"))


def _describe(python: Path) -> tuple[Path, Path, Path]:
    """A real interpreter's binary, stdlib and site-packages, as it reports them."""
    code = "import sys, sysconfig; print(sys.executable); print(sysconfig.get_path('stdlib'));"
    code += " print(sysconfig.get_path('purelib'))"
    out = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, check=True, timeout=60)
    binary, stdlib, purelib = out.stdout.splitlines()
    return Path(binary), Path(stdlib), Path(purelib)


@dataclass
class Machine:
    """The simulated machine: ``env()`` is the environment a person's shell there would have."""

    root: Path
    bin: Path
    python_bin: Path
    system_bin: Path
    python: Path
    stdlib: Path
    site_packages: Path
    apt_log: Path
    home: Path

    @classmethod
    def make(
        cls,
        root: Path,
        *,
        marked: bool = True,
        pip: bool = True,
        ensurepip: bool = False,
        system_python: Path | None = None,
        debian_nodejs: str = DEBIAN_12_NODEJS,
    ) -> Machine:
        """Builds the machine in ``root`` (an empty or missing folder).

        Args:
            marked: the interpreter carries the PEP 668 marker (Debian 12, Ubuntu 23.04 and later).
            pip: its pip is importable (Debian's python3-pip is installed).
            ensurepip: venv's pip bootstrap is there (Debian's python3.X-venv is installed).
            system_python: use this real system interpreter (``/usr/bin/python3`` on Debian) as it
                is, instead of simulating one; the three settings above are then its own.
            debian_nodejs: the version of Debian's nodejs apt-get offers (Debian 12's by default;
                Debian 13 offers 20.19.2+dfsg-1). Installing it links this machine's own Node.
        """
        base_binary, base_stdlib = _base_python()
        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        pybin = root / "usr" / "bin"
        pybin.mkdir(parents=True)
        if system_python is not None:
            python, stdlib, site_packages = _describe(system_python)
            (pybin / "python3").symlink_to(system_python)
            base_stdlib = stdlib
        else:
            stdlib = root / "usr" / "lib" / f"python{version}"
            site_packages = stdlib / "site-packages"
            site_packages.mkdir(parents=True)
            # A copy, not a link: Python looks for its stdlib beside the file it runs from, after links.
            python = pybin / f"python{version}"
            shutil.copy2(base_binary, python)
            (pybin / "python3").symlink_to(python.name)
            for entry in base_stdlib.iterdir():
                skipped = entry.name in ("site-packages", "EXTERNALLY-MANAGED") or entry.name == "ensurepip"
                if not skipped or (entry.name == "ensurepip" and ensurepip):
                    (stdlib / entry.name).symlink_to(entry)
            if marked:
                (stdlib / "EXTERNALLY-MANAGED").write_text(MARKER_TEXT)
            if pip:
                base_site = Path(sysconfig.get_path("purelib", vars={"base": sys.base_prefix}))
                for entry in base_site.glob("pip*"):
                    if entry.name == "pip" or entry.name.startswith("pip-"):
                        (site_packages / entry.name).symlink_to(entry)

        system_bin = root / "system-bin"
        system_bin.mkdir()
        for folder in SYSTEM_BIN_DIRS:
            if not os.path.isdir(folder):
                continue
            for name in os.listdir(folder):
                target = system_bin / name
                if not HIDDEN_COMMANDS.match(name) and not target.exists() and not target.is_symlink():
                    target.symlink_to(os.path.join(folder, name))

        machine = cls(
            root, root / "bin", pybin, system_bin, python, stdlib, site_packages, root / "apt.log", root / "home"
        )
        machine.bin.mkdir()
        machine.home.mkdir()
        node = shutil.which("node") or shutil.which("nodejs") or "/usr/bin/node"
        real_apt = shutil.which("apt-get") or "/usr/bin/apt-get"
        fake_apt = FAKE_APT_GET.format(
            log=shlex.quote(str(machine.apt_log)),
            node=shlex.quote(node),
            bin=shlex.quote(str(machine.bin)),
            ensurepip=shlex.quote(str(base_stdlib / "ensurepip")),
            stdlib=shlex.quote(str(stdlib)),
            real_apt=shlex.quote(real_apt),
        )
        fake_apt_cache = FAKE_APT_CACHE.format(
            nodejs=shlex.quote(debian_nodejs),
            real_apt_cache=shlex.quote(shutil.which("apt-cache") or "/usr/bin/apt-cache"),
        )
        for name, text in (("apt-get", fake_apt), ("apt-cache", fake_apt_cache), ("sudo", FAKE_SUDO)):
            (machine.bin / name).write_text(text)
            (machine.bin / name).chmod(0o755)
        return machine

    def env(self, **extra: str) -> dict[str, str]:
        """A login shell's environment on the machine: its PATH, a HOME of its own, no environment active."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ENV_VARIABLES_DROPPED and not k.startswith(ENV_PREFIXES_DROPPED)
        }
        # The interpreter's own bin, not a link to it: venv records the folder python3 was found in as
        # its home, and a venv whose home holds no stdlib falls back to the interpreter's build prefix.
        env.update(PATH=f"{self.bin}:{self.python_bin}:{self.system_bin}", HOME=str(self.home))
        env.update(extra)
        return env

    def apt_requests(self) -> list[str]:
        """What the scripts asked apt-get for, one call a line (``update``, ``install -y -qq nodejs``)."""
        return self.apt_log.read_text().splitlines() if self.apt_log.exists() else []

    def pip_refusal(self) -> subprocess.CompletedProcess[str]:
        """What the system python3's pip answers to an install (it never gets as far as the index)."""
        return subprocess.run(
            [str(self.python), "-m", "pip", "install", "--no-index", "flower-install-sim-nothing"],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )

    def bash(self, script: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
        """Runs ``script`` in bash on the machine with ``scripts/_env.sh`` sourced, in ``cwd``."""
        return subprocess.run(
            ["bash", "-c", f"set -euo pipefail; source {shlex.quote(str(ENV_SH))}; {script}"],
            cwd=cwd,
            env=self.env(**extra),
            capture_output=True,
            text=True,
            timeout=600,
        )
