"""What flower itself says is in the run's language (issue 11, acceptance c; issue 24, item 4).

A full demo run — start, a wake with a phrase, ``--status``, ``--new`` and two mistakes — in the
terminal and in a real kernel, once with an English task and once with a Chinese one, with no
language chosen (no ``--lang``, no ``FLOWER_LANG``): the task's words choose, and the run dir
remembers them for what has no words (``--status``, a bare mistake). The demo model answers in the
run's language. With ``en`` no Chinese character may appear in anything flower says, step names
included (``Work · judge #1``; on disk they stay 干活·判定#1). With ``zh`` no English word may
appear except names: paths, file names, flags, tool names, and argparse's own ``usage:`` /
``error:`` frame. (A chosen language over the task's words: tests/test_cli_demo.py.)
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from flower_magic.core.words import step_name
from flower_magic.testing import FakeAnthropic
from tests.e2e.kernel import Kernel

pytestmark = pytest.mark.slow

# The demo's steps as the run writes them (lineage.json, manifest.json); a person reads step_name's.
STEP_NAMES = ("确认需求", "设定目标", "干活", "干活·判定#1")
TASKS = {"en": "write a short notes file about CSV cleaning", "zh": "写一份清洗 CSV 的说明"}
WAKE = {"en": "keep it short", "zh": "写短一点"}
UNBALANCED = {"en": '%flower "unbalanced', "zh": '%flower "没配对的引号'}
CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
# Names a Chinese line may carry: products, formats, units, the demo's file, tools.
NAMES = {"UsageError", "flower", "Markdown", "CSV", "MiB", "K", "FLOWER_LANG", "Write", "Read", "Claude", "Code", "MCP"}
NAMES |= {"papermill", "nbclient"}  # the front ends the folder line names


def said_steps(lang: str) -> list[str]:
    """The demo's step names as a person reads them in ``lang``."""
    return [step_name(name, lang) for name in STEP_NAMES]


def _env(api: FakeAnthropic, tmp_path: Path) -> dict[str, str]:
    """No language chosen: the task's words choose it."""
    import os

    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    drop = ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_MODEL", "FLOWER_WINDOW", "FLOWER_LANG")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(api.env(home))
    env.update(PYTHONUNBUFFERED="1")
    return env


def foreign(text: str, lang: str, workspace: Path) -> list[str]:
    """The lines of ``text`` that carry words of the other language (after the stated exceptions)."""
    bad = []
    for line in text.splitlines():
        if lang == "en":
            if CJK.search(line):
                bad.append(line)
            continue
        if line.startswith(("usage: ", "       ", "flower: error: unrecognized arguments")):
            continue  # argparse's own frame and its synopsis of the flag names
        rest = line.replace(str(workspace), "").replace("flower: error:", "")
        rest = re.sub(r"[\w.~-]*(?:/[^\s,;:)]+)+", "", rest)  # paths, relative ones too (runs/manifest.json)
        rest = re.sub(rf"(?<!\w){re.escape(workspace.name)}(?!\w)", "", rest)  # the folder, by its name
        rest = re.sub(r"--?[a-z][a-z-]*", "", rest)  # flags
        rest = re.sub(r"\[[^\]]*\]", "", rest)  # tool names: * [mcp__human__ask]
        rest = re.sub(r"%config FlowerMagics\.\w+", "", rest)  # a setting, spelled as typed
        rest = re.sub(r"\S+\.(?:md|jsonl?|db|py|ipynb)\b", "", rest)  # file names
        words = set(re.findall(r"[A-Za-z][A-Za-z_]+", rest)) - NAMES
        if words:
            bad.append(f"{line}    <- {sorted(words)}")
    return bad


def _flower(ws: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        ["flower", *args], cwd=ws, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300
    )
    return done.stdout + done.stderr


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_terminal_speaks_one_language(demo_api: FakeAnthropic, tmp_path: Path, workspace: Path, lang: str) -> None:
    env = _env(demo_api, tmp_path)
    (workspace / "a-file").write_text("not a folder", encoding="utf-8")
    said = [
        _flower(workspace, env, TASKS[lang]),
        _flower(workspace, env, WAKE[lang]),
        _flower(workspace, env, "--status"),
        _flower(workspace, env, "--new", TASKS[lang]),
        _flower(workspace, env, "--rounds", "-1", TASKS[lang]),
        _flower(workspace, env, "-r", "a-file", TASKS[lang]),
    ]
    out = "\n".join(said)
    assert (workspace / "flower_demo.md").exists() and "flower_demo.md" in out  # the runs really ran
    assert all(step in said[0] for step in said_steps(lang)), said[0]
    assert all(step in said[2] for step in said_steps(lang)), said[2]  # --status: the run dir's language
    bad = foreign(out, lang, workspace)
    assert bad == [], "\n".join(bad)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_notebook_speaks_one_language(demo_api: FakeAnthropic, tmp_path: Path, workspace: Path, lang: str) -> None:
    env = _env(demo_api, tmp_path)
    kernel = Kernel(workspace, env)
    try:
        cells = [
            "%load_ext flower_magic",
            f'%flower "{TASKS[lang]}"',
            f'%flower "{WAKE[lang]}"',
            "%flower --status",
            f'%flower --new "{TASKS[lang]}"',
            "%flower --rounds -1",
            UNBALANCED[lang],
        ]
        said = [kernel.run(code).text for code in cells]
        out = "\n".join(said)
    finally:
        kernel.close()
    assert (workspace / "flower_demo.md").exists() and "flower_demo.md" in out
    assert all(step in said[1] for step in said_steps(lang)), said[1]
    assert all(step in said[3] for step in said_steps(lang)), said[3]  # --status: the run dir's language
    bad = foreign(out, lang, workspace)
    assert bad == [], "\n".join(bad)
