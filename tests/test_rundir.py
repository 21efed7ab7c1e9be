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
    assert lines[0] == say("facts_head", lang, folder=short_path(workspace), run_dir="runs")
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
