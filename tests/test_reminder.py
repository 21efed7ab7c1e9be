"""Repeated CLI reminders collapse to the newest in resumed context; sessions.db keeps every copy
(issue 13, acceptance e)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from flower_magic import AgentSpec, Runtime
from flower_magic.stores.chain import dangling
from flower_magic.stores.reminder import REPEATING, collapse, reminder_kind
from flower_magic.stores.resume import resume_view
from flower_magic.testing import FakeAnthropic, text, tool_use

Entry = dict[str, Any]
TASK_NUDGE = "The task tools haven't been used recently"
SILENT_NUDGE = "The user hasn't heard from you in a while"


def _reminder(kind: str, uid: str, parent: str, said: str) -> Entry:
    """An attachment entry in the shape CLI 2.1.332 stores (see stores/reminder.py)."""
    return {
        "type": "attachment",
        "uuid": uid,
        "parentUuid": parent,
        "attachment": {"type": kind, "content": [], "itemCount": 0},
        "rendered": [{"content": f"<system-reminder>\n{said}\n</system-reminder>"}],
        "renderedRole": "system",
    }


def _chain(n_rounds: int) -> list[Entry]:
    entries: list[Entry] = [
        {"type": "user", "uuid": "p", "parentUuid": None, "message": {"role": "user", "content": "go"}}
    ]
    for i in range(n_rounds):
        last = entries[-1]["uuid"]
        entries.append(
            {
                "type": "assistant",
                "uuid": f"a{i}",
                "parentUuid": last,
                "message": {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {}}],
                },
            }
        )
        entries.append(
            {
                "type": "user",
                "uuid": f"r{i}",
                "parentUuid": f"a{i}",
                "message": {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok"}],
                },
            }
        )
        entries.append(_reminder("task_reminder", f"k{i}", f"r{i}", TASK_NUDGE))
        if i % 2:
            entries.append(_reminder("silent_turn_reminder", f"s{i}", f"k{i}", SILENT_NUDGE))
        entries.append(_reminder("date_change", f"d{i}", entries[-1]["uuid"], "a new day"))
    entries.append(
        {
            "type": "assistant",
            "uuid": "end",
            "parentUuid": entries[-1]["uuid"],
            "message": {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
        }
    )
    return entries


def test_collapse_keeps_the_newest_of_each_kind_and_a_whole_chain() -> None:
    entries = _chain(6)
    before = copy.deepcopy(entries)

    out, dropped = collapse(entries)

    assert entries == before, "the input was modified"
    assert dropped == ["k0", "k1", "s1", "k2", "k3", "s3", "k4"]  # oldest first
    assert [e["uuid"] for e in out if reminder_kind(e)] == ["k5", "s5"]
    assert sum(1 for e in out if e.get("attachment", {}).get("type") == "date_change") == 6  # not a repeating kind
    assert not dangling(out)
    # A child of a removed reminder hangs from what the reminder hung from.
    assert next(e for e in out if e["uuid"] == "d0")["parentUuid"] == "r0"
    assert collapse(out) == (out, [])


def test_only_the_known_repeating_kinds_collapse() -> None:
    assert {"task_reminder", "todo_reminder", "silent_turn_reminder"} == REPEATING
    assert reminder_kind({"type": "attachment", "attachment": {"type": "task_reminder"}}) == "task_reminder"
    assert reminder_kind({"type": "attachment", "attachment": {"type": "skill_listing"}}) is None
    assert reminder_kind({"type": "user", "attachment": {"type": "task_reminder"}}) is None
    assert reminder_kind({"type": "attachment", "isSidechain": True, "attachment": {"type": "task_reminder"}}) is None


def test_resume_view_reports_and_marks_the_collapsed_reminders(tmp_path: Path) -> None:
    entries = _chain(4)
    view = resume_view(entries, workspace=tmp_path)
    assert view.report["reminders_collapsed"] == 3 + 1
    assert {"k0", "k1", "k2", "s1"} <= view.dropped


@pytest.mark.anyio
@pytest.mark.slow
async def test_a_resumed_request_carries_one_copy_of_each_reminder_and_the_store_keeps_them_all(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """Guards against the pile-up measured in issue 13: every copy of the CLI's nudges was sent back on
    every request (14 copies, ~2 % of the final request of a 30-round run)."""
    for i in range(24):  # the CLI nudges every 10 requests (task) and every 5 silent tool turns
        fake_api.add(tool_use("Bash", {"command": f"echo {i}"}))
    fake_api.add(text("做完了"), text("接着做完了"))
    # The task nudge comes only to a session that has the to-do tool (the worker role has it).
    spec = AgentSpec(name="w", instructions="", allowed_tools=["Bash", "TodoWrite"])
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False, handoff=False)
    try:
        first = await rt.run(spec, "一步一步做。")
        assert first.ok, first.error
        long = fake_api.requests[-1]
        again = await rt.run(spec, "继续。", resume=first.session_id)
        stored = rt.store.load_sync({"project_key": rt.project_key, "session_id": first.session_id}) or []
    finally:
        rt.close()
    assert again.ok, again.error
    assert long.all_text.count(TASK_NUDGE) >= 2 and long.all_text.count(SILENT_NUDGE) >= 2
    resumed = fake_api.requests[-1]
    assert resumed.all_text.count(TASK_NUDGE) == 1
    assert resumed.all_text.count(SILENT_NUDGE) == 1
    kinds = [e.get("attachment", {}).get("type") for e in stored if e.get("type") == "attachment"]
    assert kinds.count("task_reminder") == long.all_text.count(TASK_NUDGE)
    assert kinds.count("silent_turn_reminder") == long.all_text.count(SILENT_NUDGE)
