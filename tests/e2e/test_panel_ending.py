"""How the last run ended, in the panel (issue 23: build 3, acceptance b's "the panel's run answer"): a
real ``jupyter lab`` with auth on, Debian Chromium, and real runs on the offline demo model.

- ``flower --demo`` run to its end: the panel shows "done" where the live strip was, the terminal's
  headline, and how to continue as the notebook's magic line (``%flower --demo ...``), each command
  one click to copy.
- ``flower --demo --detach`` killed with ``kill -9`` while its question was open: "killed" at its step,
  found afterwards (no run wrote it).
- A run that failed with a reason (its log written by the real writer, ``core.live.LiveRun``): the
  reason under the headline.
In zh and in en; screenshots go to ``test-output/screenshots/`` (``panel-ending-<lang>.png``, ...).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flower_magic.core.events import Event
from flower_magic.core.live import LiveRun
from flower_magic.core.pid import is_alive
from flower_magic.core.words import say
from flower_magic.front.outcome import Ending, Outcome
from tests.e2e.contrast import low_contrast
from tests.e2e.lab import SCREENSHOTS, Lab, chromium_page, panel_build, running_lab
from tests.e2e.test_panel_browser import _other_language, _widen_right_sidebar
from tests.e2e.test_panel_live import RUN_S, TASK, Runs, _live, _wait

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PANEL = "#flower-magic-panel"
ENDING = f"{PANEL} .jp-FlowerEnding"
# A reason as the person reads it (in the run's language), and the commands the done line offers.
WHY = {"en": "the goals could not be written: the disk is full", "zh": "目标写不进去:磁盘满了"}
DONE_COMMANDS = {
    "en": ['%flower --demo "a sentence"', '%flower --demo --new "task"'],
    "zh": ['%flower --demo "一句话"', '%flower --demo --new "任务"'],
}


@pytest.fixture(params=["en", "zh"])
def lab_lang(request: pytest.FixtureRequest) -> str:
    """The language of the server and of the runs (FLOWER_LANG)."""
    lang: str = request.param
    return lang


@pytest.fixture
def runs(tmp_path: Path, lab_lang: str) -> Iterator[Runs]:
    home = tmp_path / "run-home"
    home.mkdir()
    started = Runs(tmp_path / "root", home, lab_lang)
    try:
        yield started
    finally:
        started.stop_all()


def _demo_to_the_end(runs: Runs, folder: str) -> Path:
    """``flower --demo`` in ``folder`` with nobody at stdin, to its end (it answers its own question)."""
    ws = runs.root / folder
    ws.mkdir(parents=True)
    (ws / "README.md").write_text("# demo\n", encoding="utf-8")
    env = dict(os.environ, FLOWER_LANG=runs.lang, HOME=str(runs.home), PYTHONUNBUFFERED="1")
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
        env.pop(key, None)
    done = subprocess.run(
        [sys.executable, "-m", "flower_magic.cli", "--demo", TASK],
        cwd=ws,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return ws / "runs"


def _failed_run(root: Path, folder: str, why: str) -> None:
    """A run that stopped in a step for a reason, as the launch records it (the real log writer)."""
    ws = root / folder
    (ws / "runs").mkdir(parents=True)
    (ws / "README.md").write_text("# demo\n", encoding="utf-8")
    live = LiveRun(ws / "runs", front_end="notebook", start={"front_end": "notebook"})
    live.sink(Event("step", "设定目标"))
    live.end(Outcome(Ending.FAILED, step="设定目标", why=why).to_record())


@pytest.fixture
def lab(tmp_path: Path, runs: Runs, lab_lang: str) -> Iterator[Lab]:
    assert panel_build() is not None, "no panel build beside flower_magic: run `jlpm build` first"
    runs.root.mkdir(parents=True, exist_ok=True)
    with running_lab(tmp_path, runs.root, {"FLOWER_LANG": lab_lang}) as server:
        yield server


def _open_panel(page: Any, folder: str) -> None:
    page.evaluate(f"window.jupyterapp.commands.execute('flower-magic:open', {{path: '{folder}'}})")
    page.wait_for_selector(PANEL, state="visible")


def _shot(page: Any, name: str) -> None:
    page.eval_on_selector(PANEL, "e => e.scrollTo(0, 0)")
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def _shown(page: Any, outcome: Outcome, lang: str) -> None:
    """The ending line says ``outcome`` in the cell's words: its pill, headline, reason, way to continue."""
    ending = page.locator(ENDING)
    page.wait_for_selector(f"{ENDING}[data-ending='{outcome.ending.value}']", state="visible", timeout=RUN_S * 1000)
    assert ending.get_attribute("data-style") == outcome.style
    assert ending.locator(".jp-FlowerEnding-pill").inner_text() == say(f"pill_{outcome.ending.value}", lang)
    assert ending.locator(".jp-FlowerEnding-headline").inner_text() == outcome.headline(lang)
    assert ending.locator(".jp-FlowerEnding-next").inner_text() == outcome.next_step(lang, "%flower")
    why = ending.locator(".jp-FlowerEnding-why")
    assert (why.inner_text() if why.is_visible() else "") == outcome.why
    assert page.locator(f"{PANEL} .jp-FlowerLive").is_hidden()


def test_an_ended_run_shows_its_headline_and_how_to_continue(lab: Lab, runs: Runs, lab_lang: str):
    (killed,) = runs.start("killed")
    _wait("the clarifier's question", lambda: _live(killed).get("asks"))
    pid = int(_live(killed)["pid"])
    os.killpg(pid, signal.SIGKILL)
    _wait("the killed runner to be gone", lambda: not is_alive(pid))
    _demo_to_the_end(runs, "done")
    _failed_run(runs.root, "failed", WHY[lab_lang])

    with chromium_page(width=1300, height=820) as page:
        page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=lab.url)
        page.goto(f"{lab.url}/lab/tree/done/README.md?token={lab.token}")
        page.wait_for_selector("#jp-main-dock-panel .jp-FileEditor", state="visible", timeout=60_000)
        _open_panel(page, "done")
        _widen_right_sidebar(page, 520)

        # done: the demo's way to continue is the demo form of the magic line, each command copyable
        done = Outcome(Ending.DONE, demo=True)
        _shown(page, done, lab_lang)
        commands = page.locator(f"{ENDING} .jp-FlowerEnding-cmd")
        assert commands.all_text_contents() == DONE_COMMANDS[lab_lang]
        assert commands.first.get_attribute("title") == say("lab_end_copy", lab_lang)
        bad = _other_language(page, lab_lang)
        assert bad == [], "\n".join(bad)
        commands.first.click()
        copied = commands.first.inner_text()
        assert page.evaluate("navigator.clipboard.readText()") == copied
        status = page.locator(f"{ENDING} .jp-FlowerEnding-status")
        status.wait_for(state="visible")
        assert status.inner_text() == say("lab_end_copied", lab_lang, cmd=copied)
        assert low_contrast(page, PANEL) == []
        _shot(page, f"panel-ending-{lab_lang}")

        # killed with -9 while its question was open: found afterwards, at the step it was in
        _open_panel(page, "killed")
        killed_outcome = Outcome(Ending.KILLED, step="确认需求", demo=True)
        _shown(page, killed_outcome, lab_lang)
        assert page.locator(ENDING).get_attribute("data-found") is not None
        assert page.locator(f"{ENDING} .jp-FlowerEnding-pill").get_attribute("title") == say("lab_end_found", lab_lang)
        assert low_contrast(page, PANEL) == []
        bad = _other_language(page, lab_lang)
        assert bad == [], "\n".join(bad)
        _shot(page, f"panel-ending-killed-{lab_lang}")

        # a reason: said under the headline
        _open_panel(page, "failed")
        _shown(page, Outcome(Ending.FAILED, step="设定目标", why=WHY[lab_lang]), lab_lang)
        assert low_contrast(page, PANEL) == []
        _shot(page, f"panel-ending-failed-{lab_lang}")
        page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
        page.wait_for_function("document.body.dataset.jpThemeLight === 'false'")
        page.wait_for_selector("#jupyterlab-splash", state="detached")
        assert low_contrast(page, PANEL) == []
        _shot(page, f"panel-ending-failed-dark-{lab_lang}")
