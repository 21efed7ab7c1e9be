"""Shared fixtures: a workspace, a fake API env for subprocesses, and a way to run flows in real
separate OS processes (continuation is about surviving process death, so that is what we test)."""

from __future__ import annotations

import os
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
