"""A Python without POSIX-only modules, for flower_magic: what it meets on Windows, simulated on Linux.

Active in a process whose ``PYTHONPATH`` starts with this folder (``tests.helpers.without_posix``).
``import fcntl`` (and the other POSIX-only modules in ``BLOCKED``) raises ``ModuleNotFoundError`` when
flower_magic's own code asks. Third-party code keeps them: on Windows it takes its own branches, which
cannot be simulated here (``mcp``'s stdio server, imported by claude-agent-sdk, imports ``fcntl`` on
POSIX). With ``NO_POSIX_FOR=everyone`` nobody gets them, for code that imports nothing third-party.

Each refusal is appended to the file named by ``NO_POSIX_LOG`` as ``<importer> <module>``, so a test
can tell the simulation was in force and which code took the other path.
"""

from __future__ import annotations

import builtins
import os
import sys
from typing import Any

BLOCKED = frozenset({"fcntl", "termios", "tty", "pty", "resource", "grp", "pwd"})
_EVERYONE = os.environ.get("NO_POSIX_FOR") == "everyone"
_LOG = os.environ.get("NO_POSIX_LOG", "")
_real_import = builtins.__import__


def _refuse(name: str, importer: str) -> ModuleNotFoundError:
    if _LOG:
        with open(_LOG, "a", encoding="utf-8") as log:
            log.write(f"{importer} {name}\n")
    return ModuleNotFoundError(f"No module named {name!r} (simulated: a platform without it)", name=name)


def _blocked_for(name: str, importer: str) -> bool:
    if name.partition(".")[0] not in BLOCKED:
        return False
    return _EVERYONE or importer == "flower_magic" or importer.startswith("flower_magic.")


def _import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
    importer = str((globals or {}).get("__name__") or "")
    if level == 0 and _blocked_for(name, importer):
        raise _refuse(name, importer)
    return _real_import(name, globals, locals, fromlist, level)


class _Finder:
    """For ``importlib.import_module`` and friends, which do not go through ``__import__``."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if _EVERYONE and name.partition(".")[0] in BLOCKED:
            raise _refuse(name, "importlib")


builtins.__import__ = _import
if _EVERYONE:
    for _name in BLOCKED:
        sys.modules.pop(_name, None)
    sys.meta_path.insert(0, _Finder())  # type: ignore[arg-type]
