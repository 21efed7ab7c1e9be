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
