"""Which language a run speaks when none is chosen (issue 24, item 4): the task's words decide, and the
run dir remembers it for a later start with no words, ``--status`` and a follower; step names are said
in it while the files keep the original's names.

Cheap: no CLI, no kernel. The remembered language is the one the real event log writer puts in a run's
start record (``core.live.EventLog`` with ``front.launch.start_record``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flower_magic.core.live import EventLog, run_lang
from flower_magic.core.words import say, step_name, words_lang
from flower_magic.front.launch import start_record
from flower_magic.front.options import GoError, GoOptions, settle_lang
from flower_magic.front.outcome import Ending, Outcome
from flower_magic.front.phrases import round_header, step_header


@pytest.fixture(autouse=True)
def no_lang_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLOWER_LANG", raising=False)


def _ran(ws: Path, task: str, **chosen: str) -> str:
    """A run of ``task`` in ``ws`` as far as its language goes: options checked, the start record of
    its event log written by the real writer. Returns the language it spoke."""
    opts = GoOptions(task=task, workspace=ws, **chosen).check()
    opts.rundir.path.mkdir(parents=True, exist_ok=True)
    EventLog(opts.rundir.path, start_record(opts, "terminal")).close()
    return opts.lang


@pytest.mark.parametrize(
    ("words", "lang"),
    [
        ("write a short notes file about CSV cleaning", "en"),
        ("写一份清洗 CSV 的说明", "zh"),
        ("fix the 需求 parser", "zh"),  # one Chinese character is enough
        ("Schreib eine kurze Notiz über Käse", "en"),  # any other words: English, the other language
        ("", None),
        ("42 !?", None),  # no words at all: nothing to go by
    ],
)
def test_the_words_say_their_language(words: str, lang: str | None) -> None:
    assert words_lang(words) == lang


def test_a_choice_wins_over_the_words_and_the_words_over_the_run_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    def remembered() -> str:
        return "zh"

    assert settle_lang("", "make a file", remembered) == "en"  # the words, not what the run dir remembers
    assert settle_lang("", "", remembered) == "zh"  # no words: the run dir
    assert settle_lang("", "", lambda: None) == "zh"  # nothing says: the original's default
    assert settle_lang("zh", "make a file", remembered) == "zh"  # --lang / %config
    monkeypatch.setenv("FLOWER_LANG", "zh")
    assert settle_lang("", "make a file", remembered) == "zh"
    assert settle_lang("en", "做个文件", remembered) == "en"  # --lang over FLOWER_LANG, as before
    with pytest.raises(ValueError):
        settle_lang("fr", "make a file", remembered)


def test_the_run_dir_remembers_the_language_of_its_last_run(workspace: Path) -> None:
    """An English task, then a plain start with no words: English again (it used to be Chinese)."""
    assert run_lang(workspace / "runs") is None
    assert _ran(workspace, "write a short notes file about CSV cleaning") == "en"
    assert run_lang(workspace / "runs") == "en"
    start = json.loads((workspace / "runs" / "events.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert start["type"] == "start" and start["lang"] == "en"  # our own log's record, not lineage.json
    assert GoOptions(workspace=workspace).check().lang == "en"  # `flower`, `--status`, the banner
    assert GoOptions(task="/new", workspace=workspace).check().lang == "en"  # /new has no words either
    # a start with words of its own speaks them, and the run dir remembers that from then on
    assert _ran(workspace, "写短一点") == "zh"
    assert GoOptions(workspace=workspace).check().lang == "zh"
    # a chosen language is remembered the same way, whatever the words
    assert _ran(workspace, "写短一点", lang="en") == "en"
    assert GoOptions(workspace=workspace).check().lang == "en"


def test_a_mistake_is_said_in_the_language_the_run_would_speak(workspace: Path) -> None:
    _ran(workspace, "write a short notes file")
    with pytest.raises(GoError) as plain:
        GoOptions(workspace=workspace, rounds=-1).check()  # `flower --rounds -1`: no words, the run dir's
    assert str(plain.value) == say("opt_rounds", "en", value="-1")
    with pytest.raises(GoError) as worded:
        GoOptions(task="写短一点", workspace=workspace, rounds=-1).check()
    assert str(worded.value) == say("opt_rounds", "zh", value="-1")


def test_words_given_after_the_first_check_settle_the_language_again(workspace: Path) -> None:
    """``flower`` on a terminal asks for the task after checking the options, then checks again."""
    opts = GoOptions(workspace=workspace).check()
    assert opts.lang == "zh"  # nothing to go by yet
    opts.task = "make a notes file"
    assert opts.check().lang == "en"
    chosen = GoOptions(workspace=workspace, lang="zh").check()
    chosen.task = "make a notes file"
    assert chosen.check().lang == "zh" and chosen.lang_chosen


def test_a_follower_speaks_the_live_runs_language_unless_one_is_chosen(workspace: Path) -> None:
    _ran(workspace, "写一份清洗 CSV 的说明")
    remark = GoOptions(task="also keep it short", workspace=workspace).check()
    assert remark.lang == "en" and remark.live_lang() == "zh"  # the remark's words do not change the run's view
    chosen = GoOptions(task="also keep it short", workspace=workspace, lang="en").check()
    assert chosen.live_lang() == "en"


def test_step_names_are_said_in_the_language_and_stay_the_originals_in_chinese() -> None:
    names = ["确认需求", "设定目标", "干活", "干活·判定#1", "干活#round2", "干活#retry1"]
    english = [step_name(n, "en") for n in names]
    assert english == ["Clarify", "Set goals", "Work", "Work · judge #1", "Work · round 2", "Work · retry 1"]
    assert [step_name(n, "zh") for n in names] == names
    assert step_name("my step#round3", "en") == "my step · round 3"  # a custom step keeps its own name
    # every phrase with a step in it says the step in its language
    headline = Outcome(Ending.INTERRUPTED, step="干活·判定#2").headline("en")
    assert headline == say("end_interrupted", "en", step="Work · judge #2")
    assert "干活" not in "".join(t for _, t in step_header("干活", 3, 3, resumed=True, woke=2, lang="en"))
    assert "判定" not in "".join(t for _, t in round_header("干活·判定#1", judge=True, lang="en"))


def test_the_workflows_step_names_are_the_ones_the_phrases_know() -> None:
    """The names the tables translate are the names the workflow writes to lineage.json and the
    manifest: a renamed step would silently be read in Chinese in an English run."""
    from flower_magic.core.rundir import CLARIFY_STEP, WORK_STEP
    from flower_magic.core.words import STEP_PHRASES
    from flower_magic.workflow.judge import GOAL_STEP

    assert set(STEP_PHRASES) == {CLARIFY_STEP, GOAL_STEP, WORK_STEP}


def test_the_panel_says_a_run_in_its_language_and_a_run_without_one_in_the_panels(workspace: Path) -> None:
    """Issue 24 (4): the panel's answer was said in the server's FLOWER_LANG: an English run in a
    Chinese panel. Now the run's language (its log), else the language the panel asks in."""
    from flower_magic.panel.run_summary import RunCache

    root, runs = workspace.resolve(), workspace.resolve() / "runs"
    cache = RunCache(lambda body: json.dumps(body).encode(), "zh")  # the server's own: zh
    runs.mkdir()
    (runs / "manifest.json").write_text("[]", encoding="utf-8")
    _, nothing = cache.get(root, root, runs, lang="en")
    assert nothing is not None and json.loads(nothing)["lang"] == "en"  # no log: the panel's language
    _ran(workspace, "写一份清洗 CSV 的说明")
    _, answer = cache.get(root, root, runs, lang="en")
    assert answer is not None
    said = json.loads(answer)
    assert said["lang"] == "zh"
    assert said["ending"]["pill"] == say("pill_killed", "zh")  # a log with no end: its process went
    _ran(workspace, "write it shorter")  # a new run, in English: the next answer says so
    _, again = cache.get(root, root, runs, lang="zh")
    assert again is not None and json.loads(again)["lang"] == "en"
