"""Shared fixtures: a workspace, a fake API env for subprocesses, and a way to run flows in real
separate OS processes (continuation is about surviving process death, so that is what we test)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from flower_magic.testing import FakeAnthropic


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def child_env(fake_api: FakeAnthropic, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A full environment for a child process that talks to ``fake_api`` with a throw-away HOME."""
    home = tmp_path / "home"
    home.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_MODEL", "FLOWER_WINDOW")
    }
    env.update(fake_api.env(home))
    env["PYTHONUNBUFFERED"] = "1"
    yield env


@pytest.fixture
def demo_api() -> Iterator[FakeAnthropic]:
    """The demo model (``flower_magic.testing.demo``) on its own fake API: plays every role, any task."""
    from flower_magic.testing.demo import demo_model

    api = FakeAnthropic(default=demo_model).start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture(autouse=True)
def _no_runner_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A background runner a test started (``--detach``, ``--bg``) is killed when the test ends, also
    when it failed half-way (a runner waiting for a question's answer would wait half an hour)."""
    # Asked for now, so that the folder is torn down after this looked in it.
    root = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if root is None:
        return
    from tests.helpers import runners_under

    for pid in runners_under(root):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
