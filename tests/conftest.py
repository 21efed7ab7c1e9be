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
from tests.pg import NoServer, PgServer

# Set to "postgres" to run every test that takes ``sessions`` (and ``child_env``) on PostgreSQL.
TEST_SESSIONS_ENV = "FLOWER_TEST_SESSIONS"

# The suite's runs speak Chinese unless a test chooses: most tests read the original's Chinese lines
# whatever their task's words, which alone would now choose the language (front.options.settle_lang).
# The tests of that choice take FLOWER_LANG away (tests/test_lang_choice.py, tests/e2e/test_lang.py).
os.environ.setdefault("FLOWER_LANG", "zh")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def _throw_away_pg() -> Iterator[PgServer]:
    try:
        server = PgServer()
    except NoServer as exc:
        pytest.skip(f"no PostgreSQL server could be started here: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A throw-away PostgreSQL server for the whole session (tests/pg.py); skips where none can start."""
    yield from _throw_away_pg()


@pytest.fixture
def own_pg() -> Iterator[PgServer]:
    """A PostgreSQL server of this test's own, which it may halt and resume (the session's is shared)."""
    yield from _throw_away_pg()


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """A fresh empty database on the test server, as a URL with its (canary) password."""
    return pg_server.fresh_url()


@pytest.fixture
def sessions(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where this test's runs keep their sessions, set as ``FLOWER_SESSIONS``: "" (sessions.db) or a
    fresh PostgreSQL database. ``parametrize("sessions", ["sqlite", "postgres"], indirect=True)``
    picks per test (the ``postgres`` variants are the short ones: ``is_short_variant``);
    ``FLOWER_TEST_SESSIONS=postgres`` moves every test that uses it (``child_env`` does), the
    ``sqlite`` variants at full length included, to PostgreSQL."""
    kind = os.environ.get(TEST_SESSIONS_ENV) or getattr(request, "param", None) or "sqlite"
    if kind == "sqlite":
        monkeypatch.delenv("FLOWER_SESSIONS", raising=False)
        return ""
    url = str(request.getfixturevalue("pg_url"))
    monkeypatch.setenv("FLOWER_SESSIONS", url)
    return url


def is_short_variant(request: pytest.FixtureRequest) -> bool:
    """The test is the ``postgres`` variant of a continuity test: the short one that fits CI's budget."""
    callspec = getattr(request.node, "callspec", None)
    return callspec is not None and callspec.params.get("sessions") == "postgres"


@pytest.fixture
def child_env(fake_api: FakeAnthropic, tmp_path: Path, sessions: str) -> Iterator[dict[str, str]]:
    """A full environment for a child process that talks to ``fake_api`` with a throw-away HOME (and
    ``FLOWER_SESSIONS`` as the ``sessions`` fixture chose)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_MODEL", "FLOWER_WINDOW")
    }
    env.pop("FLOWER_SESSIONS", None)
    if sessions:
        env["FLOWER_SESSIONS"] = sessions
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
