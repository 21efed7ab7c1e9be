"""The agent sees the notebook (issue 14, acceptance a–f): a real kernel, the real CLI, the fake API;
and JupyterLab in Chromium inserting the agent's proposed cell below the %flower cell, unrun."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

from flower_magic.core import notebook as nb
from flower_magic.core.words import say
from flower_magic.kernel import CELL_MIME, PROPOSED_KEY
from flower_magic.testing import FakeAnthropic, Request, text, tool_use
from flower_magic.testing.roles import as_role, role_of
from tests.e2e.kernel import Kernel
from tests.e2e.lab import SCREENSHOTS, chromium_page, running_lab

pytestmark = pytest.mark.slow

CANARY = "sk-ant-api03-CANARY-issue14-abcdefghijklmnop"
BRIEF = "## 目标\n汇总 orders\n\n## 验收标准\n- 有汇总\n\n## 边界\n只读\n\n## 未知与假设\n- 无"
GOAL = "## 目标\n汇总 orders\n\n## 判定清单\n- 有汇总"
PASS = "## 结论\n达成\n\n## 理由\n都在。\n\n## 未通过\n(无)"
SETUP = (
    "import pandas as pd\n"
    "orders = list(range(1234))\n"
    "table = pd.DataFrame({'id': range(500), 'city': ['city-%d' % i for i in range(500)]})"
)
PROPOSED = "proposed_ran = True\ntable.groupby('city').size().head()"
# The `flower` command of the code under test (the console script may be another checkout's).
FLOWER = [sys.executable, "-c", "import sys; from flower_magic.cli import main; sys.exit(main())"]
VALUES = ", ".join(str(i) for i in range(100, 140))  # any run of orders' values


def _role(api: FakeAnthropic, role: str) -> list[Request]:
    return [r for r in api.requests if role_of(r) == role]


def _offered(request: Request) -> set[str]:
    """The tools a request offers: its tool list, and the deferred tools the CLI lists by name, one a
    line, for the model to load with ToolSearch (MCP tools are deferred)."""
    listed = re.findall(r"(?m)^(mcp__\w+)$", request.all_text)
    return {str(t.get("name")) for t in request.body.get("tools") or []} | set(listed)


def _script(api: FakeAnthropic) -> None:
    api.add(
        as_role("clarifier", text(BRIEF)),
        as_role("goal", text(GOAL)),
        as_role("worker", tool_use(nb.VARIABLE_TOOL, {"name": "table"})),
        as_role("worker", tool_use(nb.PROPOSE_TOOL, {"code": PROPOSED})),
        as_role("worker", text("汇总好了")),
        as_role("judge", text(PASS)),
    )


def test_the_agent_sees_variables_errors_no_secrets_and_hands_back_a_cell_then_no_context_and_the_terminal(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path, kernel: Kernel
) -> None:
    for cell in ("%load_ext flower_magic", SETUP, f"secret_key = {CANARY!r}", "ratio = 1 / 0"):
        kernel.run(cell)
    _script(fake_api)
    run = kernel.run('%flower "summarize orders"')
    assert run.status == "ok", run.text

    # a. the first worker request: orders, list, 1234 and table with its shape, not the values
    first = _role(fake_api, "worker")[0]
    said = first.last_user_text
    assert "- orders: list, 长度 1234" in said
    assert "- table: pandas.DataFrame, 形状 (500, 2), 列:id int64, city " in said
    # b. the cell that raised, and its error
    assert "ratio = 1 / 0\n  ↳ 出错:ZeroDivisionError: division by zero" in said
    # c. the secret by name and type only, its value in no request at all
    assert f"- secret_key: str [{nb.SECRET_NOTE}]" in said
    everything = "\n".join(json.dumps(r.body, ensure_ascii=False) for r in fake_api.requests)
    assert CANARY not in everything and VALUES not in everything
    # the clarifier and the worker get the block and the tools; the goal setter and the judge neither
    for role in ("clarifier", "worker"):
        assert set(nb.TOOL_NAMES) <= _offered(_role(fake_api, role)[0])
        assert nb.BLOCK_HEAD in _role(fake_api, role)[0].last_user_text
    for role in ("goal", "judge"):
        assert not set(nb.TOOL_NAMES) & _offered(_role(fake_api, role)[0])
        assert "笔记本现场" not in _role(fake_api, role)[0].all_text

    # d. the preview is bounded; the proposal is a display on the cell, and nothing ran
    preview = json.dumps(_role(fake_api, "worker")[1].tool_results()[-1]["content"], ensure_ascii=False)
    assert "city-0" in preview and "city-9" in preview and "city-10" not in preview
    assert len(preview) < nb.PREVIEW_CHARS + 500
    (shown,) = [d for d in run.displays if CELL_MIME in d]
    assert shown[CELL_MIME]["source"] == f"{say('proposed_comment', 'zh')}\n{PROPOSED}"
    assert PROPOSED in shown["text/plain"]
    assert "False" in kernel.run("print('proposed_ran' in globals())").stream

    # f. --no-context: a wake with no block, and the notebook tools are not there to call
    fake_api.add(
        as_role("goal", text(GOAL)),  # a phrase said at wake derives the goals again
        as_role("worker", tool_use(nb.VARIABLE_TOOL, {"name": "orders"})),
        as_role("worker", text("再看过了")),
        as_role("judge", text(PASS)),
    )
    n = len(_role(fake_api, "worker"))
    assert kernel.run('%flower --no-context --rounds 1 "再看看"').status == "ok"
    wake, after = _role(fake_api, "worker")[n : n + 2]
    assert "再看看" in wake.last_user_text and "笔记本现场" not in wake.last_user_text
    refused = after.tool_results()[-1]
    assert refused.get("is_error") and "长度 1234" not in json.dumps(refused, ensure_ascii=False)

    # 5. the same run continued from a terminal: no kernel, no block, no notebook tools, still works
    fake_api.add(as_role("goal", text(GOAL)), as_role("worker", text("终端里接着做完了")), as_role("judge", text(PASS)))
    n = len(_role(fake_api, "worker"))
    done = subprocess.run(
        [*FLOWER, "--rounds", "1", "--timeout", "0", "终端里接着"],
        cwd=workspace,
        env=child_env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    terminal = _role(fake_api, "worker")[n]
    assert "终端里接着" in terminal.last_user_text and "笔记本现场" not in terminal.last_user_text
    assert not re.search(r"(?m)^mcp__notebook__", terminal.last_user_text)
    assert "汇总好了" in terminal.all_text  # the conversation the notebook started


# -- JupyterLab ----------------------------------------------------------------------------------------

CHECKOUT_PANEL = Path(__file__).resolve().parents[2] / "flower_magic" / "labextension"


def _lab_env(tmp_path: Path, api: FakeAnthropic) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "CLAUDE", "JPY", "JUPYTER"))}
    env.update(api.env(tmp_path / "home"))
    env["IPYTHONDIR"] = str(tmp_path / "ipython")
    env["FLOWER_LANG"] = "en"
    return env


@pytest.mark.browser
def test_jupyterlab_inserts_the_proposed_cell_below_marked_and_unrun(fake_api: FakeAnthropic, tmp_path: Path) -> None:
    """Acceptance d (JupyterLab): the cell appears below the %flower cell, with the "proposed" line
    and metadata; it has not run (no execution count, no outputs, and the kernel never saw it)."""
    root = tmp_path / "root"
    root.mkdir()
    if (CHECKOUT_PANEL / "package.json").is_file():
        # This checkout's build, ahead of any installed copy of the panel (data dirs come first).
        shutil.copytree(CHECKOUT_PANEL, tmp_path / "data" / "labextensions" / "flower-magic")
    cells = ["%load_ext flower_magic", SETUP, '%flower --lang en "summarize orders"', "print('last')"]
    book = nbformat.v4.new_notebook()
    book.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(book, root / "nb.ipynb")
    _script(fake_api)

    with running_lab(tmp_path, root, _lab_env(tmp_path, fake_api)) as lab, chromium_page() as page:
        page.goto(f"{lab.url}/lab/tree/nb.ipynb?token={lab.token}")
        page.wait_for_selector(".jp-Notebook", state="visible", timeout=60_000)
        page.wait_for_function("window.jupyterapp && window.jupyterapp.commands.hasCommand('notebook:run-all-cells')")
        page.wait_for_function(
            "(() => { const k = window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel;"
            " return !!k && k.connectionStatus === 'connected' && k.status === 'idle'; })()",
            timeout=60_000,
        )
        # Run the first three cells only: the proposal must land right below the %flower cell.
        for index in range(3):
            page.evaluate(
                f"(() => {{ const nb = window.jupyterapp.shell.currentWidget.content; nb.activeCellIndex = {index};"
                " return window.jupyterapp.commands.execute('notebook:run-cell'); })()"
            )
        page.wait_for_selector(".jp-FlowerProposalOutput", state="visible", timeout=120_000)
        page.wait_for_function(
            "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'", timeout=120_000
        )
        state: list[dict[str, Any]] = page.evaluate(
            "window.jupyterapp.shell.currentWidget.content.model.sharedModel.cells.map(c => c.toJSON())"
        )
        page.locator(".jp-Notebook .jp-Cell").nth(3).scroll_into_view_if_needed()
        page.screenshot(path=str(SCREENSHOTS / "proposed-cell.png"))
        out = page.locator(".jp-FlowerProposalOutput").inner_text()

    assert [c["source"] for c in state] == [
        cells[0],
        cells[1],
        cells[2],
        f"{say('proposed_comment', 'en')}\n{PROPOSED}",
        cells[3],
    ]
    proposed = state[3]
    assert proposed["metadata"][PROPOSED_KEY] == {"proposed": True}
    assert proposed["execution_count"] is None and proposed["outputs"] == []
    assert say("lab_proposed", "en") in out and "proposed_ran = True" in out
    worker = _role(fake_api, "worker")
    assert "- orders: list, 长度 1234" in worker[0].last_user_text
