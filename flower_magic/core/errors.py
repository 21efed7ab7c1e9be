"""Errors a person sees: each says what happened, with the value, and what to do next.

The tree: ``FlowerError`` is every error flower raises on purpose; ``UserError`` (under it) is one a
person can fix — a front end shows its message as one line (``UsageError`` in a notebook, one stderr
line and exit 2 or 1 from ``flower``) and never a traceback. Anything else that escapes is a bug and
keeps its traceback. Messages come from the phrase tables (``core.words``), in the run's language.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import stat
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from flower_magic.core.project import config_dir

# Any one of these makes the Claude Code CLI able to call a model.
CREDENTIAL_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
CLOUD_VARS = ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY")


def kind_of(mode: int) -> str:
    """The phrase naming what a file of ``mode`` is, where a regular file was expected."""
    if stat.S_ISDIR(mode):
        return "kind_dir"
    return "kind_fifo" if stat.S_ISFIFO(mode) else "kind_other"


class FlowerError(Exception):
    """Base class of flower_magic's own errors."""


class UserError(FlowerError):
    """Something the person can fix (a setting, a path, a flag); the message says what and how."""


class CredentialsError(UserError, RuntimeError):
    """No way to reach a model was configured. The message says how to set a key without printing it
    and what works without one, as ``cmd`` is typed (``flower`` in a terminal, ``%flower`` in a
    notebook) in this folder (``folder``): "" (no run yet) the offline demo with a task; ``demo`` (its
    last run was the demo) ``--demo`` to go on with it; ``real`` (its run is on a real model) the key,
    then ``cmd`` to go on, and the demo in another folder (here ``--demo "task"`` would be a remark to
    that run)."""

    def __init__(self, lang: str = "", *, cmd: str = "flower", folder: str = "") -> None:
        from flower_magic.core.words import pick_lang_or_default, say

        lang = pick_lang_or_default(lang)
        how = say("set_key_notebook" if cmd.startswith("%") else "set_key_terminal", lang)
        key = {"demo": "no_credentials_demo", "real": "no_credentials_real"}.get(folder, "no_credentials")
        super().__init__(say(key, lang, cmd=cmd, how=how))


class PathError(UserError, OSError):
    """A directory flower needs cannot be created or used.

    Attributes:
        path: the offending path.
        role: what it was for (``workspace``, ``run dir`` ...).
    """

    def __init__(self, role: str, path: Path, reason: str, lang: str = "") -> None:
        from flower_magic.core.words import pick_lang_or_default, say, short_path

        self.role = role
        self.path = path
        lang = pick_lang_or_default(lang)
        shown_role = say("role_workspace" if role == "workspace" else "role_run_dir", lang)
        flag = "-w/--workspace" if role == "workspace" else "-r/--run-dir"
        super().__init__(say("path_unusable", lang, path=short_path(path), role=shown_role, reason=reason, flag=flag))


@contextlib.contextmanager
def logged(logger: logging.Logger, what: str, level: int = logging.DEBUG) -> Iterator[None]:
    """Carry on past an error in best-effort work, but say it in ``logger`` (with the traceback)
    instead of swallowing it: ``with logged(log, "closing the store"): store.close()``."""
    try:
        yield
    except Exception:
        logger.log(level, "%s failed", what, exc_info=True)


DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})
MIN_FREE_BYTES = 8 * 1024 * 1024  # below this, a run would fail at its first transcript write


class DiskError(FlowerError, OSError):
    """A write failed because the disk is full, over quota or read-only: one line saying which file
    and what to do. What was written before stays; the next run continues from there.

    Attributes:
        path: the file that could not be written ("" when the system did not say).
    """

    def __init__(self, exc: OSError, lang: str = "") -> None:
        from flower_magic.core.words import pick_lang_or_default, say, short_path

        self.path = str(exc.filename or "")
        why = exc.strerror or type(exc).__name__
        shown = short_path(self.path) if self.path else "?"
        super().__init__(say("disk_error", pick_lang_or_default(lang), path=shown, why=why))


def disk_error(exc: BaseException, lang: str = "") -> DiskError | None:
    """``exc`` (or the OSError it was raised from) as a ``DiskError`` when the disk is to blame, else None."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, DiskError):
            return cur
        if isinstance(cur, OSError) and cur.errno in DISK_ERRNOS:
            return DiskError(cur, lang)
        cur = cur.__cause__ or cur.__context__
    return None


class NotAFile(UserError, OSError):
    """A file flower keeps in the run dir is something else (a directory, a named pipe): nothing ran.

    Attributes:
        path: the offending path.
    """

    def __init__(self, path: Path, lang: str = "") -> None:
        from flower_magic.core.words import pick_lang_or_default, say, short_path

        lang = pick_lang_or_default(lang)
        try:
            mode = path.lstat().st_mode
        except OSError:
            mode = 0
        self.path = path
        super().__init__(say("not_a_file", lang, path=short_path(path), kind=say(kind_of(mode), lang)))


class LinkRefused(UserError, OSError):
    """A file or folder flower keeps (in the run dir, in ``.flower``) is a symbolic link. Flower never
    writes through one (``runs/run.lock -> ../../notes.md`` in a cloned repository would be wiped), so
    nothing ran and nothing was written.

    Attributes:
        path: the link.
        target: what it points to, as ``readlink`` says ("" when that cannot be read).
    """

    def __init__(self, path: Path, lang: str = "", *, key: str = "link_refused") -> None:
        from flower_magic.core.words import pick_lang_or_default, say, short_path, short_paths_in

        self.path = path
        try:
            self.target = os.readlink(path)
        except OSError:
            self.target = ""
        # A link's text comes from whoever made it (a cloned repository): no escape reaches a terminal.
        shown = short_paths_in(self.target) if self.target.isprintable() else ascii(self.target)
        real = short_path(os.path.realpath(path))
        real = real if real.isprintable() else ascii(real)
        super().__init__(say(key, pick_lang_or_default(lang), path=short_path(path), target=shown or "?", real=real))


class RunLocked(UserError):
    """Another process runs a workflow in this run dir (it holds ``run.lock``); nothing was written.

    Attributes:
        path: the lock file.
        pid: the holder's pid (None when its record could not be read).
        host: the holder's host name.
        since: when it took the lock (ISO 8601).
        step: the step it is running ("" before the first).
        front_end: ``notebook``, ``terminal`` or ``api``.
    """

    def __init__(
        self,
        path: Path,
        *,
        pid: int | None,
        host: str,
        since: str,
        step: str,
        front_end: str,
        lang: str = "zh",
    ) -> None:
        # The words live in the one phrase table (a stdlib-only leaf module, cheap to import here).
        from flower_magic.core.words import run_locked_line

        self.path = path
        self.pid = pid
        self.host = host
        self.since = since
        self.step = step
        self.front_end = front_end
        super().__init__(
            run_locked_line(path, pid=pid, host=host, since=since, step=step, front_end=front_end, lang=lang)
        )


class SessionBusy(FlowerError):
    """Someone else (a ``claude`` process that does not take the run lock) kept writing the session's
    transcript for longer than we wait; the step stopped instead of resuming on top of it.

    Attributes:
        session_id: the session.
        path: the transcript file that kept changing.
        pids: live Claude Code processes seen on it (empty when none could be seen).
        waited_s: how long we waited.
    """

    def __init__(
        self, session_id: str, path: Path, *, pids: tuple[int, ...], waited_s: float, lang: str = "zh"
    ) -> None:
        from flower_magic.core.words import session_busy_line

        self.session_id = session_id
        self.path = path
        self.pids = pids
        self.waited_s = waited_s
        super().__init__(session_busy_line(session_id, path, pids=pids, waited_s=waited_s, lang=lang))


def has_credentials(environ: Mapping[str, str] | None = None) -> bool:
    """True when an API key, a token, a cloud provider or a Claude login is configured."""
    env = os.environ if environ is None else environ
    if any(env.get(k) for k in CREDENTIAL_VARS) or any(env.get(k) for k in CLOUD_VARS):
        return True
    return (config_dir(dict(env)) / ".credentials.json").is_file()


def ensure_dir(role: str, path: Path, lang: str = "") -> Path:
    """Create ``path`` (and parents) or raise ``PathError`` naming it."""
    check_dir(role, path, lang)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PathError(role, path, exc.strerror or str(exc), lang) from exc
    check_dir(role, path, lang)
    return path


def check_dir(role: str, path: Path, lang: str = "") -> None:
    """Raise ``PathError`` unless ``path`` is, or could be created as, a writable directory. Writes nothing.

    The nearest existing ancestor decides when ``path`` does not exist yet.
    """
    from flower_magic.core.words import pick_lang_or_default, say, short_path

    lang = pick_lang_or_default(lang)
    here = path
    while not os.path.lexists(here) and here.parent != here:
        here = here.parent
    if not here.is_dir():
        reason = say("reason_file", lang) if here == path else say("reason_under_file", lang, parent=short_path(here))
        raise PathError(role, path, reason, lang)
    if not os.access(here, os.W_OK | os.X_OK):
        raise PathError(role, path, say("reason_not_writable", lang), lang)
    read_only = False
    if sys.platform != "win32":  # no statvfs on Windows: os.access above is all there is
        with contextlib.suppress(OSError):
            read_only = bool(os.statvfs(here).f_flag & os.ST_RDONLY)
    if read_only:
        raise PathError(role, path, say("reason_read_only", lang), lang)
    try:
        free = shutil.disk_usage(here).free
    except OSError:
        free = MIN_FREE_BYTES
    if free < MIN_FREE_BYTES:
        raise PathError(role, path, say("reason_full", lang, free=f"{free / 2**20:.1f} MiB"), lang)


def check_files(paths: list[Path], lang: str = "") -> None:
    """Raise ``LinkRefused`` for the first of ``paths`` that is a symbolic link (to anything, or to
    nowhere), ``NotAFile`` for one that exists and is not a regular file. Writes nothing."""
    for path in paths:
        try:
            mode = path.lstat().st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            raise LinkRefused(path, lang)
        if not stat.S_ISREG(mode):
            raise NotAFile(path, lang)


def check_folders(paths: list[Path], lang: str = "") -> None:
    """Raise ``LinkRefused`` for the first of ``paths`` that is a symbolic link. Writes nothing."""
    for path in paths:
        if os.path.islink(path):
            raise LinkRefused(path, lang)
