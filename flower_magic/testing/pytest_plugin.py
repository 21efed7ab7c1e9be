"""pytest fixtures for offline flower tests (registered as the ``flower_magic`` pytest plugin).

- ``fake_api``: a started ``FakeAnthropic`` with an empty script; add replies with ``fake_api.add(...)``.
- ``fake_api_env``: points this process's environment (``ANTHROPIC_BASE_URL``, a dummy key, a
  throw-away ``HOME`` and ``CLAUDE_CONFIG_DIR``) at ``fake_api``; restored after the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flower_magic.testing.server import FakeAnthropic


@pytest.fixture
def fake_api() -> Iterator[FakeAnthropic]:
    api = FakeAnthropic().start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def fake_api_env(
    fake_api: FakeAnthropic, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    home = Path(tmp_path_factory.mktemp("home"))
    env = fake_api.env(home)
    for key in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_MODEL", "FLOWER_WINDOW"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env
