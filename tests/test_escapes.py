"""Text from outside reaches no terminal raw and no page unescaped (issue 22, item 7 and acceptance e):
a remark's OSC 52 / OSC 0 / CSI 2J reached the terminal and ``flower --attach`` followers as it was,
and the ``--status`` HTML story kept raw ESC.

One hostile text goes into every field of every kind of event, record and fact a view shows, and
through every view: the terminal (``TerminalView``, as a run prints and as ``--attach`` follows a
log), the notebook (``RunView`` as HTML and as widgets, a cell following a log), ``--status`` (text and
HTML, with the last run's story), the wake banner and ``wake_state``. The real command on a live run
is in ``test_a_remark_with_escapes_reaches_no_terminal_raw`` (slow).
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from flower_magic.core import live
from flower_magic.core.events import Event
from flower_magic.core.live import LiveRun, Watch, show
from flower_magic.core.rundir import RunDir, Snapshot
from flower_magic.display import RunView
from flower_magic.display.attach import follow
from flower_magic.display.bundles import banner_bundle, status_of
from flower_magic.front.options import GoOptions, snapshot
from flower_magic.front.outcome import Ending, Outcome
from flower_magic.front.phrases import problem_line, wake_banner
from flower_magic.terminal import TerminalView
from flower_magic.testing import FakeAnthropic, Reply, Request, text
from flower_magic.testing.roles import role_of
from tests.helpers import CsvModel, wait_until

# What a hostile model, file or person writes: markup, an attribute break-out, and the terminal's
# commands: OSC 52 (clipboard), OSC 0 (title), CSI 2J (clear), a colour, 8-bit CSI, a carriage
# return, a backspace, DEL, a bidi override.
PAYLOAD = "cHduZWQ="
TITLE = "PWNED-TITLE"
HOSTILE = (
    '<script>alert(1)</script> x"onload=alert(2) '
    f"\x1b]52;c;{PAYLOAD}\x07\x1b]0;{TITLE}\x07\x1b[2J\x1b[1;31m\x9b2J\x1b[0m"
    "A\rB\x08C\x7fD\u202eE 中文 😀 end"
)
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
SGR = re.compile(r"\x1b\[[0-9;]*m")  # the only sequence a view writes itself: its own colours
# A tool call's input is shown as JSON, where an ESC is the six visible characters \u001b: the
# sequence is then text a person reads, payload included, and acts on nothing.
AS_JSON = re.compile(r"\\u001b\](?:52;c;" + PAYLOAD + "|0;" + TITLE + ")")


class Tty(io.StringIO):
    """A terminal that takes colours (``use_color`` asks ``isatty``)."""

    def isatty(self) -> bool:
        return True


def assert_terminal_safe(out: str) -> None:
    """Nothing but the view's own colours acts on a terminal; the hostile text is still shown, as text."""
    assert not CONTROL.search(SGR.sub("", out)), repr(CONTROL.search(SGR.sub("", out)))
    rest = AS_JSON.sub("", out)
    assert PAYLOAD not in rest and TITLE not in rest  # a sequence goes whole, payload and all
    assert "<script>alert(1)</script>" in out and "中文 😀 end" in out


def assert_page_safe(page: str) -> None:
    """Markup from outside is text on the page (escaped), and the page holds no raw control character."""
    assert "<script" not in page and '"onload=' not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "x&quot;onload=alert(2)" in page
    assert not CONTROL.search(page), repr(CONTROL.search(page))
    rest = AS_JSON.sub("", page)
    assert PAYLOAD not in rest and TITLE not in rest and "中文 😀 end" in page


class Result:
    """A step's result as views read it."""

    def __init__(self, *, ok: bool, error: str | None = None) -> None:
        self.ok, self.num_turns, self.cost_usd, self.duration_s, self.error = ok, 2, 0.5, 3.0, error


VERDICT_CHECKS = [{"check": HOSTILE, "passed": False}]


def events(h: str = HOSTILE) -> list[Event]:
    """Every kind of event a view shows, with ``h`` in each field it shows."""
    return [
        Event("step", h, payload={"index": 1, "total": 3, "resumed": True, "woke": 2}),
        Event("step", h, payload={"judge": True}),
        Event("text", h, payload={"context": 1200}),
        Event("text", h, payload={"subagent": True}),
        Event("thinking", h),
        Event("tool_call", h, tool=h, payload={"id": "t1", "input": {"command": h}}),
        Event("tool_result", h, payload={"tool_use_id": "t1", "is_error": True}),
        Event("tool_result", h, payload={"tool_use_id": "t1"}),
        Event("retry", h),
        Event("notice", h),
        Event("error", h),
        Event("handoff", h),
        Event(
            "handoff",
            h,
            payload={
                "phase": "done",
                "context": 150_000,
                "window": 200_000,
                "path": h,
                "sections": {"doing": h, "decided": h, "deadends": h, "next": h},
            },
        ),
        Event("ask", h, payload={"id": "q1", "options": [h, "csv"], "state": "asked"}),
        Event("ask", h, payload={"id": "q1", "options": [h, "csv"], "state": "answered", "answer": h}),
        Event("ask", h, payload={"id": "q2", "options": [h], "state": h}),
        Event("ask", h, payload={"kind": "mail", "state": "delivered", "id": h}),
        Event("task", h, payload={"unverifiable": [h]}),
        Event("task", "", payload={"kind": "verdict", "verdict": h, "reason": h, "round": 1, "checks": VERDICT_CHECKS}),
        Event("system", h),
    ]


# The records a log adds to events (a remark heard, a front end's line, a goal list, a step's result).
RECORDS: list[dict[str, Any]] = [
    {"type": "heard", "op": "remark", "text": HOSTILE, "from": "terminal", "took": True},
    {"type": "heard", "op": "answer", "text": HOSTILE, "from": "panel", "took": False},
    {"type": "line", "line": [["note", HOSTILE], [HOSTILE, HOSTILE]]},
    {"type": "goals", "checks": [HOSTILE]},
    {"type": "step", "ok": False, "error": HOSTILE, "num_turns": 1, "cost_usd": 0.1, "duration_s": 1.0},
]
ENDED = Outcome(Ending.FAILED, step=HOSTILE, why=HOSTILE, cost_usd=0.5, manifest=HOSTILE)


def hostile_workspace(tmp_path: Path) -> Path:
    """A workspace whose folder name itself holds the escapes (a cloned repository may), waking: a
    confirmed brief, goals and a manifest row whose step and error are hostile."""
    ws = tmp_path / f"ws-\x1b]0;{TITLE}\x07-\x1b[2J"
    notes = ws / ".flower" / "notes"
    notes.mkdir(parents=True)
    (notes / "需求.md").write_text(
        f"## 目标\n{HOSTILE}\n\n## 验收标准\n- {HOSTILE}\n\n## 边界\n{HOSTILE}\n\n## 未知与假设\n无\n", encoding="utf-8"
    )
    (notes / "目标.md").write_text(f"## 目标\n{HOSTILE}\n\n## 判定清单\n- {HOSTILE}\n- ok\n", encoding="utf-8")
    runs = ws / "runs"
    runs.mkdir()
    row = {"step": HOSTILE, "session_id": "s", "ok": False, "error": HOSTILE, "cost_usd": 0.5, "run": "r1"}
    (runs / "manifest.json").write_text(json.dumps([row], ensure_ascii=False), encoding="utf-8")
    return ws


def record_log(run_dir: Path) -> None:
    """A run's event log, as the real ``LiveRun`` writes it, holding the hostile text everywhere."""
    live = LiveRun(run_dir, front_end="background", start={"lang": "en", "verbose": True, "rounds": 2})
    for ev in events():
        live.sink(ev)
    live.log.record("heard", op="remark", text=HOSTILE, took=True, **{"from": "terminal"})
    live.line([("note", HOSTILE)])
    live.on_step(None, Result(ok=False, error=HOSTILE))
    live.end(ENDED.to_record())


# -- the terminal ---------------------------------------------------------------------------------------


def test_the_terminal_view_prints_no_escape_from_any_event_or_record(tmp_path: Path) -> None:
    """Guards the heard remark's path (``view.line(heard_line(...))``), which printed the remark raw,
    and every other way text reaches a terminal: events, replayed records, the wake banner."""
    out = Tty()
    view = TerminalView("en", verbose=True, out=out)
    assert view.color  # the view's own colours are on, so the check tells them from the hostile text
    ws = hostile_workspace(tmp_path)
    facts = snapshot(RunDir.at(ws))
    view.line(wake_banner(facts, "en"))
    view.line(problem_line(Snapshot(RunDir.at(ws), problem=HOSTILE), "en") or [])
    for ev in events():
        view(ev)
    for record in RECORDS:
        show(view, record, "en")
    view.on_step(None, Result(ok=False, error=HOSTILE))
    assert_terminal_safe(out.getvalue())
    assert out.getvalue().count("\n") > 30  # it did print: each event its lines


def test_attach_replays_a_hostile_log_into_the_terminal_without_escapes(tmp_path: Path) -> None:
    """``flower --attach``: a log on disk (what any process wrote) is followed into a terminal."""
    run_dir = tmp_path / "runs"
    run_dir.mkdir()
    record_log(run_dir)
    out = Tty()
    end = Watch(run_dir, TerminalView("en", verbose=True, out=out), "en").run()
    assert end is not None
    assert_terminal_safe(out.getvalue())


def test_the_command_prints_only_through_the_terminal_view_or_echo() -> None:
    """A guard: a bare ``print`` in cli.py would put an error that quotes a step's error or a model's
    words on the terminal without ``printable``."""
    import ast

    import flower_magic.cli

    tree = ast.parse(Path(flower_magic.cli.__file__).read_text(encoding="utf-8"))
    calls = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "print"]
    assert calls == [], f"print( at lines {calls}: use terminal.echo"


def test_wake_state_prints_no_escape_from_the_folder_name(tmp_path: Path) -> None:
    """``print(wake_state(...))`` names the folder, and a folder's name may hold escapes."""
    ws = hostile_workspace(tmp_path)
    text = str(snapshot(RunDir.at(ws)))
    assert not CONTROL.search(text) and TITLE not in text and "ws-" in text


# -- the notebook ---------------------------------------------------------------------------------------


def _fed(mode: str, **kw: Any) -> RunView:
    view = RunView("en", verbose=True, rounds=2, goal_checks=[HOSTILE], mode=mode, interval_s=3600.0, **kw)
    for ev in events():
        view.sink(ev)
    for record in RECORDS:
        show(view, record, "en")
    view.on_step(None, Result(ok=False, error=HOSTILE))
    return view


def test_the_notebook_view_escapes_every_text_as_html_and_plain_text(tmp_path: Path) -> None:
    ws = hostile_workspace(tmp_path)
    view = _fed("html", banner_facts=snapshot(RunDir.at(ws)))
    view.close(ENDED)
    bundle = view.bundle()
    assert_page_safe(bundle["text/html"])
    assert_terminal_safe(bundle["text/plain"])  # jupyter console and nbconvert print text/plain


def _widget_texts(widget: Any) -> tuple[list[str], list[str]]:
    """(the HTML values, every other text) of a widget tree, as the frontend is sent them."""
    import ipywidgets as w

    pages, texts = [], []
    for name, value in widget.get_state().items():
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if isinstance(v, str) and not v.startswith("IPY_MODEL_"):
                (pages if isinstance(widget, w.HTML) and name == "value" else texts).append(v)
    for child in getattr(widget, "children", ()):
        more_pages, more_texts = _widget_texts(child)
        pages += more_pages
        texts += more_texts
    return pages, texts


def test_the_widget_view_sends_the_frontend_no_unescaped_markup_and_no_escape(tmp_path: Path) -> None:
    """Sections' titles, log chunks, the header, the goal list and the question card (its question
    in HTML, its options as button labels and tooltips)."""
    pytest.importorskip("ipywidgets")
    ws = hostile_workspace(tmp_path)
    view = RunView("en", verbose=True, goal_checks=[HOSTILE], mode="widget", interval_s=3600.0)
    view.state.head.append(wake_banner(snapshot(RunDir.at(ws)), "en"))
    view.attach(lambda ask_id, text: None, in_place=True)
    for ev in [e for e in events() if e.payload.get("state") != "answered"]:
        view.sink(ev)
    for record in RECORDS:
        show(view, record, "en")
    view._render()
    assert view._widgets is not None and view._widgets._asks  # the question card is up
    (_, card), *_ = view._widgets._asks.values()
    assert "<script>alert(1)</script>" in card.options[0].tooltip  # the option is there, as text
    pages, texts = _widget_texts(view._widgets.root)
    page = "".join(pages)
    assert_page_safe(page)
    assert not any(CONTROL.search(t) for t in texts), [t for t in texts if CONTROL.search(t)]
    assert not any(PAYLOAD in t or TITLE in t for t in texts)
    view.close()


def test_a_cell_following_a_hostile_log_shows_it_escaped(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs"
    run_dir.mkdir()
    record_log(run_dir)
    attached = follow(run_dir, lang="en", mode="html", poll_s=0.01, lead=[[("dim", HOSTILE)]], goal_checks=[HOSTILE])
    attached.join(30)
    assert attached.over
    bundle = attached.view.bundle()
    assert_page_safe(bundle["text/html"])
    assert_terminal_safe(bundle["text/plain"])


# -- --status and the banner ------------------------------------------------------------------------------


def test_status_and_its_story_hold_no_raw_escape_in_text_or_html(tmp_path: Path) -> None:
    """Guards ``--status``'s HTML story, which kept the remark's ESC characters raw."""
    ws = hostile_workspace(tmp_path)
    record_log(ws / "runs")
    bundle = status_of(GoOptions(task="", workspace=ws, lang="en").check())
    assert "<script>alert(1)</script>" in bundle["text/plain"]  # the story is there
    assert_page_safe(bundle["text/html"])
    assert_terminal_safe(bundle["text/plain"])


def test_the_wake_banner_holds_no_raw_escape(tmp_path: Path) -> None:
    ws = hostile_workspace(tmp_path)
    facts = Snapshot(snapshot(RunDir.at(ws)).rundir, waking=True, checks=2, problem=HOSTILE)
    bundle = banner_bundle(facts, "en", hint=True)
    assert "<script>alert(1)</script>" in bundle["text/plain"]
    assert_page_safe(bundle["text/html"])
    assert_terminal_safe(bundle["text/plain"])


def test_flower_status_prints_no_raw_escape(tmp_path: Path) -> None:
    """The real command: ``flower --status`` on a directory whose log, notes and manifest are hostile."""
    ws = hostile_workspace(tmp_path)
    record_log(ws / "runs")
    env = {**os.environ, "FLOWER_LANG": "en", "PYTHONIOENCODING": "utf-8"}
    out = subprocess.run(
        [sys.executable, "-m", "flower_magic.cli", "--status"], cwd=ws, env=env, capture_output=True, timeout=120
    )
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    text = out.stdout.decode("utf-8")
    assert_terminal_safe(text)
    assert out.stderr == b""


def test_the_magic_prints_no_escape_from_a_folder_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a terminal IPython a magic's text/plain is printed as it is: the guessed folder's line,
    ``--panel`` outside JupyterLab and ``--status`` all name the folder."""
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("FLOWER_LANG", "en")
    ws = hostile_workspace(tmp_path)
    record_log(ws / "runs")
    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("flower_magic")
    shell.user_ns.pop("__vsc_ipynb_file__", None)
    monkeypatch.setattr(shell, "starting_dir", str(ws), raising=False)
    capsys.readouterr()
    for cell in ("%flower --panel", "%flower --status"):
        assert shell.run_cell(cell).success
    out = capsys.readouterr().out
    assert "ws-" in out and "<script>alert(1)</script>" in out  # the folder named, the story told
    assert not CONTROL.search(out) and TITLE not in out


# -- the real command on a live run ------------------------------------------------------------------------

TASK = "清洗 CSV 任务-E5"
REMARK_MARK = "REMARK-R7"
REMARK = f"{REMARK_MARK} {HOSTILE}"
TYPED_MARK = "TYPED-T3"


class Model(CsvModel):
    """The worker holds its reply until a remark and then a typed line reach it; then it is done, and
    says the hostile text itself (the model's words reach the same terminals)."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def work(self, request: Request) -> Reply:
        said = json.dumps(request.messages, ensure_ascii=False)
        if TYPED_MARK in said:
            return text(f"done. {HOSTILE}")
        return text("noted" if REMARK_MARK in said else "working", hold=self.gate)


class Terminal:
    """A pseudo-terminal a process writes to (so the view's colours are on), read on a thread. Raw
    mode: the bytes read are the bytes written (no newline translation)."""

    def __init__(self) -> None:
        import pty
        import tty

        self.master, self.slave = pty.openpty()
        tty.setraw(self.slave)
        self._out = bytearray()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: every writer closed the other end
                return
            if not chunk:
                return
            self._out += chunk

    def started(self) -> None:
        """The child holds the other end now: the test's copy goes, so the end reads as EOF."""
        os.close(self.slave)

    def text(self) -> str:
        self._thread.join(timeout=30)
        os.close(self.master)
        return self._out.decode("utf-8")


def _worker_said(api: FakeAnthropic, mark: str) -> str | None:
    for request in api.requests:
        if role_of(request) == "worker":
            said = json.dumps(request.messages, ensure_ascii=False)
            if mark in said:
                return said
    return None


def _on(term: Terminal | None, ws: Path, env: dict[str, str], *args: str, stdin: Any = subprocess.DEVNULL) -> Any:
    proc = subprocess.Popen(
        ["flower", *args],
        cwd=ws,
        env=env,
        stdin=stdin,
        stdout=term.slave if term is not None else subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    if term is not None:
        term.started()
    return proc


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("where", ["background", "foreground"])
def test_a_remark_with_escapes_reaches_no_terminal_raw(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path, where: str
) -> None:
    """Guards the remark's OSC 52 / OSC 0 / CSI 2J that reached the run's terminal and every
    ``flower --attach`` follower raw. A live run (``flower --detach``, or ``flower`` in the
    foreground on a terminal) waits on its model; ``flower "<remark>"`` sends the hostile words and
    follows; ``flower --attach`` follows on a terminal and types a line that is not UTF-8 (it reaches
    the model with U+FFFD, and the reading thread goes on); the model answers with the hostile text.
    Every terminal shows all of it, as text, and nothing but its own colours acts on it."""
    model = Model()
    fake_api.default = model
    env = {k: v for k, v in child_env.items() if k != "NO_COLOR"}
    env.update(FLOWER_LANG="en", TERM="xterm-256color", LC_ALL="C.UTF-8", PYTHONUTF8="0")
    run_dir = workspace / "runs"
    procs: list[tuple[str, subprocess.Popen[bytes], Terminal | None]] = []
    try:
        if where == "background":
            rc = subprocess.run(["flower", "--detach", "--rounds", "1", TASK], cwd=workspace, env=env, timeout=120)
            assert rc.returncode == 0
        else:
            run_term = Terminal()
            runner = _on(run_term, workspace, env, "--rounds", "1", TASK, stdin=subprocess.PIPE)
            procs.append(("the run", runner, run_term))
        wait_until(lambda: _worker_said(fake_api, "") is not None, "the worker's first request", give_up_s=120)
        wait_until(lambda: (live.live_state(run_dir) or live.LiveState()).live, "the run to be live")

        attach_term = Terminal()
        follower = _on(attach_term, workspace, env, "--attach", stdin=subprocess.PIPE)
        procs.append(("flower --attach", follower, attach_term))
        sender_term = Terminal()
        procs.append(("flower <remark>", _on(sender_term, workspace, env, REMARK), sender_term))
        wait_until(lambda: _worker_said(fake_api, REMARK_MARK), "the remark to reach the model", give_up_s=120)

        assert follower.stdin is not None
        follower.stdin.write(f"{TYPED_MARK} ".encode() + b"\xff\xfe csv\n")
        follower.stdin.flush()
        wait_until(lambda: _worker_said(fake_api, TYPED_MARK), "the typed line to reach the model", give_up_s=120)
        assert f"{TYPED_MARK} \ufffd\ufffd csv" in str(_worker_said(fake_api, TYPED_MARK))

        outputs: dict[str, str] = {}
        for name, proc, term in procs:
            _, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, (name, err.decode(errors="replace"))
            assert b"Traceback" not in err, (name, err.decode(errors="replace"))
            outputs[name] = term.text() if term is not None else ""
    finally:
        model.gate.set()
        for _, proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
            proc.__exit__(None, None, None)  # closes its pipes and waits
    for name, out in outputs.items():
        assert "\x1b[" in out, name  # on a terminal: the view's colours are on
        assert_terminal_safe(out)
        assert REMARK_MARK in out and "done. " in out, name  # the remark heard and the model's answer, as text
    if where == "background":
        runner_log = (run_dir / live.RUNNER_LOG_NAME).read_text(encoding="utf-8")
        assert not CONTROL.search(runner_log) and "Traceback" not in runner_log
    assert live.read_log(run_dir)[-1]["type"] == "end"
