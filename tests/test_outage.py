"""Outages and API errors with the real CLI (issue 3, acceptance a and b)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from flower_magic import AgentSpec, Runtime
from flower_magic.core.events import Event
from flower_magic.core.resilience import Resilience
from flower_magic.testing import FakeAnthropic, Reply, drop, error, hang, text, tool_use
from tests.conftest import is_short_variant
from tests.helpers import stored_session

# pytest-jupyter (loaded by test_liveness.py and test_server.py) collects every coroutine test itself,
# before anyio can mark it as needing ``anyio_backend``; anyio then re-makes such a test once per backend
# and drops its other parameters. Asking for the fixture outright keeps this module's tests as written.
pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.usefixtures("anyio_backend")]

FAST = Resilience(base_delay=0.2, max_delay=1.0, probe_interval=1.0, probe_timeout=1.0, max_offline_wait=120)
DEBRIS = ("API Error", "ECONNREFUSED", "Connection refused", "No response requested")


def _rt(ws: Path, **kw: Any) -> Runtime:
    kw.setdefault("resilience", FAST)
    return Runtime(workspace=ws, run_dir=ws / "runs", **kw)


@pytest.mark.parametrize("sessions", ["sqlite", "postgres"], indirect=True)
async def test_outage_waits_then_resumes_the_same_session(
    sessions: str,
    fake_api: FakeAnthropic,
    fake_api_env: dict[str, str],
    workspace: Path,
    request: pytest.FixtureRequest,
) -> None:
    """The API answers the first turn, then refuses connections for 20 s, then comes back (on
    PostgreSQL too: the pruning that drops the outage's debris wraps either store)."""
    (workspace / "notes.txt").write_text("第一行\n", encoding="utf-8")
    # The second request is held open until the server goes down: it is cut, then every retry is refused.
    fake_api.add(tool_use("Read", {"file_path": str(workspace / "notes.txt")}), hang(120))
    outage_s = 8.0 if is_short_variant(request) else 20.0  # on PostgreSQL, shorter: the same probes, within the budget
    timeline: list[str] = []

    def outage() -> None:
        fake_api.wait_for_requests(2, timeout=60)
        fake_api.stop()
        timeline.append("down")
        time.sleep(outage_s)
        fake_api.add(text("看完了,继续写。"))
        fake_api.start()
        timeline.append("up")

    events: list[Event] = []
    rt = _rt(workspace)
    thread = threading.Thread(target=outage, daemon=True)
    thread.start()
    try:
        spec = AgentSpec(name="worker", instructions="", allowed_tools=["Read"])
        result = await rt.run(spec, "读 notes.txt 然后继续。", on_event=events.append)
    finally:
        rt.close()
        thread.join(timeout=60)
    assert timeline == ["down", "up"]
    assert result.ok, result.error
    assert result.attempts >= 2 and result.resumed
    assert result.text == "看完了,继续写。"
    retries = [e.text for e in events if e.kind == "retry"]
    host = f"127.0.0.1:{fake_api.port}"
    assert retries[0].startswith("第 1 次失败(transient)")
    assert any(r.startswith(f"{host} 不可达") for r in retries)
    assert retries.index(next(r for r in retries if r.startswith(f"{host} 不可达"))) < retries.index(
        f"{host} 恢复,继续"
    )
    assert any("ECONNREFUSED" in e or "Connection refused" in e for e in result.errors)

    # One session all along; sessions.db keeps the outage verbatim ...
    raw = stored_session(workspace / "runs", result.session_id, workspace)
    assert raw is not None
    assert any(e.get("isApiErrorMessage") for e in raw)
    # ... but nothing sent to the model after recovery carries it.
    after = [r for r in fake_api.requests if r.reply_kind == "message"][1:]
    assert after, "no request after recovery"
    for req in after:
        assert req.headers.get("x-claude-code-session-id") in (None, result.session_id)
        for word in DEBRIS:
            assert word not in req.all_text, word
    assert "读 notes.txt" in after[0].all_text and "第一行" in after[0].all_text  # the conversation went on


@pytest.mark.parametrize(
    ("failure", "label"),
    [
        (error(529, "Overloaded", times=3), "529"),
        (error(500, "Internal server error", times=3), "500"),
        (error(429, "Number of request tokens has exceeded your per-minute rate limit", times=3), "429"),
        (drop(times=3), "dropped"),
    ],
)
async def test_transient_errors_are_retried(
    failure: Reply, label: str, fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    # The CLI retries twice itself (CLAUDE_CODE_MAX_RETRIES=2); three failures exhaust it, so our
    # loop must take over and resume.
    fake_api.add(failure, text("好了"))
    rt = _rt(workspace)
    try:
        result = await rt.run(AgentSpec(name="a", instructions="", allowed_tools=[]), "做")
    finally:
        rt.close()
    assert result.ok, (label, result.error, result.errors)
    assert result.attempts >= 2 and result.text == "好了"
    assert result.errors, label


@pytest.mark.parametrize(
    ("status", "message", "fix"),
    [
        (401, "invalid x-api-key", "ANTHROPIC_API_KEY"),
        (400, "messages: bad thing", "rejected the request as invalid"),
    ],
)
async def test_fatal_errors_stop_and_say_what_to_fix(
    status: int, message: str, fix: str, fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    fake_api.add(error(status, message, times=None))
    rt = _rt(workspace)
    try:
        result = await rt.run(AgentSpec(name="a", instructions="", allowed_tools=[]), "做")
    finally:
        rt.close()
    assert not result.ok and result.attempts == 1
    assert fix in (result.error or ""), result.error
    rows = json.loads((workspace / "runs" / "manifest.json").read_text(encoding="utf-8"))
    assert rows[-1]["error"] == result.error and rows[-1]["attempts"] == 1
