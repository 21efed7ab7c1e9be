"""A run is live only while its lock is held (issue 23, build 5; acceptance h): the real ``flower``
command against the fake API and the panel on a real jupyter_server with authentication on.

Two directories that look live and are not:

- **A reused pid.** ``flower --detach`` starts a runner; it is killed with ``kill -9`` in the middle of
  the work step; its pid is then "reused" by an unrelated live process (``sleep``). Pid reuse cannot be
  forced, so the state it produces is made: ``run.lock``'s record and ``live.json`` are left as the
  dead runner wrote them, their pid changed to the ``sleep``'s.
- **A forgery.** A finished run, then ``live.json`` + ``run.lock`` written by hand naming a live
  process (pid 1, or this test's own, which also hosts the panel's server).

In both, ``flower --attach`` and ``flower --stop`` say "no live run" in one line and exit 1 (they used
to follow forever and to claim the stop was sent), the panel's run answer says not live and its POST is
refused (409), all of it leaving the workspace byte-identical; ``flower --detach "words"`` and plain
``flower`` start a real run (they used to post a remark into an inbox nobody empties and exit 0, and
to replay the old run's log and exit 0).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import signal
import subprocess
import threading
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from flower_magic.core import live
from flower_magic.core.words import say, short_path
from flower_magic.testing import FakeAnthropic, Reply, Request, text
from flower_magic.testing.roles import role_of
from tests.helpers import CsvModel, Stranger, claude_processes, is_running, plant_holder, snapshot, wait_until

pytestmark = pytest.mark.slow
pytest_plugins = ["pytest_jupyter.jupyter_server"]

TASK = "清洗 CSV 任务-L5"


class Model(CsvModel):
    """The fake model: every role answers at once, except the worker while ``hold`` is set (its reply
    then waits on ``gate``, so a runner can be killed in the middle of the work step)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.hold = False

    def work(self, request: Request) -> Reply:
        if self.hold:
            return text("还在写。", hold=self.gate)
        return text("做完了,clean.py 已写好。")


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"flower_magic": True}}}


@pytest.fixture
def model(fake_api: FakeAnthropic) -> Any:
    model = Model()
    fake_api.default = model
    yield model
    model.gate.set()  # a held reply whose runner was killed ends with the test


@pytest.fixture
def ws(jp_root_dir: Path) -> Path:
    """The workspace, under the panel server's root."""
    folder = Path(jp_root_dir) / "ws"
    folder.mkdir()
    return folder


@pytest.fixture
def env(child_env: dict[str, str]) -> dict[str, str]:
    return dict(child_env, FLOWER_LANG="en")


@pytest.fixture
def panel(http_server_client: Any, jp_base_url: str, jp_auth_header: dict[str, str]) -> Any:
    """``panel(method, route, body=None)`` -> (code, JSON body) for the workspace ``ws``."""

    async def _panel(method: str, route: str, body: Any = None) -> tuple[int, Any]:
        query = urllib.parse.urlencode({"path": "ws"})
        response = await http_server_client.fetch(
            f"{jp_base_url}flower/api/{route}?{query}",
            method=method,
            headers=jp_auth_header,
            body=json.dumps(body).encode() if body is not None else None,
            raise_error=False,
        )
        return response.code, json.loads(response.body) if response.body else None

    return _panel


async def flower(ws: Path, env: dict[str, str], *args: str, timeout: float = 240) -> tuple[int, str, str, int]:
    """``flower *args`` in ``ws``, nobody at stdin: ``(exit code, stdout, stderr, pid)``. Waited for in a
    thread: the panel's server runs on this test's event loop."""

    def run() -> tuple[int, str, str, int]:
        with subprocess.Popen(
            ["flower", *args], cwd=ws, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        ) as proc:
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise AssertionError(f"flower {' '.join(args)} still running after {timeout} s") from None
            return proc.returncode, out.decode(), err.decode(), proc.pid

    return await asyncio.to_thread(run)


def worker_requests(api: FakeAnthropic) -> list[Request]:
    return [r for r in api.requests if role_of(r) == "worker"]


def runner_pid(out: str) -> int:
    return int(out.split("pid ")[1].split(")")[0])


def lock_free(run_dir: Path) -> bool:
    """Nobody holds ``run.lock`` (asked of flock(2) here, not of the code under test)."""
    fd = os.open(run_dir / "run.lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


async def kill_runner(pid: int, ws: Path) -> None:
    """``kill -9`` of a background runner, its Claude Code process gone with it, and its lock.

    The lock goes last: a runner's main thread shows as dead (``Z``) while its other threads are still
    exiting, and the files (the lock with them) are closed only when the last one has.
    """
    os.kill(pid, signal.SIGKILL)
    await asyncio.to_thread(wait_until, lambda: not is_running(pid), "the runner to die")
    await asyncio.to_thread(wait_until, lambda: not claude_processes(ws), "its Claude Code process to die with it")
    await asyncio.to_thread(wait_until, lambda: lock_free(ws / "runs"), "the OS to free its lock")


async def not_live_anywhere(ws: Path, env: dict[str, str], panel: Any, pid: int) -> None:
    """Every front end and the panel treat the run dir (whose files name the live ``pid``) as not live,
    in one line each, and leave the workspace byte-identical."""
    run_dir = ws / "runs"
    state = live.live_state(run_dir)
    assert state is not None and state.pid == pid and state.state != live.ENDED and not state.live
    before = snapshot(ws)

    rc, out, err, _ = await flower(ws, env, "--attach", timeout=60)  # it used to follow forever
    assert (rc, out, err) == (1, "", f"flower: {say('live_no_run', 'en')}\n")

    rc, out, err, _ = await flower(ws, env, "--stop", timeout=60)  # it used to say the stop was sent
    assert (rc, out, err) == (1, "", f"flower: {say('live_none', 'en', path=short_path(run_dir, run_dir.parent))}\n")

    code, answer = await panel("GET", "run")
    assert code == 200 and answer["live"]["pid"] == pid and answer["live"]["live"] is False
    code, answer = await panel("POST", "live", {"op": "remark", "text": "anyone there?"})
    assert code == 409 and answer["reason"] == "NotLive"

    assert snapshot(ws) == before


async def test_a_runner_killed_whose_pid_is_reused_is_not_live_anywhere(
    fake_api: FakeAnthropic, model: Model, ws: Path, env: dict[str, str], panel: Any
) -> None:
    run_dir = ws / "runs"
    model.hold = True
    rc, out, err, _ = await flower(ws, env, "--detach", "--rounds", "1", TASK)
    assert rc == 0, err
    first = runner_pid(out)
    await asyncio.to_thread(wait_until, lambda: worker_requests(fake_api), "the work step (its reply held)")
    assert live.live_pid(run_dir) == first
    code, answer = await panel("GET", "run")
    assert code == 200 and answer["live"]["live"] is True and answer["live"]["pid"] == first  # live: said so
    await kill_runner(first, ws)

    with Stranger() as stranger:
        plant_holder(run_dir, stranger.pid)
        await not_live_anywhere(ws, env, panel, stranger.pid)

        # --detach with words: a real runner starts (it used to post a remark nobody reads, and exit 0).
        n = len(worker_requests(fake_api))
        rc, out, err, _ = await flower(ws, env, "--detach", "再加一列-D1")
        assert rc == 0 and out.startswith("running in the background"), (out, err)
        second = runner_pid(out)
        assert second not in (first, stranger.pid) and live.live_pid(run_dir) == second
        await asyncio.to_thread(
            wait_until,
            lambda: any("再加一列-D1" in r.all_text for r in worker_requests(fake_api)[n:]),
            "the words to reach the model from the new runner",
        )
        await kill_runner(second, ws)

        # The same once more, for plain flower: a real run in the foreground, to its end.
        plant_holder(run_dir, stranger.pid)
        await not_live_anywhere(ws, env, panel, stranger.pid)
        model.hold = False
        n = len(worker_requests(fake_api))
        rc, out, err, pid = await flower(ws, env)
        assert rc == 0, err
        assert len(worker_requests(fake_api)) > n  # the work step resumed: it did not replay the old log
        state = live.live_state(run_dir)
        assert state is not None and state.pid == pid and state.state == live.ENDED and not state.live


@pytest.mark.parametrize("who", ["init", "this test"])
async def test_a_forged_live_json_and_run_lock_are_not_a_live_run(
    fake_api: FakeAnthropic, model: Model, ws: Path, env: dict[str, str], panel: Any, who: str
) -> None:
    run_dir = ws / "runs"
    rc, _, err, _ = await flower(ws, env, "--rounds", "1", TASK)
    assert rc == 0, err
    pid = 1 if who == "init" else os.getpid()  # this test's process also runs the panel's server

    # Plain flower: a real run (it used to replay the old run's log and exit 0 at once).
    plant_holder(run_dir, pid)
    await not_live_anywhere(ws, env, panel, pid)
    n = len(worker_requests(fake_api))
    rc, _, err, ran = await flower(ws, env)
    assert rc == 0, err
    assert len(worker_requests(fake_api)) > n
    state = live.live_state(run_dir)
    assert state is not None and state.pid == ran and state.state == live.ENDED

    # --detach with words: a real runner, which runs to its end.
    plant_holder(run_dir, pid)
    await not_live_anywhere(ws, env, panel, pid)
    n = len(worker_requests(fake_api))
    rc, out, err, _ = await flower(ws, env, "--detach", "再加一列-F2")
    assert rc == 0 and out.startswith("running in the background"), (out, err)
    runner = runner_pid(out)

    def ended() -> bool:
        now = live.live_state(run_dir)
        return now is not None and now.pid == runner and now.state == live.ENDED and not now.live

    await asyncio.to_thread(wait_until, ended, "the new runner's run to end", give_up_s=180)
    assert any("再加一列-F2" in r.all_text for r in worker_requests(fake_api)[n:])
