"""A person's edits of 需求.md / 目标.md as the default workflow's steps take them in: the one line the
person reads, what the model is given, the copy kept aside, and "seen once" (workflow.edits).

The steps are driven by hand here (their ``when``, prompts and gates with a ctx, as ``Workflow.run``
calls them); tests/test_cli_flow.py runs the same with real ``flower`` processes and the real CLI.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from flower_magic.core import brief as brief_note
from flower_magic.core import goal as goal_note
from flower_magic.core.brief import Brief
from flower_magic.core.events import Event
from flower_magic.core.goal import Goal
from flower_magic.core.lineage import Lineage
from flower_magic.core.words import say
from flower_magic.workflow.base import StepAbort
from flower_magic.workflow.clarify import CLARIFY_RESUME
from flower_magic.workflow.starter import WAKE_NOTHING_SAID, Starter, starter_flow

BRIEF = "## 目标\n写出 hello.txt\n\n## 验收标准\n- 内容是 hello\n\n## 边界\n不碰别的文件\n\n## 未知与假设\n无\n"
GOAL = "## 目标\n写出 hello.txt\n\n## 判定清单\n- hello.txt 存在\n- 内容是 hello\n"
MINE = "内容是 hello,结尾不要换行"  # the words a person adds by hand


def notes(ws: Path) -> Path:
    return ws / ".flower" / "notes"


def clarified(ws: Path) -> tuple[Path, Path]:
    """A directory after a complete run: flower's brief and goal, a work session in lineage."""
    brief_path, goal_path = notes(ws) / "需求.md", notes(ws) / "目标.md"
    Brief.parse(BRIEF).write(brief_path)
    Goal.parse(GOAL).write(goal_path)
    lin = Lineage.open(ws / "runs", ws)
    lin.remember("确认需求", "sid-clarify")
    lin.remember("干活", "sid-work")
    lin.bump()
    return brief_path, goal_path


def start(ws: Path, ask: str = "", **kw: Any) -> tuple[Starter, dict[str, Any], list[Event]]:
    events: list[Event] = []
    starter = starter_flow(ask, workspace=ws, run_dir=ws / "runs", **kw)
    return starter, {"_on_event": events.append}, events


def lines(events: list[Event]) -> list[str]:
    return [e.text for e in events if e.kind == "task"]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def test_a_readable_edit_is_used_as_written_said_once_and_sent_to_the_worker(workspace: Path) -> None:
    brief_path, goal_path = clarified(workspace)
    edited = brief_path.read_text(encoding="utf-8").replace("## 验收标准", "## Acceptance criteria")
    edited = edited.replace("- 内容是 hello", f"- {MINE}")
    brief_path.write_bytes(edited.encode("gb18030"))  # and saved by an editor set to GB18030
    before = snapshot(notes(workspace))

    starter, ctx, events = start(workspace)
    assert starter.waking
    clarify, goal, work = starter.workflow.steps
    assert clarify.when is not None and clarify.when(ctx) is False  # complete: nothing to clarify
    assert ctx["确认需求"] == edited.strip()  # the person's text, word for word
    assert lines(events) == [say("note_edited", "zh", name="需求.md")]
    assert goal.when is not None and goal.when(ctx) is True  # the goals follow the edited brief
    assert MINE in goal.render(ctx) and "Acceptance criteria" in goal.render(ctx)
    ctx["_goal"] = Goal.parse(GOAL)
    resumed = work.render(ctx, resuming=True)
    assert resumed.startswith(WAKE_NOTHING_SAID) and MINE in resumed and "Acceptance criteria" in resumed
    assert snapshot(notes(workspace)) == before  # reading and deciding wrote nothing
    Goal.parse(GOAL).write(goal_path)  # what the goal step's gate writes once it derived them again

    # the worker had a good attempt: the edit is taken in, and the next run neither says nor resends it
    assert work.gate is not None
    with pytest.raises(StepAbort):  # no runtime for the judge here; the edit was marked first
        work.gate(SimpleNamespace(ok=True, text="做了"), ctx).send(None)  # type: ignore[union-attr]
    assert brief_note.read(brief_path).is_edited and not brief_note.read(brief_path).is_news
    assert brief_path.read_bytes() == edited.encode("gb18030")  # untouched
    again, ctx2, events2 = start(workspace)
    assert again.workflow.steps[0].when(ctx2) is False  # type: ignore[misc]
    assert ctx2["确认需求"] == edited.strip() and lines(events2) == []
    assert again.workflow.steps[1].when(ctx2) is False  # type: ignore[misc]
    assert again.workflow.steps[2].render(ctx2, resuming=True) == WAKE_NOTHING_SAID


def test_an_unreadable_edit_goes_to_the_clarifier_verbatim_and_is_kept_aside(workspace: Path) -> None:
    brief_path, _ = clarified(workspace)
    edited = brief_path.read_text(encoding="utf-8").replace("## 边界\n\n不碰别的文件\n\n", "")
    edited = edited.replace("- 内容是 hello", f"- {MINE}").encode("utf-8")
    brief_path.write_bytes(edited)

    starter, ctx, events = start(workspace)
    assert not starter.waking
    clarify = starter.workflow.steps[0]
    assert clarify.when is not None and clarify.when(ctx) is True
    for prompt in (clarify.render(ctx), clarify.render(ctx, resuming=True)):
        assert MINE in prompt and "人亲手改过需求确认书" in prompt
    assert CLARIFY_RESUME not in clarify.render(ctx, resuming=True)  # not a clarification cut short
    assert list(notes(workspace).glob("需求.md.edited-*")) == []  # nothing kept before the answer

    fixed = BRIEF.replace("- 内容是 hello", f"- {MINE}").replace("不碰别的文件", "(人删掉了这一段)")
    assert clarify.gate is not None and clarify.gate(SimpleNamespace(text=fixed), ctx) is True
    (aside,) = notes(workspace).glob("需求.md.edited-*")
    assert aside.read_bytes() == edited
    assert Brief.load(brief_path) == Brief.parse(fixed) and brief_note.read(brief_path).is_ours
    assert lines(events) == [say("note_kept", "zh", name="需求.md", aside=aside)]
    assert ctx["_brief_edited"] is True  # the goals follow, the worker is told
    assert starter.workflow.steps[1].when(ctx) is True  # type: ignore[misc]


def test_an_undecodable_brief_is_kept_aside_with_its_own_line(workspace: Path) -> None:
    brief_path, _ = clarified(workspace)
    garbage = b"\xff\xfe## \xe7\x9b\xae\n\x00\x00"
    brief_path.write_bytes(garbage)
    starter, ctx, events = start(workspace, "写出 hello.txt", lang="en")
    clarify = starter.workflow.steps[0]
    assert clarify.when(ctx) is True  # type: ignore[misc]
    assert clarify.render(ctx) == "写出 hello.txt"  # no text to hand over
    assert clarify.gate(SimpleNamespace(text=BRIEF), ctx) is True  # type: ignore[misc]
    (aside,) = notes(workspace).glob("需求.md.edited-*")
    assert aside.read_bytes() == garbage
    assert lines(events) == [say("note_kept_unreadable", "en", name="需求.md", aside=aside)]


def test_a_readable_goal_edit_reaches_the_worker_and_the_judge(workspace: Path) -> None:
    _, goal_path = clarified(workspace)
    edited = goal_path.read_text(encoding="utf-8").replace("# 判定清单", "# Checklist") + f"- {MINE}\n"
    goal_path.write_bytes(edited.encode("utf-16"))

    starter, ctx, events = start(workspace, lang="en")
    clarify, goal, work = starter.workflow.steps
    assert clarify.when(ctx) is False and goal.when(ctx) is False  # type: ignore[misc]
    assert ctx["_goal"].checks[-1] == MINE  # the judge checks what the person wrote
    assert lines(events) == [say("note_edited", "en", name="目标.md")]
    resumed = work.render(ctx, resuming=True)
    assert MINE in resumed and "# Checklist" in resumed
    assert goal_path.read_bytes() == edited.encode("utf-16")


def test_an_unreadable_goal_edit_goes_to_the_goal_setter_and_is_kept_aside(workspace: Path) -> None:
    _, goal_path = clarified(workspace)
    edited = f"# 目标\n写出 hello.txt\n\n# 怎么算做完\n- {MINE}\n".encode()
    goal_path.write_bytes(edited)

    starter, ctx, events = start(workspace)
    clarify, goal, _ = starter.workflow.steps
    assert clarify.when(ctx) is False and goal.when(ctx) is True  # type: ignore[misc]
    prompt = goal.render(ctx)
    assert "人亲手改过目标文件" in prompt and MINE in prompt and "怎么算做完" in prompt
    assert goal.gate(SimpleNamespace(text=GOAL + f"- {MINE}\n"), ctx) is True  # type: ignore[misc]
    (aside,) = notes(workspace).glob("目标.md.edited-*")
    assert aside.read_bytes() == edited
    assert lines(events) == [say("note_kept", "zh", name="目标.md", aside=aside)]
    assert MINE in Goal.load(goal_path).checks  # type: ignore[union-attr]


def test_a_wake_phrase_over_an_edited_goal_keeps_it(workspace: Path) -> None:
    """Re-deriving the goals after a phrase said at wake replaces 目标.md: a person's version of it,
    even one already taken in, goes to the goal setter and is kept aside."""
    _, goal_path = clarified(workspace)
    edited = (goal_path.read_text(encoding="utf-8") + f"- {MINE}\n").encode()
    goal_path.write_bytes(edited)
    goal_note.read(goal_path).mark_seen()
    starter, ctx, _ = start(workspace, "顺便支持中文")
    assert starter.amended
    _, goal, _ = starter.workflow.steps
    starter.workflow.steps[0].when(ctx)  # type: ignore[misc]
    assert goal.when(ctx) is True and MINE in goal.render(ctx)  # type: ignore[misc]
    goal.gate(SimpleNamespace(text=GOAL), ctx)  # type: ignore[misc]
    (aside,) = notes(workspace).glob("目标.md.edited-*")
    assert aside.read_bytes() == edited


def test_without_goals_the_edit_is_taken_in_when_the_work_passes(workspace: Path) -> None:
    brief_path, _ = clarified(workspace)
    brief_path.write_text(BRIEF.replace("无", MINE), encoding="utf-8")
    starter, ctx, _ = start(workspace, goal=False)
    clarify, work = starter.workflow.steps
    assert clarify.when(ctx) is False and MINE in work.render(ctx, resuming=True)  # type: ignore[misc]
    assert work.gate is None and work.reduce is not None
    assert work.reduce(SimpleNamespace(text="做好了"), ctx) == "做好了"
    assert not brief_note.read(brief_path).is_news


def test_flower_own_files_say_nothing(workspace: Path) -> None:
    clarified(workspace)
    starter, ctx, events = start(workspace, "顺便支持中文")  # flower's own append keeps them flower's
    for step in starter.workflow.steps:
        if step.when is not None:
            step.when(ctx)
    assert lines(events) == [] and not ctx.get("_brief_edited") and not ctx.get("_goal_edited")
