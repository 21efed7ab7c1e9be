"""Where Claude Code keeps a workspace's transcripts, computed without importing the SDK.

The SDK's ``project_key_for_directory`` (sdk-notes A1) names a workspace's sessions in a store:
realpath, Unicode NFC, every character outside ``[a-zA-Z0-9]`` replaced by ``-``, and paths longer
than 200 characters cut and suffixed with a 32-bit hash in base 36. A test checks this module gives
the same keys as the SDK; the wake banner and the web panel use it so they never pay the SDK's
import time.
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

MAX_KEY_CHARS = 200  # the CLI's limit for a project directory name
_NOT_ALNUM = re.compile(r"[^a-zA-Z0-9]")
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def _hash36(text: str) -> str:
    h = 0
    for ch in text:
        h = ((h << 5) - h + ord(ch)) & 0xFFFFFFFF  # JavaScript's 32-bit `hash |= 0`
    if h >= 0x80000000:
        h -= 0x100000000
    h = abs(h)
    digits = ""
    while h:
        h, rem = divmod(h, 36)
        digits = _BASE36[rem] + digits
    return digits or "0"


def project_key(directory: str | Path) -> str:
    """The store's ``project_key`` for a workspace directory."""
    try:
        path = os.path.realpath(directory)
    except OSError:
        path = str(directory)
    path = unicodedata.normalize("NFC", path)
    key = _NOT_ALNUM.sub("-", path)
    if len(key) <= MAX_KEY_CHARS:
        return key
    return f"{key[:MAX_KEY_CHARS]}-{_hash36(path)}"


def config_dir(environ: dict[str, str] | None = None) -> Path:
    """Claude Code's configuration directory (``CLAUDE_CONFIG_DIR`` or ``~/.claude``)."""
    env = os.environ if environ is None else environ
    value = env.get("CLAUDE_CONFIG_DIR")
    if value:
        return Path(unicodedata.normalize("NFC", value))
    home = env.get("HOME") or str(Path.home())
    return Path(unicodedata.normalize("NFC", str(Path(home) / ".claude")))


def local_transcript(workspace: str | Path, session_id: str, environ: dict[str, str] | None = None) -> Path:
    """Where the CLI writes its own local copy of a session's transcript."""
    return config_dir(environ) / "projects" / project_key(workspace) / f"{session_id}.jsonl"
