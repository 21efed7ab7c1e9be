"""The portable watchdog (issue 16, build item 2): the CLI dies with the process that started it where
there is no ``PR_SET_PDEATHSIG``. Real processes and real ``kill -9``; the "CLI" here is a small
Python program that, like the real one, does not stop on its own when its stdin ends or on SIGTERM
(tests/test_nonlinux.py runs the real Claude Code CLI under it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flower_magic.core import launcher, watchdog
from tests.helpers import wait_until, write_script

# A CLI that reads stdin to its end, echoing, then lingers (ignoring SIGTERM when asked): it never
# exits because its parent went away. argv: a file to write its pid to, "stubborn" or "polite".
FAKE_CLI = """
import os, signal, sys, time
open(sys.argv[1], "w").write(str(os.getpid()))
stubborn = sys.argv[2] == "stubborn"
signal.signal(signal.SIGTERM, signal.SIG_IGN if stubborn else lambda *a: sys.exit(7))
signal.signal(signal.SIGPIPE, signal.SIG_IGN)
print("READY", flush=True)
for line in sys.stdin:
    print("ECHO " + line.strip(), flush=True)
if not stubborn:
    sys.exit(3)
while True:
    time.sleep(1)
"""

# Starts the watchdog over the fake CLI, the way the SDK starts the CLI: stdin and stdout are pipes.
# argv: fake CLI, pid file, mode, "fork" (a forked child keeps a copy of the stdin pipe's write end).
PARENT = """
import os, subprocess, sys, time
watchdog = sys.argv[1]
proc = subprocess.Popen(
    [sys.executable, "-I", "-S", watchdog, sys.executable, sys.argv[2], sys.argv[3], sys.argv[4]],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    env={**os.environ, "FLOWER_WATCHDOG_PARENT": str(os.getpid())},
)
print("WATCHDOG", proc.pid, flush=True)
print(proc.stdout.readline().strip(), flush=True)
if sys.argv[5] == "fork" and os.fork() == 0:
    time.sleep(600)  # holds the pipe's write end: no end-of-file when the parent dies
    os._exit(0)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.fixture
def programs(tmp_path: Path) -> dict[str, Path]:
    return {"cli": write_script(tmp_path / "cli.py", FAKE_CLI), "parent": write_script(tmp_path / "parent.py", PARENT)}


@pytest.mark.parametrize("pipe", ["closes", "held-by-a-fork"])
def test_the_cli_dies_with_its_parent(tmp_path: Path, programs: dict[str, Path], pipe: str) -> None:
    """kill -9 of the parent: the stdin pipe closes (or, held by a forked child, does not) and the CLI,
    which would linger forever, is killed; the watchdog goes too."""
    pid_file = tmp_path / "cli.pid"
    argv = [sys.executable, str(programs["parent"]), watchdog.__file__, str(programs["cli"]), str(pid_file)]
    mode = "fork" if pipe == "held-by-a-fork" else "no"
    with subprocess.Popen([*argv, "stubborn", mode], stdout=subprocess.PIPE, text=True) as parent:
        try:
            assert parent.stdout is not None
            guard = int(parent.stdout.readline().split()[1])
            assert parent.stdout.readline().strip() == "READY"
            cli = int(pid_file.read_text())
            assert _alive(cli) and _alive(guard)
            os.kill(parent.pid, signal.SIGKILL)
            parent.wait(timeout=30)
            wait_until(lambda: not _alive(cli), "the CLI dying with its parent", give_up_s=5)
            wait_until(lambda: not _alive(guard), "the watchdog exiting", give_up_s=5)
        finally:
            parent.kill()
            for pid in _forks_of(programs["parent"], parent.pid):
                os.kill(pid, signal.SIGKILL)


def _forks_of(script: Path, pid: int) -> list[int]:
    """This test's own forked parent copies (their command line names its script)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(script).encode() in cmd and int(entry.name) != pid:
                found.append(int(entry.name))
    return found


def _under_watchdog(cli: Path, mode: str, tmp_path: Path, **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-I", "-S", watchdog.__file__, sys.executable, str(cli), str(tmp_path / "cli.pid"), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        **kw,  # type: ignore[call-overload]
    )


def test_a_normal_end_passes_through(tmp_path: Path, programs: dict[str, Path]) -> None:
    """What the SDK writes reaches the CLI, its end-of-file too, and the CLI's exit code comes back."""
    with _under_watchdog(programs["cli"], "polite", tmp_path) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        big = "x" * (3 * watchdog.RELAY_CHUNK_BYTES)  # a long task crosses several relay reads
        proc.stdin.write("hello\n" + big + "\n")
        proc.stdin.close()
        assert proc.stdout.read().split() == ["ECHO", "hello", "ECHO", big]
        assert proc.wait(timeout=30) == 3


def test_sigterm_is_passed_on(tmp_path: Path, programs: dict[str, Path]) -> None:
    """The SDK's terminate() reaches the CLI; one that ignores it is killed before the SDK's SIGKILL."""
    with _under_watchdog(programs["cli"], "polite", tmp_path) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        proc.terminate()
        assert proc.wait(timeout=30) == 7  # the CLI's own answer to SIGTERM
    with _under_watchdog(programs["cli"], "stubborn", tmp_path) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        cli = int((tmp_path / "cli.pid").read_text())
        proc.terminate()
        assert proc.wait(timeout=30) == 128 + signal.SIGKILL
        assert not _alive(cli)


def test_ctrl_c_is_left_to_the_cli(tmp_path: Path, programs: dict[str, Path]) -> None:
    """A terminal's Ctrl-C reaches every process of the group; the watchdog itself does not stop on it."""
    with _under_watchdog(programs["cli"], "polite", tmp_path) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGHUP)
        proc.stdin.write("still here\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "ECHO still here"
        proc.stdin.close()
        assert proc.wait(timeout=30) == 3


def test_the_cli_never_starts_when_its_parent_is_already_gone(tmp_path: Path, programs: dict[str, Path]) -> None:
    env = {**os.environ, watchdog.PARENT_ENV: "999999999"}  # not our pid: the parent it guards is gone
    with _under_watchdog(programs["cli"], "polite", tmp_path, env=env) as proc:
        assert proc.wait(timeout=30) == 128 + signal.SIGKILL
    assert not (tmp_path / "cli.pid").exists()


# -- which mechanism, and the launcher scripts ------------------------------------------------------


def test_the_mechanism_for_each_platform_and_mode() -> None:
    table = {
        (platform, mode): launcher.mechanism(mode, platform)
        for platform in ("linux", "darwin", "freebsd14", "win32")
        for mode in launcher.WATCHDOG_MODES
    }
    assert table == {
        ("linux", "auto"): "pdeathsig",
        ("linux", "portable"): "watchdog",
        ("linux", "off"): "none",
        ("darwin", "auto"): "watchdog",
        ("darwin", "portable"): "watchdog",
        ("darwin", "off"): "none",
        ("freebsd14", "auto"): "watchdog",
        ("freebsd14", "portable"): "watchdog",
        ("freebsd14", "off"): "none",
        ("win32", "auto"): "job",
        ("win32", "portable"): "job",
        ("win32", "off"): "none",
    }


def test_a_watchdog_setting_nobody_can_honour_is_refused_in_one_line() -> None:
    assert launcher.watchdog_mode({}) == "auto"
    assert launcher.watchdog_mode({"FLOWER_WATCHDOG": " Portable "}) == "portable"
    with pytest.raises(ValueError) as caught:
        launcher.watchdog_mode({"FLOWER_WATCHDOG": "pdeath"})
    message = str(caught.value)
    assert "\n" not in message and "'pdeath'" in message and "FLOWER_WATCHDOG=portable" in message


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_go_refuses_a_bad_watchdog_setting_before_writing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, lang: str
) -> None:
    from flower_magic.core.words import say
    from flower_magic.front.options import GoError, GoOptions

    monkeypatch.setenv("FLOWER_WATCHDOG", "sometimes")
    with pytest.raises(GoError) as caught:
        GoOptions(task="x", workspace=tmp_path / "ws", run_dir=tmp_path / "ws" / "runs", lang=lang).check()
    assert str(caught.value) == say("bad_watchdog", lang, value="'sometimes'", choices="auto, portable, off")
    assert "FLOWER_WATCHDOG=portable" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


LAUNCH = """
import json, sys
from pathlib import Path
from flower_magic.core import launcher
cli = Path(sys.argv[1])
for kind, script in (("pdeathsig", launcher.pdeathsig_script(cli)), ("watchdog", launcher.watchdog_script(cli))):
    print(json.dumps([kind, launcher._written(script)]))
"""


def test_launchers_run_from_paths_with_spaces_cjk_and_emoji(tmp_path: Path) -> None:
    """A home with a space (the launcher's folder), an interpreter there, and a CLI under 数据 清洗 🌻:
    every path in a launcher is quoted, so each launcher runs the CLI with its arguments intact."""
    home = tmp_path / "Jane Doe 数据"
    odd = tmp_path / "数据 清洗 🌻 with spaces"
    odd.mkdir()
    python = odd / "python 3"
    python.symlink_to(sys.executable)
    cli = write_script(odd / "claude", '#!/bin/sh\necho "ARGS $#: $1|$2"\n')
    cli.chmod(0o755)
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}
    out = subprocess.run(
        [str(python), "-c", LAUNCH, str(cli)], capture_output=True, text=True, env=env, check=True
    ).stdout
    import json

    for line in out.splitlines():
        kind, path = json.loads(line)
        assert path is not None and path.startswith(str(home / ".cache" / "flower_magic" / "bin")), (kind, path)
        ran = subprocess.run(
            [path, "a b", "数据 🌻"], capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL
        )
        assert ran.stdout.strip() == "ARGS 2: a b|数据 🌻", (kind, ran.stderr)
    time.sleep(0)  # nothing lingers: the CLI exited and so did each launcher
