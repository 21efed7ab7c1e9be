"""``%flower --demo`` in a real kernel without a key (issue 12, build item 2): the same demo model as
``flower --demo``, the whole workflow, a second ``%flower --demo`` continuing the same sessions, the
kernel's environment put back after each run, and a ``%flower`` without ``--demo`` still refused with
the line that points to the demo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flower_magic.core.words import say
from flower_magic.testing.demo import DEMO_FILE, demo_says
from tests.e2e.kernel import Kernel
from tests.e2e.test_lang import foreign, said_steps
from tests.helpers import no_key_env

pytestmark = pytest.mark.slow

TASKS = {"en": "write a short notes file about CSV cleaning", "zh": "写一份清洗 CSV 的说明"}
ENV_CHECK = "import os; print('DEMO ENV', [k for k in ('ANTHROPIC_BASE_URL', 'ANTHROPIC_API_KEY') if k in os.environ])"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_notebook_demo_runs_and_wakes_on_the_same_model(tmp_path: Path, workspace: Path, lang: str) -> None:
    task = TASKS["zh" if lang == "en" else "en"]  # the model speaks the run's language, not the task's
    kernel = Kernel(workspace, no_key_env(tmp_path, lang))
    try:
        kernel.run("%load_ext flower_magic")
        first = kernel.run(f'%flower --demo "{task}"')
        runs = workspace / "runs"
        sessions = json.loads((runs / "lineage.json").read_text(encoding="utf-8"))["steps"]
        second = kernel.run("%flower --demo")
        after = kernel.run(ENV_CHECK)
        refused = kernel.run(f'%flower "{task}"')
    finally:
        kernel.close()
    assert first.status == second.status == "ok", first.text + second.text
    for step in said_steps(lang):
        assert step in first.text, step
    assert (workspace / DEMO_FILE).is_file()
    assert say("demo_on", lang) in first.text and demo_says(lang, "question") in first.text
    lineage = json.loads((runs / "lineage.json").read_text(encoding="utf-8"))
    assert lineage["woke"] == 2 and lineage["steps"] == sessions and set(sessions) == {"确认需求", "设定目标", "干活"}
    assert "DEMO ENV []" in after.text  # the kernel points at no demo once the run is over
    assert refused.status == "error" and '%flower --demo "' in refused.text
    bad = foreign((first.text + second.text).replace(task, ""), lang, workspace)
    assert bad == [], "\n".join(bad)
