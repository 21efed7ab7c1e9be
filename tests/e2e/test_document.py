"""A run reads as a document (issue 24, item 5 and acceptance e), from one demo run in JupyterLab:

- live, in Chromium: the agent's words rendered as Markdown (headings, lists), the judge's ruling as
  its own element with its reason, tool calls as one line each; readable in the light and the dark
  theme; the pictures the README shows (the live view while the agent asks, the finished run beside
  the Flower panel) taken here, so ``scripts/screenshots`` regenerates them and nobody draws them;
- saved by JupyterLab and rendered by ``jupyter nbconvert --to html``, as a notebook is read without
  the extension (GitHub, nbviewer, an export): the same document, headings as headings, no raw ``##``,
  no widget left to load. Its screenshot goes to ``test-output/screenshots/``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

from flower_magic.core.words import say
from flower_magic.testing.demo import demo_says
from tests.e2e.contrast import low_contrast
from tests.e2e.lab import SCREENSHOTS, chromium_page, running_lab

pytestmark = [pytest.mark.slow, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]
VIEW = ".jp-OutputArea-output .flower-magic"
PANEL = "#flower-magic-panel"
TASK = "write a short note about CSV cleaning"
LANG = "en"  # the README's language
# The README's pictures (scripts/screenshots copies them into docs/): small enough to commit.
README_SHOTS = {"live": "readme-live-view.png", "panel": "readme-panel.png"}
README_SHOT_BYTES = 150_000
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# The brief's and the goal's headings as the demo model writes them (flower_magic/testing/demo.py).
HEADINGS = ["Goal", "Acceptance criteria", "Scope", "Checks"]


def _notebook(path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in ["%load_ext flower_magic", f'%flower --demo "{TASK}"']]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def _env(tmp_path: Path) -> dict[str, str]:
    """The server's (and so its kernels') environment: this checkout, no credential, the demo's language."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "CLAUDE", "JPY", "JUPYTER"))}
    env.update(
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
        IPYTHONDIR=str(tmp_path / "ipython"),
        FLOWER_LANG=LANG,
    )
    return env


def _theme(page: Any, name: str) -> None:
    page.evaluate(f"window.jupyterapp.commands.execute('apputils:change-theme', {{theme: '{name}'}})")
    light = "true" if name == "JupyterLab Light" else "false"
    page.wait_for_function(f"document.body.dataset.jpThemeLight === '{light}'", timeout=30_000)
    page.wait_for_timeout(800)  # the theme's stylesheet applies


def _readable(page: Any) -> list[str]:
    """Is the document part of the view readable in the browser: rendered Markdown, the ruling's
    element, one-line tool calls, and no terminal markup (``##``, ``-- name ----``)?"""
    problems = []
    for heading in HEADINGS:
        if page.locator(f"{VIEW} .fm-md h2", has_text=heading).count() == 0:
            problems.append(f"no <h2> {heading!r}")
    if page.locator(f"{VIEW} .fm-md li").count() < 4:
        problems.append("the brief's and the goal's lists are not lists")
    card = page.locator(f"{VIEW} .fm-verdict")
    if card.count() != 1 or card.get_attribute("data-state") != "achieved":
        problems.append(f"{card.count()} rulings, not one 'achieved'")
    elif say("state_achieved", LANG) not in card.locator(".fm-verdict-head").inner_text():
        problems.append("the ruling does not say achieved")
    if page.locator(f"{VIEW} .fm-tool .fm-tool-name", has_text="Write").count() != 1:
        problems.append("the Write call is not one tool line")
    text = page.locator(VIEW).first.evaluate("e => e.innerText")  # folded parts too
    for raw in ("## ", "\n-- ", "== "):
        if raw in text:
            problems.append(f"raw {raw.strip()!r} in the view")
    return problems


def test_the_demo_run_reads_as_a_document_live_and_once_saved(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "demo").mkdir(parents=True)
    nb_path = root / "demo" / "demo.ipynb"
    _notebook(nb_path)
    with running_lab(tmp_path, root, _env(tmp_path)) as lab, chromium_page(1200, 760) as page:
        page.goto(f"{lab.url}/lab/tree/demo/demo.ipynb?token={lab.token}")
        page.wait_for_selector(".jp-Notebook", state="visible", timeout=60_000)
        page.wait_for_function("window.jupyterapp && window.jupyterapp.commands.hasCommand('notebook:run-all-cells')")
        # The kernel connected and idle: run-all before that runs nothing (seen on a loaded machine).
        page.wait_for_function(
            "(() => { const k = window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel;"
            " return !!k && k.connectionStatus === 'connected' && k.status === 'idle'; })()",
            timeout=120_000,
        )
        # Not awaited: the cells finish only after the demo's question is answered below.
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")

        ask = page.locator(f"{VIEW} .fm-ask")
        ask.wait_for(state="visible", timeout=120_000)
        page.wait_for_timeout(300)  # the header's clock and the step bar settle
        page.locator(VIEW).first.screenshot(path=str(SCREENSHOTS / README_SHOTS["live"]))
        ask.locator(".fm-ask-option", has_text="Markdown").click()

        done = f"{VIEW} .fm-header[data-status=done]"
        page.wait_for_selector(done, timeout=120_000)
        page.wait_for_timeout(500)
        problems = _readable(page)
        # The finished run beside the Flower panel, the file browser out of the way.
        page.evaluate("window.jupyterapp.shell.collapseLeft()")
        page.evaluate("window.jupyterapp.commands.execute('flower-magic:open', {path: 'demo'})")
        page.wait_for_function(f"document.querySelectorAll('{PANEL} tbody tr').length >= 4", timeout=30_000)
        page.mouse.move(0, 0)  # no hover underline in the picture
        page.wait_for_timeout(500)
        page.screenshot(path=str(SCREENSHOTS / README_SHOTS["panel"]))
        # The whole document, every fold open, in both themes: tall enough that nothing scrolls.
        page.evaluate("window.jupyterapp.shell.collapseRight()")
        page.set_viewport_size({"width": 1100, "height": 2400})
        page.evaluate("document.querySelectorAll('.flower-magic details').forEach(d => d.open = true)")
        for theme, suffix in (("JupyterLab Dark", "dark"), ("JupyterLab Light", "light")):
            _theme(page, theme)
            page.locator(VIEW).first.screenshot(path=str(SCREENSHOTS / f"document-lab-{suffix}.png"))
            problems += [f"{suffix}: {m}" for m in low_contrast(page, VIEW)]
        page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_function("window.jupyterapp.shell.currentWidget.context.model.dirty === false")
    assert problems == [], "\n".join(problems)
    for name in README_SHOTS.values():
        size = (SCREENSHOTS / name).stat().st_size
        assert size <= README_SHOT_BYTES, f"{name} is {size} bytes"

    # The notebook as JupyterLab saved it, read without the extension.
    problems = _exported(nb_path, _env(tmp_path))
    assert problems == [], "\n".join(problems)


def _exported(nb_path: Path, env: dict[str, str]) -> list[str]:
    """What is wrong with ``nb_path`` read without the extension: its saved outputs, then
    ``jupyter nbconvert --to html`` of it in Chromium (screenshots in ``test-output/screenshots``)."""
    saved = nbformat.read(nb_path, as_version=4)
    outputs = [o for o in saved.cells[1].outputs if "data" in o]
    problems = [f"a widget view without text/html: {list(o['data'])}" for o in outputs if WIDGET_MIME in o["data"]]
    if not any("fm-verdict" in o["data"].get("text/html", "") for o in outputs):
        problems.append("no final view in the saved notebook's text/html")
    export = SCREENSHOTS.parent / "document-nbconvert.html"
    convert = [sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", str(nb_path), "--output", str(export)]
    done = subprocess.run(convert, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    with chromium_page(1000, 900) as page:
        page.goto(export.as_uri())
        page.wait_for_timeout(300)
        page.screenshot(path=str(SCREENSHOTS / "document-nbconvert.png"), full_page=True)
        page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        page.screenshot(path=str(SCREENSHOTS / "document-nbconvert-open.png"), full_page=True)
        text = page.locator("body").inner_text()
        headings = page.locator(".flower-magic .fm-md h2").all_inner_texts()
        wrote = page.locator(".flower-magic .fm-md p", has_text=demo_says(LANG, "writing")).count()
        ruling = page.locator(".flower-magic .fm-verdict[data-state=achieved]").count()
    problems += [f"no <h2> {h!r}" for h in HEADINGS if h not in headings]
    if wrote != 1:
        problems.append("the worker's words are not a paragraph")
    if ruling != 1:
        problems.append("no ruling element")
    problems += [f"raw {raw.strip()!r} in the page" for raw in ("## ", "\n-- ", "== ") if raw in text]
    if "total $" not in text:
        problems.append("no closing lines")
    return problems
