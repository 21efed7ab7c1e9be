"""The seed's own example, run twice in two OS processes: the second run continues the first's
conversation (issue 2, acceptance a)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flower_magic.testing import FakeAnthropic, text, tool_use
from tests.helpers import run_script, stored_session, write_script

SEED_EXAMPLE = """
    import asyncio, json

    from flower_magic import AgentSpec, Runtime, Step, Workflow

    terse = AgentSpec(
        name="terse",
        instructions="回答极简,一行以内,不解释不寒暄。",
        allowed_tools=["Read", "Glob"],
        max_turns=4,
    )


    async def main() -> None:
        wf = Workflow([Step("取词", terse, "读 seed.txt,只回文件里那个词。")])
        rt = Runtime(workspace=".", run_dir="runs")
        try:
            ctx = await wf.run(rt)
        finally:
            rt.close()
        print(json.dumps({"woke": ctx["_woke"], "sessions": ctx["_sessions"],
                          "text": ctx.get("取词"), "failed": ctx.get("_failed_at")}, ensure_ascii=False))


    asyncio.run(main())
"""


@pytest.mark.slow
@pytest.mark.parametrize("sessions", ["sqlite", "postgres"], indirect=True)
def test_seed_example_continues_across_processes(
    sessions: str, fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """Also on PostgreSQL (issue 17, acceptance b): FLOWER_SESSIONS alone moves the example there."""
    (workspace / "seed.txt").write_text("向日葵\n", encoding="utf-8")
    script = write_script(workspace / "seed_example.py", SEED_EXAMPLE)
    fake_api.add(tool_use("Read", {"file_path": str(workspace / "seed.txt")}), text("向日葵"))

    first = run_script(script, cwd=workspace, env=child_env)
    assert first["woke"] == 1
    assert first["failed"] is None
    sid = first["sessions"]["取词"]
    assert (workspace / "runs" / "lineage.json").is_file()
    # The transcript is in the store FLOWER_SESSIONS chose, and only there.
    assert stored_session(workspace / "runs", sid) is not None
    assert (workspace / "runs" / "sessions.db").exists() is not bool(sessions)
    n_first = len(fake_api.requests)

    fake_api.add(text("还是向日葵"))
    second = run_script(script, cwd=workspace, env=child_env)
    assert second["woke"] == 2
    assert second["sessions"]["取词"] == sid
    resumed = fake_api.requests[n_first]
    # The second process's request carried the first process's conversation.
    assert "向日葵" in resumed.all_text  # the first answer and the tool result
    assert any(r.get("tool_use_id") for r in resumed.tool_results())
    assert resumed.n_messages > fake_api.requests[0].n_messages
    assert resumed.headers.get("x-claude-code-session-id") in (None, sid)
