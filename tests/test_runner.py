"""``flower_magic.runner``'s start, with the real runner process: it says it started (its pid) once it
holds the run, before the SDK's import, so ``%flower --bg`` and ``flower --detach`` return at once; what
goes wrong after that is still told, by the run's log (issue 24, 6). The SDK's import is held at a gate
(``tests/sdk_gate.py``), so nothing here depends on how fast anything is.

Whole background runs: tests/test_background_cli.py, tests/e2e/test_background.py.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from flower_magic import runner
from flower_magic.core.live import live_state, read_log
from flower_magic.display.bundles import status_of
from flower_magic.front.launch import Launch
from flower_magic.front.options import GoOptions
from flower_magic.front.outcome import Ending, Outcome
from tests.helpers import snapshot, wait_until
from tests.sdk_gate import SdkGate

START_GIVE_UP_S = 30.0  # only keeps a broken start from hanging the suite; nothing is timed


def _started(opts: GoOptions) -> int:
    """``runner.start`` from a thread: its pid, or a failure if it does not return while the gate holds."""
    got: list[object] = []
    thread = threading.Thread(target=lambda: got.append(runner.start(opts, front_end="terminal")), daemon=True)
    thread.start()
    thread.join(START_GIVE_UP_S)
    assert got, "start() did not return while the runner waited for the SDK"
    pid = got[0]
    assert isinstance(pid, int)
    return pid


def test_the_runner_says_it_started_before_the_sdk_and_a_later_failure_is_told_by_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--bg`` and ``--detach`` waited for the runner to import the SDK before saying anything (4.6 to
    9.3 s): the pid is said as soon as the runner holds the run, and a runner that then fails to start
    the run still says why, in its log's ending, which ``--status`` and a following cell read."""
    gate = SdkGate(tmp_path)
    for name, value in gate.env(dict(HOME=str(tmp_path))).items():
        if name in ("PYTHONPATH", "FLOWER_TEST_SDK_GATE"):
            monkeypatch.setenv(name, value)
    ws = tmp_path / "ws"
    ws.mkdir()
    opts = GoOptions(task="写个笔记", workspace=ws, demo=True, lang="en").check()
    Launch(opts, front_end="terminal").plan()  # as the callers do: their mistakes are said before
    pid = _started(opts)
    runs = ws / "runs"
    state = live_state(runs)
    assert state is not None and state.live and state.pid == pid  # it holds the run
    wait_until(lambda: gate.reached, "the runner at the SDK's import")
    assert [r["type"] for r in read_log(runs)] == ["start"]  # nothing of the run itself yet
    gate.fail()  # the SDK cannot be imported: the run cannot start
    wait_until(lambda: any(r["type"] == "end" for r in read_log(runs)), "the log's ending")
    end = next(r for r in read_log(runs) if r["type"] == "end")
    outcome = Outcome.from_record(end)
    assert outcome.ending is Ending.FAILED and "gate keeps the SDK out" in outcome.why
    wait_until(lambda: not live_state(runs).live, "the runner letting the run go")  # type: ignore[union-attr]
    said = status_of(opts, cmd="flower")["text/plain"]
    assert outcome.headline("en") in said and "gate keeps the SDK out" in said


def test_a_runner_sent_away_before_its_options_writes_nothing(tmp_path: Path) -> None:
    """The callers start the runner before their own checks (it imports meanwhile); when a check finds
    a mistake they cancel it, and it must leave without a byte written."""
    ws = tmp_path / "ws"
    ws.mkdir()
    opts = GoOptions(task="写个笔记", workspace=ws, demo=True).check()
    before = snapshot(ws)
    starting = runner.prepare(opts)
    starting.cancel()
    wait_until(lambda: starting.child.poll() is not None, "the cancelled runner's exit")
    assert starting.child.returncode == 0 and snapshot(ws) == before
