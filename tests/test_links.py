"""Links in the run dir (issue 22, items 3 and 4, acceptance c): nothing outside is ever written
through a symbolic link in flower's place.

Git keeps links, so a cloned repository can carry ``runs/run.lock -> ../../notes.md`` (the first
``flower`` wrote the holder record into notes.md and truncated it to 0 bytes at the end; a dangling
one created its target) or ``runs/inbox -> ..`` (the run took a message-shaped ``settings.json`` there
as a remark and deleted it, and renamed ``package.json`` to ``.bad``). Each case plants a link to a
file, to a folder or to nowhere, outside the workspace, and hashes that outside folder (names, bytes,
mtimes, link texts) before and after.

Quick tier: ``GoOptions.preflight`` over every file and folder flower writes, and each writer on its
own (run lock, manifest lock, notes, the Q&A log, the inbox both ways, sessions.db's side files, the
event log and live.json, archiving on ``--new``). Slow tier: the real ``flower`` command against the
fake API, foreground and ``--detach``, over the nine names of acceptance c; the background runner's
own check; a run after the link is gone; one kernel.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from flower_magic.core import live, manifest, note, runlock
from flower_magic.core.durable import IsALink
from flower_magic.core.errors import LinkRefused, UserError
from flower_magic.core.human import HumanChannel
from flower_magic.core.lineage import Lineage
from flower_magic.core.rundir import QA_LOG_NAME, RunDir
from flower_magic.front.options import GoOptions, RunDirLink
from flower_magic.testing import FakeAnthropic

TASK = "write a short notes file"
KINDS = ("file", "folder", "nowhere")
# A message-shaped file where a linked inbox points: the run used to take it as a remark and delete it.
SETTINGS = {"op": "remark", "text": "the settings of another project"}

# Acceptance c's nine names, where they live under the workspace.
NAMES = {
    "run.lock": "runs/run.lock",
    "inbox": "runs/inbox",
    "live.json": "runs/live.json",
    "events.jsonl": "runs/events.jsonl",
    "manifest.json": "runs/manifest.json",
    "lineage.json": "runs/lineage.json",
    "需求.md": ".flower/notes/需求.md",
    "目标.md": ".flower/notes/目标.md",
    "诉求.md": ".flower/notes/诉求.md",
}
# Every other file and folder flower writes, truncates, renames or deletes there (core.rundir).
MORE = [
    "runs/sessions.db",
    "runs/sessions.db-wal",
    "runs/sessions.db-shm",
    "runs/sessions.db-journal",
    "runs/store.json",
    "runs/.lock",
    "runs/events.1.jsonl",
    "runs/runner.log",
    ".flower",
    ".flower/notes",
    ".flower/spill",
    ".flower/notes/archive",
    ".flower/notes/archive/交接",
    f".flower/notes/{QA_LOG_NAME}",
    ".flower/notes/.需求.md.flower.json",
    ".flower/notes/.目标.md.flower.json",
    ".flower/notes/交接-干活.md",
]


def make_outside(tmp_path: Path) -> Path:
    """A folder outside the workspace with what a link may point to: a file, a folder holding a
    message-shaped ``settings.json`` and a ``package.json``, and no ``nowhere.json``."""
    out = tmp_path / "outside"
    (out / "box").mkdir(parents=True)
    (out / "notes.md").write_text("precious notes\n", encoding="utf-8")
    (out / "box" / "settings.json").write_text(json.dumps(SETTINGS), encoding="utf-8")
    (out / "box" / "package.json").write_text('{"name": "another-project"}', encoding="utf-8")
    return out


def plant(link: Path, kind: str, out: Path) -> None:
    """Make ``link`` a relative symbolic link (as a cloned repository carries one) to ``out``'s file,
    folder, or to a name that does not exist there."""
    target = {"file": out / "notes.md", "folder": out / "box", "nowhere": out / "nowhere.json"}[kind]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent), target_is_directory=kind == "folder")


def fingerprint(root: Path) -> dict[str, tuple[str, int, str]]:
    """Every name under ``root`` (``root`` too) -> (kind, mtime in ns, sha256 of the bytes or the link's
    text), never following a link: equal fingerprints = nothing created, written, truncated, renamed
    or deleted there."""
    out: dict[str, tuple[str, int, str]] = {}
    for folder, dirs, files in os.walk(root):
        for name in ["", *dirs, *files]:
            path = Path(folder) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = ("link", st.st_mtime_ns, os.readlink(path))
            elif path.is_dir():
                out[rel] = ("dir", st.st_mtime_ns, "")
            else:
                out[rel] = ("file", st.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return make_outside(tmp_path)


def _options(ws: Path) -> GoOptions:
    return GoOptions(task=TASK, workspace=ws, demo=True, lang="en")


# -- preflight -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rel", [*NAMES.values(), *MORE])
def test_preflight_refuses_a_link_among_flowers_files_and_writes_nothing(
    workspace: Path, out: Path, rel: str, kind: str
) -> None:
    """A link in the place of any file or folder flower writes used to pass preflight (a link to a
    regular file, a dangling one "that the writer replaces") and was then written through."""
    plant(workspace / rel, kind, out)
    before, outside = fingerprint(workspace), fingerprint(out)
    opts = _options(workspace).check()
    with pytest.raises(LinkRefused) as refused:
        opts.preflight()
    line = str(refused.value)
    assert "\n" not in line and str(workspace / rel) in line and "symbolic link" in line
    assert refused.value.path == workspace / rel
    assert fingerprint(workspace) == before and fingerprint(out) == outside


def test_the_refusal_is_said_in_chinese_too_and_shows_no_escape_from_the_links_text(workspace: Path, out: Path) -> None:
    """A link's text is whatever a repository put there: an escape in it must not reach a terminal."""
    (workspace / "runs").mkdir()
    (workspace / "runs" / "live.json").symlink_to("\x1b]52;c;AAAA\x07x")
    opts = GoOptions(task=TASK, workspace=workspace, demo=True, lang="zh").check()
    with pytest.raises(LinkRefused) as refused:
        opts.preflight()
    line = str(refused.value)
    assert "符号链接" in line and "live.json" in line
    assert "\x1b" not in line and "\x07" not in line and "\\x1b" in line


@pytest.mark.parametrize("kind", KINDS)
def test_a_default_run_dir_found_as_a_link_is_refused_and_a_named_one_is_taken(
    workspace: Path, out: Path, kind: str
) -> None:
    """``runs -> elsewhere`` in a cloned repository would take every write of the run (and a remark or
    --stop would go to the run living there); ``-r`` with a link is the person's own choice."""
    plant(workspace / "runs", kind, out)
    before, outside = fingerprint(workspace), fingerprint(out)
    with pytest.raises(RunDirLink) as refused:
        _options(workspace).check()
    line = str(refused.value)
    assert str(workspace / "runs") in line and f"-r {os.path.realpath(workspace / 'runs')}" in line
    assert fingerprint(workspace) == before and fingerprint(out) == outside
    if kind == "folder":
        named = GoOptions(task=TASK, workspace=workspace, run_dir=Path("runs"), demo=True).check()
        named.preflight()
        assert named.rundir.path == out / "box"


# -- each writer on its own ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_the_run_lock_is_never_taken_through_a_link(tmp_path: Path, out: Path, kind: str) -> None:
    """Item 3: the holder record was written into the link's target and the target truncated to
    0 bytes at release; a dangling link created its target."""
    runs = tmp_path / "runs"
    plant(runs / runlock.LOCK_NAME, kind, out)
    outside = fingerprint(out)
    with pytest.raises(LinkRefused, match=r"run\.lock"):
        runlock.acquire(runs, front_end="api", lang="en")
    assert fingerprint(out) == outside
    assert runlock.holder(runs) is None and not runlock.held_here(runs)


@pytest.mark.parametrize("kind", KINDS)
def test_the_manifest_lock_is_never_opened_through_a_link(tmp_path: Path, out: Path, kind: str) -> None:
    runs = tmp_path / "runs"
    plant(runs / manifest.LOCK, kind, out)
    outside = fingerprint(out)
    with pytest.raises(IsALink):
        manifest.persist(runs, manifest.new_run_id(), [{"step": "x", "ok": True}])
    assert fingerprint(out) == outside and not (runs / manifest.MANIFEST).exists()


@pytest.mark.parametrize("kind", ["file", "nowhere"])
def test_a_note_is_never_appended_through_a_link(tmp_path: Path, out: Path, kind: str) -> None:
    """需求.md takes a phrase said at wake by appending; a linked one would grow the file it points to."""
    path = tmp_path / "notes" / "需求.md"
    plant(path, kind, out)
    outside = fingerprint(out)
    with pytest.raises(IsALink):  # a dangling one too: O_EXCL finds the name taken, and never follows it
        note.append(path, "\n## 唤醒时补充\nmore\n")
    assert fingerprint(out) == outside


@pytest.mark.parametrize("kind", KINDS)
def test_the_question_log_is_never_appended_through_a_link(tmp_path: Path, out: Path, kind: str) -> None:
    log_path = tmp_path / "notes" / QA_LOG_NAME
    plant(log_path, kind, out)
    outside = fingerprint(out)
    channel = HumanChannel(timeout_s=0, log_path=log_path)
    asyncio.run(channel.ask("Which format?", ["md", "txt"]))
    assert channel.ui_errors and isinstance(channel.ui_errors[0], OSError)
    assert fingerprint(out) == outside


@pytest.mark.parametrize("kind", KINDS)
def test_a_linked_inbox_is_never_taken(tmp_path: Path, out: Path, kind: str) -> None:
    """Item 4: the run consumed, deleted and renamed ``*.json`` files in the folder the inbox linked to."""
    plant(tmp_path / live.INBOX_NAME, kind, out)
    outside = fingerprint(out)
    assert live.take_inbox(tmp_path) == []
    assert fingerprint(out) == outside


def test_a_link_inside_the_inbox_is_never_taken(tmp_path: Path, out: Path) -> None:
    box = tmp_path / live.INBOX_NAME
    box.mkdir()
    for name, kind in (("1-file.json", "file"), ("2-folder.json", "folder"), ("3-nowhere.json", "nowhere")):
        plant(box / name, kind, out)
    (box / "2-settings.json").symlink_to(out / "box" / "settings.json")
    outside = fingerprint(out)
    assert live.take_inbox(tmp_path) == []
    assert fingerprint(out) == outside
    assert sorted(p.name for p in box.iterdir()) == [
        "1-file.json",
        "2-folder.json",
        "2-settings.json",
        "3-nowhere.json",
    ]


@pytest.fixture
def live_here(tmp_path: Path) -> Iterator[live.LiveRun]:
    run = live.LiveRun(tmp_path, front_end="api", start={"lang": "en"})
    lock = runlock.acquire(tmp_path, front_end="api")
    yield run
    run.close()
    lock.release()


@pytest.mark.parametrize("kind", KINDS)
def test_post_never_writes_through_a_linked_inbox(
    tmp_path: Path, out: Path, live_here: live.LiveRun, kind: str
) -> None:
    """``flower "words"`` / ``--stop`` on a live run, the magic and the panel's POST all go through
    ``post``; a linked folder used to take the message."""
    plant(tmp_path / live.INBOX_NAME, kind, out)
    outside = fingerprint(out)
    for op in ("remark", "stop"):
        with pytest.raises(LinkRefused, match="inbox"):
            live.post(tmp_path, op, text="hello", lang="en")
    assert fingerprint(out) == outside


@pytest.mark.parametrize("side", ["", "-wal", "-shm", "-journal"])
def test_the_session_store_is_never_opened_through_a_link(tmp_path: Path, out: Path, side: str) -> None:
    """SQLite opens sessions.db and its side files by name, following links."""
    from flower_magic.stores.sqlite import SqliteSessionStore

    db = tmp_path / "runs" / "sessions.db"
    plant(db.with_name(db.name + side), "file", out)
    outside = fingerprint(out)
    with pytest.raises(IsALink):
        SqliteSessionStore(db)
    assert fingerprint(out) == outside


@pytest.mark.parametrize("kind", KINDS)
def test_the_event_log_and_live_json_replace_a_link_never_write_through_it(
    tmp_path: Path, out: Path, kind: str
) -> None:
    """Behind preflight: a link planted later is replaced by a file of flower's, its target untouched."""
    plant(tmp_path / live.LOG_NAME, kind, out)
    plant(tmp_path / live.OLD_LOG_NAME, kind, out)
    plant(tmp_path / live.LIVE_NAME, kind, out)
    outside = fingerprint(out)
    run = live.LiveRun(tmp_path, front_end="api", start={"lang": "en"})
    run.log.record("line", line=[["dim", "hello"]])
    run.end({"ending": "done"})
    assert fingerprint(out) == outside
    assert not (tmp_path / live.LOG_NAME).is_symlink() and not (tmp_path / live.LIVE_NAME).is_symlink()
    assert [r["type"] for r in live.read_log(tmp_path)] == ["start", "line", "end"]


@pytest.mark.parametrize("kind", KINDS)
def test_archiving_on_new_moves_a_link_never_its_target(workspace: Path, out: Path, kind: str) -> None:
    """``--new`` moves 需求.md, 目标.md and 诉求.md into the archive; a linked one's target stays as it was."""
    rd = RunDir.at(workspace)
    lin = Lineage.open(rd.path, rd.workspace)
    lin.bump()
    for path in (rd.brief, rd.goal, rd.task):
        plant(path, kind, out)
    outside = fingerprint(out)
    lin.archive(rd.archive, extra=[rd.brief, rd.goal, rd.task])
    assert fingerprint(out) == outside


# -- the real command -------------------------------------------------------------------------------------


@pytest.fixture
def env(demo_api: FakeAnthropic, tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    drop = ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_MODEL", "FLOWER_WINDOW", "FLOWER_SESSIONS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(demo_api.env(home))
    env.update(FLOWER_LANG="en", PYTHONUNBUFFERED="1")
    return env


def flower(ws: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["flower", *args], cwd=ws, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300
    )


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", list(NAMES))
@pytest.mark.parametrize("mode", ["foreground", "detach"])
def test_flower_with_a_link_in_its_place_says_one_line_and_touches_nothing_outside(
    env: dict[str, str], workspace: Path, out: Path, mode: str, name: str, kind: str
) -> None:
    """Acceptance c through the real command: refused at preflight, before the run lock, the event
    log, the runner or the model."""
    plant(workspace / NAMES[name], kind, out)
    before, outside = fingerprint(workspace), fingerprint(out)
    done = flower(workspace, env, *(["--detach"] if mode == "detach" else []), TASK)
    assert done.returncode == 1, done.stderr
    line = one_line(done.stderr)
    # The path as a person reads it: relative to the folder flower runs in (issue 24).
    assert f" {NAMES[name]} " in line and str(workspace) not in line and "symbolic link" in line, line
    assert fingerprint(out) == outside and fingerprint(workspace) == before


@pytest.mark.slow
@pytest.mark.parametrize("args", [(TASK,), ("--detach", TASK), ("--stop",), ("--status",)])
def test_flower_on_a_default_run_dir_that_is_a_link_says_one_line(
    env: dict[str, str], workspace: Path, out: Path, args: tuple[str, ...]
) -> None:
    """``runs -> ../outside/box``: no run, no remark or stop to whatever run lives there, no status read."""
    plant(workspace / "runs", "folder", out)
    before, outside = fingerprint(workspace), fingerprint(out)
    done = flower(workspace, env, *args)
    assert done.returncode == 1, done.stderr
    assert f"-r {out / 'box'}" in one_line(done.stderr)
    assert fingerprint(out) == outside and fingerprint(workspace) == before


@pytest.mark.slow
def test_the_background_runner_checks_for_links_itself(
    env: dict[str, str], workspace: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runner started past the front end's preflight (another caller of ``runner.start``) refuses too."""
    from flower_magic.runner import start

    # Not run.lock: the runner's run lock refuses that one by itself (test_the_run_lock_is_never_taken...).
    plant(workspace / NAMES["events.jsonl"], "file", out)
    outside = fingerprint(out)
    opts = _options(workspace).check()
    for key, value in env.items():
        monkeypatch.setenv(key, value)  # the runner's environment is this process's
    with pytest.raises(UserError, match="symbolic link") as refused:
        start(opts, front_end="terminal")
    assert "events.jsonl" in str(refused.value) and "\n" not in str(refused.value)
    assert fingerprint(out) == outside


@pytest.mark.slow
def test_a_cloned_run_lock_link_is_refused_and_the_run_goes_once_it_is_removed(
    env: dict[str, str], workspace: Path, out: Path
) -> None:
    """The headline of item 3: ``runs/run.lock -> ../../outside/notes.md`` wiped notes.md on the first run."""
    lock = workspace / NAMES["run.lock"]
    plant(lock, "file", out)
    outside = fingerprint(out)
    assert flower(workspace, env, TASK).returncode == 1
    lock.unlink()
    done = flower(workspace, env, TASK)
    assert done.returncode == 0, done.stderr
    assert fingerprint(out) == outside
    assert (out / "notes.md").read_text(encoding="utf-8") == "precious notes\n"
    assert lock.is_file() and not lock.is_symlink() and lock.stat().st_size == 0  # emptied at release


@pytest.mark.slow
def test_the_magic_goes_through_the_same_check(env: dict[str, str], workspace: Path, out: Path) -> None:
    from tests.e2e.kernel import Kernel

    plant(workspace / NAMES["inbox"], "folder", out)
    before, outside = fingerprint(workspace), fingerprint(out)
    kernel = Kernel(workspace, env)
    try:
        assert kernel.run("%load_ext flower_magic").status == "ok"
        res = kernel.run(f'%flower "{TASK}"')
    finally:
        kernel.close()
    assert res.status == "error"
    [err] = res.errors
    assert err["ename"] == "UsageError" and "\n" not in err["evalue"].strip()
    assert "inbox" in err["evalue"] and "symbolic link" in err["evalue"]
    assert fingerprint(out) == outside and fingerprint(workspace) == before
