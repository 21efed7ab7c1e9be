"""The same run rendered three ways — JupyterLab in Chromium, terminal IPython, an nbconvert HTML
export — with hostile agent text shown as text everywhere (issue 5, acceptance f)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter

from flower_magic.testing import FakeAnthropic, text
from flower_magic.testing.roles import as_role
from tests.e2e.lab import SCREENSHOTS, chromium_page, running_lab

pytestmark = pytest.mark.slow

XSS = '<script>window.__xss=1</script> <img src=x onerror="window.__xss=2"> 清洗完了'
BRIEF = "## 目标\n清洗 CSV\n\n## 验收标准\n- clean.py\n\n## 边界\n只碰 data/\n\n## 未知与假设\n- UTF-8"
GOAL = "## 目标\n清洗脚本可用\n\n## 判定清单\n- clean.py 存在\n- 输出里没有空行"
NOT_YET = "## 结论\n未达成\n\n## 理由\n还有空行 <b>没去掉</b>\n\n## 未通过\n- 输出里没有空行"
PASS = "## 结论\n达成\n\n## 理由\n都在。\n\n## 未通过\n(无)"
TASK = "清洗 data/ 里的 CSV"
CELLS = ["%load_ext flower_magic", f'%flower "{TASK}" --rounds 2']
WAKE = "%flower --rounds 1"  # a second run: the banner, a resumed header, the goal list with the latest marks


# A notebook ~380 px wide cut the English label ("work context 5.1K of 1M"); this window is a little
# narrower, so the Chinese label, a few characters shorter, meets the same edge.
NARROW_PX = 340
# The elements (of a selector) that do not show whole: past their output's right edge, or cut inside.
_CUT = """(selector) => [...document.querySelectorAll(selector)].filter(e => {
  const area = e.closest('.jp-OutputArea-output') || document.body;
  const words = e.querySelector('.fm-ctx-words') || e;
  return e.getBoundingClientRect().right > area.getBoundingClientRect().right + 0.5
    || words.scrollWidth > words.clientWidth + 0.5;
}).map(e => e.innerText)"""


def _script(api: FakeAnthropic) -> None:
    api.add(
        as_role("clarifier", text(BRIEF)),
        as_role("goal", text(GOAL)),
        as_role("worker", text("第一轮:" + XSS)),
        as_role("judge", text(NOT_YET)),
        as_role("worker", text("第二轮:" + XSS)),
        as_role("judge", text(PASS)),
    )


def _notebook(path: Path, *, wake: bool = False) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in [*CELLS, *([WAKE] if wake else [])]]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.mark.browser
def test_jupyterlab_renders_the_run_and_escapes_agent_text(
    fake_api: FakeAnthropic, child_env: dict[str, str], tmp_path: Path
) -> None:
    root = tmp_path / "root"
    (root / "proj").mkdir(parents=True)
    _notebook(root / "proj" / "run.ipynb", wake=True)
    _script(fake_api)
    fake_api.add(as_role("worker", text("又检查了一遍。")), as_role("judge", text(NOT_YET)))
    env = {k: v for k, v in child_env.items() if k.startswith(("ANTHROPIC", "CLAUDE", "DISABLE"))}
    with running_lab(tmp_path, root, env) as lab, chromium_page(1300, 1100) as page:
        page.goto(f"{lab.url}/lab/tree/proj/run.ipynb?token={lab.token}")
        page.wait_for_selector(".jp-Notebook", state="visible", timeout=60_000)
        page.wait_for_function("window.jupyterapp && window.jupyterapp.commands.hasCommand('notebook:run-all-cells')")
        page.wait_for_timeout(1500)  # the kernel connects
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        page.wait_for_function(
            "document.querySelectorAll('.flower-magic').length >= 2"
            " && [...document.querySelectorAll('.flower-magic')].every(e => e.innerText.includes('总花费'))",
            timeout=240_000,
        )
        page.wait_for_timeout(500)
        page.screenshot(path=str(SCREENSHOTS / "notebook-run-lab.png"))
        wake = page.locator(".flower-magic").last
        wake.scroll_into_view_if_needed()
        wake.screenshot(path=str(SCREENSHOTS / "notebook-wake-lab.png"))
        wake_text = wake.inner_text()
        assert "接上上次" in wake_text and "第 2 次唤醒" in wake_text  # the banner
        assert "上下文" in wake_text and "累计" in wake_text  # the status line
        # The wake's total has two "$": JupyterLab must not typeset the text between them as LaTeX.
        assert "这次唤醒 $" in wake_text and "清单合计 $" in wake_text
        assert page.locator(".flower-magic mjx-container").count() == 0
        assert page.evaluate("window.__xss") is None
        out = page.locator(".flower-magic").first.inner_text()
        assert "<script>window.__xss=1</script>" in out and 'onerror="window.__xss=2"' in out
        assert "干活" in out and "总花费" in out and "## 目标" not in out  # the brief is a document
        assert page.locator(".flower-magic .fm-md h2", has_text="验收标准").count() >= 1
        assert page.locator(".flower-magic .fm-verdict[data-state=not_yet]").count() >= 1
        assert "clean.py 存在" in out and "输出里没有空行" in out
        assert page.locator(".flower-magic img").count() == 0
        assert page.locator(".flower-magic script").count() == 0

        # Issue 24, item 10: in a notebook ~380 px wide the header's context label was cut ("of 1N").
        page.evaluate("window.jupyterapp.shell.collapseLeft()")  # the notebook alone, in a narrow window
        page.set_viewport_size({"width": NARROW_PX, "height": 1100})
        page.wait_for_timeout(500)
        wake.scroll_into_view_if_needed()
        assert page.evaluate(_CUT, ".flower-magic .fm-ctx") == []
        wake.screenshot(path=str(SCREENSHOTS / "notebook-wake-lab-narrow.png"))
    rows = json.loads((root / "proj" / "runs" / "manifest.json").read_text(encoding="utf-8"))
    assert [r["step"] for r in rows][-1] == "干活·判定#1"  # the wake's own judge round


def test_terminal_ipython_prints_plain_text(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    _script(fake_api)
    fake_api.add(as_role("worker", text("又看了一遍。")), as_role("judge", text(PASS)))
    script = workspace / "run.ipy"
    script.write_text("\n".join([*CELLS, "%flower"]) + "\n", encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "IPython", "--no-banner", "--colors=NoColor", str(script)],
        cwd=workspace,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    text_out = out.stdout
    assert "== 确认需求" in text_out and "== 干活" in text_out
    assert XSS in text_out  # shown as the characters it is
    assert "第 2 次唤醒" in text_out  # the second %flower woke up with its banner
    assert "\x1b[" not in text_out  # no colour codes when the output is not a terminal
    assert "text/html" not in text_out and "<div" not in text_out


def test_nbconvert_export_is_static_and_escaped(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _script(fake_api)
    for key, value in child_env.items():
        if key.startswith(("ANTHROPIC", "CLAUDE", "HOME", "DISABLE")):
            monkeypatch.setenv(key, value)
    path = workspace / "run.ipynb"
    _notebook(path)
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(workspace)}}).execute()
    html, _ = HTMLExporter().from_notebook_node(nb)
    export = workspace / "run.html"
    export.write_text(html, encoding="utf-8")
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in html
    assert "<script>window.__xss" not in html and "<img src=x onerror" not in html
    assert "总花费" in html and "clean.py 存在" in html
    assert "<h2>验收标准</h2>" in html and "<h2>判定清单</h2>" in html  # the agent's Markdown, rendered
    with chromium_page(1200, 1000) as page:
        page.goto(export.as_uri())
        page.wait_for_timeout(500)
        page.screenshot(path=str(SCREENSHOTS / "notebook-run-nbconvert.png"), full_page=True)
        assert page.evaluate("window.__xss") is None
