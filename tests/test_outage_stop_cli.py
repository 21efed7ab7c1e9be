"""Acceptance g of issue 23, with real processes: a run waiting out an API outage hears a stop and words.

A background run (``flower --detach``) against the fake API; the worker's first request is in flight
when the API goes away (the fake server stops: the request is cut, every retry and probe refused).
The runner then waits for the API with flower's own timings (a probe every 15 s, up to an hour):
- ``flower --stop`` ends it: the runner is gone, the log has one end record (``stopped``), the
  manifest one row for the step, ``live.json`` ended;
- ``flower "words"`` is kept, and once the API is back the words reach the model in the first request,
  exactly once.
The foreground terminal (Ctrl-C, then words) and a kernel's ■ are held the same way.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from flower_magic.core import live
from flower_magic.core.result import INTERRUPTED
from flower_magic.core.rundir import WORK_STEP
from flower_magic.core.words import say
from flower_magic.testing import FakeAnthropic, Reply, Request, text
from flower_magic.testing.roles import role_of
from tests.helpers import CsvModel, claude_processes, is_running, wait_until
from tests.test_cli_signals import Terminal

pytestmark = pytest.mark.slow

TASK = "清洗 CSV 任务-Q4"
WORDS = "also X: 表头改成英文-R9"
DONE = "表头改成英文了,clean.py 写好了。"
GIVE_UP_S = 30.0  # only keeps a broken run from hanging the suite; a stop ends it within a second or two


class Model(CsvModel):
    """Clarifier, goals and judge answer at once; the worker's first request is held until the API
    goes away (which cuts it); once the words have reached it, the worker is done."""

    def work(self, request: Request) -> Reply:
        if WORDS in json.dumps(request.messages, ensure_ascii=False):
            return text(DONE)
        return text("还在写。", hold=threading.Event())


def _flower(ws: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["flower", *args],
        cwd=ws,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _done(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def _workers(api: FakeAnthropic) -> list[Request]:
    return [r for r in api.requests if role_of(r) == "worker"]


def _said(request: Request) -> int:
    """How many times the words are in what the model was sent (the whole history of the request)."""
    return json.dumps(request.messages, ensure_ascii=False).count(WORDS)


def _waiting_for_the_api(run_dir: Path, api: FakeAnthropic) -> bool:
    """The run's log says it waits for the endpoint (the probe found it down)."""
    down = f"127.0.0.1:{api.port} "
    return any(
        r["type"] == "event" and r["event"]["kind"] == "retry" and r["event"]["text"].startswith(down)
        for r in live.read_log(run_dir)
    )


def _into_the_outage(api: FakeAnthropic, run_dir: Path) -> None:
    """Once the worker's first request is in flight: the API goes away; returns once the run waits for it."""
    wait_until(lambda: _workers(api), "the worker's first request", give_up_s=120)
    api.stop()
    wait_until(lambda: _waiting_for_the_api(run_dir, api), "the run to wait for the API", give_up_s=120)


def _detach(ws: Path, env: dict[str, str]) -> int:
    rc, out, err = _done(_flower(ws, env, "--detach", "--rounds", "1", TASK))
    assert rc == 0, err
    return int(out.split("pid ")[1].split(")")[0])


def _ends(run_dir: Path) -> list[dict[str, Any]]:
    return [r for r in live.read_log(run_dir) if r["type"] == "end"]


def _work_rows(run_dir: Path) -> list[dict[str, Any]]:
    rows = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    return [r for r in rows if r["step"].startswith(WORK_STEP)]


def _live_json(run_dir: Path) -> dict[str, Any]:
    return dict(json.loads((run_dir / "live.json").read_text(encoding="utf-8")))


@pytest.mark.timeout(600)
def test_stop_during_an_outage_ends_a_background_run_at_once(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """Issue 23 (acceptance g): ``flower --stop`` while the runner waits out an outage said it asked, the
    log said ``heard`` — and the runner was still waiting 90 s later. It ends now, recorded once."""
    fake_api.default = Model()
    env = dict(child_env, FLOWER_LANG="en")
    run_dir = workspace / "runs"
    runner = _detach(workspace, env)
    _into_the_outage(fake_api, run_dir)
    assert is_running(runner)

    asked = time.monotonic()
    rc, out, err = _done(_flower(workspace, env, "--stop"))
    assert rc == 0 and "asked it to stop" in out, err
    wait_until(lambda: not is_running(runner), "the runner to end after --stop", give_up_s=GIVE_UP_S)
    took = time.monotonic() - asked
    ends = _ends(run_dir)
    heard_at = next(r["t"] for r in live.read_log(run_dir) if r["type"] == "heard")
    print(
        f"flower --stop during an outage wait: the runner ended {took:.2f} s after flower --stop was started, "
        f"its end record {ends[0]['t'] - heard_at:.2f} s after it took the stop"
    )
    assert len(ends) == 1 and ends[0]["ending"] == "stopped", ends
    assert ends[0]["step"] == WORK_STEP
    heard = [r for r in live.read_log(run_dir) if r["type"] == "heard"]
    assert [(h["op"], h["took"]) for h in heard] == [("stop", True)]
    rows = _work_rows(run_dir)
    assert [(r["step"], r["error"]) for r in rows] == [(WORK_STEP, INTERRUPTED)], rows
    assert any("ECONNREFUSED" in e or "Connection refused" in e for e in rows[0]["errors"]), rows[0]["errors"]
    assert _live_json(run_dir)["state"] == "ended"
    assert not live.live_state(run_dir).live  # type: ignore[union-attr]
    assert not claude_processes(workspace)
    rc, out, err = _done(_flower(workspace, env, "--status"))
    assert rc == 0 and say("end_stopped", "en", step=WORK_STEP) in out, out


@pytest.mark.timeout(600)
def test_words_during_an_outage_reach_the_model_once_it_is_back(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """A remark sent while the runner waits out an outage was ignored like the stop. It is kept (the
    follower is told so), and goes to the model in the first request once the API answers, once."""
    fake_api.default = Model()
    env = dict(child_env, FLOWER_LANG="en")
    run_dir = workspace / "runs"
    runner = _detach(workspace, env)
    _into_the_outage(fake_api, run_dir)
    cut = len(fake_api.requests)

    follower = _flower(workspace, env, WORDS)
    wait_until(
        lambda: any(r["type"] == "heard" and r["op"] == "remark" for r in live.read_log(run_dir)),
        "the remark to be taken",
    )
    wait_until(
        lambda: any(r["type"] == "event" and r["event"]["payload"].get("words_kept") for r in live.read_log(run_dir)),
        "the words kept said",
    )
    assert len(fake_api.requests) == cut  # nothing reached the API meanwhile
    fake_api.start()
    rc, out, err = _done(follower, timeout=240)
    assert rc == 0, (out, err)
    assert say("words_kept_offline", "en") in out and DONE in out
    wait_until(lambda: not is_running(runner), "the runner to end")

    back = [r for r in _workers(fake_api) if r.index >= cut]
    assert back, "no worker request after the API came back"
    assert _said(back[0]) == 1 and WORDS in back[0].last_user_text
    assert all(_said(r) == 1 for r in back)
    kept = [r for r in live.read_log(run_dir) if r["type"] == "event" and r["event"]["payload"].get("words_kept")]
    assert len(kept) == 1
    rows = _work_rows(run_dir)
    assert [(r["step"], r["ok"]) for r in rows][:1] == [(WORK_STEP, True)], rows
    ends = _ends(run_dir)
    assert len(ends) == 1 and ends[0]["ending"] == "done", ends


@pytest.mark.timeout(600)
def test_ctrl_c_and_words_during_an_outage_in_the_terminal(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """``flower`` in a terminal, the API gone: Ctrl-C, then words. The wait goes on, the terminal says the
    words are kept, and they reach the model once the API is back, once."""
    fake_api.default = Model()
    env = dict(child_env, FLOWER_LANG="en")
    run_dir = workspace / "runs"
    term = Terminal(["--rounds", "1", TASK], workspace, env)
    try:
        _into_the_outage(fake_api, run_dir)
        cut = len(fake_api.requests)
        term.read_until("is unreachable")
        term.proc.send_signal(signal.SIGINT)
        term.read_until(say("interrupt_say", "en").strip())
        term.type(WORDS)
        term.read_until(say("words_kept_offline", "en"))
        assert term.proc.poll() is None and len(fake_api.requests) == cut
        fake_api.start()
        assert term.proc.wait(timeout=120) == 0, term.out[-2000:]
        term.read_until(DONE)
    finally:
        term.close()
    back = [r for r in _workers(fake_api) if r.index >= cut]
    assert back and _said(back[0]) == 1 and WORDS in back[0].last_user_text
    assert all(_said(r) == 1 for r in back)
    assert [e["ending"] for e in _ends(run_dir)] == ["done"]


@pytest.mark.timeout(600)
def test_the_kernels_interrupt_during_an_outage_ends_the_run(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path
) -> None:
    """The kernel's ■ while ``%flower`` waits out an outage: the cell gave up after its wind-down while
    the run went on waiting for the API. The run ends now: ``interrupted``, one row, the kernel free."""
    from tests.e2e.kernel import Kernel

    fake_api.default = Model()
    run_dir = workspace / "runs"
    kernel = Kernel(workspace, child_env)
    try:
        assert kernel.run("%load_ext flower_magic").status == "ok"
        kernel.start(f'%flower --rounds 1 "{TASK}"')
        _into_the_outage(fake_api, run_dir)
        asked = time.monotonic()
        kernel.interrupt()
        wait_until(lambda: _ends(run_dir), "the run's end after the kernel's interrupt", give_up_s=GIVE_UP_S)
        print(f"the kernel's interrupt during an outage wait: the run ended {time.monotonic() - asked:.2f} s after it")
        assert kernel.run("print('free')", timeout=60).stream.strip() == "free"
    finally:
        kernel.close()
    ends = _ends(run_dir)
    assert len(ends) == 1 and ends[0]["ending"] == "interrupted" and ends[0]["step"] == WORK_STEP, ends
    assert [(r["step"], r["error"]) for r in _work_rows(run_dir)] == [(WORK_STEP, INTERRUPTED)]
    assert _live_json(run_dir)["state"] == "ended"
