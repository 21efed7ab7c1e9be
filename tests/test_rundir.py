"""``wake_state`` / ``Snapshot``: read without writing, and shown field by field with what each means."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flower_magic import wake_state
from flower_magic.core.words import say, short_path


def _lineage(ws: Path, woke: int, steps: dict[str, str]) -> None:
    runs = ws / "runs"
    runs.mkdir()
    body = {"workspace": str(ws), "woke": woke, "steps": steps}
    (runs / "lineage.json").write_text(json.dumps(body, ensure_ascii=False), encoding="utf-8")


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_wake_state_says_what_each_field_means(workspace: Path, lang: str) -> None:
    """Issue 12: the walk-through printed ``'waking': False`` right after explaining continuation, with
    nothing to say that ``waking`` is about a confirmed brief while the step did continue."""
    _lineage(workspace, 2, {"取词": "s-1"})
    facts = wake_state(workspace, run_dir="runs")
    shown = facts.describe(lang)
    lines = shown.splitlines()
    assert lines[0] == say("facts_head", lang, folder=short_path(workspace, workspace), run_dir="runs")
    meaning = {ln.split("=", 1)[0].strip(): ln.split("  # ", 1)[1] for ln in lines[1:]}
    assert meaning == {
        "woke": say("facts_woke", lang, next=3),
        "steps": say("facts_steps", lang),
        "waking": say("facts_waking_no", lang),
        "checks": say("facts_checks_none", lang),
        "task": say("facts_task_none", lang),
        "problem": say("facts_problem_none", lang),
        "work_context": say("facts_context_unknown", lang),
    }
    assert "waking = False" in shown and "steps = {'取词': 's-1'}" in shown
    assert not (workspace / ".flower").exists()  # read only


def test_a_notebook_shows_the_words_and_print_too(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from IPython.lib.pretty import pretty

    monkeypatch.setenv("FLOWER_LANG", "en")
    facts = wake_state(workspace)
    assert pretty(facts) == str(facts) == facts.describe("en")
    assert say("facts_woke_none", "en") in str(facts)
    assert repr(facts).startswith("Snapshot(")  # the data's own repr stays for debugging


# Every name flower gives a file or folder of a run, and the one module that spells it.
_NAME_OWNERS = {
    "runs": "core/rundir.py",
    ".flower": "core/rundir.py",
    "notes": "core/rundir.py",
    "spill": "core/rundir.py",
    "archive": "core/rundir.py",
    "需求.md": "core/rundir.py",
    "目标.md": "core/rundir.py",
    "诉求.md": "core/rundir.py",
    "问答记录.md": "core/rundir.py",
    "sessions.db": "core/storage.py",
    "store.json": "core/storage.py",
    "run.lock": "core/runlock.py",
    "lineage.json": "core/lineage.py",
    "manifest.json": "core/manifest.py",
    "events.jsonl": "core/live.py",
    "events.1.jsonl": "core/live.py",
    "live.json": "core/live.py",
    "inbox": "core/live.py",
    "runner.log": "core/live.py",
}
# The same letters standing for something else than a file.
_NOT_A_FILE = {("core/human.py", "inbox")}  # the agent's inbox tool (mcp__human__inbox)


def test_every_run_dir_name_is_spelled_once_by_its_owner() -> None:
    """Issue 23 (4): "runs" was spelled in 5 places, "sessions.db" on 6 lines of 4 files, run.lock in
    two modules and the Q&A log's name in two: a rename in one would leave the others reading another
    file. A string that is one of these names (or a path of them, ".flower/spill") appears only in the
    module that owns it; every other module asks ``RunDir`` or that owner's constant."""
    import ast

    import flower_magic

    package = Path(flower_magic.__file__).parent
    found = set()
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.startswith("testing/"):
            continue  # the fake API and the demo model speak for the model, not for flower
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            parts = node.value.strip("/").split("/")
            for part in parts if all(p in _NAME_OWNERS for p in parts) else []:
                if _NAME_OWNERS[part] != rel and (rel, part) not in _NOT_A_FILE:
                    found.add((rel, part))
    assert sorted(found) == []


def test_a_clarification_cut_short_is_read_once_with_the_rest(workspace: Path) -> None:
    """Issue 23 (4): whether a clarification was cut short was derived a second time from the same
    files (需求.md, lineage.json, 诉求.md) after the snapshot had read them; it is one of its facts now,
    the store asked through ``holds`` only when the clarifier's session is all that can tell."""
    from flower_magic.core.rundir import CLARIFY_STEP, RunDir
    from flower_magic.workflow.clarify import STEP_NAME

    assert STEP_NAME == CLARIFY_STEP
    rd = RunDir.at(workspace)
    asked: list[str] = []

    def holds(_: RunDir, sid: str) -> bool:
        asked.append(sid)
        return sid == "s-held"

    assert not rd.snapshot(holds=holds).cut_short and asked == []  # a fresh directory
    _lineage(workspace, 1, {CLARIFY_STEP: "s-gone"})
    assert not rd.snapshot(holds=holds).cut_short and asked == ["s-gone"]
    (rd.path / "lineage.json").write_text(
        json.dumps({"workspace": str(workspace), "woke": 1, "steps": {CLARIFY_STEP: "s-held"}}), encoding="utf-8"
    )
    assert rd.snapshot(holds=holds).cut_short
    assert not rd.snapshot().cut_short  # no store to ask: the session does not count
    rd.notes.mkdir(parents=True)
    rd.task.write_text("做个计算器\n", encoding="utf-8")
    assert rd.snapshot().cut_short  # the request is on disk
    rd.task.unlink()
    rd.brief.write_text("## 目标\n我自己写的半份需求\n", encoding="utf-8")  # a person's own, incomplete
    assert rd.snapshot().cut_short
    done = "## 目标\n计算器\n\n## 验收标准\n- 能加\n\n## 边界\n无\n\n## 未知与假设\n无\n"
    rd.brief.write_text(done, encoding="utf-8")
    facts = rd.snapshot(holds=holds)
    assert facts.waking and not facts.cut_short  # a confirmed brief: it wakes, nothing is cut short
