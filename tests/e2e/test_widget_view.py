"""The live widget view of a run in JupyterLab, in Chromium (issue 12, item 3 and acceptance c): the
header and its progress, goal badges that change as the judge rules, a step that collapses, the
agent's question answered by clicking one of its options, and text contrast in the light and the
dark theme. Screenshots go to ``test-output/screenshots/``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

from flower_magic.core.rundir import QA_LOG_NAME
from flower_magic.core.words import say
from flower_magic.testing import FakeAnthropic, text, tool_use
from flower_magic.testing.roles import as_role
from tests.e2e.contrast import low_contrast
from tests.e2e.lab import SCREENSHOTS, chromium_page, running_lab

pytestmark = [pytest.mark.slow, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]
VIEW = ".jp-OutputArea-output .flower-magic"
QUESTION = "输出写到哪里?"
OPTIONS = ["stdout", "同名文件 clean.csv"]
BRIEF = "## 目标\n清洗 CSV\n\n## 验收标准\n- clean.py\n\n## 边界\n只碰 data/\n\n## 未知与假设\n- UTF-8"
GOAL = "## 目标\n清洗脚本可用\n\n## 判定清单\n- clean.py 存在\n- 输出里没有空行"
NOT_YET = "## 结论\n未达成\n\n## 理由\n还有空行\n\n## 未通过\n- 输出里没有空行"
PASS = "## 结论\n达成\n\n## 理由\n都在。\n\n## 未通过\n(无)"
SECOND_ROUND_S = 12  # the second work round takes this long: the badges of round one stay on screen


def _script(api: FakeAnthropic) -> None:
    api.add(
        as_role("clarifier", tool_use("mcp__human__ask", {"question": QUESTION, "options": OPTIONS})),
        as_role("clarifier", text(BRIEF)),
        as_role("goal", text(GOAL)),
        as_role("worker", tool_use("Bash", {"command": "echo 一行 > clean.py"}, say="先写脚本。")),
        as_role("worker", text("第一轮做完了。")),
        as_role("judge", text(NOT_YET)),
        as_role("worker", text("第二轮:去掉了空行。", delay_s=SECOND_ROUND_S)),
        as_role("judge", text(PASS)),
    )


def _notebook(path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    cells = ["%load_ext flower_magic", '%flower "清洗 data/ 里的 CSV" --rounds 2']
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def _badges(page: Any) -> list[str]:
    return list(page.eval_on_selector_all(f"{VIEW} .fm-goals li.fm-check", "els => els.map(e => e.dataset.state)"))


def _theme(page: Any, name: str) -> None:
    page.evaluate(f"window.jupyterapp.commands.execute('apputils:change-theme', {{theme: '{name}'}})")
    light = "true" if name == "JupyterLab Light" else "false"
    page.wait_for_function(f"document.body.dataset.jpThemeLight === '{light}'", timeout=30_000)
    page.wait_for_timeout(800)  # the theme's stylesheet applies


def _contrast(page: Any, shot: str) -> list[str]:
    """Low-contrast texts of the view, in the light theme and then in the dark one (screenshots of both)."""
    found = []
    for theme, suffix in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
        _theme(page, theme)
        page.locator(VIEW).first.screenshot(path=str(SCREENSHOTS / f"{shot}-{suffix}.png"))
        found += [f"{suffix}: {m}" for m in low_contrast(page, VIEW)]
    _theme(page, "JupyterLab Light")
    return found


def test_the_live_view_header_badges_sections_and_a_question_answered_by_a_click(
    fake_api: FakeAnthropic, child_env: dict[str, str], tmp_path: Path
) -> None:
    root = tmp_path / "root"
    (root / "proj").mkdir(parents=True)
    _notebook(root / "proj" / "run.ipynb")
    _script(fake_api)
    env = {k: v for k, v in child_env.items() if k.startswith(("ANTHROPIC", "CLAUDE", "DISABLE"))}
    # The kernels the lab starts run this checkout's flower_magic (they inherit the server's environment).
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    with running_lab(tmp_path, root, env) as lab, chromium_page(1300, 1000) as page:
        page.goto(f"{lab.url}/lab/tree/proj/run.ipynb?token={lab.token}")
        page.wait_for_selector(".jp-Notebook", state="visible", timeout=60_000)
        page.wait_for_function("window.jupyterapp && window.jupyterapp.commands.hasCommand('notebook:run-all-cells')")
        page.wait_for_timeout(1500)  # the kernel connects
        # Not awaited: the command resolves when the cells finish, and the run waits for a click first.
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")

        # The question: shown once, as a widget, while the clarify step runs.
        ask = page.locator(f"{VIEW} .fm-ask")
        ask.wait_for(state="visible", timeout=120_000)
        header = page.locator(f"{VIEW} .fm-header")
        assert header.get_attribute("data-status") == "asking"
        assert "第 1/3 步 · 确认需求" in header.inner_text()
        assert page.locator(VIEW).first.inner_text().count(QUESTION) == 1
        buttons = ask.locator(".fm-ask-option")
        assert [b.inner_text().strip() for b in buttons.all()] == OPTIONS
        assert ask.locator(".fm-ask-decide").inner_text().strip() == "让它自己拿主意"
        page.locator(VIEW).first.screenshot(path=str(SCREENSHOTS / "widget-view-question.png"))
        found = _contrast(page, "widget-view-question")
        buttons.nth(1).click()

        # Answered in place: the widget gives way to the question and its answer, once each.
        ask.wait_for(state="detached", timeout=30_000)
        page.wait_for_function(
            f"[...document.querySelectorAll('{VIEW}')].some(e => e.innerText.includes('+ {OPTIONS[1]}'))",
            timeout=30_000,
        )

        # Round one judged: one check passed, one failed, while round two is still working.
        page.wait_for_function(
            f"document.querySelectorAll('{VIEW} .fm-goals li.fm-check[data-state=fail]').length === 1", timeout=120_000
        )
        assert _badges(page) == ["pass", "fail"]
        ruling = page.locator(f"{VIEW} .fm-verdict[data-state=not_yet]")  # the round's own element
        assert ruling.locator("li.fm-check[data-state=fail] .fm-check-text").all_inner_texts() == ["输出里没有空行"]
        assert "第 2/2 轮" in header.inner_text() and "第 3/3 步 · 干活" in header.inner_text()
        assert header.locator(".fm-seg-done").count() == 2 and header.locator(".fm-seg-run").count() == 1
        assert header.locator(".fm-bar[role=progressbar]").count() == 1
        # Finished steps are collapsed to their summary line; the running one is open.
        sections = page.locator(f"{VIEW} .fm-section")
        assert sections.count() == 3
        titles = [s.locator(".jupyter-widget-Collapse-header").inner_text() for s in sections.all()]
        assert titles[0].startswith("✓ 确认需求") and "1/3" in titles[0] and "完成" in titles[0], titles
        assert titles[2].startswith("… 干活"), titles
        opened = [s.locator(".jupyter-widget-Collapse-contents").is_visible() for s in sections.all()]
        assert opened == [False, False, True]
        # A tool call is one line; its details open on a click.
        tool = sections.nth(2).locator("details").first
        assert tool.locator("summary .fm-tool-name").inner_text() == "Bash"
        tool.locator("summary").click()
        assert "echo" in tool.locator(".fm-pre").inner_text()
        page.locator(VIEW).first.screenshot(path=str(SCREENSHOTS / "widget-view-running.png"))
        found += _contrast(page, "widget-view-running")

        # The end: both badges pass, the header says done, the live widget became static HTML.
        page.wait_for_function(
            f"[...document.querySelectorAll('{VIEW}')].some(e => e.innerText.includes('总花费'))", timeout=120_000
        )
        page.wait_for_timeout(500)
        assert _badges(page) == ["pass", "pass"]
        assert page.locator(f"{VIEW} .fm-header").get_attribute("data-status") == "done"
        page.screenshot(path=str(SCREENSHOTS / "widget-view-done-lab.png"))
        found += _contrast(page, "widget-view-done")
        assert found == [], "\n".join(found)
    rows = json.loads((root / "proj" / "runs" / "manifest.json").read_text(encoding="utf-8"))
    assert rows[0]["step"] == "确认需求"
    log = (root / "proj" / ".flower" / "notes" / QA_LOG_NAME).read_text(encoding="utf-8")
    assert OPTIONS[1] in log  # the click reached the agent as the answer


def test_after_a_restart_the_live_view_says_it_no_longer_changes_and_its_buttons_take_no_click(
    child_env: dict[str, str], tmp_path: Path
) -> None:
    """A kernel restart under a background run waiting for an answer left the cell's question card
    with buttons that looked alive and reached nobody, and a header still "waiting for you" (issue 24,
    7). JupyterLab drops what the going kernel says last and marks the widgets disconnected: the
    card's buttons are dimmed and take no click, the card and the header say what to do instead."""
    root = tmp_path / "root"
    (root / "proj").mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('%load_ext flower_magic\n%flower --demo --bg "写一个笔记"')]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "proj" / "bg.ipynb")
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    try:
        with running_lab(tmp_path, root, env) as lab, chromium_page(1300, 1000) as page:
            page.goto(f"{lab.url}/lab/tree/proj/bg.ipynb?token={lab.token}")
            page.wait_for_selector(".jp-Notebook", state="visible", timeout=60_000)
            page.wait_for_function("window.jupyterapp && window.jupyterapp.commands.hasCommand('kernelmenu:restart')")
            page.wait_for_timeout(1500)  # the kernel connects
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            ask = page.locator(f"{VIEW} .fm-ask")
            ask.wait_for(state="visible", timeout=120_000)
            gone, pill = page.locator(f"{VIEW} .fm-ask-gone"), page.locator(f"{VIEW} .fm-header .fm-gone").first
            assert not gone.is_visible() and not pill.is_visible()  # alive: nothing says it is gone
            page.evaluate("() => { window.jupyterapp.commands.execute('kernelmenu:restart'); }")
            page.locator(".jp-Dialog-button.jp-mod-accept").click()
            gone.wait_for(state="visible", timeout=60_000)
            assert say("ask_gone", "zh") in gone.inner_text()
            assert pill.is_visible() and pill.inner_text().strip() == say("run_let_go", "zh")
            assert not page.locator(f"{VIEW} .fm-header .fm-st-asking").is_visible()  # no "waiting for you"
            option = ask.locator(".fm-ask-option").first
            events = option.evaluate("b => getComputedStyle(b.closest('.fm-ask-row')).pointerEvents")
            assert events == "none"  # a click goes nowhere, as it looks
            # One pill and line of ours instead of ipywidgets' broken-link icon on every part of the view.
            before = "es => es.map(e => getComputedStyle(e, '::before').content)"
            icons = page.eval_on_selector_all(f"{VIEW}, {VIEW} .jupyter-widgets-disconnected", before)
            assert set(icons) <= {"none", "normal"}, icons
            page.locator(VIEW).first.screenshot(path=str(SCREENSHOTS / "widget-view-after-restart.png"))
    finally:
        subprocess.run(
            [sys.executable, "-m", "flower_magic.cli", "--stop"],
            cwd=root / "proj",
            env={**os.environ, **env, "HOME": str(tmp_path / "home")},
            capture_output=True,
        )
