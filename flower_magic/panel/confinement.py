"""Turn a client-supplied relative path into a real path under the server's root, or refuse.

Guarantees:
- A returned path is the fully resolved (``realpath``) location, inside the resolved root, and no
  component of it below the root starts with ``.`` except where the caller names an allowed hidden
  prefix (the run's own ``.flower/notes``).
- Refusal is one exception type, ``Refused``, whatever the reason, so a handler answers every refusal
  the same way (404, no detail) and a prober learns nothing about what exists outside the root.
- Input is checked *after* Tornado's single URL decoding: anything still looking URL-encoded
  (``%2e``), absolute, with backslashes, control characters or NUL is refused, never decoded again.

Not guaranteed:
- Freedom from races: a symlink swapped in between the check and the read can still redirect that
  one read. The server runs as the notebook user and serves only what that user can read anyway.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from flower_magic.core.errors import FlowerError

# Longer inputs are refused outright: no real notebook directory needs more, and it bounds the work a
# single request can cause.
MAX_PATH_CHARS = 1024

_STILL_ENCODED = re.compile(r"%[0-9A-Fa-f]{2}")


class Refused(FlowerError):
    """The path is not served. The reason is kept for tests and never sent to the client."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def split_relative(rel: str) -> list[str]:
    """Check the syntax of a client path relative to the root and return its components.

    Args:
        rel: a ``/``-separated path, relative; ``""`` means the root itself.

    Raises:
        Refused: absolute, traversing, hidden, encoded, with control characters or too long.
    """
    if not isinstance(rel, str) or len(rel) > MAX_PATH_CHARS:
        raise Refused("not a string or too long")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in rel):
        raise Refused("control character")
    if "\\" in rel or _STILL_ENCODED.search(rel):
        raise Refused("backslash or still URL-encoded")
    if rel.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", rel):
        raise Refused("absolute")
    parts = [p for p in rel.split("/") if p]
    if any(p.startswith(".") for p in parts):
        raise Refused("dot component (traversal or hidden)")
    return parts


def real_root(root: str | os.PathLike[str]) -> Path:
    return Path(os.path.realpath(root))


def inside(root: Path, target: Path, *, hidden_ok: tuple[str, ...] = ()) -> Path:
    """Resolve ``target`` and check that it stays under ``root`` with no hidden component.

    Args:
        root: the resolved root (see ``real_root``).
        target: any path, possibly through symlinks.
        hidden_ok: resolved-relative path prefixes (as ``a/.flower/notes``) below which hidden
            components are allowed.

    Raises:
        Refused: the resolved path leaves the root or has a hidden component.
    """
    real = Path(os.path.realpath(target))
    if real == root:
        return real
    if root not in real.parents:
        raise Refused("outside the root")
    rel = real.relative_to(root).as_posix()
    allowed = any(rel == p or rel.startswith(p + "/") for p in hidden_ok)
    if not allowed and any(part.startswith(".") for part in rel.split("/") if part):
        raise Refused("hidden after resolution")
    return real


def confine_dir(root: Path, rel: str) -> Path:
    """The resolved directory for a client path, which must exist under the root.

    Raises:
        Refused: as ``split_relative`` and ``inside``, or when it is not an existing directory.
    """
    real = inside(root, root.joinpath(*split_relative(rel)))
    if not real.is_dir():
        raise Refused("not a directory")
    return real
