"""Where Claude Code keeps a workspace's transcripts, computed without importing the SDK.

Claude Code names a workspace's sessions by its path: realpath, Unicode NFC, every character outside
``[a-zA-Z0-9]`` replaced by ``-``, and a name longer than 200 characters cut and suffixed with a 32-bit
hash in base 36. It is a JavaScript program, so "character" means a UTF-16 code unit: a character
outside the Basic Multilingual Plane (an emoji such as 🌻) is two units, so two ``-``, and it counts
twice towards the 200 and in the hash. That name is its folder under ``projects/`` and the
``project_key`` of every entry the SDK mirrors into a store (``file_path_to_session_key`` reads it off
the transcript's path), so ``project_key`` here computes exactly that.

The SDK's own ``project_key_for_directory`` counts code points instead (``sdk_project_key``); the two
agree on every path without such characters. Where they differ, the SDK's store-backed resume asks
the store under its own key: ``stores.resume.PruningSessionStore`` answers it from Claude Code's.
The wake banner and the web panel use this module so they never pay the SDK's import time.
"""

from __future__ import annotations

import os
import re
import struct
import unicodedata
from collections.abc import Iterable
from pathlib import Path

MAX_KEY_CHARS = 200  # the CLI's limit for a project directory name
_NOT_ALNUM = re.compile(r"[^a-zA-Z0-9]")
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"
_ALNUM = frozenset(map(ord, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"))


def _hash36(codes: Iterable[int]) -> str:
    h = 0
    for code in codes:
        h = ((h << 5) - h + code) & 0xFFFFFFFF  # JavaScript's 32-bit `hash |= 0`
    if h >= 0x80000000:
        h -= 0x100000000
    h = abs(h)
    digits = ""
    while h:
        h, rem = divmod(h, 36)
        digits = _BASE36[rem] + digits
    return digits or "0"


def _canonical(directory: str | Path) -> str:
    try:
        path = os.path.realpath(directory)
    except OSError:
        path = str(directory)
    return unicodedata.normalize("NFC", path)


def _utf16_units(text: str) -> tuple[int, ...]:
    data = text.encode("utf-16-le", "surrogatepass")
    return struct.unpack(f"<{len(data) // 2}H", data)


def project_key(directory: str | Path) -> str:
    """Claude Code's ``project_key`` for a workspace directory (its sessions' folder and store key)."""
    units = _utf16_units(_canonical(directory))
    key = "".join(chr(u) if u in _ALNUM else "-" for u in units)
    if len(key) <= MAX_KEY_CHARS:
        return key
    return f"{key[:MAX_KEY_CHARS]}-{_hash36(units)}"


def sdk_project_key(directory: str | Path) -> str:
    """The SDK's ``project_key_for_directory`` (code points, not UTF-16 units): ``project_key`` unless
    the path holds a character outside the Basic Multilingual Plane."""
    path = _canonical(directory)
    key = _NOT_ALNUM.sub("-", path)
    if len(key) <= MAX_KEY_CHARS:
        return key
    return f"{key[:MAX_KEY_CHARS]}-{_hash36(map(ord, path))}"


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
