"""Both notebooks execute top to bottom with nbclient, in demo mode (no credentials), as a newcomer
would see them (issue 5, acceptance g) — and again, in the same folder, with the same outcome and no
file git tracks or shows changed (issue 12, build item 7)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

# What changes from one run to the next however right it is: money, time, context sizes, ids, the
# walk-through's scratch folder. Everything else a cell shows must read the same.
_VOLATILE = [
    (re.compile(r"\$\d+\.\d+"), "$#"),
    (re.compile(r"\b\d+\.\d{3,}\b"), "#.#"),
    (re.compile(r"\b\d+:\d\d\b"), "#:##"),
    (re.compile(r"\b\d+(?:\.\d)?K\b"), "#K"),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<session>"),
    (re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}"), "<run>"),
    (re.compile(r"flower-walkthrough-\w+"), "<scratch>"),
]
# The manifest history under --status: cumulative by design, so a second run shows more rows.
_HISTORY = re.compile(r"^(最近|latest) ", re.MULTILINE)
# The total line: in a folder whose manifest holds earlier runs it also says what the manifest
# totals (cumulative too), which a first run in a fresh clone cannot.
_TOTAL = (re.compile(r"^(总花费|total)\b.*$", re.MULTILINE), "<total>")


def _repo(tmp_path: Path) -> Path:
    """What a fresh clone holds of the notebooks (the tracked files and the ignore rules), committed."""
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    tracked = subprocess.run(["git", "ls-files", "notebooks"], cwd=ROOT, capture_output=True, text=True, check=True)
    for name in [".gitignore", *tracked.stdout.split()]:
        shutil.copy(ROOT / name, repo / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "clone"], cwd=repo, check=True)
    return repo


def _status(repo: Path) -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clone-like folder, and a kernel environment with no credentials (demo mode) and private
    HOME and TMPDIR (the walk-through's scratch folders land there)."""
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    for key in ("FLOWER_LANG", "JPY_SESSION_NAME"):
        monkeypatch.delenv(key, raising=False)
    home, scratch = tmp_path / "home", tmp_path / "tmp"
    home.mkdir(), scratch.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home / ".claude"))
    monkeypatch.setenv("TMPDIR", str(scratch))
    return _repo(tmp_path)


def _execute(notebook: Path) -> list[str]:
    """Run the notebook where it is, in a new kernel, as a person would; each code cell's text."""
    nb = nbformat.read(notebook, as_version=4)
    folder = str(notebook.parent)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": folder}}).execute()
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        texts = []
        for out in cell.get("outputs", []):
            assert out.output_type != "error", (cell.source, out.get("ename"), out.get("evalue"))
            texts.append(out.get("text", "") or str(out.get("data", {}).get("text/plain", "")))
        cells.append("\n".join(texts))
    return cells


def _archives(work: Path) -> list[Path]:
    """The archive folders that hold something (``--new`` in a fresh folder leaves an empty one)."""
    return [d for d in (work / ".flower" / "notes" / "archive").iterdir() if any(d.iterdir())]


def _outcome(cells: list[str]) -> list[str]:
    """What each cell showed, volatile figures masked and --status's history cut. The first cell is
    left out: loading the extension shows what the folder remembers, so a second run's says more."""
    shown = []
    for text in cells[1:]:
        # Which folder flower guessed is said once per kernel: by %load_ext where the folder holds a run,
        # else by the first %flower, in its task's language (issue 24) — not part of the run's outcome.
        text = "\n".join(ln for ln in text.split("\n") if not ln.startswith(("flower 在 ", "flower runs in ")))
        history = _HISTORY.search(text)
        text = text[: history.start()] if history else text
        for pattern, mask in [*_VOLATILE, _TOTAL]:
            text = pattern.sub(mask, text)
        shown.append(text)
    return shown


def test_quickstart_runs_in_demo_mode_twice_alike(repo: Path) -> None:
    work = repo / "notebooks"
    first = _execute(work / "quickstart.ipynb")
    out = "\n".join(first)
    assert "flower_magic.testing.demo" in out  # the demo-mode line
    assert "第 2 次唤醒" in out  # the second %flower woke up and said what it remembers
    assert "flower_demo.md" in out
    assert (work / "flower_demo.md").is_file()
    assert len(_archives(work)) == 1  # --new set the first task aside

    second = _execute(work / "quickstart.ipynb")
    assert _outcome(second) == _outcome(first)
    assert len(_archives(work)) == 3  # the first --new now set the last run aside too: nothing lost
    assert _status(repo) == ""


def test_continuation_walkthrough_runs_twice_alike(repo: Path, tmp_path: Path) -> None:
    work = repo / "notebooks"
    first = _execute(work / "continuation.ipynb")
    out = "\n".join(first)
    assert "flower_magic.testing.demo" in out and "向日葵" in out
    assert "waking = False" in out and "woke = 2" in out  # wake_state, field by field, in words

    second = _execute(work / "continuation.ipynb")
    assert _outcome(second) == _outcome(first)
    walks = sorted((tmp_path / "tmp").glob("flower-walkthrough-*"))
    assert len(walks) == 2  # a fresh scratch folder each time: nothing nested, nothing carried over
    for walk in walks:
        assert json.loads((walk / "runs" / "lineage.json").read_text(encoding="utf-8"))["woke"] == 2
    assert _status(repo) == ""
