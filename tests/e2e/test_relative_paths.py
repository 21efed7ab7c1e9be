"""A saved notebook carries no absolute path (issue 24, item 3 and acceptance b): a demo run, a wake,
a ``--new`` (the archive line), ``--panel`` and ``--status`` executed with nbclient, the saved
``.ipynb`` searched for the workspace's path and the home directory; then ``flower --status`` in a
terminal, which also marks the wake's rows as continued and says what the manifest totals.

Real nbclient, a real kernel, the real Claude Code CLI, the demo model (no key)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from flower_magic.core.words import say
from flower_magic.magics import PANEL_MIME
from tests.helpers import no_key_env

ROOT = Path(__file__).resolve().parents[2]
STEPS = ["确认需求", "设定目标", "干活", "干活·判定#1"]

pytestmark = pytest.mark.slow

CELLS = [
    "%load_ext flower_magic",
    '%flower --demo "写一份清洗 CSV 的说明"',
    "%flower --demo",  # a wake: the total line says this wake and the manifest's total
    '%flower --demo --new "再写一份说明"',  # the archive line (in --status's story below)
    "%flower --panel",
    "%flower --status",
]


def _texts(cell: nbformat.NotebookNode) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(str(out.get("text") or out.get("evalue") or ""))
        parts.append(str(out.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)


def test_a_saved_notebook_and_the_terminal_name_no_absolute_path(tmp_path: Path) -> None:
    """Issue 24, item 3: the [Write] lines, the total line, the archive line and ``%flower --panel``
    put the author's absolute paths (their home directory) into every saved notebook."""
    env = no_key_env(tmp_path, "zh")
    home = Path(env["HOME"])
    ws = home / "proj"  # where a person keeps notebooks: the banner says ~/proj
    ws.mkdir()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["JPY_SESSION_NAME"] = str(ws / "paths.ipynb")  # as JupyterLab names it: --panel sends the panel's bundle
    saved = ws / "paths.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ws)}})
    client.execute(env=env)
    nbformat.write(nb, saved)

    written = saved.read_text(encoding="utf-8")
    for absolute in {str(ws), str(home), os.path.realpath(ws), os.path.realpath(home)}:
        assert absolute not in written, absolute
    cells = [_texts(c) for c in nb.cells]
    assert all(out.get("output_type") != "error" for c in nb.cells for out in c.get("outputs", [])), cells
    assert "[Write] flower_demo.md" in cells[1]  # the work step's tool call, relative to the notebook
    assert "runs/manifest.json" in cells[1]
    woke = say("total_wake", "zh", cost=0, run=0, manifest="").split("$")[0]
    assert woke in cells[2] and woke not in cells[1]
    assert any(PANEL_MIME in out.get("data", {}) for out in nb.cells[4].outputs)
    archived = say("archived", "zh", path=".flower/notes/archive/")
    assert archived in cells[5]
    assert say("wake_head", "zh", where="~/proj") in cells[5]

    # The terminal's --status, in the notebook's folder: relative paths, and the wake's rows continued.
    done = subprocess.run(
        [sys.executable, "-m", "flower_magic.cli", "--status"], cwd=ws, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert str(ws) not in done.stdout and str(home) not in done.stdout
    rows = [ln for ln in done.stdout.splitlines() if ln.startswith(("确认需求", "设定目标", "干活"))]
    # Four steps, the wake's work step and its judge (the brief and the goals stand), --new's four.
    assert [ln.split()[0] for ln in rows] == [*STEPS, "干活", "干活·判定#1", *STEPS], done.stdout
    continued = [say("yes", "zh") in ln.split("$", 1)[1] for ln in rows]
    assert continued == [False] * 4 + [True, False] + [False] * 4, rows  # the wake's work step goes on
    assert woke in done.stdout  # the last run's story: that run, and what the manifest totals
