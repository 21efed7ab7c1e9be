"""The IPython shell as the agent's notebook (flower_magic/kernel.py, issue 14): cells and their errors,
and a proposed cell pre-filling terminal IPython's next input. (Real kernels and JupyterLab:
tests/e2e/test_notebook_context.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from flower_magic.core import notebook as nb
from flower_magic.core.words import say
from flower_magic.kernel import CellErrors, Proposals, ShellSource
from flower_magic.testing import FakeAnthropic, text, tool_use
from flower_magic.testing.roles import as_role, role_of

BRIEF = "## 目标\n看表\n\n## 验收标准\n- 有提议\n\n## 边界\n不动文件\n\n## 未知与假设\n- 无"


@pytest.fixture
def shell(workspace: Path) -> Iterator[InteractiveShell]:
    sh = InteractiveShell.instance()
    sh.extension_manager.load_extension("flower_magic")
    sh.user_ns["__vsc_ipynb_file__"] = str(workspace / "notebook.ipynb")
    try:
        yield sh
    finally:
        sh.user_ns.pop("__vsc_ipynb_file__", None)
        sh.rl_next_input = None


def test_cells_before_the_current_one_with_the_errors_they_raised(shell: InteractiveShell) -> None:
    start = shell.execution_count
    shell.run_cell("rows = [1, 2]", store_history=True)
    shell.run_cell("rows[5]", store_history=True)
    shell.run_cell("rows.append(3)\nrows", store_history=True)
    errors = shell.magics_manager.registry["FlowerMagics"].errors
    source = ShellSource(shell, errors, Proposals(shell, "zh"))
    cells = source.cells(5)
    assert [(c.number - start, c.source, c.error) for c in cells if c.number >= start] == [
        (0, "rows = [1, 2]", ""),
        (1, "rows[5]", "IndexError: list index out of range"),
        (2, "rows.append(3)\nrows", ""),
    ]
    assert cells[-1].output == [1, 2, 3] and source.cell(source.current) is None


def test_an_error_raised_before_the_extension_was_loaded_is_found_from_the_last_traceback(
    shell: InteractiveShell,
) -> None:
    shell.run_cell("1/0", store_history=True)
    number = shell.execution_count - 1
    fresh = CellErrors()  # what a %load_ext after that cell starts with
    assert fresh.of(shell, number) == "ZeroDivisionError: division by zero"
    assert fresh.of(shell, number - 1) == ""


@pytest.mark.slow
def test_terminal_ipython_gets_a_proposed_cell_as_its_next_input(
    shell: InteractiveShell, fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """Acceptance d (terminal): the preview the agent asks for is bounded; its proposed cell pre-fills
    the next input and runs nothing."""
    shell.run_cell("table = {f'col{i}': list(range(500)) for i in range(40)}", store_history=True)
    fake_api.add(
        as_role("clarifier", tool_use(nb.VARIABLE_TOOL, {"name": "table"})),
        as_role("clarifier", tool_use(nb.PROPOSE_TOOL, {"code": "ran = True\ntable['col0'][:5]"})),
        as_role("clarifier", text(BRIEF)),
    )
    result = shell.run_cell('%flower --clarify-only "看看 table"')
    assert result.error_in_exec is None
    requests = [r for r in fake_api.requests if role_of(r) == "clarifier"]
    assert len(requests) == 3
    preview = requests[1].tool_results()[-1]
    shown = json.dumps(preview["content"], ensure_ascii=False)
    assert "table: dict, 长度 40" in shown and "'col0': [0, 1, 2" in shown
    assert len(shown) < nb.PREVIEW_CHARS + 500
    reply = requests[2].tool_results()[-1]
    assert nb.PROPOSED_NEXT in json.dumps(reply["content"], ensure_ascii=False)
    assert shell.rl_next_input == f"{say('proposed_comment', 'zh')}\nran = True\ntable['col0'][:5]\n"
    assert "ran" not in shell.user_ns


@pytest.mark.parametrize(
    ("setting", "line", "context"), [(True, '"x"', True), (True, '--no-context "x"', False), (False, '"x"', False)]
)
def test_no_context_comes_from_the_flag_or_the_setting(
    shell: InteractiveShell, setting: bool, line: str, context: bool
):
    shell.run_cell(f"%config FlowerMagics.context = {setting}")
    magics = shell.magics_manager.registry["FlowerMagics"]
    try:
        opts, _ = magics._options(line, None)
    finally:
        shell.run_cell("%config FlowerMagics.context = True")
    assert opts.context is context
