"""``flower`` without a key, and ``flower --demo`` (issue 12, build item 2 and acceptance b).

Without credentials ``flower "task"`` says so in one line that tells how to try the demo and how to
set a key without echoing it, exits 1, writes nothing and imports nothing heavy. ``flower --demo``
runs the whole default workflow offline on the demo model (``flower_magic.testing.demo``: the real
Claude Code CLI against the fake API, in the ``flower`` process itself) with nobody at stdin, exits 0,
and a second ``flower --demo`` wakes and continues the same sessions, in either language.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flower_magic.core.words import say
from flower_magic.testing.demo import DEMO_FILE, demo_says
from tests.e2e.test_lang import foreign, said_steps
from tests.helpers import no_key_env, snapshot

HEAVY = ("claude_agent_sdk", "mcp", "jsonschema")
TASKS = {"en": "write a short notes file about CSV cleaning", "zh": "写一份清洗 CSV 的说明"}
# The no-credentials line is run through the same ``main`` the console script calls; what it imported
# by the time it returned is printed after it.
NO_KEY_RUN = """
import sys
from flower_magic.cli import main
rc = main(sys.argv[1:])
print("HEAVY", [m for m in {heavy!r} if m in sys.modules])
sys.exit(rc)
"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_no_credentials_is_one_line_that_points_to_the_demo_and_writes_nothing(
    tmp_path: Path, workspace: Path, lang: str
) -> None:
    """The credential check comes before the SDK, ``mcp`` or ``jsonschema`` is imported (they made the
    answer take ~6 s) and before anything is created (an empty ``.flower/notes/`` was left behind)."""
    env = no_key_env(tmp_path, lang)
    before = snapshot(workspace)
    done = subprocess.run(
        [sys.executable, "-c", NO_KEY_RUN.format(heavy=HEAVY), TASKS[lang]],
        cwd=workspace,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout.strip() == "HEAVY []"
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert 'flower --demo "' in line
    assert "read -rs ANTHROPIC_API_KEY" in line and "%env" not in line
    assert snapshot(workspace) == before == {}
    if lang == "en":  # (in Chinese the commands it quotes are English, as they should be)
        assert foreign(line, lang, workspace) == []


def _flower(ws: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["flower", *args], cwd=ws, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300
    )


def _lineage(ws: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((ws / "runs" / "lineage.json").read_text(encoding="utf-8"))
    return data


@pytest.mark.slow
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_demo_runs_every_step_offline_then_wakes_the_same_sessions(
    tmp_path: Path, workspace: Path, lang: str
) -> None:
    """The task is in the other language on purpose: the demo model speaks the run's language, not
    the task's, so the only words of the other language are the task's own (the model quotes it)."""
    env = no_key_env(tmp_path, lang)
    task = TASKS["zh" if lang == "en" else "en"]
    first = _flower(workspace, env, "--demo", task)
    assert first.returncode == 0, first.stdout + first.stderr
    said = first.stdout + first.stderr
    for step in said_steps(lang):  # clarify (with its question), goals, work, judge
        assert step in said, step
    # The file says what was asked, not the last check the work prompt lists ("要做的事:- 文件里写明了要做的事").
    assert task in (workspace / DEMO_FILE).read_text(encoding="utf-8")
    sessions = _lineage(workspace)["steps"]
    assert isinstance(sessions, dict) and set(sessions) == {"确认需求", "设定目标", "干活"}

    second = _flower(workspace, env, "--demo")
    assert second.returncode == 0, second.stdout + second.stderr
    after = _lineage(workspace)
    assert after["woke"] == 2 and after["steps"] == sessions  # the same sessions, continued
    out = said + second.stdout + second.stderr
    assert say("demo_on", lang) in out and demo_says(lang, "question") in out
    bad = foreign(out.replace(task, ""), lang, workspace)
    assert bad == [], "\n".join(bad)
    assert not (Path(env["HOME"]) / ".claude").exists()  # the demo never touches the person's ~/.claude
