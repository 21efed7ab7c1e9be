"""Both notebooks execute top to bottom with nbclient, in demo mode (no credentials), as a newcomer
would see them (issue 5, acceptance g)."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

pytestmark = pytest.mark.slow


def _execute(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home / ".claude"))
    work = tmp_path / "nb"
    work.mkdir()
    shutil.copy(NOTEBOOKS / name, work / name)
    nb = nbformat.read(work / name, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(work)}}).execute()
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.output_type != "error", (cell.source, out.get("ename"), out.get("evalue"))
            texts.append(out.get("text", "") or str(out.get("data", {}).get("text/plain", "")))
    return "\n".join(texts)


def test_quickstart_runs_in_demo_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _execute("quickstart.ipynb", tmp_path, monkeypatch)
    assert "flower_magic.testing.demo" in out  # the demo-mode line
    assert "第 2 次唤醒" in out  # the second %flower woke up and said what it remembers
    assert "flower_demo.md" in out
    work = tmp_path / "nb"
    assert (work / "flower_demo.md").is_file()
    archives = list((work / ".flower" / "notes" / "archive").iterdir())
    assert len(archives) == 1  # --new set the first task aside


def test_continuation_walkthrough_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _execute("continuation.ipynb", tmp_path, monkeypatch)
    assert "flower_magic.testing.demo" in out and "向日葵" in out
    lineage = tmp_path / "nb" / "walkthrough" / "runs" / "lineage.json"
    assert '"woke": 2' in lineage.read_text(encoding="utf-8")
