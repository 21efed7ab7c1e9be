"""The notebook's context for the agent (core/notebook.py, issue 14): the block, its bounds and marks,
secrets, and the tools' answers, over a fake kernel that records what was proposed."""

from __future__ import annotations

import os
import threading
from collections.abc import Container, Mapping
from typing import Any

import numpy
import pandas
import pytest

from flower_magic.core import notebook as nb
from flower_magic.core.notebook import Cell, NotebookContext, Seen

CANARY = "sk-ant-api03-CANARY-notebook-0123456789"


class FakeSource:
    """A kernel: a namespace, numbered cells; records proposed code."""

    def __init__(self, ns: dict[str, Any], cells: list[Cell] | None = None, hidden: tuple[str, ...] = ()) -> None:
        self.ns = ns
        self.all_cells = cells or []
        self.hidden_names = hidden
        self.proposed: list[str] = []

    def namespace(self) -> Mapping[str, Any]:
        return self.ns

    def hidden(self) -> Container[str]:
        return self.hidden_names

    def cells(self, last: int) -> list[Cell]:
        return self.all_cells[-last:]

    def cell(self, number: int) -> Cell | None:
        return next((c for c in self.all_cells if c.number == number), None)

    def last_number(self) -> int:
        return self.all_cells[-1].number if self.all_cells else 0

    def propose(self, code: str) -> bool:
        self.proposed.append(code)
        return True


class Lazy:
    """A lazy table: reading ``shape`` or ``columns`` would compute it."""

    computed = 0

    @property
    def shape(self) -> tuple[int, int]:
        Lazy.computed += 1
        return (10, 2)

    @property
    def columns(self) -> list[str]:
        Lazy.computed += 1
        return ["a", "b"]

    def __len__(self) -> int:
        Lazy.computed += 1
        return 10

    def __repr__(self) -> str:
        Lazy.computed += 1
        return "Lazy()"


class Stored:
    """A DataFrame-like that keeps its shape and columns as plain attributes."""

    def __init__(self) -> None:
        self.shape = (7, 3)
        self.columns = ["x", "y", "z"]


def _context(ns: dict[str, Any], cells: list[Cell] | None = None, **kw: Any) -> NotebookContext:
    return NotebookContext(FakeSource(ns, cells), environ={}, **kw)


def test_the_block_names_types_and_cheap_shapes_never_values() -> None:
    orders = list(range(1234))
    table = pandas.DataFrame({"id": range(5), "city": ["a", "b", "c", "d", "e"]})
    ns = {"orders": orders, "table": table, "meta": {"k1": 1, "k2": [1, 2]}, "grid": numpy.zeros((4, 5))}
    ns |= {"stored": Stored(), "n": 42, "text": "hello there"}
    block = _context(ns).take()
    assert "- orders: list, 长度 1234" in block
    assert "- table: pandas.DataFrame, 形状 (5, 2), 列:id int64, city " in block
    assert "- meta: dict, 长度 2, 键:'k1', 'k2'" in block
    assert "- grid: numpy.ndarray, 形状 (4, 5), dtype float64" in block
    assert f"- stored: {nb.type_name(Stored())}, 形状 (7, 3), 列:x, y, z" in block
    assert "- n: int\n" in block and "- text: str, 长度 11" in block
    assert "1233" not in block and "hello there" not in block and "42" not in block


def test_lazy_objects_are_shown_by_type_and_never_computed() -> None:
    Lazy.computed = 0
    block = _context({"lazy": Lazy()}).take()
    assert f"- lazy: {nb.type_name(Lazy())}\n" in block
    assert Lazy.computed == 0


def test_private_names_modules_code_and_ipython_names_are_left_out() -> None:
    ns = {"_private": 1, "os": os, "f": lambda: 1, "Stored": Stored, "print": print, "In": [], "kept": 1}
    ctx = NotebookContext(FakeSource(ns, hidden=("In",)), environ={})
    block = ctx.take()
    assert "## 变量(1 个)" in block and "- kept: int" in block
    for name in ("_private", "os", "f:", "Stored:", "print", "In:"):
        assert name not in block.split("## 变量")[1]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("secret_key", "an ordinary looking value"),
        ("my_value", CANARY),
        ("env_text", "USER=me\nOPENAI_API_KEY=abcdefgh12345678\n"),
        ("config", {"HOST": "x", "DB_PASSWORD": "abcdefgh12345678"}),
        ("from_env", "environment-secret-value"),
    ],
)
def test_a_secret_is_shown_by_name_and_type_only_and_its_value_nowhere(name: str, value: Any) -> None:
    cells = [Cell(1, f"{name} = {value!r}"), Cell(2, f"print({name})", output=value)]
    ctx = NotebookContext(FakeSource({name: value}, cells), environ={"SERVICE_TOKEN": "environment-secret-value"})
    said = [ctx.take(), ctx.preview(name), ctx.read_cell(1), ctx.read_cell(2)]
    assert f"- {name}: {nb.type_name(value)} [{nb.SECRET_NOTE}]" in said[0]
    assert said[1] == f"{name}: {nb.type_name(value)} [{nb.SECRET_NOTE}]"
    hidden = [value] if isinstance(value, str) else []
    hidden += ["abcdefgh12345678"] if name in ("env_text", "config") else []
    assert not any(h in text for h in hidden for text in said), said


def test_ordinary_names_with_key_or_token_inside_are_not_secrets() -> None:
    block = _context({"keys": ["a"], "tokens": ["a", "b"], "monkey": 1}).take()
    assert nb.SECRET_NOTE not in block and "- tokens: list, 长度 2" in block


def test_ten_thousand_variables_stay_within_the_budget_mentioned_first_and_in_a_stable_order() -> None:
    ns: dict[str, Any] = {f"v{i:05d}": i for i in range(10_000)}
    ns["zeta"] = [1, 2]
    cells = [Cell(3, "zeta.append(3)")]
    first, again = _context(ns, cells).take(), _context(dict(reversed(ns.items())), cells).take()
    assert first == again
    assert len(first) <= nb.BLOCK_BUDGET_CHARS
    assert "## 变量(10001 个)\n\n- zeta: list, 长度 2\n- v00000: int" in first
    listed = first.count("\n- ")
    assert f"…还有 {10_001 - listed} 个没列出" in first and "[3] zeta.append(3)" in first


def test_what_changed_since_the_last_wake_is_marked() -> None:
    ns: dict[str, Any] = {"a": [1], "b": 2, "c": 3}
    cells = [Cell(1, "a = [1]")]
    first = NotebookContext(FakeSource(ns, cells), environ={})
    listed = first.take().split("## 变量")[1]
    assert nb.NEW not in listed and nb.CHANGED not in listed
    ns["a"].append(2)
    ns["b"] = 5
    del ns["c"]
    ns["d"] = 1
    cells.append(Cell(2, "a.append(2); b = 5; del c; d = 1"))
    second = NotebookContext(FakeSource(ns, cells), environ={}, seen=first.seen)
    block = second.take()
    assert f"- a: list, 长度 2 {nb.CHANGED}" in block
    assert f"- b: int {nb.CHANGED}" in block  # a new object, though its line reads the same
    assert f"- d: int {nb.NEW}" in block and "上次以后不见了的:c" in block
    assert "[1] a = [1]" in block and f"[2] {nb.NEW} a.append(2)" in block
    assert second.seen == Seen({k: (id(v), nb.describe(k, v)) for k, v in ns.items()}, 2)


def test_recent_cells_show_their_errors_and_long_sources_cut() -> None:
    cells = [Cell(4, "x = 1\n" * 400), Cell(5, "1/0", error="ZeroDivisionError: division by zero")]
    block = _context({}, cells).take()
    assert "[5] 1/0\n  ↳ 出错:ZeroDivisionError: division by zero" in block
    assert nb.CUT in block and len(block) <= nb.BLOCK_BUDGET_CHARS


def test_previews_are_bounded() -> None:
    big = pandas.DataFrame({"a": range(100_000), "b": ["word " * 50] * 100_000})
    ctx = _context({"orders": list(range(1234)), "big": big, "s": "x" * 1_000_000, "d": {i: i for i in range(999)}})
    ctx.take()
    orders = ctx.preview("orders")
    assert "[0] 0" in orders and f"[{nb.PREVIEW_ITEMS - 1}]" in orders and f"[{nb.PREVIEW_ITEMS}]" not in orders
    assert "[100] 100" in ctx.preview("orders", 100)
    head = ctx.preview("big")
    assert len(head) <= nb.PREVIEW_CHARS and "0  " in head and "99999" not in head
    for name in ("s", "d"):
        assert len(ctx.preview(name)) <= nb.PREVIEW_CHARS
    assert "没有叫 nothing 的变量" in ctx.preview("nothing")


class SlowRepr:
    """A value whose repr does not finish until the test lets it (or 30 s pass)."""

    release = threading.Event()

    def __repr__(self) -> str:
        self.release.wait(30)
        return "finished-repr"


def test_a_slow_preview_is_given_up() -> None:
    ctx = NotebookContext(FakeSource({"slow": SlowRepr()}), environ={}, timeout_s=0.2)
    try:
        said = ctx.preview("slow")
    finally:
        SlowRepr.release.set()
    # Given up, not waited for: the repr's own text never made it in.
    assert "没算完" in said and f"slow: {nb.type_name(SlowRepr())}" in said and "finished-repr" not in said


def test_a_cell_by_number_with_its_output_and_a_proposal_goes_to_the_source() -> None:
    source = FakeSource({}, [Cell(2, "table.describe()", output=pandas.DataFrame({"a": [1]}))])
    ctx = NotebookContext(source, environ={})
    assert "### 单元格 [2]\ntable.describe()" in ctx.read_cell(2) and "### 输出" in ctx.read_cell(2)
    assert "没有第 9 个单元格" in ctx.read_cell(9)
    assert ctx.propose("df.head()") == nb.PROPOSED_LAB and source.proposed == ["df.head()"]
    assert ctx.propose("  ") == nb.PROPOSED_EMPTY and source.proposed == ["df.head()"]


def test_the_demo_model_reads_the_task_before_the_notebook_block() -> None:
    """The demo model took the block's last line ("[1] %load_ext flower_magic") for the task, and
    answered in its language."""
    from flower_magic.core.notebook import BLOCK_HEAD
    from flower_magic.testing.demo import _task
    from flower_magic.testing.request import Request
    from flower_magic.workflow.clarify import with_notebook

    class Block:
        block = f"{BLOCK_HEAD}\n## 最近的单元格\n[1] %load_ext flower_magic"

    prompt = with_notebook("写一份清洗 CSV 的说明", Block())
    req = Request(0, "/v1/messages", {"messages": [{"role": "user", "content": prompt}]})
    assert _task(req) == "写一份清洗 CSV 的说明"


# -- issue 22: every planted secret, hostile objects ---------------------------------------------------


def test_no_planted_secret_reaches_the_agent_through_the_block_a_preview_or_a_cell() -> None:
    """Issue 22 item 5: of 19 planted values 12 reached the model (camelCase names, pw, hf_tok, URLs,
    an Authorization header, nested and listed dicts, a DataFrame column, a repr, an exception, a print)."""
    from tests.plants import PLANTS, run_plants

    ns, cells = run_plants(PLANTS)
    ctx = NotebookContext(FakeSource(ns, cells), environ={})
    said = [ctx.take()] + [ctx.preview(name) for name in ns] + [ctx.read_cell(c.number) for c in cells]
    everything = "\n".join(said)
    caught = [p.shape for p in PLANTS if not any(v in everything for v in p.values)]
    assert caught == [p.shape for p in PLANTS]
    # What is not secret stays readable: the table's rows, the repr's other field, the error itself.
    assert "ann" in ctx.preview("users") and "password" in ctx.preview("users")
    assert "https://api.internal" in ctx.read_cell(11)
    assert "RuntimeError: login refused for [redacted]" in ctx.read_cell(12)
    assert f"- pw: str [{nb.SECRET_NOTE}]" in said[0]  # a line is not read as "pw = str"


class Blocking:
    """Every attribute read waits for ever (until the test releases it)."""

    release = threading.Event()

    def __getattribute__(self, name: str) -> Any:
        Blocking.release.wait(60)
        return object.__getattribute__(self, name)


class ForeverStr:
    def __str__(self) -> str:
        Blocking.release.wait(60)
        return "7"


class ClassProperty:
    @property  # type: ignore[misc]
    def __class__(self) -> type:
        raise RuntimeError("no class")


class RaisingStr:
    def __str__(self) -> str:
        raise ValueError("no str")


def _hostile() -> dict[str, Any]:
    from unittest.mock import Mock

    shaped, columned = Stored(), Stored()
    shaped.shape = (ForeverStr(), 3)  # type: ignore[assignment]
    columned.columns = [RaisingStr(), "b"]
    return {
        "blocking": Blocking(),
        "shaped": shaped,
        "as_str": Mock(spec=str),
        "as_dict": Mock(spec=dict),
        "weird": ClassProperty(),
        "columned": columned,
        "orders": [1, 2, 3],
    }


def test_hostile_objects_are_shown_as_unreadable_and_the_block_is_built() -> None:
    """Issue 22 item 6: an object whose attributes block, a shape whose element's str blocks, Mocks
    of str and dict, a __class__ property, a column whose str raises: the cell hung or raised."""
    ns = _hostile()
    first = NotebookContext(FakeSource(ns, [Cell(1, "orders = [1, 2, 3]")]), environ={})
    try:
        block = first.take()
        threads = threading.active_count()
        for name in ("blocking", "shaped", "as_str", "as_dict", "weird", "columned"):
            line = next(x for x in block.splitlines() if x.startswith(f"- {name}:"))
            assert line.endswith(f"[{nb.UNREADABLE_NOTE}]"), line
        assert "- orders: list, 长度 3" in block and "[1] orders = [1, 2, 3]" in block
        # The next wake does not read the hung ones again (each would hold one more thread).
        again = NotebookContext(FakeSource(ns, [Cell(1, "orders = [1, 2, 3]")]), environ={}, seen=first.seen)
        assert nb.UNREADABLE_NOTE in again.take().split("- blocking:")[1].splitlines()[0]
        assert threading.active_count() == threads
        assert again.preview("blocking").endswith(f"[{nb.UNREADABLE_NOTE}]")
        assert "取不出来" in again.preview("as_str") and "取不出来" in again.preview("weird")
    finally:
        Blocking.release.set()
