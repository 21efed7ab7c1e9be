"""What the agent sees of the notebook: a short block about the kernel's variables and recent cells,
and three tools for detail (one variable, one cell) and for handing code back as a proposed cell.

A front end that has a kernel (``magics.py``) gives a ``NotebookSource``; this module never imports
IPython. ``NotebookContext.take`` reads the source once per wake, on the kernel's own thread, before
the run starts; the prompts of that wake (the clarifier's and the worker's) carry ``block``.

Guarantees:
    - Building the block never raises and holds the kernel's thread for under a second at most
      (``VARIABLES_READ_S + DESCRIBE_LEAST_S + CELLS_READ_S``), whatever the namespace holds: every variable is
      read on a reader thread (``core.timebox``), ``VARIABLE_READ_S`` each; one that hangs or raises
      (a blocking ``__getattribute__``, ``Mock(spec=str)``, a ``__class__`` property, a ``__str__``
      that raises) is shown by name, its type when that is safe to read, and ``UNREADABLE_NOTE``. One
      that hung is not read again at a later wake in this kernel, nor by the variable tool.
    - The block lists a variable by name, type and a cheap shape only: ``len`` of built-in containers
      and strings, ``shape`` / columns and dtypes of array and DataFrame-likes from the libraries in
      ``EAGER_LIBRARIES`` (attributes they keep, nothing computed), the first keys of a dict, an
      instance's own ``shape`` / ``columns`` attributes. Never a value, never a full repr; a lazy
      object (dask, a polars ``LazyFrame``, anything of an unknown library) is shown by type only.
    - Private names (``_x``), modules, functions, classes and the names IPython put there are left out.
    - A variable is shown by name and type only, in the block and by the variable tool, when its
      name reads as a credential (``core.redaction.secret_name``: ``dbPassword``, ``hf_tok``, ``pw``)
      or it holds a secret (``secret_values``): a string the redaction finds something in, any string
      under a credential-named key, attribute or column, at any depth (a nested ``{"db": {"password":
      …}}``, a list of dicts, an object whose ``token`` attribute its repr shows). A DataFrame is the
      exception: its credential-named columns are masked in its preview, the rest stays readable.
    - Everything the agent is given — the block, a preview, a cell's source (``%flower`` cells
      included), output and error — goes through one redaction (``core.redaction.Redactor``): the
      secrets those variables hold, the environment's credentials and the session store's password
      by value, tokens and URL passwords by shape, values given to credential names in code. Text is
      scrubbed before it is cut, so no secret is shown in part.
    - The block is at most ``BLOCK_BUDGET_CHARS``; its order depends only on the namespace and the
      cells (no clock), so the same kernel state gives the same text. What changed since the previous
      wake in this kernel is marked (``NEW`` / ``CHANGED``, cells after the last one seen).
    - The tools only read; a preview or a cell's output is computed on a thread of its own and given
      up after ``PREVIEW_TIMEOUT_S`` (the agent is told), so a slow ``repr`` never holds the run.
    - A proposed cell is only handed to the source (``NotebookSource.propose``): nothing here executes
      code in the kernel.
Not guaranteed:
    - A read that timed out keeps running on its daemon thread until it ends by itself (possibly
      never: one thread per hung object, once per kernel).
    - A secret that is neither named, shaped, in the environment nor held by a variable (a password
      typed into a cell as a bare argument and never kept) is unknown here.
    - Values shorter than ``core.redaction.MIN_SECRET_CHARS`` are hidden where they stand (by name,
      by key) but not searched for elsewhere (an exception message that repeats a 6-letter password).
"""

from __future__ import annotations

import inspect
import itertools
import re
import time
import types
from collections import deque
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from flower_magic.core.redaction import MIN_SECRET_CHARS, REDACTED, Redactor, secret_name
from flower_magic.core.timebox import TIMED_OUT, Outcome, call_within, read_each, safe_type

if TYPE_CHECKING:
    from claude_agent_sdk import McpSdkServerConfig

SERVER_NAME = "notebook"
VARIABLE_TOOL = f"mcp__{SERVER_NAME}__variable"
CELL_TOOL = f"mcp__{SERVER_NAME}__cell"
PROPOSE_TOOL = f"mcp__{SERVER_NAME}__propose_cell"
TOOL_NAMES = (VARIABLE_TOOL, CELL_TOOL, PROPOSE_TOOL)

# About 2,000 tokens at the CLI's 3 characters a token: the notebook is context, not the task. The
# variables take at most VARIABLES_BUDGET_CHARS of it, the recent cells the rest.
BLOCK_BUDGET_CHARS = 6_000
VARIABLES_BUDGET_CHARS = 3_400
LINE_CHARS = 200  # one variable's line; a longer one is cut
RECENT_CELLS = 5  # the cells before the %flower cell that the block shows
CELL_SOURCE_CHARS = 500  # of each recent cell's source in the block (head and tail kept)
ERROR_CHARS = 300
KEYS_SHOWN = 8  # first keys of a dict, first columns of a DataFrame
NAMES_SHOWN = 30  # names listed as gone since the last wake
# What a tool gives back: a screenful, enough to see the data's form, far from a full dump.
PREVIEW_CHARS = 4_000
PREVIEW_ROWS = 10
PREVIEW_ITEMS = 20
CELL_CHARS = 8_000
PREVIEW_TIMEOUT_S = 5.0  # a repr that takes longer is given up: the agent should not wait on it
SECRET_SCAN_CHARS = 100_000  # of a string, looked at for secrets (a longer one is never shown whole)
# Reading the namespace for the block, on the kernel's thread before the run starts: one variable
# takes microseconds (its type, a length, stored attributes), so one that takes VARIABLE_READ_S is
# hung or hostile; the whole read and the cells' stay within a second together.
VARIABLE_READ_S = 0.2
VARIABLES_READ_S = 0.6
CELLS_READ_S = 0.2
DESCRIBE_LEAST_S = 0.05  # for the lines, when reading the variables used up VARIABLES_READ_S
# Looked at in a variable for secrets: nested containers and attributes this deep, this many items of
# each, this many strings in all, this many columns and rows of a table.
SECRET_DEPTH = 4
SECRET_ITEMS = 200
SECRET_STRINGS = 2_000
SECRET_COLUMNS = 1_000
SECRET_ROWS = 1_000
# A text is scrubbed at least this far past what is shown of it, so no secret is cut in half where
# the redaction reads it and shown whole where the cut falls later.
SCRUB_WINDOW_CHARS = 2_000

# Libraries whose arrays and tables keep shape, columns and dtypes as metadata (reading them computes
# nothing). Anything else (dask, vaex, a database cursor) may compute on access: type only.
EAGER_LIBRARIES = frozenset({"numpy", "pandas", "polars", "pyarrow", "torch", "scipy", "xarray", "jax", "cupy"})

NEW, CHANGED = "[新]", "[变]"

BLOCK_HEAD = (
    "# 笔记本现场\n\n"
    "人是在 Jupyter 笔记本里叫你来的。下面是这一刻内核里的变量(名字、类型、大小,不含内容)和最近运行的单元格,"
    "只读。要看某个变量的内容,用 mcp__notebook__variable;要看某个单元格的全文和输出,用 mcp__notebook__cell;"
    "要把代码交给人,用 mcp__notebook__propose_cell 放进笔记本 —— 人运行了它才会执行,你不要自己去跑。"
    f"标 {NEW} 的是上次唤醒以后新出现的,标 {CHANGED} 的是上次以后变过的。"
)
VARS_HEAD = "## 变量({n} 个)"
VARS_NONE = "(没有变量)"
VARS_MORE = "…还有 {n} 个没列出(先列最近单元格里提到的,再按名字排序);用 mcp__notebook__variable 按名字看。"
VARS_GONE = "上次以后不见了的:{names}"
CELLS_HEAD = "## 最近的单元格"
CELLS_NONE = "(还没有运行过别的单元格)"
CELL_ERROR = "  ↳ 出错:{error}"
SECRET_NOTE = "看着像密钥,只给名字和类型"
UNREADABLE_NOTE = "读不出来:读它时出错或卡住了,跳过"
LEN, SHAPE, COLUMNS, KEYS, DTYPE = "长度 {n}", "形状 {shape}", "列:{cols}", "键:{keys}", "dtype {dtype}"
CUT = "…(截断)"

NO_VARIABLE = "内核里没有叫 {name} 的变量(私有名字、模块和 IPython 自己的名字也不给看)。"
NO_CELL = "没有第 {n} 个单元格(能看的是 1 到 {last})。"
TIMED_OUT_NOTE = "{what} 在 {s:g} 秒内没算完,放弃了(对象太大或 repr 太慢)。只看类型和大小:{line}"
FAILED = "{what} 取不出来:{error}"
CELL_SOURCE, CELL_OUTPUT = "### 单元格 [{n}]\n{source}", "### 输出\n{output}"
PROPOSED_LAB = (
    "已经把代码作为提议的单元格放进笔记本(在 %flower 这个单元格的输出里,JupyterLab 里也插在它下面)。"
    "人运行了它才会执行;结果你看不到,除非人告诉你。"
)
PROPOSED_NEXT = "已经把代码放进人的下一个输入(终端 IPython),人按回车才会执行;结果你看不到,除非人告诉你。"
PROPOSED_EMPTY = "代码是空的,没有放进笔记本。"

VARIABLE_DESCRIPTION = (
    "看内核里一个变量的内容,有上限:DataFrame 的前几行,列表的一段,字典的前几项,函数的源码。只读,不改变量。"
)
CELL_DESCRIPTION = "按编号读笔记本里一个单元格的源码、输出和报错。只读。"
PROPOSE_DESCRIPTION = (
    "把一段 Python 代码作为「提议的单元格」交给人:它出现在笔记本里(%flower 单元格下面),标明是提议,"
    "人看过、运行了才会执行。你不会在内核里执行任何代码。"
)
VARIABLE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "变量名"},
        "start": {"type": "integer", "description": "可选:从第几项(行)开始看,默认 0"},
    },
    "required": ["name"],
}
CELL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"number": {"type": "integer", "description": "单元格编号(In [n] 里的 n)"}},
    "required": ["number"],
}
PROPOSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "要交给人的 Python 代码,完整可运行"}},
    "required": ["code"],
}

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SIZED_BUILTINS = (str, bytes, bytearray, list, tuple, dict, set, frozenset, range, deque)


@dataclass(frozen=True)
class Cell:
    """One executed cell, as the source gives it.

    Attributes:
        number: its execution count (``In [n]``).
        source: what was typed.
        error: ``ExceptionName: message`` when it raised, else ``""``.
        output: its result (``Out[n]``), or None when it had none.
    """

    number: int
    source: str
    error: str = ""
    output: Any = None


class NotebookSource(Protocol):
    """What a front end with a kernel gives: reads that are safe from any thread, and where code goes."""

    def namespace(self) -> Mapping[str, Any]:
        """The user's namespace (read, never written)."""

    def hidden(self) -> Container[str]:
        """Names the shell itself put in the namespace."""

    def cells(self, last: int) -> list[Cell]:
        """Up to ``last`` cells run before the current one, oldest first."""

    def cell(self, number: int) -> Cell | None:
        """One cell by execution count."""

    def last_number(self) -> int:
        """The number of the newest cell before the current one (0 = none)."""

    def propose(self, code: str) -> bool:
        """Hand ``code`` to the person as a proposed cell. True: into a notebook; False: into the
        terminal's next input."""


@dataclass(frozen=True)
class Seen:
    """What one wake's block said, for marking what changed at the next one."""

    variables: Mapping[str, tuple[int, str]]  # name -> (id of the value, its line)
    last_cell: int
    # (id, type) of the values whose reading hung: not read again (each would hold one more thread).
    hung: frozenset[tuple[int, type]] = field(default_factory=frozenset)


def is_listed(name: str, value: Any, hidden: Container[str]) -> bool:
    """Whether a namespace entry is the person's data: not private, not IPython's, not code."""
    if name.startswith("_") or name in hidden:
        return False
    return not _is_code(type(value), value)


_CODE_TYPES = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
_code_kinds: dict[type, bool] = {}  # whether values of a type are modules, classes or routines


def _is_code(cls: type, value: Any) -> bool:
    # By type, once: a namespace of 10,000 variables holds a handful of types.
    known = _code_kinds.get(cls)
    if known is None:
        known = isinstance(value, _CODE_TYPES) or inspect.isroutine(value)
        if len(_code_kinds) < 10_000:
            _code_kinds[cls] = known
    return known


def looks_secret(name: str, value: Any, redactor: Redactor) -> bool:
    """Whether a variable must be shown by name and type only: its name reads as a credential
    (``core.redaction.secret_name``), or it holds a secret (``secret_values``) — a table excepted,
    whose credential-named columns are masked in its preview instead.

    Args:
        redactor: the redaction of this wake (``core.redaction.Redactor``): a string it would change
            holds a secret.
    """
    return secret_name(name) or (not _is_table(value) and bool(secret_values(value, redactor)))


def secret_values(value: Any, redactor: Redactor, *, whole: bool = False) -> list[str]:
    """The secrets a variable holds, to scrub wherever they appear: what the redaction finds in its
    strings, and every string under a credential-named key, attribute or table column, at any depth
    (bounded: ``SECRET_DEPTH``, ``SECRET_ITEMS``, ``SECRET_STRINGS``).

    Args:
        whole: every string in it is a secret (the variable's own name reads as a credential).
    """
    if type(value) in _PLAIN:
        return []
    if type(value) is str and not whole:  # the common cases, without the walk's closures
        return redactor.findings(value[:SECRET_SCAN_CHARS]) if len(value) >= _SHORTEST_SECRET else []
    if type(value) in (list, tuple) and _PLAIN.issuperset(map(type, itertools.islice(value, SECRET_ITEMS))):
        return []
    found: list[str] = []
    left = [SECRET_STRINGS]

    def text(v: str, under: bool) -> None:
        left[0] -= 1
        if under:
            found.append(v[:SECRET_SCAN_CHARS])
        elif len(v) >= _SHORTEST_SECRET:
            found.extend(redactor.findings(v[:SECRET_SCAN_CHARS]))

    def visit(v: Any, under: bool, depth: int) -> None:
        if left[0] <= 0 or depth > SECRET_DEPTH:
            return
        kind = type(v)
        if kind in _PLAIN:
            return
        if isinstance(v, str):
            text(v, under)
        elif isinstance(v, (bytes, bytearray)):
            if under:
                text(bytes(v[:SECRET_SCAN_CHARS]).decode("utf-8", "replace"), True)
        elif isinstance(v, dict):
            for k, x in itertools.islice(dict.items(v), SECRET_ITEMS):
                named = under
                if type(k) is str:
                    named = under or secret_name(k)
                    if not named and len(k) >= MIN_SECRET_CHARS:  # a key that is itself a token
                        text(k, False)
                kind = type(x)
                if kind is str:  # inline: the common value, without a call
                    if named or len(x) >= _SHORTEST_SECRET:
                        text(x, named)
                elif kind not in _PLAIN:
                    visit(x, named, depth + 1)
        elif isinstance(v, (list, tuple, set, frozenset, deque)):
            if _PLAIN.issuperset(map(type, itertools.islice(iter(v), SECRET_ITEMS))):
                return  # numbers only (the common list), looked at in C
            for x in itertools.islice(iter(v), SECRET_ITEMS):
                if type(x) is str:
                    if under or len(x) >= _SHORTEST_SECRET:
                        text(x, under)
                elif type(x) not in _PLAIN:
                    visit(x, under, depth + 1)
        elif _is_table(v):
            found.extend(_table_secrets(v, everything=under))
        else:
            top = (kind.__module__ or "").split(".")[0]
            own = getattr(v, "__dict__", None) if top not in EAGER_LIBRARIES else None
            if isinstance(own, dict) and not isinstance(v, (type, types.ModuleType)):
                for k, x in itertools.islice(dict.items(own), SECRET_ITEMS):
                    visit(x, under or (isinstance(k, str) and secret_name(k)), depth + 1)

    visit(value, whole, 0)
    return found


_SHORTEST_SECRET = 4  # "pw=x": shorter text holds nothing the redaction finds
# Values that hold no text: looked past at once (a list of 200 numbers is 200 of them).
_PLAIN = frozenset({int, float, bool, complex, type(None), range})


def _is_table(value: Any) -> bool:
    """A pandas or polars DataFrame (its rows are data: a credential column is masked, not the table)."""
    top = (type(value).__module__ or "").split(".")[0]
    return top in ("pandas", "polars") and type(value).__name__ == "DataFrame"


def _secret_columns(table: Any) -> list[Any]:
    columns = itertools.islice(iter(table.columns), SECRET_COLUMNS)
    return [c for c in columns if isinstance(c, str) and secret_name(c)]


def _table_secrets(table: Any, *, everything: bool = False) -> list[str]:
    """The strings of a table's credential-named columns (all of them when ``everything``), first rows."""
    columns = list(itertools.islice(iter(table.columns), SECRET_COLUMNS)) if everything else _secret_columns(table)
    if not columns:
        return []
    head = table.head(SECRET_ROWS)
    found: list[str] = []
    for column in columns:
        values = head[column].to_list() if hasattr(head[column], "to_list") else list(head[column])
        found += [v for v in values if isinstance(v, str)]
    return found


def type_name(value: Any) -> str:
    """``list``, ``pandas.DataFrame``, ``numpy.ndarray``: the class, with its library's top name."""
    cls = type(value)
    top = (cls.__module__ or "").split(".")[0]
    return cls.__qualname__ if top in ("builtins", "", "__main__") else f"{top}.{cls.__qualname__}"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - len(CUT))] + CUT


def _key(k: Any) -> str:
    return _short(repr(k), 40) if isinstance(k, (str, int, float, bool, type(None))) else type_name(k)


def _builtin_len(value: Any) -> int | None:
    """``len(value)`` for the built-in containers and their subclasses that keep the built-in ``__len__``."""
    for base in _SIZED_BUILTINS:
        if isinstance(value, base):
            if type(value).__len__ is base.__len__:
                return len(value)
            return None
    return None


def _metadata(value: Any) -> tuple[Any, Any, Any]:
    """``shape``, ``columns`` and ``dtype(s)`` that can be read without computing anything."""
    cls = type(value)
    top = (cls.__module__ or "").split(".")[0]
    if top in EAGER_LIBRARIES and "Lazy" not in cls.__name__:
        try:
            shape = getattr(value, "shape", None)
            columns = getattr(value, "columns", None) if hasattr(value, "dtypes") else None
            dtypes = getattr(value, "dtypes", None) if columns is not None else getattr(value, "dtype", None)
        except Exception:
            return None, None, None
        return shape, columns, dtypes
    own = getattr(value, "__dict__", None)
    if isinstance(own, dict):  # stored values only: a property of an unknown class may compute
        return own.get("shape"), own.get("columns"), None
    return None, None, None


def _shape_text(shape: Any) -> str:
    if isinstance(shape, tuple) and len(shape) <= 8:
        return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    return ""


def _columns_text(columns: Any, dtypes: Any) -> str:
    try:
        names = list(itertools.islice(iter(columns), KEYS_SHOWN + 1))
        kinds: list[Any] = []
        if dtypes is not None and hasattr(dtypes, "items"):
            kinds = [d for _, d in itertools.islice(dtypes.items(), KEYS_SHOWN)]
        elif isinstance(dtypes, (list, tuple)):
            kinds = list(dtypes[:KEYS_SHOWN])
    except Exception:
        return ""
    shown = [f"{_short(str(n), 40)} {kinds[i]}" if i < len(kinds) else _short(str(n), 40) for i, n in enumerate(names)]
    more = ", …" if len(names) > KEYS_SHOWN else ""
    return ", ".join(shown[:KEYS_SHOWN]) + more


def describe(name: str, value: Any, *, secret: bool = False) -> str:
    """One line about a variable: name, type and a cheap shape; never its content."""
    parts = [type_name(value)]
    if secret:
        return _short(f"{name}: {parts[0]} [{SECRET_NOTE}]", LINE_CHARS)
    n = _builtin_len(value)
    if n is not None:
        parts.append(LEN.format(n=n))
        if isinstance(value, dict) and n:
            keys = [_key(k) for k in itertools.islice(dict.keys(value), KEYS_SHOWN)]
            parts.append(KEYS.format(keys=", ".join(keys) + (", …" if n > KEYS_SHOWN else "")))
    else:
        shape, columns, dtypes = _metadata(value)
        if (shown := _shape_text(shape)) != "":
            parts.append(SHAPE.format(shape=shown))
        if columns is not None and not isinstance(columns, (str, bytes)):
            if text := _columns_text(columns, dtypes):
                parts.append(COLUMNS.format(cols=text))
        elif dtypes is not None and not hasattr(dtypes, "items"):
            parts.append(DTYPE.format(dtype=_short(str(dtypes), 40)))
    return _short(f"{name}: " + ", ".join(parts), LINE_CHARS)


def _cell_text(source: str, limit: int) -> str:
    source = source.strip("\n")
    if len(source) > limit:
        half = limit // 2
        source = f"{source[:half]}\n{CUT}\n{source[-half:]}"
    return source


def _mentioned(cells: list[Cell]) -> set[str]:
    return {word for c in cells for word in _IDENT.findall(c.source)}


@dataclass(frozen=True)
class _Variable:
    """One variable as the block shows it (read on a reader thread, ``core.timebox``)."""

    line: str
    secret: bool = False
    values: tuple[str, ...] = ()  # the secrets it holds, scrubbed wherever they appear


_ORDINARY = _Variable("")  # listed, not secret, holds none


def unreadable_line(name: str, value: Any = None, *, typed: bool = False) -> str:
    """A variable that could not be read: its name, its type when asked for and safe to read (a class
    attribute read through a plain metaclass runs no code of the object's), and why."""
    kind = ""
    if typed and safe_type(value) is not None:
        try:
            kind = type_name(value) + " "
        except Exception:
            kind = ""
    return _short(f"{name}: {kind}[{UNREADABLE_NOTE}]", LINE_CHARS)


class NotebookContext:
    """The notebook as the agent of one wake sees it: ``block`` and the tools of ``mcp_server``.

    Args:
        source: the front end's kernel.
        seen: what the previous wake's block said (None: the first wake in this kernel, nothing marked).
        environ: the environment whose secrets are scrubbed (default ``os.environ``).
        timeout_s: how long a tool waits for a preview or a cell's output.
    """

    def __init__(
        self,
        source: NotebookSource,
        *,
        seen: Seen | None = None,
        environ: Mapping[str, str] | None = None,
        timeout_s: float = PREVIEW_TIMEOUT_S,
    ):
        self.source = source
        self.timeout_s = timeout_s
        self.previous = seen
        self._environ = environ
        self.block = ""
        self.seen: Seen | None = None
        self.proposed: list[str] = []
        self._scrub = Redactor(environ)
        self._lines: dict[str, str] = {}  # name -> its line in the block
        self._secrets: set[str] = set()  # names shown by name and type only

    # -- the block ------------------------------------------------------------------------------------

    def take(self) -> str:
        """Read the kernel once (call it on the kernel's thread, before the run starts) and build the
        block of this wake; returns it (also in ``block``; ``seen`` is what the next wake compares with).

        Never raises, and returns within about ``VARIABLES_READ_S + DESCRIBE_LEAST_S + CELLS_READ_S``
        (0.85 s) whatever the namespace holds: each variable is read on a reader thread
        (``core.timebox``); one that hangs or raises is shown by name and ``UNREADABLE_NOTE``.
        """
        ns, hidden = self.source.namespace(), self.source.hidden()
        got = call_within(lambda: (self.source.cells(RECENT_CELLS), self.source.last_number()), CELLS_READ_S)
        cells, last_cell = (list(got.value[0]), int(got.value[1])) if got.ok and got.value else ([], 0)
        probe = self._scrub
        hung_before = self.previous.hung if self.previous is not None else frozenset()
        # Names, not (name, value) pairs: 10,000 tuples would wake the garbage collector mid-build.
        names = [k for k in list(ns) if isinstance(k, str) and not k.startswith("_") and k not in hidden]

        def sort(name: str) -> _Variable | None:
            """Whether the variable is listed, and what secrets it holds (every variable: a secret
            not shown in the block may still be in a cell's source or output)."""
            value = ns.get(name)
            if hung_before and (id(value), type(value)) in hung_before:
                return _Variable(unreadable_line(name, value, typed=True))
            try:
                if _is_code(type(value), value):
                    return None
                named = secret_name(name)
                held = secret_values(value, probe, whole=named)
                if not named and not held:
                    return _ORDINARY  # one object for all of them: nothing new for the collector
                return _Variable("", named or not _is_table(value), tuple(held))
            except Exception:
                return _Variable(unreadable_line(name, value, typed=True))

        deadline = time.monotonic() + VARIABLES_READ_S
        sorted_out = read_each(names, sort, item_s=VARIABLE_READ_S, budget_s=VARIABLES_READ_S)
        read_vars: dict[str, _Variable] = {}
        hung: set[tuple[int, type]] = set(hung_before)

        def unread(name: str, outcome: Outcome[Any]) -> _Variable:
            value = ns.get(name)
            if outcome.status == TIMED_OUT:
                hung.add((id(value), type(value)))
            return _Variable(unreadable_line(name, value, typed=True))

        for i, name in enumerate(names):
            if i in sorted_out.failed:
                read_vars[name] = unread(name, sorted_out.failed[i])
            elif (variable := sorted_out.values[i]) is not None:
                read_vars[name] = variable
        listed = list(read_vars)
        self._secrets = {k for k, v in read_vars.items() if v.secret}
        self._scrub = Redactor(self._environ, values=[t for v in read_vars.values() for t in v.values])
        mentioned = _mentioned(cells)
        ordered = sorted(k for k in listed if k in mentioned) + sorted(k for k in listed if k not in mentioned)
        # Lines only for the variables the block can hold (the shortest line is about 8 characters).
        to_describe = [k for k in ordered[: VARIABLES_BUDGET_CHARS // 8] if not read_vars[k].line]

        def line_of(name: str) -> str:
            value = ns.get(name)
            try:
                return describe(name, value, secret=read_vars[name].secret)
            except Exception:
                return unreadable_line(name, value, typed=True)

        left_s = max(DESCRIBE_LEAST_S, deadline - time.monotonic())
        described = read_each(to_describe, line_of, item_s=VARIABLE_READ_S, budget_s=left_s)
        for i, name in enumerate(to_describe):
            failed = described.failed.get(i)
            line = unread(name, failed).line if failed is not None else str(described.values[i])
            read_vars[name] = _Variable(line, read_vars[name].secret, read_vars[name].values)
        before = self.previous.variables if self.previous is not None else None
        lines: list[str] = []
        now: dict[str, tuple[int, str]] = {}
        used = 0
        for name in ordered:
            if not read_vars[name].line:  # past what the block can hold
                break
            value = ns.get(name)
            # A line names types and shapes, never values: only what is secret by value or shape
            # (a dict key that is a token) is scrubbed, not "name: type" read as an assignment.
            line = self._scrub(read_vars[name].line, names=False)
            self._lines[name] = line
            mark = ""
            if before is not None:
                old = before.get(name)
                mark = f" {NEW}" if old is None else (f" {CHANGED}" if old != (id(value), line) else "")
            if used + len(line) + len(mark) + 3 > VARIABLES_BUDGET_CHARS:
                break
            now[name] = (id(value), line)
            lines.append(f"- {line}{mark}")
            used += len(line) + len(mark) + 3
        parts = [BLOCK_HEAD, VARS_HEAD.format(n=len(listed))]
        parts.append("\n".join(lines) if lines else VARS_NONE)
        if len(lines) < len(listed):
            parts.append(VARS_MORE.format(n=len(listed) - len(lines)))
        if before is not None:
            present = set(listed)
            gone = sorted(k for k in before if k not in present)
            if gone:
                gone_names = ", ".join(gone[:NAMES_SHOWN]) + (", …" if len(gone) > NAMES_SHOWN else "")
                parts.append(VARS_GONE.format(names=gone_names))
        last_seen = self.previous.last_cell if self.previous is not None else None
        parts.append(CELLS_HEAD)
        shown_cells = []
        room = BLOCK_BUDGET_CHARS - sum(len(p) + 2 for p in parts)
        for cell in reversed(cells):  # the newest first gets the room, then shown oldest first
            mark = f" {NEW}" if last_seen is not None and cell.number > last_seen else ""
            # Scrubbed before it is cut: a secret cut in half would leave its head readable.
            text = f"[{cell.number}]{mark} {_cell_text(self._scrub(cell.source), CELL_SOURCE_CHARS)}"
            if cell.error:
                text += "\n" + CELL_ERROR.format(error=_short(self._scrub(cell.error), ERROR_CHARS))
            if len(text) + 1 > room:
                break
            room -= len(text) + 1
            shown_cells.append(text)
        parts.append("\n".join(reversed(shown_cells)) if shown_cells else CELLS_NONE)
        self.block = "\n\n".join(parts)
        self.seen = Seen(now, last_cell, frozenset(hung))
        return self.block

    # -- the tools ------------------------------------------------------------------------------------

    def preview(self, name: str, start: int = 0) -> str:
        """What the variable tool answers: a bounded look at one variable (blocks up to the timeout)."""
        ns, hidden = self.source.namespace(), self.source.hidden()
        if not isinstance(name, str) or name not in ns or name.startswith("_") or name in hidden:
            return NO_VARIABLE.format(name=name)
        value = ns[name]
        if self.seen is not None and (id(value), type(value)) in self.seen.hung:
            return self._lines.get(name) or unreadable_line(name)

        def look() -> str:
            if isinstance(value, types.ModuleType):
                return NO_VARIABLE.format(name=name)
            if name in self._secrets or looks_secret(name, value, self._scrub):
                return describe(name, value, secret=True)
            head = self._scrub(describe(name, value), names=False)
            return head + "\n\n" + _preview(value, max(0, start), self._scrub)

        return self._bounded(name, look)

    def read_cell(self, number: int) -> str:
        """What the cell tool answers: a cell's source, its output and error, bounded and scrubbed."""
        got = call_within(lambda: self.source.cell(number), self.timeout_s)
        cell = got.value if got.ok else None
        if cell is None:
            last = call_within(self.source.last_number, self.timeout_s)
            return NO_CELL.format(n=number, last=last.value if last.ok else "?")

        def text() -> str:
            source = _short(self._scrub(cell.source), CELL_CHARS)
            parts = [CELL_SOURCE.format(n=cell.number, source=source)]
            if cell.output is not None:
                parts.append(CELL_OUTPUT.format(output=_preview(cell.output, 0, self._scrub)))
            if cell.error:
                parts.append(CELL_ERROR.format(error=_short(self._scrub(cell.error), ERROR_CHARS)).strip())
            return "\n\n".join(parts)

        return self._bounded(f"[{number}]", text)

    def propose(self, code: str) -> str:
        """What the proposal tool answers; the code goes to the source (never executed here)."""
        if not code.strip():
            return PROPOSED_EMPTY
        self.proposed.append(code)
        return PROPOSED_LAB if self.source.propose(code) else PROPOSED_NEXT

    def _line_of(self, name: str) -> str:
        """The variable's line: the block's, else read now (bounded, as the block reads it)."""
        if name in self._lines:
            return self._lines[name]
        value = self.source.namespace().get(name)
        got = call_within(lambda: describe(name, value, secret=name in self._secrets), VARIABLE_READ_S)
        return self._scrub(str(got.value), names=False) if got.ok else unreadable_line(name, value, typed=True)

    def _bounded(self, what: str, make: Callable[[], str]) -> str:
        """``make()`` (which scrubs what it shows) on a thread of its own, given up after
        ``timeout_s``; cut to the tool's bound."""
        done: Outcome[str] = call_within(make, self.timeout_s)
        if done.ok:
            text = str(done.value)
        elif done.status == TIMED_OUT:
            line = what if what.startswith("[") else self._line_of(what)
            text = TIMED_OUT_NOTE.format(what=what, s=self.timeout_s, line=line)
        else:
            error = done.error
            try:
                said = self._scrub(f"{type(error).__name__}: {error}")
            except BaseException:  # its __str__ is hostile too
                said = type(error).__name__
            text = FAILED.format(what=what, error=_short(said, ERROR_CHARS))
        return _short(text, max(PREVIEW_CHARS, CELL_CHARS if what.startswith("[") else 0))

    def mcp_server(self) -> McpSdkServerConfig:
        """The in-process SDK MCP server offering the three tools (imports the SDK)."""
        import asyncio

        from claude_agent_sdk import create_sdk_mcp_server, tool

        def reply(text: str) -> dict[str, Any]:
            return {"content": [{"type": "text", "text": text}]}

        @tool("variable", VARIABLE_DESCRIPTION, VARIABLE_SCHEMA)
        async def variable_tool(args: dict[str, Any]) -> dict[str, Any]:
            start = args.get("start")
            at = start if isinstance(start, int) and not isinstance(start, bool) else 0
            return reply(await asyncio.to_thread(self.preview, str(args.get("name") or ""), at))

        @tool("cell", CELL_DESCRIPTION, CELL_SCHEMA)
        async def cell_tool(args: dict[str, Any]) -> dict[str, Any]:
            number = args.get("number")
            n = number if isinstance(number, int) and not isinstance(number, bool) else -1
            return reply(await asyncio.to_thread(self.read_cell, n))

        @tool("propose_cell", PROPOSE_DESCRIPTION, PROPOSE_SCHEMA)
        async def propose_tool(args: dict[str, Any]) -> dict[str, Any]:
            return reply(self.propose(str(args.get("code") or "")))

        return create_sdk_mcp_server(SERVER_NAME, tools=[variable_tool, cell_tool, propose_tool])


def _preview(value: Any, start: int, scrub: Callable[[str], str]) -> str:
    """A bounded look at a value's content (what the variable tool shows after the describe line),
    scrubbed before each cut (a secret cut in half would leave its head readable)."""

    def cut(text: str, limit: int) -> str:
        return _short(scrub(text), limit)

    cls = type(value)
    top = (cls.__module__ or "").split(".")[0]
    if inspect.isroutine(value) or isinstance(value, type):
        try:
            return cut(inspect.getsource(value), PREVIEW_CHARS)
        except (OSError, TypeError):
            return cut(repr(value), PREVIEW_CHARS)
    if top in EAGER_LIBRARIES and "Lazy" not in cls.__name__:
        if hasattr(value, "iloc") and hasattr(value, "to_string"):  # pandas
            part = value.iloc[start : start + PREVIEW_ROWS]
            if hasattr(part, "columns") and (hidden := _secret_columns(part)):
                part = part.copy()
                for column in hidden:  # a password column: its name stays, its values do not
                    part[column] = REDACTED
            return cut(part.to_string(max_cols=20, max_colwidth=60), PREVIEW_CHARS)
        if hasattr(value, "slice") and hasattr(value, "head"):  # polars, pyarrow tables
            part = value.slice(start, PREVIEW_ROWS)
            names = getattr(part, "column_names", None) or getattr(part, "columns", None) or []
            if hidden := [n for n in names if isinstance(n, str) and secret_name(n)]:
                part = part.select([n for n in names if n not in hidden])
            return cut(repr(part), PREVIEW_CHARS)
        if top == "numpy" and hasattr(value, "shape"):
            import numpy

            part = value[start : start + PREVIEW_ROWS] if getattr(value, "ndim", 0) else value
            return cut(numpy.array2string(part, threshold=200, edgeitems=3, max_line_width=120), PREVIEW_CHARS)
    if isinstance(value, (str, bytes, bytearray)):
        return cut(repr(value[start : start + PREVIEW_CHARS]), PREVIEW_CHARS)
    if isinstance(value, dict):
        items = itertools.islice(dict.items(value), start, start + PREVIEW_ITEMS)
        # Key and value scrubbed together, so that a credential-named key hides its value.
        lines = (cut(f"{_short(repr(k), 80)}: {repr(v)[:SCRUB_WINDOW_CHARS]}", 80 + 2 + 200) for k, v in items)
        return _short("\n".join(lines), PREVIEW_CHARS)
    if isinstance(value, (list, tuple, deque, set, frozenset, range)):
        elements = itertools.islice(iter(value), start, start + PREVIEW_ITEMS)
        lines = (f"[{start + i}] {cut(repr(v), 200)}" for i, v in enumerate(elements))
        return _short("\n".join(lines), PREVIEW_CHARS)
    import reprlib

    short = reprlib.Repr()
    short.maxstring, short.maxother, short.maxlist, short.maxdict = 400, PREVIEW_CHARS, PREVIEW_ITEMS, PREVIEW_ITEMS
    return cut(short.repr(value), PREVIEW_CHARS)
