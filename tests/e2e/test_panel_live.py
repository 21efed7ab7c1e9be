"""The panel's live strip in a real browser, on real background runs (issue 15: build 4, acceptance c
and e): a real ``jupyter lab`` with auth on, Debian Chromium, and ``flower --demo --detach`` runners
(the offline demo model, whose clarifier asks "which format" with options).

- A question of a live run shows in the panel; clicking an option answers it: the runner records the
  answer as heard from the panel, the question as answered, and goes on to the end.
- Stop (after the confirm) on a second live run records the step as interrupted by a person.
- A third runner killed with ``kill -9``: the strip goes away on the next poll.
The browser's POST carries ``X-XSRFToken`` (JupyterLab's ``makeRequest``); screenshots go to
``test-output/screenshots/``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flower_magic.core.pid import is_alive
from flower_magic.core.words import say
from tests.e2e.contrast import low_contrast
from tests.e2e.lab import SCREENSHOTS, Lab, chromium_page, panel_build, running_lab
from tests.e2e.test_panel_browser import _other_language

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PANEL = "#flower-magic-panel"
LIVE = f"{PANEL} .jp-FlowerLive"
TASK = "write hello.txt with a greeting"
# How long a runner may take to reach a state the test waits for (the demo model answers at once).
RUN_S = 60
OPTION = "Markdown"  # one of the demo clarifier's options (flower_magic/testing/demo.py)


def _records(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _live(run_dir: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads((run_dir / "live.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data


def _wait(what: str, check: Any, timeout_s: float = RUN_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


class Runs:
    """Background runs started for the test, each in its own folder; every runner still alive at the
    end is killed with its process group (it has its own session)."""

    def __init__(self, root: Path, home: Path, lang: str) -> None:
        self.root, self.home, self.lang = root, home, lang
        self.pids: list[int] = []

    def start(self, *folders: str) -> list[Path]:
        """``flower --demo --detach`` in each folder (all at once); their run dirs once each is live."""
        env = dict(os.environ, FLOWER_LANG=self.lang, HOME=str(self.home), PYTHONUNBUFFERED="1")
        for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
            env.pop(key, None)
        starting = []
        for folder in folders:
            ws = self.root / folder
            ws.mkdir(parents=True)
            (ws / "README.md").write_text("# demo\n", encoding="utf-8")
            argv = [sys.executable, "-m", "flower_magic.cli", "--demo", "--detach", TASK]
            starting.append(
                subprocess.Popen(
                    argv, cwd=ws, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
                )
            )
        run_dirs = []
        for folder, proc in zip(folders, starting, strict=True):
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode == 0, out.decode(errors="replace")
            run_dir = self.root / folder / "runs"
            pid = _wait(f"{folder}'s live.json", lambda d=run_dir: _live(d).get("pid"))
            self.pids.append(int(pid))
            run_dirs.append(run_dir)
        return run_dirs

    def stop_all(self) -> None:
        for pid in self.pids:
            if is_alive(pid):
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)


@pytest.fixture
def lab_lang() -> str:
    """The language of the server and of the runs (FLOWER_LANG): English, as the assertions are written."""
    return "en"


@pytest.fixture
def runs(tmp_path: Path, lab_lang: str) -> Iterator[Runs]:
    home = tmp_path / "run-home"
    home.mkdir()
    started = Runs(tmp_path / "root", home, lab_lang)
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture
def lab(tmp_path: Path, runs: Runs, lab_lang: str) -> Iterator[Lab]:
    assert panel_build() is not None, "no panel build beside flower_magic: run `jlpm build` first"
    runs.root.mkdir(parents=True, exist_ok=True)
    with running_lab(tmp_path, runs.root, {"FLOWER_LANG": lab_lang}) as server:
        yield server


def _shot(page: Any, name: str) -> None:
    page.eval_on_selector(PANEL, "e => e.scrollTo(0, 0)")
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def _sent(page: Any) -> None:
    """The strip's line after a send says it was sent (a refusal would say why, and fail here)."""
    status = page.locator(f"{LIVE} .jp-FlowerLive-status")
    status.wait_for(state="visible")
    assert "jp-mod-error" not in (status.get_attribute("class") or ""), status.inner_text()


def _is_live_post(response: Any) -> bool:
    return response.request.method == "POST" and "/flower/api/live" in response.url


def _open_panel(page: Any, folder: str) -> None:
    page.evaluate(f"window.jupyterapp.commands.execute('flower-magic:open', {{path: '{folder}'}})")
    page.wait_for_selector(PANEL, state="visible")


def test_the_panel_answers_stops_and_loses_live_runs(lab: Lab, runs: Runs, tmp_path: Path):
    # Four live runs, each waiting on the demo clarifier's question, started before the browser.
    first, second, third, fourth = runs.start("answer", "stop", "killed", "remark")
    for run_dir in (first, second, third, fourth):
        _wait("the clarifier's question", lambda d=run_dir: _live(d).get("asks"))
    question = _live(first)["asks"][0]
    assert OPTION in question["options"]

    with chromium_page(width=1300, height=900) as page:
        page.goto(f"{lab.url}/lab/tree/answer/README.md?token={lab.token}")
        page.wait_for_selector("#jp-main-dock-panel .jp-FileEditor", state="visible", timeout=60_000)
        _open_panel(page, "answer")

        # (4) the strip: waiting for an answer, the step, the question and its options as buttons
        page.wait_for_selector(f"{LIVE}[data-state='waiting']", state="visible")
        strip = page.locator(LIVE)
        assert strip.locator(".jp-FlowerLive-chip").inner_text() == say("lab_live_waiting", "en")
        assert say("lab_live_step", "en", step="确认需求") in strip.inner_text()
        assert strip.locator(".jp-FlowerLive-question").inner_text() == question["question"]
        options = strip.locator(".jp-FlowerLive-option").all_text_contents()
        assert options == question["options"]
        _shot(page, "10-live-question")
        assert low_contrast(page, PANEL) == []

        # (c) clicking an option answers it; the runner hears it from the panel and goes on to the end
        with page.expect_response(_is_live_post) as sent:
            strip.locator(f".jp-FlowerLive-option:text-is('{OPTION}')").click()
        assert sent.value.status == 202, sent.value.text()
        assert sent.value.request.headers.get("x-xsrftoken"), "the panel's POST carried no X-XSRFToken"
        assert json.loads(sent.value.request.post_data) == {"op": "answer", "text": OPTION, "id": question["id"]}
        _wait("the first run's end", lambda: _live(first).get("state") == "ended")
        records = _records(first)
        heard = [r for r in records if r["type"] == "heard"]
        assert [(h["op"], h["text"], h["id"], h["from"], h["took"]) for h in heard] == [
            ("answer", OPTION, question["id"], "panel", True)
        ]
        asks = [r["event"]["payload"] for r in records if r["type"] == "event" and r["event"]["kind"] == "ask"]
        assert [a.get("state") for a in asks if a.get("id") == question["id"]][-1] == "answered"
        steps = [r["step"] for r in json.loads((first / "manifest.json").read_text(encoding="utf-8"))]
        assert steps[:3] == ["确认需求", "设定目标", "干活"]  # the run went on past the question
        page.wait_for_selector(LIVE, state="hidden", timeout=RUN_S * 1000)  # not live any more
        _shot(page, "11-live-answered")

        # Stop, on the second run: a confirm first; then the step is interrupted by a person
        _open_panel(page, "stop")
        page.wait_for_selector(f"{LIVE}[data-state='waiting']", state="visible")
        page.locator(f"{LIVE} .jp-FlowerLive-remarkText").fill("please keep it short")
        _shot(page, "12-live-remark-typed")
        page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
        page.wait_for_function("document.body.dataset.jpThemeLight === 'false'")
        page.wait_for_selector("#jupyterlab-splash", state="detached")
        # what was typed survives the polls and the theme change
        assert page.locator(f"{LIVE} .jp-FlowerLive-remarkText").input_value() == "please keep it short"
        _shot(page, "13-live-dark")
        assert low_contrast(page, PANEL) == []
        page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})")
        page.wait_for_function("document.body.dataset.jpThemeLight === 'true'")
        page.wait_for_selector("#jupyterlab-splash", state="detached")
        page.locator(f"{LIVE} .jp-FlowerLive-stop").click()
        dialog = page.locator(".jp-Dialog")
        dialog.wait_for(state="visible")
        assert say("lab_live_stop_confirm", "en") in dialog.inner_text()
        page.screenshot(path=str(SCREENSHOTS / "14-live-stop-confirm.png"))
        dialog.locator("button.jp-mod-warn").click()
        _wait("the second run's end", lambda: _live(second).get("state") == "ended")
        rows = json.loads((second / "manifest.json").read_text(encoding="utf-8"))
        assert [(r["step"], r["error"]) for r in rows] == [("确认需求", "interrupted-by-human")]
        heard = [(r["op"], r["from"]) for r in _records(second) if r["type"] == "heard"]
        assert heard == [("stop", "panel")]
        page.wait_for_selector(LIVE, state="hidden", timeout=RUN_S * 1000)

        # a remark: the words go to the agent (an interrupt that carries on in the same session)
        _open_panel(page, "remark")
        page.wait_for_selector(f"{LIVE}[data-state='waiting']", state="visible")
        # a refused answer (too long) is said in the strip with the server's reason; nothing reaches the run
        page.locator(f"{LIVE} .jp-FlowerLive-answerText").fill("x" * 64_001)
        page.locator(f"{LIVE} .jp-FlowerLive-send").click()
        page.wait_for_selector(f"{LIVE} .jp-FlowerLive-status.jp-mod-error", state="visible")
        why = say("lab_live_bad_field", "en", name="text", n=64_000)
        assert page.locator(f"{LIVE} .jp-FlowerLive-status").inner_text() == say("lab_live_failed", "en", why=why)
        _shot(page, "15-live-refused")
        assert low_contrast(page, PANEL) == []
        assert [r for r in _records(fourth) if r["type"] == "heard"] == []
        page.locator(f"{LIVE} .jp-FlowerLive-remarkText").fill("please keep it short")
        with page.expect_response(_is_live_post) as sent:
            page.locator(f"{LIVE} .jp-FlowerLive-remarkText").press("Enter")
        assert sent.value.status == 202, sent.value.text()
        _sent(page)
        assert page.locator(f"{LIVE} .jp-FlowerLive-status").inner_text() == say(
            "lab_live_sent_remark", "en", text="please keep it short"
        )
        _shot(page, "16-live-remark-sent")
        assert low_contrast(page, PANEL) == []
        heard = _wait("the remark heard", lambda: [r for r in _records(fourth) if r["type"] == "heard"])
        assert [(h["op"], h["text"], h["from"]) for h in heard] == [("remark", "please keep it short", "panel")]

        # kill -9 of the third runner: no file changes, yet the strip goes on the next poll
        _open_panel(page, "killed")
        page.wait_for_selector(f"{LIVE}[data-state='waiting']", state="visible")
        pid = int(_live(third)["pid"])
        os.kill(pid, signal.SIGKILL)
        _wait("the killed runner to be gone", lambda: not is_alive(pid))
        page.wait_for_selector(LIVE, state="hidden", timeout=10_000)
        assert _live(third)["state"] == "waiting"  # live.json still says so: only the lock tells
        # an answer sent to it now is refused by the server, and the panel says why
        refused = lab_post(lab, "killed", {"op": "answer", "text": OPTION})
        assert refused == 409
        _shot(page, "17-live-killed")


@pytest.mark.parametrize("lab_lang", ["zh"])
def test_a_chinese_live_strip_says_no_english_word(lab: Lab, runs: Runs, lab_lang: str):
    """With FLOWER_LANG=zh the strip's every label, tooltip and placeholder is Chinese (the agent's
    question and options are its own words, not the panel's)."""
    (run_dir,) = runs.start("zh")
    _wait("the clarifier's question", lambda: _live(run_dir).get("asks"))
    with chromium_page() as page:
        page.goto(f"{lab.url}/lab/tree/zh/README.md?token={lab.token}")
        page.wait_for_selector("#jp-main-dock-panel .jp-FileEditor", state="visible", timeout=60_000)
        _open_panel(page, "zh")
        page.wait_for_selector(f"{LIVE}[data-state='waiting']", state="visible")
        assert page.locator(f"{LIVE} .jp-FlowerLive-chip").inner_text() == say("lab_live_waiting", "zh")
        assert page.locator(f"{LIVE} .jp-FlowerLive-stop").inner_text() == say("lab_live_stop", "zh")
        placeholders = page.locator(f"{LIVE} [placeholder]").evaluate_all("es => es.map(e => e.placeholder)")
        assert placeholders == [say("lab_live_answer", "zh")]
        assert _other_language(page, "zh") == []
        _shot(page, "18-live-zh")


def lab_post(lab: Lab, folder: str, body: dict[str, Any]) -> int:
    """POST live with the token (no cookie, so no XSRF token needed); the status."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"{lab.url}/flower/api/live?path={folder}&run_dir=runs",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"token {lab.token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
