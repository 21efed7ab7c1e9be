"""Runtime: clear errors before anything starts, events, and the store keys it shares with the SDK."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

import pytest

from flower_magic import AgentSpec, Runtime
from flower_magic.core.errors import CredentialsError, PathError, has_credentials
from flower_magic.core.events import Event, context_of, normalize, session_id_of, tool_summary
from flower_magic.core.project import local_transcript, project_key, sdk_project_key
from flower_magic.testing import FakeAnthropic, text


def _no_credentials(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    for key in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "CLAUDE_CODE_USE_BEDROCK",
        "CLAUDE_CODE_USE_VERTEX",
        "CLAUDE_CODE_USE_FOUNDRY",
    ):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home / ".claude"))


def test_no_credentials_is_one_clear_error_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake_api: FakeAnthropic
) -> None:
    _no_credentials(monkeypatch, tmp_path / "home")
    with pytest.raises(CredentialsError) as info:
        Runtime(workspace=tmp_path / "ws", run_dir=tmp_path / "runs")
    message = str(info.value)
    assert "ANTHROPIC_API_KEY" in message and "claude login" in message
    # Nothing was created and no CLI ever talked to an API.
    assert not (tmp_path / "ws").exists() and not (tmp_path / "runs").exists()
    assert fake_api.requests == []


def test_a_claude_login_counts_as_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    home = tmp_path / "home"
    _no_credentials(monkeypatch, home)
    assert not has_credentials()
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text("{}")
    assert has_credentials()
    assert has_credentials({"ANTHROPIC_AUTH_TOKEN": "x"})


def test_unusable_directories_are_named(fake_api_env: dict[str, str], tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(PathError) as info:
        Runtime(workspace=blocker / "ws")
    assert str(blocker / "ws") in str(info.value) and info.value.role == "workspace"
    with pytest.raises(PathError) as info:
        Runtime(workspace=tmp_path / "ws", run_dir=blocker)
    assert str(blocker) in str(info.value) and "-r/--run-dir" in str(info.value)


@pytest.mark.parametrize(
    "path",
    ["/tmp/x", "/home/u/my_proj.v2", "/tmp/naïve café", "/tmp/" + "deep/" * 60 + "end", "/tmp/日本語/データ"],
)
def test_project_key_matches_the_sdk(path: str) -> None:
    from claude_agent_sdk import project_key_for_directory

    assert project_key(path) == project_key_for_directory(path) == sdk_project_key(path)
    assert unicodedata.is_normalized("NFC", project_key(path))


@pytest.mark.parametrize(
    ("path", "cli_key"),
    [
        ("/tmp/a🌻b", "-tmp-a--b"),  # one emoji: two UTF-16 units, two dashes
        ("/tmp/数据 清洗 🌻 with spaces", "-tmp-" + "-" * 9 + "with-spaces"),  # 2+1+2+1+2+1 units
        # Past 200 units: cut at 200, then the hash of the UTF-16 units (Claude Code's folder name,
        # read off a real run of CLI 2.1.332 in that directory).
        ("/tmp/fm16/" + "🌻" * 50 + "/" + "🌻" * 50, "-tmp-fm16-" + "-" * 190 + "-sx675f"),
    ],
)
def test_project_key_is_claude_codes_where_the_sdk_differs(path: str, cli_key: str) -> None:
    """Guards issue 16: in a workspace with an emoji in its name, the CLI (JavaScript: UTF-16 code units)
    files its sessions under another key than the SDK computes (code points), so every store lookup
    by the SDK's key missed the whole conversation."""
    from claude_agent_sdk import project_key_for_directory

    assert project_key(path) == cli_key
    assert sdk_project_key(path) == project_key_for_directory(path) != cli_key


def test_local_transcript_location() -> None:
    env = {"CLAUDE_CONFIG_DIR": "/c"}
    assert local_transcript("/w/x", "abc", env) == Path("/c/projects/-w-x/abc.jsonl")


def test_normalize_real_sdk_messages() -> None:
    from claude_agent_sdk import (
        AssistantMessage,
        ResultMessage,
        SystemMessage,
        TextBlock,
        ToolResultBlock,
        ToolUseBlock,
        UserMessage,
    )

    init = SystemMessage(subtype="init", data={"session_id": "s1", "model": "m", "apiKeySource": "ANTHROPIC_API_KEY"})
    assert session_id_of(init) == "s1"
    (ev,) = normalize(init)
    assert ev.kind == "system" and ev.payload == {"session_id": "s1", "model": "m"}

    usage = {"input_tokens": 100, "cache_read_input_tokens": 20, "cache_creation_input_tokens": 3}
    msg = AssistantMessage(
        content=[TextBlock("hi"), ToolUseBlock("t1", "Bash", {"command": "ls -la"})], model="m", usage=usage
    )
    text_ev, call = normalize(msg)
    assert (text_ev.kind, text_ev.text, text_ev.payload["context"], text_ev.payload["subagent"]) == (
        "text",
        "hi",
        123,
        False,
    )
    assert (call.kind, call.tool, call.text, str(call)) == ("tool_call", "Bash", "ls -la", "[Bash] ls -la")
    assert "context" not in call.payload

    synthetic = AssistantMessage(
        content=[TextBlock("API Error: 529 Overloaded")], model="<synthetic>", error="server_error"
    )
    (err,) = normalize(synthetic)
    assert err.kind == "error" and err.payload["synthetic"] and "529" in err.text

    sub = UserMessage(content=[ToolResultBlock("t1", "x" * 900, True)], parent_tool_use_id="p")
    (res,) = normalize(sub)
    assert res.kind == "tool_result" and len(res.text) == 500 and res.payload["subagent"] and res.payload["is_error"]

    done = ResultMessage(
        subtype="success",
        duration_ms=1,
        duration_api_ms=1,
        is_error=False,
        num_turns=2,
        session_id="s1",
        total_cost_usd=0.5,
    )
    (r,) = normalize(done)
    assert (r.kind, r.payload["cost_usd"], r.payload["num_turns"]) == ("result", 0.5, 2)
    assert Event("text").__str__() == "<text>"
    assert context_of(None) == 0 and tool_summary("X", {"a": 1}) == '{"a": 1}'


@pytest.mark.anyio
@pytest.mark.slow
async def test_session_id_reaches_on_session_before_the_first_request(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """The id is handed over the moment the init message arrives, before the model is even asked."""
    fake_api.add(text("ok"))
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False)
    seen: list[tuple[str, int]] = []
    rt.on_session = lambda sid: seen.append((sid, len(fake_api.requests)))
    try:
        result = await rt.run(AgentSpec(name="a", instructions="", allowed_tools=[]), "hi")
    finally:
        rt.close()
    assert result.ok and result.text == "ok" and result.num_turns == 1 and result.cost_usd > 0
    assert seen == [(result.session_id, 0)]
    assert rt.on_session is not None  # the runtime never detaches a hook it did not attach
    assert os.path.isfile(workspace / "runs" / "manifest.json")


@pytest.mark.anyio
@pytest.mark.slow
async def test_sdk_failure_never_escapes_run(fake_api_env: dict[str, str], workspace: Path) -> None:
    """A CLI that cannot start (a bad option) ends the step with an error text, not an exception."""
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False)
    try:
        result = await rt.run(AgentSpec(name="a", instructions="", permission_mode="no-such-mode"), "hi")
    finally:
        rt.close()
    assert not result.ok and result.error
    rows = (workspace / "runs" / "manifest.json").read_text(encoding="utf-8")
    assert '"ok": false' in rows


def test_rescue_from_a_signal_while_the_rows_are_being_written_does_not_wait_on_its_own_lock(
    fake_api_env: dict[str, str], tmp_path: Path
) -> None:
    """Found by the continuity walk: SIGTERM landing while the step's row was being written ran
    ``rescue`` on the same thread, which waited forever for the manifest lock its own frame held."""
    import json

    from flower_magic.core.result import StepResult

    rt = Runtime(workspace=tmp_path / "ws", run_dir=tmp_path / "runs")
    try:
        rt._current = StepResult(step="干活", session_id="s1")
        rt._persisting = True  # what a signal handler finds when it interrupts _persist
        rt.rescue()
        assert not (tmp_path / "runs" / "manifest.json").exists()
        rt._persisting = False
        rt.rescue()  # any other moment: the step in flight is recorded
        rows = json.loads((tmp_path / "runs" / "manifest.json").read_text(encoding="utf-8"))
        assert [(r["step"], r["error"]) for r in rows] == [("干活", "killed-by-signal")]
    finally:
        rt.close()


@pytest.mark.anyio
async def test_a_manifest_row_that_cannot_be_written_is_said_not_swallowed(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """Issue 11 (5): the run goes on (its session is kept), and the person reads why its row is missing."""
    from flower_magic.core.words import say

    fake_api.add(text("one"), text("two"))
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs")
    events: list[Event] = []
    spec = AgentSpec(name="a", instructions="")
    try:
        (workspace / "runs" / ".lock").mkdir()  # a directory where the manifest's lock file belongs
        first = await rt.run(spec, "first", step_name="s1", on_event=events.append)
        (workspace / "runs" / ".lock").rmdir()
        second = await rt.run(spec, "second", step_name="s2", on_event=events.append)
    finally:
        rt.close()
    assert first.ok and second.ok
    told = [e for e in events if e.kind == "notice" and "manifest_error" in e.payload]
    assert len(told) == 1 and "s1" in told[0].text
    assert told[0].text.startswith(say("manifest_unwritten", "zh", path="", step="s1", why="")[:8])
    from flower_magic.core import manifest

    assert [r["step"] for r in manifest.read_rows(workspace / "runs")] == ["s1", "s2"]  # caught up


def test_words_said_twice_before_the_session_took_them_all_go(fake_api_env: dict[str, str], tmp_path: Path) -> None:
    """Issue 22: a second remark arriving before the session took the first one replaced it, and the
    first was never said to the model in that run. Both go, in order; a stop still ends the step."""
    rt = Runtime(workspace=tmp_path / "ws", run_dir=tmp_path / "runs")
    try:
        rt.interrupt("第一句-F1")
        rt.interrupt("")  # a bare interrupt keeps what waits
        rt.interrupt("第二句-S2")
        assert rt.words_waiting() and rt.take_words() == "第一句-F1\n\n第二句-S2"
        assert not rt.words_waiting() and rt.take_words() is None
        rt.interrupt("说了又停")
        rt.interrupt("", resume=False)
        assert not rt.words_waiting() and rt.take_words() is None
    finally:
        rt.close()
