"""The phrase tables (core/words.py): one table per language, the same phrases in both."""

from __future__ import annotations

import ast
import pathlib
import re
import string
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath

import pytest

from flower_magic.core import words

ROOT = pathlib.Path(__file__).resolve().parents[1]
PANEL_SOURCES = ROOT / "src"  # the JupyterLab panel's TypeScript
# Words that are not in a language: a letter pair or a Chinese character.
WORDY = re.compile(r"[A-Za-z]{2,}|[\u4e00-\u9fff]")


def _fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def test_both_languages_have_the_same_phrases_with_the_same_fields() -> None:
    zh, en = words._TEXTS["zh"], words._TEXTS["en"]
    assert sorted(zh) == sorted(en)
    different = {k: (_fields(zh[k]), _fields(en[k])) for k in zh if _fields(zh[k]) != _fields(en[k])}
    assert different == {}


def test_a_count_of_one_is_said_in_the_singular() -> None:
    """Issue 12 (6): "done 1 turns" and "1 goals"; a phrase with a ``_1`` form uses it when ``n`` is 1."""
    assert words.say("result", "en", n=1, cost=0.0, elapsed="0:01").startswith("1 turn ·")
    assert words.say("result", "en", n=2, cost=0.0, elapsed="0:01").startswith("2 turns ·")
    assert words.say("goals", "en", n=1) == "1 goal"
    assert words.say("result", "zh", n=1, cost=0.0, elapsed="0:01").startswith("1 轮 ·")
    singular = [k for k in words._TEXTS["en"] if k.endswith("_1") and k[:-2] in words._TEXTS["en"]]
    assert all(_fields(words._TEXTS["en"][k]) == _fields(words._TEXTS["en"][k[:-2]]) for k in singular)


def test_an_unknown_language_falls_back_to_chinese() -> None:
    assert words.say("done", "fr") == words.say("done", "zh")


def test_every_phrase_is_said_somewhere() -> None:
    """Issue 11 (6): a phrase nothing says is dead weight that misleads (``received_no_brief`` once made
    the CLI claim every remark went into the brief). Keys built at run time are named by prefix."""
    import pathlib

    from flower_magic.core import words

    composed = (
        "col_",
        "front_",
        "stop_",
        "writer_",
        "ask_",
        "state_",
        "run_locked",
        "session_busy",
        "foreign_wait",
        "minutes",
        "kind_",
        "role_",
        "reason_",
        "live_heard_",
        "end_",  # front.outcome: one per Ending
        "next_",
        "pill_",
        "stepname_",  # words.step_name
    )
    root = pathlib.Path(words.__file__).parents[1]
    sources = [*(p for p in root.rglob("*.py") if p.name != "words.py"), *PANEL_SOURCES.glob("*.ts")]
    code = "\n".join(p.read_text(encoding="utf-8") for p in sources)
    said = [k for k in words._TEXTS["zh"] if k.startswith(composed) or f'"{k}"' in code or f"'{k}'" in code]
    # A singular form (``<key>_1``) is said through its key, by ``say`` when ``n`` is 1.
    unused = [k for k in words._TEXTS["zh"] if k not in said and not (k.endswith("_1") and k[:-2] in said)]
    assert unused == []


# The places Python code speaks to a person directly: a print, a UsageError, a widget's text, a step's
# stop (its reason is the run's last line).
_SPEAKING_CALLS = {
    *("print", "write", "display", "UsageError", "StepAbort"),
    *("HTML", "Label", "Button", "Text", "Textarea"),
}
# Keywords that speak whatever they are given to: a setting's help (``%config FlowerMagics`` prints it).
_SPEAKING_KEYWORDS = {"help"}
# What may stand as it is: the program's name before its line, argparse's frame.
_FRAMES = ("flower: error: ", "flower: ", "%flower: ")


def _user_error_classes() -> set[str]:
    """UserError and every class that derives from it (by name, through the package's class tree)."""
    bases: dict[str, list[str]] = {}
    for path in (ROOT / "flower_magic").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
    found = {"UserError"}
    while grown := {c for c, bs in bases.items() if c not in found and found.intersection(bs)}:
        found |= grown
    return found


def _literal(node: ast.expr) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return ""


def test_python_says_nothing_to_a_person_that_is_not_from_the_tables() -> None:
    """Issue 11 (4): a line written straight into a print, a UsageError, a widget or a user error
    bypasses the tables and ignores the language. Issue 23 (4): so did ``%config FlowerMagics``'s help
    and a step's stop. The demo model (flower_magic/testing) speaks for
    the model, not for flower, and is not checked."""
    speaking = _SPEAKING_CALLS | _user_error_classes()
    found = []
    for path in (ROOT / "flower_magic").rglob("*.py"):
        if "testing" in path.parts or path.name == "words.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            said = [k.value for k in node.keywords if k.arg in _SPEAKING_KEYWORDS]
            if name in speaking:
                said += [*node.args, *(k.value for k in node.keywords)]
            for arg in said:
                text = _literal(arg)
                if text in _FRAMES:
                    continue
                if WORDY.search(text):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}({text[:60]!r})")
    assert found == []


# A literal given to what the panel shows: an element's text, tooltip, label or caption.
_PANEL_SINK = re.compile(
    r"(?:\b(?:text|title|label|caption)\s*:|'aria-label'\s*:|\.(?:textContent|title|caption|label)\s*=)"
    r"\s*(?:[^'`\n]*?\?\s*)?(['`])((?:\\.|(?!\1).)*)\1"
)


def test_the_panel_code_holds_no_words_of_its_own() -> None:
    """Issue 11 (4): every label, tooltip and message of the JupyterLab panel is a phrase key the server
    fills in (src/words.ts); a literal with words in it is English in a Chinese panel."""
    found = []
    for path in sorted(PANEL_SOURCES.glob("*.ts")):
        if path.name == "words.ts":
            continue
        code = path.read_text(encoding="utf-8")
        for match in _PANEL_SINK.finditer(code):
            text = re.sub(r"\$\{[^}]*\}", "", match.group(2))
            if text == "Flower" or re.fullmatch(r"lab_\w+", text):
                continue  # the product's name; a phrase key (the table's column labels)
            if WORDY.search(text):
                found.append(f"{path.name}:{code.count(chr(10), 0, match.start()) + 1}: {match.group(0)[:70]}")
    assert found == []


def test_config_help_is_said_in_flower_lang() -> None:
    """Issue 23 (4): ``%config FlowerMagics`` printed its settings' help in English whatever FLOWER_LANG
    said (literals in the traits); now in the language ``%flower?`` uses for the flags."""
    import os
    import subprocess
    import sys

    probe = "from flower_magic.magics import FlowerMagics as M; print(M.class_traits()['sessions'].help)"
    for lang in words.LANGS:
        env = {**os.environ, "FLOWER_LANG": lang}
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)
        assert out.stdout.strip() == words.say("config_sessions", lang)


# -- paths a person reads (issue 24, item 3) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "base", "home", "kind", "shown"),
    [
        ("/w/runs/manifest.json", "/w", "/home/jane", PurePosixPath, "runs/manifest.json"),
        ("/home/jane/proj/runs", "/home/jane/proj", "/home/jane", PurePosixPath, "runs"),
        ("/home/jane/proj", "/home/jane/proj", "/home/jane", PurePosixPath, "~/proj"),  # the workspace itself
        ("/srv/proj", "/srv/proj", "/home/jane", PurePosixPath, "proj"),  # ... outside the home: its name
        ("/home/jane/other/x", "/home/jane/proj", "/home/jane", PurePosixPath, "~/other/x"),
        ("/srv/data/runs", "/home/jane/proj", "/home/jane", PurePosixPath, "/srv/data/runs"),  # outside both
        ("/w2/x", "/w", "/home/jane", PurePosixPath, "/w2/x"),  # a prefix is not a parent
        ("/srv/x", "/", "/home/jane", PurePosixPath, "/srv/x"),  # a base at the root names nothing
        (
            r"C:\Users\Jane\proj\runs\manifest.json",
            r"c:\users\jane\proj",
            r"C:\Users\Jane",
            PureWindowsPath,
            r"runs\manifest.json",
        ),
        (r"C:\Users\Jane\proj", r"C:\Users\Jane\proj", r"C:\Users\Jane", PureWindowsPath, "~\\proj"),
        (r"D:\data\x", r"C:\Users\Jane\proj", r"C:\Users\Jane", PureWindowsPath, r"D:\data\x"),
    ],
)
def test_a_path_is_said_relative_to_the_workspace_or_the_home(
    path: str, base: str, home: str, kind: type[PurePath], shown: str
) -> None:
    """Issue 24, item 3: the cell's [Write] lines, total line, archive line and ``--panel`` named
    absolute paths, so every saved notebook showed its author's home directory."""
    assert words.shown_path(path, base, home, kind) == shown


def test_a_path_that_is_a_link_is_named_as_itself(tmp_path: Path) -> None:
    """``short_path`` must not resolve the path it names: a refused link is the link, not its target."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "runs").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    assert words.short_path(tmp_path / "runs", tmp_path, "/home/jane") == "runs"
    assert words.short_path(tmp_path / "runs" / "x.json", tmp_path, "/home/jane") == "runs/x.json"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("* [Write] /w/proj/flower_demo.md", "* [Write] flower_demo.md"),
        ('"file_path": "/w/proj/a b.md",', '"file_path": "a b.md",'),
        ("File created successfully at: /w/proj/d/e.py (file", "File created successfully at: d/e.py (file"),
        ("cd /w/proj && ls /w/proj/", "cd . && ls ./"),
        ("read /home/jane/.pgpass and /home/jane", "read ~/.pgpass and ~"),
        (
            "/w/proj2/x /w/proj.bak /x/w/proj/y http://h/w/proj/z",
            "/w/proj2/x /w/proj.bak /x/w/proj/y http://h/w/proj/z",
        ),
    ],
)
def test_paths_in_the_agents_text_are_said_the_same_way(text: str, shown: str) -> None:
    """A tool call's input and result, the agent's words and a step's error quote absolute paths."""
    assert words.short_paths_in(text, "/w/proj", "/home/jane") == shown


# Keyword fields of the phrases that name a path, and the (phrase, field) pairs among them that do not.
PATH_FIELDS = {"path", "manifest", "folder", "run_dir", "real", "target", "aside", "parent", "point", "where"}
NOT_PATHS = {("sessions_unreachable", "where")}  # a PostgreSQL address (its password taken out)
SAYERS = {"short_path", "short_paths_in", "said_path"}  # the one way (and its forms for text, for a run's ctx)


def _through_sayer(expr: ast.expr, said: set[str]) -> bool:
    """``expr`` is built by a path sayer: a call of one, or a name only ever assigned from one."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in SAYERS:
            return True
        if isinstance(node, ast.Name) and node.id in said:
            return True
    return False


def _names_said(func: ast.AST) -> set[str]:
    """The names that every assignment in ``func`` gives a value built by a path sayer."""
    good: dict[str, bool] = {}
    for node in ast.walk(func):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs: list[tuple[ast.expr, ast.expr]] = [(target, node.value)]
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                pairs = list(zip(target.elts, node.value.elts, strict=False))
            for name, value in pairs:
                if isinstance(name, ast.Name):  # ``x = short_path(p)`` then ``x = printable(x)`` is good
                    so_far = {n for n, ok in good.items() if ok}
                    good[name.id] = good.get(name.id, True) and _through_sayer(value, so_far)
    return {name for name, ok in good.items() if ok}


def test_every_path_a_phrase_names_goes_through_short_path() -> None:
    """Issue 24, item 3: each front end once formatted paths its own way (``str(path)``), and the
    notebook's cells kept the absolute ones. A ``say(..., path=p)`` with a path not said by
    ``short_path`` (or ``short_paths_in``, ``said_path``) fails here."""
    bad = []
    for file in sorted((ROOT / "flower_magic").rglob("*.py")):
        tree = ast.parse(file.read_text(encoding="utf-8"))
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            said = _names_said(func)
            for call in ast.walk(func):
                if not isinstance(call, ast.Call) or getattr(call.func, "id", getattr(call.func, "attr", "")) != "say":
                    continue
                first = call.args[0] if call.args else None
                key = first.value if isinstance(first, ast.Constant) else None
                for kw in call.keywords:
                    if kw.arg in PATH_FIELDS and (key, kw.arg) not in NOT_PATHS and not _through_sayer(kw.value, said):
                        bad.append(f"{file.relative_to(ROOT)}:{call.lineno}: {key} {kw.arg}={ast.unparse(kw.value)}")
    assert bad == []
