"""The wheel carries the prebuilt JupyterLab extension and the server config, and installs both
enabled (issue 6, acceptance d). Builds a real wheel from this checkout."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_wheel_contains_the_prebuilt_extension_and_the_server_config(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (wheel,) = tmp_path.glob("flower_magic-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    lab = [n for n in names if "/share/jupyter/labextensions/flower-magic/" in n]
    assert any(n.endswith("/package.json") for n in lab)
    assert any("/static/remoteEntry." in n for n in lab)
    assert any(n.endswith("etc/jupyter/jupyter_server_config.d/flower_magic.json") for n in names)
    assert any(n.endswith("flower_magic/server.py") for n in names)
    assert not any("node_modules" in n for n in names)


def test_installed_extensions_are_enabled() -> None:
    labext = subprocess.run(
        [sys.executable, "-m", "jupyter", "labextension", "list"], capture_output=True, text=True, timeout=120
    )
    listing = labext.stdout + labext.stderr
    assert "flower-magic" in listing and "enabled" in listing and "OK" in listing
    server = subprocess.run(
        [sys.executable, "-m", "jupyter", "server", "extension", "list"], capture_output=True, text=True, timeout=120
    )
    listing = server.stdout + server.stderr
    assert "flower_magic" in listing and "enabled" in listing
