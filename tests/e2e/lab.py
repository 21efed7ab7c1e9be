"""A real ``jupyter lab`` on loopback and a headless Debian Chromium page, for browser tests."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-output" / "screenshots"
SERVER_START_S = 90


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Lab:
    url: str
    token: str
    root: Path
    log: Path

    def api(self, path: str) -> Any:
        request = urllib.request.Request(f"{self.url}{path}", headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)


def panel_build() -> Path | None:
    """The panel build (``jlpm build``) beside the flower_magic being tested, when there is one."""
    import flower_magic

    build = Path(flower_magic.__file__).parent / "labextension"
    return build if (build / "package.json").is_file() else None


# JupyterLab's language (Settings > Language) as each of flower's is set: the panel speaks it.
LOCALES = {"zh": "zh_CN", "en": "en"}


@contextlib.contextmanager
def running_lab(tmp_path: Path, root: Path, env_extra: dict[str, str], *, lang: str | None = None) -> Iterator[Lab]:
    """``jupyter lab`` serving ``root`` with auth on, its own settings, data and runtime dirs.

    ``lang`` is JupyterLab's own language (``zh`` needs the language pack jupyterlab-language-pack-zh-CN,
    a test dependency); None = the server's ``FLOWER_LANG`` when ``env_extra`` sets one, as a person who
    chose one for flower would for JupyterLab, else JupyterLab's default (English).

    The panel it loads is the build beside the flower_magic under test (``panel_build``), put in the
    lab's own data dir, which JupyterLab reads before the environment's: a checkout's or worktree's
    fresh ``jlpm build`` is what the browser gets, whichever copy the environment has installed.
    """
    port, token = free_port(), os.urandom(16).hex()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env.update(
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTER_DATA_DIR=str(tmp_path / "data"),
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        HOME=str(tmp_path / "home"),
    )
    env.update(env_extra)
    Path(env["HOME"]).mkdir(parents=True, exist_ok=True)
    build = panel_build()
    if build is not None:
        into = Path(env["JUPYTER_DATA_DIR"]) / "labextensions" / "flower-magic"
        shutil.rmtree(into, ignore_errors=True)  # a test may start a second lab in the same folder
        shutil.copytree(build, into)
    # No news or update toast over the page: it would intercept clicks (and it reaches out to the web).
    notification = tmp_path / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True, exist_ok=True)
    notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    locale = LOCALES[lang or env_extra.get("FLOWER_LANG") or "en"]
    language = tmp_path / "settings" / "@jupyterlab" / "translation-extension" / "plugin.jupyterlab-settings"
    language.parent.mkdir(parents=True, exist_ok=True)
    language.write_text(json.dumps({"locale": locale}))
    log = tmp_path / "lab.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                "--allow-root",
                "--ip=127.0.0.1",
                f"--port={port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={root}",
                f"--LabApp.user_settings_dir={tmp_path / 'settings'}",
                f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}",
                "--LabApp.expose_app_in_browser=True",
            ],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    lab = Lab(f"http://127.0.0.1:{port}", token, root, log)
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            try:
                lab.api("/api/status")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = log.read_text(errors="replace")[-3000:]
                    raise AssertionError(f"jupyter lab did not start:\n{tail}") from None
                time.sleep(0.5)
        yield lab
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def chromium_page(width: int = 1400, height: int = 900) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        raise AssertionError(f"{CHROMIUM} is missing; install it with `apt-get install -y chromium`")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        page.set_default_timeout(30_000)
        try:
            yield page
        finally:
            context.close()
            browser.close()
