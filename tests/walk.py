"""A seeded random walk over one directory: failures in sequences, the invariant checked after each.

Every operation is a real process running the default workflow (``tests/walk_child.py``, which runs
what ``flower`` runs) with the real Claude Code CLI against the fake Messages API, on one workspace
and one ``HOME`` for the whole walk, as a person has. An operation is a way of starting (continue,
say something at wake, ``--new``, a context that fills and hands off, ``--new`` cut short in its
clarification: ``kill -9`` while the clarifier's request is in flight or while its question waits)
times something that happens to it (nothing, ``kill -9`` at one of four moments, ``SIGTERM``, an
outage, an interrupt with words, or ``kill -9`` after which its pid is "reused": ``run.lock``'s record
and ``live.json`` then name a live ``sleep`` that lives on through the next op). Issue 23 adds the
endings a person meets: ``flower --stop`` mid-step (``stop``) and while the run waits out an outage
(``stopout``), the panel's stop (``panel``: the inbox message its ``POST live`` writes, through the same
``core.live.post``), words said to the live run while the API is away (``remarkout``: what
``flower "..."`` and the panel post, through the same call),
the kernel shut down while the clarifier's question is open (``cut+closed``: what a kernel's shutdown
does, the interrupt and then ``Launch.end_now(CLOSED)``), and a start refused because the run's store
cannot be reached (``refused``: ``store.json`` names a PostgreSQL nobody listens on). While a
clarification is unfinished, what is said at wake is for the clarifier (the answer to its question,
when one died with its process).

After every operation:
    - every worker request of the op, in the session it was sent for, carries every phrase said to
      that session before the op (in order, each exactly once) and the brief it started from; every
      clarifier request carries the task; the last worker request of a finished op also carries what
      was said in it, once;
    - every clarifier request of the op carries every phrase said to the unfinished clarification
      (before the op and at its start), each exactly once; an op that finished with the clarification
      unfinished at its start sent at least one;
    - every ``tool_use`` in every request has exactly one result; no request holds ``API Error``,
      ``ECONNREFUSED``, ``No response requested.`` or assistant text the model never wrote;
    - the requests' session is the one lineage.json names for the step;
    - lineage.json and manifest.json parse; sessions.db passes ``PRAGMA integrity_check`` and no
      stored entry of the work session names a parent that does not exist;
    - no Claude Code process of this workspace outlives the op;
    - the directory is never taken for a live run (ops run one at a time): no op's child finds one, and
      after a runner whose pid was reused ``core.live.live_state`` says not live;
    - every op that was not killed with ``-9`` left exactly one end record, saying how it ended (stopped
      after a stop that was taken, closed, signalled after SIGTERM, done when it exited 0), and
      ``live.json`` does not say running; no two manifest rows are one step attempt;
    - a refused start left the directory byte-identical, sent nothing to the API and said one line.

``Walk(seed).run(n)`` returns the failures (empty when the invariant held); ``Walk(seed, opening=[...])``
begins with the ops given (``"cut+kill@clarify"``, ``"wake+stopout"``) before the seed chooses.
``scripts/soak`` runs many seeds and prints the figures.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flower_magic.core import live, manifest
from flower_magic.core.brief import Brief
from flower_magic.core.errors import FlowerError
from flower_magic.core.human import ASK_TOOL
from flower_magic.core.live import live_state
from flower_magic.core.project import project_key
from flower_magic.core.rundir import TASK_NAME
from flower_magic.core.storage import StoreLocation, record_store
from flower_magic.stores.chain import dangling
from flower_magic.testing import FakeAnthropic, Reply, Request, text, tool_pairing_error, tool_use
from flower_magic.testing.roles import role_of
from tests.helpers import Stranger, plant_holder, stored_session

CHILD = Path(__file__).with_name("walk_child.py")
WINDOW_TOKENS = 200_000  # passed as --window; a reply reporting more than the hand-off line fills it
FULL_TOKENS = 170_000  # past the hand-off line of a 200K window (150K)
DEBRIS = ("API Error", "ECONNREFUSED", "Connection refused", "No response requested")
WORK_STEP = "干活"
CLARIFY_STEP = "确认需求"
PROC_GIVE_UP_S = 240.0  # a hung op fails the walk instead of hanging it
TOOL_SLEEP_S = 1.5  # the worker's tool call runs this long: room to strike mid-call
STARTS = ("continue", "continue", "wake", "handoff", "new", "cut")
# How a "cut" op cuts the clarification short: -9 while the clarifier's request is in flight, or while
# its question waits for an answer.
CUTS = ("clarify", "question", "closed")
QUESTION = "输出要什么格式?"
EVENTS = (
    *("none", "none", "kill", "kill", "kill", "term", "outage", "interrupt", "reused"),
    *("stop", "panel", "stopout", "remarkout", "refused"),
)
KILLED = ("kill", "reused")  # killed with -9 ("reused": and its pid then named by a live process)
STOPS = ("stop", "panel", "stopout")  # a stop is asked of the live run (flower --stop, the panel's)
# The ending each kind of op leaves in the event log when the run took what was done to it.
ENDED_BY = {"stop": "stopped", "panel": "stopped", "stopout": "stopped", "closed": "closed", "term": "signalled"}
# A store nobody listens on (the discard port): a run dir that records it cannot start.
UNREACHABLE_STORE = "postgresql://flower@127.0.0.1:9/flower"
MOMENTS = ("early", "request", "tool", "flush")

BRIEF = """确认书如下。

## 目标
{marker}:把 data/ 里的 CSV 清洗干净。

## 验收标准
- clean.py 存在并能运行

## 边界
不联网。

## 未知与假设
CSV 用逗号分隔(假设)。
"""
GOAL = """## 目标
{marker} 的 clean.py 能用

## 判定清单
- 清单-{marker}:clean.py 能运行
"""
ACHIEVED = "## 结论\n达成\n\n## 理由\n逐条看过。\n\n## 未通过\n(无)\n"
HANDOFF_DOC = """## 现在在做什么
在写 clean.py,做到一半。

## 已经定下的
- 用标准库 csv,因为不许装包。

## 走不通的路
- 无。

## 下一步
- 把 clean.py 写完。

## 现场
- clean.py
"""


@dataclass
class Failure:
    seed: int
    op: int
    what: str
    detail: str

    def __str__(self) -> str:
        return f"seed {self.seed} op {self.op} ({self.what}): {self.detail}"


@dataclass
class Op:
    start: str
    event: str
    moment: str = ""
    said: str = ""  # said at wake
    words: str = ""  # said with an interrupt, in the op
    stop_sent: float | None = None  # when a stop the live run took was asked (monotonic)

    def __str__(self) -> str:
        tail = f"@{self.moment}" if self.moment else ""
        return f"{self.start}+{self.event}{tail}"


@dataclass
class Session:
    """What one work session must hold: the brief it began with (None: a successor) and what was said."""

    marker: str | None
    said: list[str] = field(default_factory=list)


class Model:
    """The fake API's answer to every request, by role: the clarifier writes the brief, the worker runs
    one slow shell command and then says it is done, a hand-off request gets the document."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.marker = "任务标记-T0"
        self.full = False  # report a context past the hand-off line, once
        self.delay_s = 0.0  # slow the next answers (a strike lands while a request is in flight)
        self.written: set[str] = set()
        self.n = 0
        self.finals = 0  # worker text replies served (the step's last answer)
        self.tools = 0
        self.asks = False  # the clarifier asks QUESTION before it writes the brief

    def _say(self, body: str, **kw: Any) -> Reply:
        with self.lock:
            self.written.add(body)
        return text(body, **kw)

    def __call__(self, request: Request) -> Reply:
        with self.lock:
            self.n += 1
            n, delay = self.n, self.delay_s
        role = role_of(request)
        if role == "clarifier":
            if self.asks and QUESTION not in request.all_text:
                return tool_use(ASK_TOOL, {"question": QUESTION, "options": ["csv", "json"]}, delay_s=delay)
            return self._say(BRIEF.format(marker=self.marker), delay_s=delay)
        if role == "handoff":
            return self._say(HANDOFF_DOC, delay_s=delay)
        if role == "goal":
            return self._say(GOAL.format(marker=self.marker), delay_s=delay)
        if role == "judge":
            return self._say(ACHIEVED, delay_s=delay)
        last = request.messages[-1] if request.messages else {}
        content = last.get("content")
        answered = isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        )
        with self.lock:
            # One reply reports the context full: the session hands off once, its successor starts small.
            # Not a session's first request: a session that starts past the line is a runaway (the
            # runtime stops it, rightly), not a full one.
            grown = any(m.get("role") == "assistant" for m in request.messages)  # it has answered before
            usage = {"input_tokens": FULL_TOKENS} if self.full and grown else {}
            self.full = self.full and not grown
        if answered:
            with self.lock:
                self.finals += 1
            return self._say(f"第 {n} 轮做完了。", delay_s=delay, usage=usage)
        with self.lock:
            self.tools += 1
        return tool_use("Bash", {"command": f"sleep {TOOL_SLEEP_S}; echo ok-{n}"}, delay_s=delay, usage=usage)


def _session_of(request: Request) -> str:
    return request.headers.get("x-claude-code-session-id", "")


def _not_once(haystack: str, needles: list[str]) -> str | None:
    """The first needle ``haystack`` does not hold exactly once, with its count; None when all are once."""
    for needle in needles:
        n = haystack.count(needle)
        if n != 1:
            return f"{needle!r} {n} times"
    return None


def _in_order(haystack: str, needles: list[str]) -> str | None:
    """The first needle missing from ``haystack`` or out of order; None when all are there in order."""
    at = 0
    for needle in needles:
        found = haystack.find(needle, at)
        if found < 0:
            return needle if needle not in haystack else f"{needle} (out of order)"
        at = found + len(needle)
    return None


def _digest(root: Path) -> str:
    """Every file under ``root``, its path and bytes (links as their target): equal when nothing changed."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(os.fsencode(path.relative_to(root)))
        if path.is_symlink():
            h.update(b"->" + os.fsencode(os.readlink(path)))
        elif path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def _claude_pids(workspace: Path) -> list[int]:
    """Live Claude Code processes whose working directory is ``workspace`` (Linux /proc)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if Path(os.readlink(proc / "cwd")) != workspace:
                continue
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"claude" in cmd and b"walk_child" not in cmd:
            pids.append(int(proc.name))
    return pids


class Walk:
    """One seeded walk. ``run(n)`` performs ``n`` operations and returns the failures."""

    def __init__(
        self, seed: int, root: Path, *, log: Callable[[str], None] | None = None, opening: Sequence[str] = ()
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.root = root
        self.ws = root / "ws"
        self.ws.mkdir(parents=True, exist_ok=True)
        self.home = root / "home"
        self.home.mkdir(exist_ok=True)
        self.interrupt_file = root / "interrupt.txt"
        self.model = Model()
        self.api = FakeAnthropic(default=self.model)
        self.failures: list[Failure] = []
        self.log = log or (lambda line: None)
        self.ops_done = 0
        self.sessions: dict[str, Session] = {}  # work session id -> what it must hold
        self.task = ""
        self.started = False
        self.n_new = 0
        self.counts: dict[str, int] = {}
        self.goals = self.rng.random() < 0.5  # half the walks judge every round, half run --no-goal
        self.to_clarifier: list[str] = []  # what was said to the current task's unfinished clarification
        self.heard_by_clarifier = 0  # ops that said something to an unfinished clarification
        self.stranger: Stranger | None = None  # the live process a reused pid names, until the next op ends
        self.stop_took: list[float] = []  # seconds from a stop asked to the run's process gone
        self.opening = list(opening)  # ops to begin with, before the seed chooses
        self.before_refused = ""  # the directory's digest before a refused start

    # -- the environment -----------------------------------------------------------------------------

    def env(self, op: Op | None = None) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_MODEL", "FLOWER_WINDOW")
        }
        env.update(self.api.env(self.home))
        env.update(PYTHONUNBUFFERED="1", WALK_INTERRUPT_FILE=str(self.interrupt_file), FLOWER_LANG="zh")
        if op is not None and op.moment == "question":
            env["WALK_QUESTIONS_WAIT"] = "1"  # the question waits for an answer nobody gives: -9 then
        return env

    def lineage(self) -> dict[str, Any]:
        path = self.ws / "runs" / "lineage.json"
        return dict(json.loads(path.read_text(encoding="utf-8"))) if path.exists() else {}

    def archived_since(self, when: float) -> bool:
        archive = self.ws / ".flower" / "notes" / "archive"
        try:
            return any(p.stat().st_mtime >= when - 1 for p in archive.iterdir())
        except OSError:
            return False

    def brief_text(self) -> str:
        path = self.ws / ".flower" / "notes" / "需求.md"
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return ""

    def work_sid(self) -> str | None:
        return (self.lineage().get("steps") or {}).get(WORK_STEP)

    def saved_task(self) -> str:
        try:
            return (self.ws / ".flower" / "notes" / TASK_NAME).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return ""

    def unfinished(self) -> bool:
        """A task was given here and its clarification has not produced a complete brief."""
        brief = Brief.load(self.ws / ".flower" / "notes" / "需求.md")
        return self.started and not (brief is not None and brief.complete())

    # -- choosing ------------------------------------------------------------------------------------

    def choose(self) -> Op:
        if self.opening:  # the walk's first ops, as given ("start+event@moment"); then the seed's
            start, _, rest = self.opening.pop(0).partition("+")
            event, _, moment = rest.partition("@")
            return self.phrased(Op(start, event, moment))
        start = self.rng.choice(STARTS) if self.started else "task"
        if self.unfinished() and start != "task" and self.rng.random() < 0.6:
            start = "wake"  # words for the clarification that was cut short
        if start == "cut":
            how = self.rng.choice(CUTS)
            return Op(start, "closed", "question") if how == "closed" else Op(start, "kill", how)
        event = self.rng.choice(EVENTS)
        if event == "refused" and (os.environ.get("FLOWER_SESSIONS") or not self.started):
            event = "none"  # a PostgreSQL walk's store is the server's own; a first op makes the dir
        op = Op(start, event, self.rng.choice(MOMENTS) if event in (*KILLED, "term") else "")
        if event == "term" and op.moment == "early":
            op.moment = "tool"
        return self.phrased(op)

    def phrased(self, op: Op) -> Op:
        """``op`` with the words it says: at wake, and with an interrupt or while the API is away.
        Bracketed, so that no phrase is part of another ("-1" of "-10"): each is counted on its own."""
        if op.start == "wake":
            op.said = f"「唤醒补充-{self.seed}-{self.ops_done}」"
        if op.event in ("interrupt", "remarkout"):
            op.words = f"「打断的话-{self.seed}-{self.ops_done}」"
        return op

    # -- one op -------------------------------------------------------------------------------------

    def argv(self, op: Op) -> list[str]:
        timeout = "600" if op.moment == "question" else "0"
        args = ["--window", str(WINDOW_TOKENS), "--timeout", timeout, "--rounds", "1"]
        if not self.goals:
            args.append("--no-goal")
        if op.start == "task":
            self.task = f"清洗 CSV({self.model.marker})"
            return [*args, self.task]
        if op.start in ("new", "cut"):
            self.n_new += 1
            self.model.marker = f"任务标记-T{self.n_new}"
            self.task = f"清洗 CSV({self.model.marker})"
            return [*args, "--new", self.task]
        if op.start == "wake":
            return [*args, op.said]
        return args

    def step(self) -> None:
        op = self.choose()
        index = self.ops_done
        self.ops_done += 1
        self.counts[str(op)] = self.counts.get(str(op), 0) + 1
        before_sid = self.work_sid()
        before_marker, before_task, before_new = self.model.marker, self.task, self.n_new
        expected = {sid: Session(s.marker, list(s.said)) for sid, s in self.sessions.items()}
        unfinished = self.unfinished()
        to_clarifier = list(self.to_clarifier)
        n_req = len(self.api.requests)
        started_at = time.time()
        self.model.full = op.start == "handoff"
        self.model.asks = op.moment == "question"
        self.model.delay_s = 0.8 if op.moment in ("request", "early", "clarify") or op.event == "outage" else 0.0
        argv = self.argv(op)
        self.log(f"[{self.seed}:{index}] {op}")
        stranger, self.stranger = self.stranger, None  # a reused pid's process lives through this op
        if op.event == "refused":
            record_store(self.ws / "runs", StoreLocation.parse(UNREACHABLE_STORE))
            self.before_refused = _digest(self.ws)
        rc = self.perform(op, argv)
        if op.event == "refused":
            self.check_refused(index, op, n_req, rc)
            (self.ws / "runs" / "store.json").unlink()
        if op.event == "reused":
            self.reuse_pid()
        self.model.full, self.model.delay_s, self.model.asks = False, 0.0, False
        # Killed before it wrote a byte (still importing): nothing was started, the task was never said.
        self.started = self.started or (self.ws / ".flower" / "notes" / TASK_NAME).exists()
        after_sid = self.work_sid()
        if op.start in ("new", "cut") and not self.archived_since(started_at):
            # Killed before --new archived anything: the old request is still the one at work.
            self.model.marker, self.task, self.n_new = before_marker, before_task, before_new
            op.start = "continue"
        elif op.start in ("new", "cut"):
            before_sid = None
        if op.start in ("task", "new", "cut"):
            self.to_clarifier, to_clarifier, unfinished = [], [], False
        elif op.start == "wake" and unfinished and op.said in self.saved_task():
            # Said to the unfinished clarification (written to 诉求.md): every clarifier request from
            # now on carries it, once. Killed before it was written down, it was never said.
            to_clarifier.append(op.said)
            self.to_clarifier.append(op.said)
            self.heard_by_clarifier += 1
        handed_off = any(role_of(r) == "handoff" for r in self.api.requests[n_req:])
        self.account(op, before_sid, after_sid, handed_off=handed_off)
        self.check(index, op, expected, n_req, rc, to_clarifier, unfinished=unfinished)
        if stranger is not None:
            stranger.__exit__(None)

    def reuse_pid(self) -> None:
        """After a ``kill -9``: what its pid being taken by another process leaves (tests.helpers.plant_holder)."""
        run_dir = self.ws / "runs"
        if not (run_dir / "run.lock").exists():
            return  # killed before it took the lock: nothing names it
        self.stranger = Stranger()
        plant_holder(run_dir, self.stranger.pid)

    def perform(self, op: Op, argv: list[str]) -> int | None:
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), *argv],
            cwd=self.ws,
            env=self.env(op),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        events: list[dict[str, Any]] = []
        arrived = threading.Condition()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                with arrived:
                    events.append(event)
                    arrived.notify_all()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        err: list[str] = []
        err_reader = threading.Thread(target=lambda: err.append(proc.stderr.read() if proc.stderr else ""), daemon=True)
        err_reader.start()
        n_req, finals = len(self.api.requests), self.model.finals
        try:
            if op.event in (*KILLED, "term"):
                self.wait_moment(proc, op.moment, events, arrived, n_req, finals)
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGKILL if op.event in KILLED else signal.SIGTERM)
            elif op.event == "outage":
                self.wait_moment(proc, "request", events, arrived, n_req, finals)
                self.api.stop()
                time.sleep(self.rng.uniform(0.3, 3.5))
                self.api.start()
            elif op.event == "closed":  # a kernel's shutdown: its cell is interrupted, then the run ended
                self.wait_moment(proc, op.moment, events, arrived, n_req, finals)
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGUSR2)
            elif op.event in ("stop", "panel"):
                self.wait_moment(proc, "tool", events, arrived, n_req, finals)
                self.stop(op, proc)
            elif op.event in ("stopout", "remarkout"):
                self.wait_moment(proc, "tool", events, arrived, n_req, finals)
                self.api.stop()  # the request after the tool's result finds the API gone: the run waits
                give_up = time.monotonic() + 60
                while proc.poll() is None and time.monotonic() < give_up:
                    with arrived:
                        if any(e.get("kind") == "retry" for e in events):
                            break
                        arrived.wait(0.05)
                time.sleep(self.rng.uniform(0.0, 1.0))
                if op.event == "stopout":
                    self.stop(op, proc)
                else:
                    try:  # what flower "words" and the panel's POST do with words for a live run
                        live.post(self.ws / "runs", "remark", text=op.words, source="terminal", lang="zh")
                    except FlowerError:
                        op.words = ""  # the run had ended: nothing was posted
                    time.sleep(self.rng.uniform(0.3, 2.0))
                    self.api.start()
            elif op.event == "interrupt":
                self.wait_moment(proc, "tool", events, arrived, n_req, finals)
                self.interrupt_file.write_text(op.words, encoding="utf-8")
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGUSR1)
                else:
                    op.words = ""  # the run ended before the words could be said
            rc = proc.wait(timeout=PROC_GIVE_UP_S)
            if op.stop_sent is not None:
                self.stop_took.append(time.monotonic() - op.stop_sent)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            self.fail(self.ops_done - 1, op, "hung", f"no exit within {PROC_GIVE_UP_S} s")
            rc = None
        finally:
            if not self.api.running:
                self.api.start()
        reader.join(timeout=10)
        err_reader.join(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        self.last_events, self.last_err = events, "".join(err)
        return rc

    def flower(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The ``flower`` command in the walk's directory, as a person types it beside the run."""
        return subprocess.run(
            [sys.executable, "-m", "flower_magic.cli", *args],
            cwd=self.ws,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def stop(self, op: Op, proc: subprocess.Popen[str]) -> None:
        """Ask the live run to stop: ``flower --stop``, or what the panel's ``POST live`` does."""
        if proc.poll() is not None:
            return
        asked = time.monotonic()
        if op.event == "panel":
            try:
                live.post(self.ws / "runs", "stop", source="panel", lang="zh")
            except FlowerError:
                return  # no live run any more: it ended first
        elif self.flower("--stop").returncode != 0:
            return
        op.stop_sent = asked

    def wait_moment(
        self,
        proc: subprocess.Popen[str],
        moment: str,
        events: list[dict[str, Any]],
        arrived: threading.Condition,
        n_req: int,
        finals: int,
    ) -> None:
        """Block until ``moment`` of this run (or its end), then a random little more."""
        give_up = time.monotonic() + 60

        def until(happened: Callable[[], bool]) -> None:
            while not happened() and proc.poll() is None and time.monotonic() < give_up:
                with arrived:
                    arrived.wait(0.02)

        if moment == "early":
            time.sleep(self.rng.uniform(0.0, 0.6))
            return
        if moment == "request":
            until(lambda: len(self.api.requests) > n_req)
            time.sleep(self.rng.uniform(0.0, 0.6))
        elif moment == "tool":
            until(lambda: any(e.get("kind") == "tool_call" for e in events))
            time.sleep(self.rng.uniform(0.0, TOOL_SLEEP_S))
        elif moment == "flush":
            until(lambda: self.model.finals > finals)
            time.sleep(self.rng.uniform(0.0, 0.25))
        elif moment == "clarify":
            until(lambda: any(role_of(r) == "clarifier" for r in self.api.requests[n_req:]))
            time.sleep(self.rng.uniform(0.0, 0.6))
        elif moment == "question":
            until(lambda: any(e.get("kind") == "ask" and e.get("state") == "asked" for e in events))
            time.sleep(self.rng.uniform(0.0, 0.5))

    # -- what the directory must hold now ------------------------------------------------------------

    def account(self, op: Op, before: str | None, after: str | None, *, handed_off: bool) -> None:
        """Update what each work session must hold, from what was said and which session now works."""
        if op.start in ("task", "new"):
            self.sessions = {k: v for k, v in self.sessions.items() if k == before}
        if after and after != before and after not in self.sessions:
            # A new work session: the first after a task or --new begins from the brief; any other is
            # a hand-off's successor, which begins from the hand-off document.
            fresh = (op.start in ("task", "new") or before is None) and not handed_off
            self.sessions[after] = Session(self.model.marker if fresh else None)
        if op.start == "wake" and op.said not in self.brief_text():
            op.said = ""  # killed before the phrase was written down: it was never said
        if after in self.sessions:
            self.sessions[after].said.extend(w for w in (op.said, op.words) if w)

    def fail(self, index: int, op: Op, what: str, detail: str) -> None:
        self.failures.append(Failure(self.seed, index, f"{op}: {what}", detail))
        self.log(f"  FAIL {what}: {detail}")

    def check(
        self,
        index: int,
        op: Op,
        expected: dict[str, Session],
        n_req: int,
        rc: int | None,
        to_clarifier: list[str],
        *,
        unfinished: bool,
    ) -> None:
        if op.event in ("none", "outage", "interrupt") and rc != 0:
            tail = (self.last_err or "").strip().splitlines()[-3:]
            done = next((e for e in reversed(self.last_events) if e.get("kind") == "done"), {})
            self.fail(index, op, "exit", f"rc={rc} failed={done.get('failed')} error={done.get('error')} {tail}")
        # Files parse, the store is whole.
        for name in ("lineage.json", "manifest.json"):
            path = self.ws / "runs" / name
            if path.exists():
                try:
                    json.loads(path.read_text(encoding="utf-8"))
                except ValueError as exc:
                    self.fail(index, op, name, str(exc))
        db = self.ws / "runs" / "sessions.db"
        if os.environ.get("FLOWER_SESSIONS"):  # PostgreSQL: the server keeps itself whole; walk the chain
            sid = self.work_sid()
            if db.exists():
                self.fail(index, op, "store", "sessions.db was made, though FLOWER_SESSIONS names PostgreSQL")
            broken = dangling(stored_session(self.ws / "runs", sid, self.ws) or []) if sid else []
            if broken:
                self.fail(index, op, "chain", f"{len(broken)} stored entries name a missing parent")
        elif db.exists():
            con = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
            try:
                ok = con.execute("PRAGMA integrity_check").fetchone()
                if ok != ("ok",):
                    self.fail(index, op, "integrity", str(ok))
                sid = self.work_sid()
                if sid:
                    rows = con.execute(
                        "SELECT payload FROM entries WHERE store_key = ? ORDER BY seq",
                        (f"{project_key(self.ws)}/{sid}",),
                    ).fetchall()
                    broken = dangling(json.loads(p) for (p,) in rows)
                    if broken:
                        self.fail(index, op, "chain", f"{len(broken)} stored entries name a missing parent")
            finally:
                con.close()
        # Never a live run but the op's own (tests.walk_child asks as flower does, and says "live").
        found = next((e for e in self.last_events if e.get("kind") == "live"), None)
        if found is not None:
            self.fail(index, op, "live", f"the op found the directory live (pid {found.get('pid')}) and ran nothing")
        if self.stranger is not None:
            state = live_state(self.ws / "runs")
            if state is None or state.pid != self.stranger.pid or state.live:
                self.fail(index, op, "reused", f"a reused pid's directory reads as {state}")
        # No agent outlives the op.
        give_up = time.monotonic() + 15
        while _claude_pids(self.ws) and time.monotonic() < give_up:
            time.sleep(0.1)
        alive = _claude_pids(self.ws)
        if alive:
            self.fail(index, op, "orphan", f"Claude Code still alive: {alive}")
            for pid in alive:
                os.kill(pid, signal.SIGKILL)
        if op.event not in (*KILLED, "refused") and any(e.get("kind") == "started" for e in self.last_events):
            self.check_ending(index, op, rc)
        self.check_requests(index, op, expected, n_req, rc)
        self.check_clarifier(index, op, n_req, rc, to_clarifier, unfinished=unfinished)

    def check_ending(self, index: int, op: Op, rc: int | None) -> None:
        """The op's run wrote its ending once, the one that happened, and live.json says it is over."""
        run_dir = self.ws / "runs"
        ends = [str(r.get("ending")) for r in live.read_log(run_dir) if r.get("type") == "end"]
        want = ENDED_BY.get(op.event) if op.event not in STOPS or op.stop_sent is not None else None
        if rc == 0:
            want = "done"
        if op.event == "term" and ends == ["done"]:
            want = "done"  # the run had written its ending when the signal came: the process then died of it
        if len(ends) != 1 or (want is not None and ends[0] != want):
            self.fail(index, op, "ending", f"end records {ends}, expected one: {want or 'any'} (rc={rc})")
        try:
            state = json.loads((run_dir / live.LIVE_NAME).read_text(encoding="utf-8")).get("state")
        except (OSError, ValueError) as exc:
            state = f"unreadable: {exc}"
        if state == "running":
            self.fail(index, op, "live.json", "says running after its process ended")
        rows = manifest.read_rows(run_dir)
        attempts = [(r.get("step"), r.get("session_id"), r.get("started_at")) for r in rows]
        if len(set(attempts)) != len(attempts):
            self.fail(index, op, "manifest", f"a step attempt written twice: {attempts}")

    def check_refused(self, index: int, op: Op, n_req: int, rc: int | None) -> None:
        """A start whose store cannot be reached: one line, exit 1, nothing written, nothing sent."""
        said = [line for line in (self.last_err or "").splitlines() if line.strip()]
        if rc != 1 or len(said) != 1:
            self.fail(index, op, "refused", f"rc={rc}, said {said[-3:]}")
        if _digest(self.ws) != self.before_refused:
            self.fail(index, op, "refused", "the directory changed")
        if len(self.api.requests) != n_req:
            self.fail(index, op, "refused", f"{len(self.api.requests) - n_req} requests sent")

    def check_clarifier(
        self, index: int, op: Op, n_req: int, rc: int | None, said: list[str], *, unfinished: bool
    ) -> None:
        """Every clarifier request of the op carries what was said to the unfinished clarification, once;
        an op that ran to its end with the clarification unfinished asked the clarifier at least once."""
        asked = [r for r in self.api.requests[n_req:] if role_of(r) == "clarifier"]
        for req in asked:
            wrong = _not_once(req.all_text, said)
            if wrong:
                self.fail(index, op, "heard", f"clarifier request {req.index} carries {wrong}")
        if unfinished and said and not asked and rc == 0:
            self.fail(index, op, "heard", f"the clarification went on without the clarifier hearing {said!r}")

    def check_requests(self, index: int, op: Op, expected: dict[str, Session], n_req: int, rc: int | None) -> None:
        requests = self.api.requests[n_req:]
        steps = self.lineage().get("steps") or {}
        if os.environ.get("WALK_DEBUG"):
            for req in requests:
                head = f"    req {req.index} {role_of(req)} {_session_of(req)[:8]} {req.reply_kind}"
                self.log(f"{head} {req.last_user_text[:60]!r}")
            self.log(f"    lineage {steps}")
        last_worker: dict[str, Request] = {}
        for req in requests:
            role = role_of(req)
            body = req.all_text
            pairing = tool_pairing_error(req.messages)
            if pairing:
                self.fail(index, op, "pairing", f"request {req.index}: {pairing}")
            for bad in DEBRIS:
                if bad in body:
                    self.fail(index, op, "debris", f"request {req.index} ({role}) holds {bad!r}")
            for msg in req.messages:
                if msg.get("role") == "assistant":
                    for block in msg.get("content") or []:
                        said = block.get("text") if isinstance(block, dict) and block.get("type") == "text" else None
                        if said and said.strip() and said not in self.model.written:
                            self.fail(index, op, "invented", f"request {req.index}: assistant said {said[:80]!r}")
            sid = _session_of(req)
            if role in ("clarifier", "goal", "judge"):
                # The clarifier holds the task, the goal setter the brief, the judge the checklist.
                need = f"清单-{self.model.marker}" if role == "judge" else self.model.marker
                if self.task and need not in body:
                    self.fail(index, op, "instructions", f"{role} request {req.index} lacks {need!r}")
                continue
            if role != "worker":
                continue
            last_worker[sid] = req
            must = expected.get(sid)
            if must is None:
                continue  # a session that began in this op: checked below by its last request
            missing = _in_order(body, ([must.marker] if must.marker else []) + must.said)
            if missing:
                self.fail(index, op, "lost", f"worker request {req.index} (session {sid[:8]}) lacks {missing!r}")
            wrong = _not_once(body, must.said)
            if wrong:
                self.fail(index, op, "heard", f"worker request {req.index} (session {sid[:8]}) carries {wrong}")
        # The op's last worker request carries what was said in it too, and is for lineage's session.
        current = steps.get(WORK_STEP)
        if last_worker and current:
            tail = max(last_worker.values(), key=lambda r: r.index)
            # A stop may come after a hand-off was written and named the successor, before it spoke.
            handed = any(role_of(r) == "handoff" for r in requests)
            unspoken = handed and op.stop_sent is not None and current not in {_session_of(r) for r in requests}
            if _session_of(tail) != current and rc is not None and rc >= 0 and not unspoken:
                self.fail(
                    index,
                    op,
                    "lineage",
                    f"last worker request is for {_session_of(tail)[:8]}, lineage says {current[:8]}",
                )
            must = self.sessions.get(_session_of(tail))
            if must is not None and op.event not in (*KILLED, "term") and rc == 0:
                missing = _in_order(tail.all_text, ([must.marker] if must.marker else []) + must.said)
                if missing:
                    self.fail(index, op, "lost", f"last worker request {tail.index} lacks {missing!r}")
                wrong = _not_once(tail.all_text, must.said)
                if wrong:
                    self.fail(index, op, "heard", f"last worker request {tail.index} carries {wrong}")

    # -- the walk ------------------------------------------------------------------------------------

    def run(self, n_ops: int) -> list[Failure]:
        self.api.start()
        try:
            for _ in range(n_ops):
                self.step()
        finally:
            self.api.stop()
            if self.stranger is not None:
                self.stranger.__exit__(None)
                self.stranger = None
        return self.failures
