"""papermill runs a notebook from another folder (issue 12, acceptance f): the output's first line names
the folder the run is bound to, and ``--cwd`` set to the notebook's folder continues that folder's run.

Real papermill, a real kernel, the real Claude Code CLI, the demo model on the fake API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from flower_magic.core.words import say, short_path
from flower_magic.testing import FakeAnthropic

ROOT = Path(__file__).resolve().parents[2]
CELLS = ("%load_ext flower_magic", '%flower "写一个小文件记下这件事" --rounds 1')

pytestmark = pytest.mark.slow


@pytest.fixture
def env(demo_api: FakeAnthropic, tmp_path: Path) -> dict[str, str]:
    """papermill's environment, which its kernel inherits: the demo model, this checkout first."""
    home = tmp_path / "home"
    home.mkdir()
    drop = ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_MODEL", "FLOWER_LANG", "JPY_SESSION_NAME")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(demo_api.env(home))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def _papermill(notebook: Path, out: Path, cwd: Path, env: dict[str, str], *extra: str) -> list[str]:
    """Run papermill in ``cwd``; every line the output notebook shows, in order."""
    cmd = [sys.executable, "-m", "papermill", str(notebook), str(out), "--no-progress-bar", *extra]
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines: list[str] = []
    for cell in nbformat.read(out, as_version=4).cells:
        for output in cell.get("outputs", []):
            text = output.get("text") or output.get("data", {}).get("text/plain", "")
            lines += [ln for ln in str(text).splitlines() if ln.strip()]
    return lines


def _sessions(folder: Path) -> dict[str, str]:
    return dict(json.loads((folder / "runs" / "lineage.json").read_text(encoding="utf-8"))["steps"])


def test_papermill_from_another_folder_says_where_and_cwd_continues_the_notebooks_run(
    tmp_path: Path, env: dict[str, str]
) -> None:
    nbdir, other = tmp_path / "notebooks", tmp_path / "elsewhere"
    nbdir.mkdir(), other.mkdir()
    notebook = nbdir / "small.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, notebook)

    # The notebook's folder has a run (started there, as a person would in JupyterLab).
    first = _papermill(notebook, other / "0.ipynb", nbdir, env)
    assert first[0] == say("bound_to_start", "zh", folder=short_path(nbdir, nbdir))
    before = _sessions(nbdir)
    assert before.get("干活")

    # From another folder: the run happens there, and the first line says so, with how to choose.
    away = _papermill(notebook, other / "1.ipynb", other, env)
    assert away[0] == say("bound_to_start", "zh", folder=short_path(other, other))
    assert "--cwd" in away[0]
    assert (other / "runs" / "lineage.json").is_file()
    assert _sessions(nbdir) == before

    # --cwd the notebook's folder: the same lineage, the same sessions, one more wake.
    back = _papermill(notebook, other / "2.ipynb", other, env, "--cwd", str(nbdir))
    assert back[0] == say("bound_to_start", "zh", folder=short_path(nbdir, nbdir))
    assert any(say("wake_n", "zh", n=2) in ln for ln in back)
    assert _sessions(nbdir) == before
    lineage = json.loads((nbdir / "runs" / "lineage.json").read_text(encoding="utf-8"))
    assert lineage["woke"] == 2

    # papermill --inject-input-path from another folder: the notebook's path is known, so its folder.
    injected = _papermill(notebook, other / "3.ipynb", other, env, "--inject-input-path")
    assert not any(ln.startswith(say("bound_to_start", "zh", folder="")[:8]) for ln in injected)
    assert any(say("wake_n", "zh", n=3) in ln for ln in injected)
    assert _sessions(nbdir) == before
