"""``%flower --panel``: the bundle a kernel sends, and JupyterLab opening the Flower panel from it.

The browser tests run a real ``jupyter lab`` on loopback in Debian Chromium; screenshots go to
``test-output/screenshots/``. The kernel test needs no browser.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from flower_magic.core.words import say
from flower_magic.magics import PANEL_MIME, PANEL_TRANSIENT
from tests.e2e.kernel import Kernel
from tests.e2e.lab import SCREENSHOTS, chromium_page, running_lab

pytestmark = pytest.mark.slow

PANEL = "#flower-magic-panel"
OUTPUT = ".jp-FlowerPanelOutput"
CELLS = ["%load_ext flower_magic", "%flower --panel"]
SUB_STEPS = ["确认需求", "干活"]
OTHER_STEPS = ["somewhere-else"]
SHOWN = {"确认需求": "Clarify", "干活": "Work"}  # as an English panel says the steps (issue 24)


def _rows(steps: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "step": step,
            "session_id": f"3f0c6b1e-8a2d-4c5e-9f70-1a2b3c4d5e{i:02d}",
            "ok": True,
            "cost_usd": 0.25,
            "num_turns": 3,
            "error": None,
            "started_at": 1_767_000_000.0 + 60 * i,
            "ended_at": 1_767_000_030.0 + 60 * i,
            "attempts": 1,
            "errors": [],
            "resumed": i > 0,
            "retired": [],
            "context": 20_000 + 1000 * i,
            "duration_s": 30.0,
            "run": "20260101-000000-abcdef",
        }
        for i, step in enumerate(steps)
    ]


def _write_run(folder: Path, steps: list[str]) -> None:
    (folder / "runs").mkdir(parents=True)
    (folder / "runs" / "manifest.json").write_text(json.dumps(_rows(steps), ensure_ascii=False), encoding="utf-8")


def _notebook(path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def _plain_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The test's environment without credentials or Jupyter settings, with its own IPython dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "CLAUDE", "JPY", "JUPYTER"))}
    env["IPYTHONDIR"] = str(tmp_path / "ipython")
    env.update(extra)
    return env


# -- the kernel side ---------------------------------------------------------------------------------


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    (tmp_path / "ws" / "sub").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    env = _plain_env(tmp_path, JPY_SESSION_NAME=str(tmp_path / "ws" / "sub" / "nb.ipynb"), FLOWER_LANG="en")
    k = Kernel(tmp_path / "elsewhere", env)  # started elsewhere: the notebook's directory wins
    try:
        yield k
    finally:
        k.close()


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _transient(kernel: Kernel, res: Any) -> dict[str, Any]:
    """The transient part of the cell's one display (what a front end gets and no notebook saves)."""
    (msg,) = [
        m for m in kernel.seen if m["parent_header"].get("msg_id") == res.msg_id and m["msg_type"] == "display_data"
    ]
    return dict(msg["content"].get("transient") or {})


def test_panel_flag_sends_the_notebook_dir_and_a_fresh_nonce_and_runs_nothing(kernel: Kernel, tmp_path: Path) -> None:
    """The folder's absolute path reaches the front end only in the message's transient part, which a
    notebook does not save (issue 24, item 3: a saved %flower --panel output showed the author's path)."""
    ws = tmp_path / "ws"
    assert kernel.run("%load_ext flower_magic").status == "ok"
    before = _tree(ws)

    first, second = kernel.run("%flower --panel"), kernel.run("%flower --panel")

    for res in (first, second):
        assert (res.status, res.errors, res.stream) == ("ok", [], "")
        (bundle,) = res.displays
        assert set(bundle) == {PANEL_MIME, "text/plain"}
        assert _transient(kernel, res)[PANEL_TRANSIENT] == {"path": str((ws / "sub").resolve())}
        assert bundle[PANEL_MIME]["where"] == "sub"  # outside the home directory: the folder's name
        assert isinstance(bundle[PANEL_MIME]["nonce"], str) and len(bundle[PANEL_MIME]["nonce"]) >= 16
        assert str(tmp_path) not in json.dumps(bundle)
        plain = bundle["text/plain"]
        assert "\n" not in plain
        assert "Flower: Open run panel" in plain and "sub" in plain
    assert first.displays[0][PANEL_MIME]["nonce"] != second.displays[0][PANEL_MIME]["nonce"]
    assert first.displays[0][PANEL_MIME]["run_dir"] == "runs"
    assert _tree(ws) == before  # no run dir, no notes: it ran nothing


def test_panel_follows_the_configured_run_dir(kernel: Kernel, tmp_path: Path) -> None:
    """Issue 11 (b): %config FlowerMagics.run_dir reaches the panel as well (relative to the folder)."""
    assert kernel.run("%load_ext flower_magic").status == "ok"
    assert kernel.run('%config FlowerMagics.run_dir = "work/runs-a"').status == "ok"
    (bundle,) = kernel.run("%flower --panel").displays
    assert bundle[PANEL_MIME]["run_dir"] == "work/runs-a"


@pytest.mark.parametrize(
    ("code", "named"),
    [
        ('%flower --panel "tidy the CSVs"', "tidy the CSVs"),
        ("%flower --panel --new", "--new"),
        ("%flower --panel --status", "--status"),
        ("%flower --panel -r elsewhere", "--run-dir"),
        ("%%flower --panel\ntidy the CSVs", "a_cell_body"),
    ],
)
def test_panel_with_anything_else_is_a_one_line_usage_error(kernel: Kernel, tmp_path: Path, code: str, named: str):
    assert kernel.run("%load_ext flower_magic").status == "ok"
    res = kernel.run(code)
    assert res.status == "error"
    assert [e["ename"] for e in res.errors] == ["UsageError"], res.errors
    (err,) = res.errors
    names = [say(named, lang) for lang in ("zh", "en")] if named == "a_cell_body" else [named]
    assert "\n" not in err["evalue"].strip() and "--panel" in err["evalue"]
    assert any(n in err["evalue"] for n in names)
    assert not any("Traceback" in line for line in err.get("traceback", []))
    assert res.displays == []
    assert _tree(tmp_path / "ws") == ["sub"]


# -- JupyterLab ----------------------------------------------------------------------------------------


def _kernel_idle(page: Any) -> None:
    page.wait_for_function(
        "(() => { const k = window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel;"
        " return !!k && k.connectionStatus === 'connected' && k.status === 'idle'; })()",
        timeout=60_000,
    )


def _panel_state(page: Any) -> tuple[str, list[str]]:
    where = page.locator(f"{PANEL} .jp-FlowerPanel-where").inner_text()
    return where, page.locator(f"{PANEL} tbody tr td.jp-FlowerTable-col-step").all_text_contents()


def _wait_rows(page: Any, n: int) -> None:
    page.wait_for_function(f"document.querySelectorAll('{PANEL} tbody tr').length === {n}")


@pytest.mark.browser
@pytest.mark.parametrize("root_kind", ["plain", "symlinked"])
def test_flower_panel_in_a_notebook_opens_the_panel_on_its_folder_once(tmp_path: Path, root_kind: str) -> None:
    """`%flower --panel` opens the panel on the notebook's folder, whether the kernel's absolute
    directory is under the server root as given (converted with serverRoot) or only through a
    symlink the kernel resolved (the notebook's folder instead); a saved output never reopens it."""
    real = tmp_path / "real-root"
    _write_run(real / "proj" / "sub", SUB_STEPS)
    _notebook(real / "proj" / "sub" / "nb.ipynb")
    _write_run(real / "other", OTHER_STEPS)
    root = real
    if root_kind == "symlinked":
        root = tmp_path / "root-link"
        root.symlink_to(real, target_is_directory=True)
    nb_url = "tree/proj/sub/nb.ipynb"

    # English, as the assertions below are written (the Chinese panel: test_panel_browser.py).
    with running_lab(tmp_path, root, _plain_env(tmp_path, FLOWER_LANG="en")) as lab, chromium_page() as page:
        page.goto(f"{lab.url}/lab/{nb_url}?token={lab.token}")
        page.wait_for_selector(".jp-Notebook", state="visible", timeout=60_000)
        page.wait_for_function("window.jupyterapp && window.jupyterapp.commands.hasCommand('notebook:run-all-cells')")
        _kernel_idle(page)
        # The panel elsewhere and out of sight, so both the folder and the opening are the magic's doing.
        page.evaluate("window.jupyterapp.commands.execute('flower-magic:open', {path: 'other'})")
        _wait_rows(page, len(OTHER_STEPS))
        page.evaluate("window.jupyterapp.shell.collapseRight()")
        page.wait_for_selector(PANEL, state="hidden")
        assert _panel_state(page) == ("other", OTHER_STEPS)

        # A second tab on the same notebook and kernel gets the same broadcast; it did not ask, so it must not act.
        bystander = page.context.new_page()
        bystander.goto(f"{lab.url}/lab/workspaces/bystander/{nb_url}?token={lab.token}")
        bystander.wait_for_selector(".jp-Notebook", state="visible", timeout=60_000)
        _kernel_idle(bystander)

        page.bring_to_front()
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        page.wait_for_selector(OUTPUT, state="visible", timeout=60_000)
        page.wait_for_selector(PANEL, state="visible")
        _wait_rows(page, len(SUB_STEPS))
        assert _panel_state(page) == ("proj/sub", [SHOWN[step] for step in SUB_STEPS])
        # The folder as the kernel says it (~/…, or outside the home directory its name), never its path.
        assert page.locator(OUTPUT).inner_text() == "Flower panel opened for sub"
        assert page.locator(f"{OUTPUT} *").count() == 0  # text only
        assert page.locator(".jp-OutputArea-output:has-text('Open the Flower panel from')").count() == 0
        page.screenshot(path=str(SCREENSHOTS / f"panel-from-magic{'' if root_kind == 'plain' else '-symlinked'}.png"))
        bystander.wait_for_timeout(1500)  # the broadcast reached both tabs together; give it time to act wrongly
        assert bystander.locator(PANEL).is_hidden()
        bystander.close()

        # Saved with its output, then opened again in a fresh page: the line renders, the panel stays shut.
        page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_function("window.jupyterapp.shell.currentWidget.context.model.dirty === false")
        saved = nbformat.read(real / "proj" / "sub" / "nb.ipynb", as_version=4)
        assert any(PANEL_MIME in o.get("data", {}) for o in saved.cells[1].outputs)
        assert str(tmp_path) not in nbformat.writes(saved)  # the folder's path went in the transient part only
        page.goto(f"{lab.url}/lab/workspaces/reopened/{nb_url}?token={lab.token}")
        page.wait_for_selector(OUTPUT, state="visible", timeout=60_000)
        page.wait_for_function("window.jupyterapp.commands.hasCommand('flower-magic:open')")
        page.wait_for_timeout(1500)  # give a wrongly eager renderer the time to act
        assert page.locator(PANEL).is_hidden()
