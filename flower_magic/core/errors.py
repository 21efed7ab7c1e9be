"""Errors a person sees: each says what happened, with the value, and what to do next."""

from __future__ import annotations

import os
from pathlib import Path

from flower_magic.core.project import config_dir

# Any one of these makes the Claude Code CLI able to call a model.
CREDENTIAL_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
CLOUD_VARS = ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY")


class FlowerError(Exception):
    """Base class of flower_magic's own errors."""


class CredentialsError(FlowerError, RuntimeError):
    """No way to reach a model was configured."""

    def __init__(self) -> None:
        super().__init__(
            "No Anthropic credentials found. Set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN for a gateway, "
            "with ANTHROPIC_BASE_URL), or log in once with `claude login`. "
            "To try flower offline, run it against the built-in fake API: `python -m flower_magic.testing`."
        )


class PathError(FlowerError, OSError):
    """A directory flower needs cannot be created or used.

    Attributes:
        path: the offending path.
        role: what it was for (``workspace``, ``run dir`` ...).
    """

    def __init__(self, role: str, path: Path, reason: str) -> None:
        self.role = role
        self.path = path
        super().__init__(
            f"Cannot use {path} as the {role}: {reason}. Choose another directory "
            f"({'-w/--workspace' if role == 'workspace' else '-r/--run-dir'})."
        )


class RunLocked(FlowerError):
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


def has_credentials(environ: dict[str, str] | os._Environ[str] | None = None) -> bool:
    """True when an API key, a token, a cloud provider or a Claude login is configured."""
    env = os.environ if environ is None else environ
    if any(env.get(k) for k in CREDENTIAL_VARS) or any(env.get(k) for k in CLOUD_VARS):
        return True
    return (config_dir(dict(env)) / ".credentials.json").is_file()


def ensure_dir(role: str, path: Path) -> Path:
    """Create ``path`` (and parents) or raise ``PathError`` naming it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PathError(role, path, exc.strerror or str(exc)) from exc
    if not path.is_dir():
        raise PathError(role, path, "it exists and is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise PathError(role, path, "it is not writable")
    return path
