"""``<run_dir>/lineage.json``: which session each step used, and how many times the run woke.

Format (the original flower's): ``{"workspace": <resolved path>, "woke": <int>, "steps": {step: sid}}``,
keys in that order, indent 2, ``ensure_ascii=False``, UTF-8.

Guarantees:
    - ``Lineage.open`` writes nothing and moves nothing, never raises for any file content, and never
      prompts. A missing file is an empty lineage; a corrupt or foreign file (another workspace: the
      directory was copied or moved) is an empty lineage with ``problem`` saying why. A file bad
      only in some step entries keeps its good entries (``problem`` still set, file still kept).
    - A file that was judged bad is never overwritten: the first ``flush`` moves it aside
      (``lineage.json.unreadable-<ts>`` / ``lineage.json.other-workspace-<ts>``) before writing, and
      if it cannot be moved the write is skipped.
    - Every write is atomic and durable (``durable.write_atomic``): a ``kill -9`` at any moment leaves
      the old or the new file, whole. Temps of dead writers are swept at each flush.
    - A failed write never raises: it is recorded in ``last_error`` and the run goes on.
    - ``archive`` never overwrites an earlier archive folder.
Not guaranteed:
    - Two processes sharing one run dir overwrite each other's lineage whole (as in the original);
      the last writer wins. Use different run dirs for parallel runs of the same workflow.
    - One ``Lineage`` used from several threads at once.
    - That the sessions named still exist: ``Workflow`` checks that against the store.
    - Sweeping the original flower's ``lineage.tmp``: it carries no pid, so a live writer's temp
      cannot be told from a dead one's.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import time
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath
from typing import Any

from flower_magic.core.durable import read_capped, set_aside, sweep_temps, write_atomic

FILENAME = "lineage.json"

# A real lineage is a few hundred bytes; 8 MiB is far beyond any honest file and small enough to
# read without a thought.
MAX_LINEAGE_BYTES = 8 * 1024 * 1024
# The folders ``archive`` makes: ``<YYYYmmdd-HHMMSS>[-N]`` in local time (the panel finds start-overs by it).
ARCHIVE_NAME = re.compile(r"\d{8}-\d{6}(?:-\d+)?")

# Longest quoted value in a ``problem`` line; it goes into a one-line banner.
_SHOWN_CHARS = 60

_DIGITS = re.compile(r"[0-9]+", re.ASCII)

_Identity = tuple[int, int, int, int]


class _Bad(Exception):
    """The file is unusable; ``reason`` is the short text ``problem`` reports."""

    def __init__(self, reason: str, *, aside_as: str = "unreadable") -> None:
        super().__init__(reason)
        self.reason = reason
        self.aside_as = aside_as


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


def _encodable(text: str) -> bool:
    # A lone surrogate (from "\ud800" in the JSON) would make every later flush fail to encode.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _woke_of(value: Any) -> int:
    if isinstance(value, bool):
        raise _Bad(f"unreadable: woke is {_shown(value)}")
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, float) and math.isfinite(value) and value >= 0 and value.is_integer():
        return int(value)
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value.strip())
    raise _Bad(f"unreadable: woke is {_shown(value)}")


def _parse(data: bytes, workspace: Path) -> tuple[int, dict[str, str], int]:
    """Return (woke, steps, number of step entries dropped) or raise ``_Bad``."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _Bad("unreadable: not UTF-8 text") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise _Bad(f"unreadable: not JSON ({str(exc)[:_SHOWN_CHARS]})") from None
    except RecursionError:
        raise _Bad("unreadable: nested too deeply") from None
    if not isinstance(doc, dict):
        raise _Bad(f"unreadable: top level is {type(doc).__name__}, not an object")
    recorded = doc.get("workspace")
    if not isinstance(recorded, str):
        raise _Bad(f"unreadable: workspace is {_shown(recorded)}")
    if not same_workspace(recorded, workspace):
        raise _Bad(f"other workspace: {recorded[:200]}", aside_as="other-workspace")
    # A missing woke is harmless (count from 0); a present but nonsensical one is corruption.
    woke = _woke_of(doc["woke"]) if "woke" in doc else 0
    raw_steps = doc.get("steps", {})
    if not isinstance(raw_steps, dict):
        raise _Bad(f"unreadable: steps is {type(raw_steps).__name__}, not an object")
    steps: dict[str, str] = {}
    for step, sid in raw_steps.items():
        if step and isinstance(sid, str) and sid and sid.isprintable() and _encodable(step + sid):
            steps[step] = sid
    return woke, steps, len(raw_steps) - len(steps)


_LONG_PREFIXES = ("\\\\?\\UNC\\", "\\\\?\\")  # Windows' extended-length forms: \\?\UNC\server\share, \\?\C:\


def _plain(text: str, *, windows: bool) -> str:
    text = unicodedata.normalize("NFC", text)
    if windows:
        if text.startswith(_LONG_PREFIXES[0]):
            return "\\\\" + text[len(_LONG_PREFIXES[0]) :]
        if text.startswith(_LONG_PREFIXES[1]):
            return text[len(_LONG_PREFIXES[1]) :]
    return text


def same_workspace(recorded: str, workspace: PurePath) -> bool:
    """``recorded`` (lineage.json's ``workspace``, written by this tool or the original) names ``workspace``.

    Compared as paths of ``workspace``'s own kind: on Windows without regard to case, with ``/`` and
    ``\\`` alike and the ``\\\\?\\`` long-path prefix ignored; everywhere after Unicode NFC (macOS may
    hand back the decomposed form of a name typed composed). Failing that, two existing paths that are
    the same directory (a case-insensitive disk, a symlink) are the same workspace; a copied or
    moved run dir is not.
    """
    if recorded == str(workspace):
        return True
    windows = isinstance(workspace, PureWindowsPath)
    kind: type[PurePath] = PureWindowsPath if windows else PurePosixPath
    if kind(_plain(recorded, windows=windows)) == kind(_plain(str(workspace), windows=windows)):
        return True
    try:
        return os.path.samefile(recorded, workspace)
    except (OSError, ValueError):
        return False


def _identity(path: Path) -> _Identity | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _judge(path: Path, workspace: Path) -> tuple[int, dict[str, str], str | None, str]:
    """(woke, steps, problem, aside reason) for whatever is at ``path`` now."""
    try:
        data = read_capped(path, MAX_LINEAGE_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        return 0, {}, None, ""
    except OSError as exc:
        return 0, {}, f"unreadable: {exc.strerror or type(exc).__name__}", "unreadable"
    try:
        woke, steps, dropped = _parse(data, workspace)
    except _Bad as bad:
        return 0, {}, bad.reason, bad.aside_as
    if dropped:
        # Keep what is usable, but keep the original too: the next flush would lose those entries.
        return woke, steps, f"unreadable: {dropped} step entries dropped", "unreadable"
    return woke, steps, None, ""


@dataclass
class Lineage:
    """Step name -> session id for one run dir, plus the wake count.

    Attributes:
        path: ``<run_dir>/lineage.json`` (absolute).
        workspace: the resolved workspace this lineage belongs to.
        steps: step name -> the session id that last carried it.
        woke: how many times a continuous workflow has started here.
        problem: why the file on disk was not used (None when it was fine or missing).
        set_aside_as: where the unusable file was moved, once a flush did that.
        last_error: the error of the last failed write or move (None after a good flush).
    """

    path: Path
    workspace: Path
    steps: dict[str, str] = field(default_factory=dict)
    woke: int = 0
    problem: str | None = None
    set_aside_as: Path | None = None
    last_error: Exception | None = field(default=None, init=False, compare=False)
    # The file judged bad at open (identity, reason for its aside name); cleared once dealt with.
    _bad_file: tuple[_Identity | None, str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.path = Path(os.path.abspath(self.path))
        self.workspace = Path(self.workspace).resolve()

    @classmethod
    def open(cls, run_dir: str | os.PathLike[str], workspace: str | os.PathLike[str]) -> Lineage:
        """Load ``<run_dir>/lineage.json`` for ``workspace``. Read-only; never raises for bad content.

        Returns:
            The lineage on disk, or an empty one (with ``problem`` set when the file was unusable).
        """
        lin = cls(Path(run_dir) / FILENAME, Path(workspace))
        identity = _identity(lin.path)
        lin.woke, lin.steps, lin.problem, aside_as = _judge(lin.path, lin.workspace)
        if lin.problem is not None:
            lin._bad_file = (identity, aside_as)
        return lin

    def remember(self, step: str, sid: str) -> None:
        """Record that ``step`` is carried by session ``sid`` and flush at once. Empty either: no-op."""
        if not step or not sid or not _encodable(step + sid):
            return
        self.steps[step] = sid
        self.flush()

    def bump(self) -> int:
        """Count one more wake, flush, and return the new count (1 on the first run)."""
        self.woke += 1
        self.flush()
        return self.woke

    def flush(self) -> None:
        """Write the lineage durably. Never raises; a failure is kept in ``last_error``."""
        try:
            sweep_temps(self.path)
            if self._bad_file is not None:
                self._keep_bad_file()
            write_atomic(self.path, self._payload())
        except (OSError, ValueError) as exc:
            # ValueError: a workspace path that is not valid UTF-8 cannot be stored as JSON text.
            self.last_error = exc
            return
        self.last_error = None

    def archive(self, into: str | os.PathLike[str], *, extra: Iterable[str | os.PathLike[str]] = ()) -> Path | None:
        """Move lineage.json and each existing file in ``extra`` into ``<into>/<YYYYmmdd-HHMMSS>[-N]/``.

        Afterwards ``steps`` is empty and ``woke`` is 0 (in memory; the file is gone until the next
        flush). An earlier archive folder is never reused. A move that fails is recorded in
        ``last_error`` and skipped.

        Returns:
            The archive folder; None when there was nothing to archive (no folder is made: an empty
            one would read as a start-over that set nothing aside).
        """
        sources = [src for src in (self.path, *(Path(p) for p in extra)) if src.is_file()]
        dest: Path | None = None
        if sources:
            dest = self._new_archive_dir(Path(into))
            for src in sources:
                try:
                    shutil.move(src, dest / src.name)
                except OSError as exc:
                    self.last_error = exc
        self.steps = {}
        self.woke = 0
        # Whatever was bad is now in the archive; if lineage.json could not be moved, the next flush
        # must still not overwrite it.
        self._bad_file = (_identity(self.path), "unarchived") if self.path.exists() else None
        return dest

    def _new_archive_dir(self, into: Path) -> Path:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        dest = into / stamp
        for n in range(1000):
            dest = into / (f"{stamp}-{n}" if n else stamp)
            try:
                dest.mkdir(parents=True)
            except FileExistsError:
                continue
            except OSError as exc:
                self.last_error = exc
            return dest
        return dest

    def _keep_bad_file(self) -> None:
        assert self._bad_file is not None
        identity, reason = self._bad_file
        now = _identity(self.path)
        if now is not None and now != identity:
            # Replaced since we judged it (another process wrote it): judge what is there now.
            problem, reason = _judge(self.path, self.workspace)[2:]
            if problem is None:
                now = None
        if now is not None:
            moved = set_aside(self.path, reason)
            if moved is None and os.path.lexists(self.path):
                raise OSError(f"cannot move the unusable {self.path} aside; not overwriting it")
            self.set_aside_as = moved
        self._bad_file = None

    def _payload(self) -> bytes:
        doc = {"workspace": str(self.workspace), "woke": self.woke, "steps": self.steps}
        return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
