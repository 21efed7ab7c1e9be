"""Guards: the public surface, cheap imports, and which way dependencies point."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import flower_magic
from tests.helpers import without_posix

PACKAGE = Path(flower_magic.__file__).parent
# psycopg: only a run dir on PostgreSQL loads the driver (issue 17).
HEAVY = ("claude_agent_sdk", "ipywidgets", "jupyter_server", "IPython", "tornado", "psycopg", "psycopg_pool")
PUBLIC = {
    "AgentSpec",
    "Lineage",
    "Runtime",
    "Step",
    "StepResult",
    "Workflow",
    "__version__",
    "load_ipython_extension",
    "unload_ipython_extension",
    "wake_state",
}


def _modules_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_all_is_exactly_the_public_names() -> None:
    assert set(flower_magic.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(flower_magic, name) is not None


def test_import_flower_magic_is_light() -> None:
    loaded = _modules_after("import flower_magic")
    assert [m for m in HEAVY if m in loaded] == []


def test_public_names_do_not_import_the_sdk_or_jupyter() -> None:
    """`from flower_magic import Runtime, ...` must stay cheap: the SDK loads when a step runs."""
    loaded = _modules_after(
        "from flower_magic import AgentSpec, Runtime, Step, StepResult, Workflow, Lineage, wake_state"
    )
    assert [m for m in HEAVY if m in loaded] == []


def test_testing_module_is_stdlib_only() -> None:
    loaded = _modules_after("import flower_magic.testing")
    assert [m for m in HEAVY if m in loaded] == []


def test_stores_export_both_stores_without_the_sdk() -> None:
    """A person plugs ``PruningSessionStore`` into their own ``ClaudeAgentOptions`` (issue 10, item 5)."""
    from flower_magic import stores

    assert set(stores.__all__) == {
        "PostgresSessionStore",
        "PruningSessionStore",
        "SqliteSessionStore",
        "open_reader",
        "open_store",
    }
    loaded = _modules_after("from flower_magic.stores import PostgresSessionStore, PruningSessionStore, open_store")
    assert [m for m in HEAVY if m in loaded] == []


def test_importing_the_stores_registers_nothing(tmp_path: Path) -> None:
    """Issue 23 (4): importing ``flower_magic.stores`` filled core's store registry as a side effect, so
    whether ``Runtime(workspace=...)`` had a store depended on what some other module had imported.
    Now only the public ``flower_magic.Runtime`` wires the default; core's own class asks for a store."""
    ws = str(tmp_path / "ws")
    probe = f"""
import flower_magic.stores
from flower_magic.core.runtime import Runtime
try:
    Runtime(workspace={ws!r})
except LookupError:
    print("no default")
from flower_magic import Runtime as Public
rt = Public(workspace={ws!r})
print(type(rt.store).__name__)
rt.close()
"""
    env = {**os.environ, "ANTHROPIC_API_KEY": "sk-test", "CLAUDE_CONFIG_DIR": str(tmp_path / "claude")}
    env.pop("FLOWER_SESSIONS", None)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split() == ["no", "default", "PruningSessionStore"]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_engine_never_imports_the_front_ends() -> None:
    """core/, stores/ and workflow/ never import IPython, widgets, the server or any front end."""
    forbidden = (
        "IPython",
        "ipywidgets",
        "ipykernel",
        "jupyter_server",
        "tornado",
        "flower_magic.magics",
        "flower_magic.display",
        "flower_magic.server",
        "flower_magic.panel",
        "flower_magic.cli",
    )
    offenders = []
    for folder in ("core", "stores", "workflow"):
        for path in (PACKAGE / folder).rglob("*.py"):
            for name in _imports(path):
                if name.startswith(forbidden):
                    offenders.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert offenders == []


def _module_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _runtime_imports(path: Path, modules: set[str], *, hints: bool = False) -> set[str]:
    """Modules of this package ``path`` imports when it runs (``if TYPE_CHECKING:`` blocks excluded
    unless ``hints``; imports inside functions included: they are arrows too). ``from pkg import sub`` is
    an arrow to ``pkg.sub`` only: the package's own ``__init__`` running first is how Python imports,
    not a choice."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if not hints and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            subs = {f"{node.module}.{a.name}" for a in node.names} & modules
            names.update(subs)
            if len(subs) < len(node.names):
                names.add(node.module)
    return {n for n in names if n.startswith("flower_magic")}


def _graph(*, hints: bool = False) -> dict[str, set[str]]:
    paths = {_module_of(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {
        m: {n for n in _runtime_imports(p, modules, hints=hints) if n in modules and n != m} for m, p in paths.items()
    }


def test_layers_point_one_way() -> None:
    """Issue 11 (d), issue 23: front ends -> front -> workflow -> core <- stores. core imports neither the
    workflow nor the stores (it is handed its store), stores do not import the workflow, nothing below
    imports a front end or the front-end core."""
    below = {
        "flower_magic.core": ("flower_magic.workflow", "flower_magic.stores", "flower_magic.front"),
        "flower_magic.stores": ("flower_magic.workflow", "flower_magic.front"),
        "flower_magic.workflow": ("flower_magic.front",),
    }
    offenders = [
        f"{m} imports {n}"
        for m, deps in _graph().items()
        for layer, banned in below.items()
        if m.startswith(layer + ".") or m == layer
        for n in deps
        if n.startswith(banned)
    ]
    assert offenders == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach each other through ``graph``'s arrows."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_import_cycles() -> None:
    """Issue 11 (d): no module reaches itself through the imports it runs."""
    assert _cycles(_graph()) == []


def test_no_cycles_through_type_hints_either() -> None:
    """Issue 23 (4): ``core.succession`` imported ``core.runtime`` for its type hints while the runtime
    imported succession, to reach into ten of its private fields: a circle ``test_no_import_cycles``
    did not see, because a hint's import never runs. A reader follows it all the same."""
    assert _cycles(_graph(hints=True)) == []


def test_magics_load_without_the_workflow_or_the_sdk() -> None:
    """%load_ext must stay cheap: the workflow, the human channel and the SDK load when a run starts."""
    loaded = _modules_after("import IPython.core.magic\nimport flower_magic.magics")
    heavy = (
        "claude_agent_sdk",
        "ipywidgets",
        "flower_magic.workflow.starter",
        "flower_magic.core.human",
        "flower_magic.core.runtime",
        "jupyter_server",
    )
    assert [m for m in heavy if m in loaded] == []


def test_light_copies_of_defaults_agree() -> None:
    from flower_magic.core.human import DEFAULT_TIMEOUT_S
    from flower_magic.front import options
    from flower_magic.workflow import starter

    assert options.DEFAULT_TIMEOUT_S == DEFAULT_TIMEOUT_S
    assert options.NEW_CMD == starter.NEW_CMD


IMPORT_ALL = """
import importlib, json, pkgutil, sys
import flower_magic
names = [m.name for m in pkgutil.walk_packages(flower_magic.__path__, "flower_magic.")]
wanted = [n for n in names if n.startswith(tuple(sys.argv[1:]))]
failed = {}
for name in wanted:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = repr(exc)
print(json.dumps({"imported": len(wanted) - len(failed), "failed": failed}))
"""


@pytest.mark.parametrize(
    ("everyone", "prefixes"),
    [
        (False, ["flower_magic"]),
        # The engine and the fake API import nothing third-party that needs fcntl: take it from everyone.
        (
            True,
            [
                "flower_magic.core",
                "flower_magic.stores",
                "flower_magic.workflow",
                "flower_magic.front",
                "flower_magic.testing",
            ],
        ),
    ],
)
def test_every_module_imports_without_fcntl(tmp_path: Path, everyone: bool, prefixes: list[str]) -> None:
    """Windows has no ``fcntl`` (nor ``termios``, ``pwd``...): every module imports without them, and none
    even tries at import time. Guards issue 16: ``core/manifest.py`` imported ``fcntl`` at module level,
    so the runtime could not be imported on Windows at all."""
    log = tmp_path / "refused.log"
    env = without_posix(dict(os.environ), log, everyone=everyone)
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, *prefixes], capture_output=True, text=True, env=env, check=True
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["failed"] == {}
    assert found["imported"] >= (50 if everyone else 70)
    tried = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    assert [line for line in tried if line.startswith("flower_magic")] == []


def test_load_ext_imports_the_sdk_in_the_background_after_its_cell() -> None:
    """Issue 12 (e): the first %flower waited ~6 s for the SDK's import. %load_ext now starts it once
    its own cell is done (inside the cell it would slow %load_ext), and a run waits for it to finish."""
    probe = (
        "import sys\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "sh = InteractiveShell.instance()\n"
        'sh.run_cell(\'%load_ext flower_magic\\nimport sys\\nprint("DURING", "claude_agent_sdk" in sys.modules)\')\n'
        "from flower_magic import magics\n"
        "magics._warmed()\n"
        "print('AFTER', 'claude_agent_sdk' in sys.modules, magics._warming is not None)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert "DURING False" in out.stdout and "AFTER True True" in out.stdout, out.stdout + out.stderr


# Private names of other libraries that flower must reach, each with why no public way exists.
FOREIGN_PRIVATES = {
    # claude_agent_sdk's client holds the CLI process it spawned only there: its pid goes into the
    # Windows kill-on-close job, and its pipes are closed before the event loop ends.
    ("core/launcher.py", "_transport"): "the SDK's CLI process (no public handle)",
    ("core/launcher.py", "_process"): "the SDK's CLI process (no public handle)",
    # ipykernel's only hook on a widget's messages while a cell is running (the subshell router).
    ("display/ask.py", "_reply_subshell_for"): "ipykernel's comm router (no public hook)",
    # ipykernel says whether the front end takes input() only in this flag (nbclient and papermill do not).
    ("magics.py", "_allow_stdin"): "ipykernel's stdin flag (no public accessor)",
    # IPython names each cell's code; which cell a traceback starts in is only in its compiler's map.
    ("kernel.py", "_filename_map"): "IPython's cell-name map (no public reverse lookup)",
}


def _own_names(tree: ast.Module) -> set[str]:
    """The private names a module defines itself: its functions and methods, class attributes and
    fields, and what it assigns to ``self.``/``cls.`` (a module may use its own privates anywhere)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _is_own(node.value):
            names.add(node.attr)
    return {n for n in names if n.startswith("_")}


def _is_own(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _private_reaches(tree: ast.Module) -> list[tuple[int, str]]:
    """``x._name`` (x not ``self``/``cls``) and ``getattr(x, "_name")`` / ``setattr`` / ``hasattr``."""
    found = []
    for node in ast.walk(tree):
        name = ""
        if isinstance(node, ast.Attribute) and not _is_own(node.value):
            name = node.attr
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("getattr", "setattr", "hasattr"):
            key = node.args[1] if len(node.args) > 1 else None
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and not _is_own(node.args[0]):
                name = key.value
        if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
            found.append((node.lineno, name))
    return found


def test_no_module_touches_another_modules_private_names() -> None:
    """Issue 23 (4): ``core.succession`` read and wrote ten private fields of ``Runtime`` in 34 places
    (``rt._watermark``, ``rt._floor``...), so neither could change without the other. A module uses only
    the public names of another (a private name it defines itself is its own); a library's private name
    that flower must reach is in ``FOREIGN_PRIVATES`` with its reason."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own = _own_names(tree)
        for line, name in _private_reaches(tree):
            if name not in own and (rel, name) not in FOREIGN_PRIVATES:
                offenders.append(f"{rel}:{line}: {name}")
    assert offenders == []
