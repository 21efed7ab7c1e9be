"""Every "how to go on" hint works as typed (issue 24, item 2 and acceptance c).

A hint is a command a person copies: the ending's next step, the wake banner at ``%load_ext``, the
no-key line, the no-task line, ``--status``'s first line, the background run's and the stop's lines.
Each test here reads the hint from what flower showed, takes the commands out of it, runs them as
typed (the terminal's with the ``flower`` command, the magic's as a cell of a real kernel) and checks
each did what it promised: continued the same sessions, added the words to the brief, archived and
started over, followed or stopped the live run. The situations: a demo folder, a folder of a run on a
real model (the fake API with a dummy key; without the key set, the no-key line), a live run, a
stopped run and a clarification cut short.

The failures this guards: after a restart the banner said ``%flower`` in a demo folder, where a plain
``%flower`` is refused for want of a key; that refusal then suggested ``%flower --demo "任务"``, which
there is a remark to the demo run; ``%flower --demo`` with no task answered with the command line's
syntax; ``flower --stop`` told a terminal about ``%flower``; ``--status`` after a stop said the folder
had no brief yet although a plain start continues the clarification. The terminal speaks English and
the kernel Chinese: both phrase tables are read.

One kernel serves every magic case and one demo model every run (``demo_api``); the forms a front end
shares (a remark in two folders, say) are run once each.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import signal
import subprocess
from pathlib import Path

import pytest

from flower_magic.core import live
from flower_magic.core.lineage import Lineage
from flower_magic.core.words import say
from flower_magic.front.outcome import Ending, Outcome
from flower_magic.testing import FakeAnthropic
from flower_magic.testing.demo import demo_says
from flower_magic.testing.roles import role_of
from tests.e2e.kernel import CellResult, Kernel
from tests.helpers import no_key_env, wait_until
from tests.test_cli_signals import Terminal

pytestmark = pytest.mark.slow

# A command as a hint spells it: %flower or flower, then flags (one may take a number) and quoted words.
# Not a name that contains it (flower_demo.md, flower_magic) nor the program's own prefix ("flower: ...").
COMMAND = re.compile(r'(?<![\w%/.-])(%?flower)(?![\w.:-])((?:[ \t]+(?:--[a-z][a-z-]*(?:[ \t]+\d+)?|"[^"\n]*"))*)')


def commands(line: str) -> list[str]:
    """The commands in one line of a hint, as a person would copy them."""
    return [m.group(0).strip() for m in COMMAND.finditer(line)]


def magic_commands(text: str) -> list[str]:
    """The magic's commands in a notebook's hint; a terminal command there (``flower`` with flags or
    words: a bare "flower" is the program's name in a sentence) fails the test, as it would the person."""
    found = commands(text)
    assert [c for c in found if c.startswith("flower ")] == [], text
    return [c for c in found if c.startswith("%")]


def _heard(api: FakeAnthropic, since: int, words: str) -> bool:
    """A work request after the first ``since`` requests carries ``words`` as said last (a remark said at
    wake reaches the resumed work session)."""
    return any(role_of(r) == "worker" and words in r.last_user_text for r in api.requests[since:])


def words_of(command: str) -> str:
    """The quoted words of ``command`` ("" when it has none)."""
    quoted = re.findall(r'"([^"]*)"', command)
    return quoted[0] if quoted else ""


def _brief(ws: Path) -> str:
    path = ws / ".flower" / "notes" / "需求.md"
    return path.read_text(encoding="utf-8") if path.exists() else ""


def _lineage(ws: Path) -> Lineage:
    return Lineage.open(ws / "runs", ws)


def _ends(ws: Path) -> list[str]:
    return [str(r.get("ending")) for r in live.read_log(ws / "runs") if r["type"] == "end"]


def _archives(ws: Path) -> list[Path]:
    folder = ws / ".flower" / "notes" / "archive"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def _asking(ws: Path) -> bool:
    state = live.live_state(ws / "runs")
    return state is not None and state.live and bool(state.asks)


def _over(ws: Path) -> bool:
    state = live.live_state(ws / "runs")
    return state is not None and not state.live


def _last_line(text: str) -> str:
    return [ln for ln in text.splitlines() if ln.strip()][-1]


def _line_with(text: str, needle: str) -> str:
    return next(ln for ln in text.splitlines() if needle in ln)


# -- the terminal ---------------------------------------------------------------------------------------


def _flower(ws: Path, env: dict[str, str], command: str) -> subprocess.CompletedProcess[str]:
    """``command`` as typed in a terminal in ``ws`` (nobody at stdin: a question ends at once)."""
    argv = shlex.split(command)
    assert argv[0] == "flower", command
    return subprocess.run(argv, cwd=ws, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


def _parsed(command: str) -> argparse.Namespace:
    """``command`` as the ``flower`` command reads it (a form another test runs)."""
    from flower_magic.cli import build_parser

    argv = shlex.split(command)
    assert argv[0] == "flower", command
    return build_parser().parse_args(argv[1:])


def _said(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout + done.stderr


def test_terminal_hints_work_as_typed(demo_api: FakeAnthropic, tmp_path: Path) -> None:
    lang = "en"
    keyless = no_key_env(tmp_path, lang)
    keyed = {**keyless, **demo_api.env(tmp_path / "home")}  # a real-model folder: the fake API, a dummy key
    real, demo = tmp_path / "real", tmp_path / "demo"
    real.mkdir()
    demo.mkdir()

    # A fresh folder: --status's line says how to start; typed, it starts.
    status = _flower(real, keyed, "flower --status")
    (start,) = commands(status.stdout.splitlines()[0])
    started = _flower(real, keyed, start)
    assert started.returncode == 0, _said(started)
    assert words_of(start) in _brief(real)
    sessions = _lineage(real).steps

    # Its ending: a remark (typed just now: the same words), and --new (run in the kernel's test; here
    # it must be what the command takes).
    remark, new = commands(_last_line(started.stdout))
    assert "--demo" not in remark + new  # a run on a real model goes on without --demo
    assert remark == start
    assert _parsed(new).new and _parsed(new).task == [words_of(new)]

    # The same folder without a key: set the key, then a plain `flower` continues; the demo elsewhere.
    refused = _flower(real, keyless, "flower")
    assert refused.returncode == 1 and "--demo" not in commands(refused.stderr)[0], refused.stderr
    go_on, try_demo = commands(refused.stderr)
    n = len(demo_api.requests)
    continued = _flower(real, keyed, go_on)
    assert continued.returncode == 0, _said(continued)
    assert _lineage(real).steps == sessions and _lineage(real).woke == 2
    assert _heard(demo_api, n, "")  # the work session went on

    # "For the offline demo use an empty folder": typed there, the demo starts.
    demo_run = _flower(demo, keyless, try_demo)
    assert demo_run.returncode == 0, _said(demo_run)
    assert words_of(try_demo) in _brief(demo)
    sessions = _lineage(demo).steps

    # A demo folder without a key: every hint says --demo, and each works.
    refused = _flower(demo, keyless, "flower")
    go_on, remark = commands(refused.stderr)
    assert refused.returncode == 1 and go_on == "flower --demo", refused.stderr
    remark_too, new = commands(_last_line(demo_run.stdout))
    assert remark_too == remark  # the ending says the same remark
    assert _parsed(new).demo and _parsed(new).new and _parsed(new).task == [words_of(new)]
    # Continuing on a terminal asks first, and shows first what it would continue.
    term = Terminal(shlex.split(go_on)[1:], demo, keyless)
    try:
        term.read_until(say("ask_wake", lang))
        before = term.out.split(say("ask_wake", lang))[0]
        banner = say("wake_head", lang, where="").strip()
        assert banner in before and Outcome(Ending.DONE).headline(lang) in before, before
        term.type("")  # Enter = continue
        assert term.proc.wait(timeout=300) == 0, term.out[-2000:]
        term.read_until(Outcome(Ending.DONE).next_step(lang, "flower --demo")[:20])
    finally:
        term.close()
    assert term.out.count(banner) == 1  # shown before the question, not again
    assert _lineage(demo).steps == sessions
    assert _flower(demo, keyless, remark).returncode == 0
    assert words_of(remark) in _brief(demo) and _lineage(demo).steps == sessions

    # A live run: the lines it starts with say how to follow it and how to stop it.
    detached = _flower(demo, keyless, 'flower --demo --new --detach "count the rows"')
    assert detached.returncode == 0, _said(detached)
    follow, stop = commands(detached.stdout)
    wait_until(lambda: _asking(demo), "the live run's question", give_up_s=120)
    clarifier = _lineage(demo).steps["确认需求"]
    watching = subprocess.Popen(
        shlex.split(follow), cwd=demo, env=keyless, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
    )
    try:
        assert watching.stdout is not None
        first = watching.stdout.readline()
        assert first.startswith(say("live_attached", lang, pid=0, front="").split("0")[0]), first
        while demo_says(lang, "question") not in watching.stdout.readline():
            pass  # its story so far, up to the open question
        watching.send_signal(signal.SIGINT)  # Ctrl-C stops watching; the run goes on
        assert watching.wait(timeout=60) == 0
    finally:
        if watching.poll() is None:
            watching.kill()
        watching.communicate()
    assert _asking(demo)
    stopped = _flower(demo, keyless, stop)
    assert stopped.returncode == 0, _said(stopped)
    (after_stop,) = commands(stopped.stdout)
    assert "%" not in stopped.stdout and after_stop == "flower --demo"  # the terminal's command, for a demo
    wait_until(lambda: _over(demo), "the stopped run's end", give_up_s=120)
    assert _ends(demo) == ["stopped"]

    # The stopped clarification: --status says it is unfinished and how to go on, and that continues it.
    status = _flower(demo, keyless, "flower --status").stdout
    assert commands(status.splitlines()[0]) == [after_stop]
    assert "proceed" not in status and say("tool_stopped", lang) in status  # the stopped question, for a person
    assert after_stop in commands(_last_line(status))
    resumed = _flower(demo, keyless, after_stop)
    assert resumed.returncode == 0, _said(resumed)
    assert _lineage(demo).steps["确认需求"] == clarifier  # the same clarification, not a new one
    assert "count the rows" in _brief(demo)


# -- the kernel -----------------------------------------------------------------------------------------


def _run(kernel: Kernel, code: str) -> CellResult:
    """``code`` as a cell (nobody answers: a question ends at once)."""
    return kernel.run(code, timeout=300)


def _error(result: CellResult) -> str:
    assert result.status == "error", result.text
    return str(result.errors[-1].get("evalue", ""))


def _final(result: CellResult) -> str:
    """The run's view as it ended (a headless run updates one display in place)."""
    assert result.status == "ok", result.text
    return str(result.displays[-1].get("text/plain", ""))


def _shown(result: CellResult) -> str:
    """What a cell that shows one view (``--status``) shows, as text."""
    assert result.status == "ok", result.text
    return "\n".join(str(d.get("text/plain", "")) for d in result.displays)


def _kernel_env(kernel: Kernel, env: dict[str, str]) -> None:
    code = f"import os; os.environ.update({json.dumps(env)})"
    assert _run(kernel, code).status == "ok"


def _to(kernel: Kernel, folder: Path) -> Path:
    """Bind the kernel's runs to ``folder``, as a notebook in that folder would be."""
    folder.mkdir(exist_ok=True)
    assert _run(kernel, f"%config FlowerMagics.workspace = {str(folder)!r}").status == "ok"
    return folder


def test_magic_hints_work_as_typed(demo_api: FakeAnthropic, tmp_path: Path, workspace: Path) -> None:
    lang = "zh"
    kernel = Kernel(workspace, no_key_env(tmp_path, lang))
    try:
        _magic_hints(kernel, demo_api, tmp_path, workspace, lang)
    finally:
        kernel.close()


def _magic_hints(kernel: Kernel, demo_api: FakeAnthropic, tmp_path: Path, ws: Path, lang: str) -> None:
    _run(kernel, "%load_ext flower_magic")

    # A fresh folder, --demo and no task: the answer is in the magic's syntax, and works.
    (start,) = magic_commands(_error(_run(kernel, "%flower --demo")))
    assert start.startswith("%flower --demo ")
    first = _final(_run(kernel, start))
    assert words_of(start) in _brief(ws)
    sessions = _lineage(ws).steps
    remark, new = magic_commands(_last_line(first))
    assert remark.startswith("%flower --demo ") and new.startswith("%flower --demo --new ")

    # A restart: the banner says how to go on in this demo folder, and it does.
    kernel.restart()
    banner = _run(kernel, "%load_ext flower_magic").text
    go_on, remark_too, new_too = magic_commands(_last_line(banner))
    assert go_on == "%flower --demo", banner
    assert _final(_run(kernel, go_on))
    assert _lineage(ws).steps == sessions and _lineage(ws).woke == 2

    # No key: a plain %flower is refused with the demo's way to go on; the remark is a remark.
    refused = _error(_run(kernel, "%flower"))
    assert magic_commands(refused)[:2] == [go_on, remark_too], refused
    _final(_run(kernel, remark_too))
    assert words_of(remark_too) in _brief(ws) and _lineage(ws).steps == sessions
    _final(_run(kernel, new_too))
    assert len(_archives(ws)) == 1 and words_of(new_too) in _brief(ws)
    assert remark.replace(words_of(remark), "") == remark_too.replace(words_of(remark_too), "")  # same form
    assert new.replace(words_of(new), "") == new_too.replace(words_of(new_too), "")

    # A live run in another folder: how to follow it and how to stop it.
    live_ws = _to(kernel, tmp_path / "live")
    bg = _run(kernel, '%flower --demo --bg "数一数行数"')
    started = "\n".join(str(d.get("text/plain", "")) for d in bg.displays)
    follow, stop = magic_commands(_line_with(started, say("runner_started", lang, pid="", follow="")[:4]))
    wait_until(lambda: _asking(live_ws), "the live run's question", give_up_s=120)
    clarifier = _lineage(live_ws).steps["确认需求"]
    followed = _run(kernel, follow)
    assert say("live_attached", lang, pid=0, front="").split("0")[0] in followed.text, followed.text
    # --new on it is refused with how to stop it first: the same stop.
    (stop_first,) = magic_commands(_error(_run(kernel, '%flower --demo --new "别的事"')))
    assert stop_first == stop
    stopped = _run(kernel, stop)
    (after_stop,) = magic_commands(stopped.text)
    assert after_stop == "%flower --demo", stopped.text
    wait_until(lambda: _over(live_ws), "the stopped run's end", give_up_s=120)
    assert _ends(live_ws) == ["stopped"]
    # The two cells that follow it (--bg's own and the plain %flower) show its end before the next cell
    # runs: their threads' last updates would otherwise come under that cell.
    ended = Outcome(Ending.STOPPED, step="确认需求", demo=True).next_step(lang, "%flower")
    for view in (kernel.display_id(bg), kernel.display_id(followed)):
        kernel.pump(lambda v=view: any(ended in str(d.get("text/plain")) for d in kernel.displays_of(v)), "its end")
    status = _shown(_run(kernel, "%flower --status"))
    assert magic_commands(status.splitlines()[0]) == [after_stop], status
    assert after_stop in magic_commands(_last_line(status))
    _final(_run(kernel, after_stop))
    assert _lineage(live_ws).steps["确认需求"] == clarifier

    # A folder of a run on a real model (the fake API, a dummy key).
    _kernel_env(kernel, demo_api.env(tmp_path / "home"))
    real = _to(kernel, tmp_path / "real")
    (begin,) = magic_commands(_shown(_run(kernel, "%flower --status")).splitlines()[0])
    done = _final(_run(kernel, begin))
    assert words_of(begin) in _brief(real)
    sessions = _lineage(real).steps
    remark, _ = magic_commands(_last_line(done))
    assert remark == begin  # a remark: typed just now (the same words); not --demo
    banner = _run(kernel, "%reload_ext flower_magic").text  # what %load_ext shows after a restart
    (go_on, *_) = magic_commands(_last_line(banner))
    assert go_on == "%flower", banner
    n = len(demo_api.requests)
    _final(_run(kernel, go_on))
    assert _lineage(real).steps == sessions and _heard(demo_api, n, "")
    # Without the key: set it, then the same %flower; not a demo remark to this run.
    assert _run(kernel, "import os; os.environ.pop('ANTHROPIC_API_KEY')").status == "ok"
    refused = _error(_run(kernel, "%flower"))
    assert magic_commands(refused)[0] == "%flower", refused
