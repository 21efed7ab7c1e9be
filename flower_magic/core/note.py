"""A notes document a person may edit (需求.md, 目标.md): read in the encodings editors save, and never
replaced while it holds what a person wrote.

Whose bytes are these: beside each note, ``.<name>.flower.json`` records the sha256 of the bytes flower
last wrote there (``written``) and of the person's version a run last took in (``seen``). A note is
flower's when its bytes hash to ``written``; with no record at all (a file written by flower_magic 0.1
or by the original runtime), when its text is exactly what flower renders from it (``renders``).
Anything else is a person's edit, even one that only re-saved the file in another encoding.

Guarantees:
    - ``read_note`` and ``Note.read`` never raise. Encodings are tried in this order: a UTF-16 BOM, a
      UTF-8 BOM, UTF-8, GB18030; a decoding with control characters (NUL, …) is not text.
    - ``replace`` never destroys a person's bytes: when the file there is not flower's, a
      byte-identical copy ``<name>.edited-<YYYYmmdd-HHMMSS>`` is made durable beside it first (named
      as ``lineage.json.unreadable-<ts>`` is), and only then is the file replaced; a file that cannot
      be read at all is moved aside under that name instead. If neither works: OSError, file untouched.
    - ``append`` only appends, in the file's own encoding (a GB18030 or UTF-16 file stays one), and
      carries the record over, so flower's own append never makes its file look like a person's edit
      and never makes a person's edit look like flower's. It never appends through a symbolic link
      (``durable.IsALink``); ``replace`` renames over the name, so a link there is replaced, never
      written into.
    - The record is written after the note itself. A lost record (a crash in between, a folder that
      takes the note but not the record) only makes flower keep one copy too many, never one too few.
Not guaranteed:
    - An edit saved in the milliseconds between ``replace``'s read and its write is not kept.
    - Bytes a person restored to exactly what flower last wrote are flower's (there is nothing to keep).
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flower_magic.core.durable import BINARY, copy_aside, open_own, read_capped, set_aside, write_atomic

MAX_NOTE_BYTES = 4 * 1024 * 1024  # a notes document is prose; anything bigger is not one of ours
ASIDE_REASON = "edited"  # <name>.edited-<ts>

# C0 controls other than tab, newline, form feed and carriage return: never in a text a person saved,
# always in binary or in bytes decoded with the wrong codec (UTF-16 read as bytes gives NULs).
_NOT_TEXT_RE = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")
_BOMS = ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"), (codecs.BOM_UTF8, "utf-8-sig"))


def decode(data: bytes) -> tuple[str, str] | None:
    """``(text, encoding)`` for the bytes of a note; None when they are not text in any encoding read.

    ``encoding`` is the codec that appends to the file without a second BOM (``utf-16-le``,
    ``utf-16-be``, ``utf-8-sig`` for a file that starts with a UTF-8 BOM, ``utf-8``, ``gb18030``).
    """
    candidates: list[tuple[bytes, str]] = []
    for bom, codec in _BOMS:
        if data.startswith(bom):
            candidates.append((data[len(bom) :], codec))
            break
    candidates += [(data, "utf-8"), (data, "gb18030")]
    for body, codec in candidates:
        try:
            text = body.decode("utf-8" if codec == "utf-8-sig" else codec)
        except UnicodeDecodeError:
            continue
        if not _NOT_TEXT_RE.search(text):
            return text, codec
    return None


def read_note(path: Path) -> str | None:
    """The text of a notes document; None when it is missing, unreadable, not a regular file (a FIFO
    must not hang a run), too large, or not text in any encoding ``decode`` reads."""
    try:
        decoded = decode(read_capped(Path(path), MAX_NOTE_BYTES))
    except OSError:
        return None
    return None if decoded is None else decoded[0]


def record_path(path: Path) -> Path:
    """Where the record of ``path`` lives: ``.<name>.flower.json`` beside it (hidden, like temp files)."""
    return path.with_name(f".{path.name}.flower.json")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _load_record(path: Path) -> dict[str, str] | None:
    try:
        doc = json.loads(read_capped(record_path(path), 64 * 1024))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    return {k: v for k, v in doc.items() if isinstance(k, str) and isinstance(v, str)}


def _save_record(path: Path, record: dict[str, str]) -> None:
    # An unwritable record costs one spare copy later (module docstring); it must not fail the write.
    with contextlib.suppress(OSError):
        write_atomic(record_path(path), json.dumps(record, sort_keys=True).encode("ascii"))


@dataclass(frozen=True)
class Note:
    """What is at a note's path now, and whose it is.

    Attributes:
        path: the note.
        exists: something is at ``path`` (a file, or anything else a person put there).
        data: its bytes; None when missing or unreadable.
        text: its text; None when missing, unreadable or not text.
        encoding: the codec ``text`` was read with ("" without text).
        is_ours: flower wrote exactly these bytes, or nothing is there.
        is_seen: these bytes are a person's version a run already took in.
    """

    path: Path
    exists: bool
    data: bytes | None
    text: str | None
    encoding: str
    is_ours: bool
    is_seen: bool

    @classmethod
    def read(cls, path: Path, *, renders: Callable[[str], bool]) -> Note:
        """Read ``path`` and judge it (never raises).

        Args:
            renders: whether a text is exactly what flower renders from it; decides for a note
                without a record (module docstring).
        """
        path = Path(path)
        try:
            data: bytes | None = read_capped(path, MAX_NOTE_BYTES)
        except FileNotFoundError:
            return cls(path, False, None, None, "", True, False)
        except OSError:
            data = None
        if data is None:
            return cls(path, True, None, None, "", False, False)
        decoded = decode(data)
        text, encoding = decoded if decoded is not None else (None, "")
        record = _load_record(path)
        digest = _digest(data)
        # No record at all: a file from before records existed, flower's if it renders as itself.
        ours = record.get("written") == digest if record is not None else text is not None and renders(text)
        seen = record is not None and record.get("seen") == digest
        return cls(path, True, data, text, encoding, ours, seen)

    @property
    def is_edited(self) -> bool:
        """A person's version is there (not flower's bytes)."""
        return self.exists and not self.is_ours

    @property
    def is_news(self) -> bool:
        """A person's version no run has taken in yet."""
        return self.is_edited and not self.is_seen

    def mark_seen(self) -> None:
        """Record that a run took these bytes in (the model had them), so the next run does not again."""
        if self.data is None:
            return
        record = _load_record(self.path) or {}
        record["seen"] = _digest(self.data)
        _save_record(self.path, record)


def replace(path: Path, data: bytes, *, renders: Callable[[str], bool]) -> Path | None:
    """Replace the note at ``path`` with ``data``, keeping a person's version aside first.

    Returns:
        Where the person's version was kept (``<name>.edited-<ts>``), or None when the file was
        flower's or absent.

    Raises:
        OSError: the person's version could not be kept, or the folder cannot be written; the note
            is untouched either way.
    """
    path = Path(path)
    note = Note.read(path, renders=renders)
    aside: Path | None = None
    if note.is_edited and note.data is not None:
        aside = copy_aside(path, note.data, ASIDE_REASON)
    elif note.is_edited:
        aside = set_aside(path, ASIDE_REASON)
        if aside is None:
            raise OSError(f"cannot keep the unreadable {path} aside; not replacing it")
    write_atomic(path, data)
    _save_record(path, {"written": _digest(data)})
    return aside


def append(path: Path, text: str, *, title: str = "") -> None:
    """Append ``text`` to the note at ``path`` in the note's own encoding; never rewrites what is there.

    Args:
        path: the note.
        text: what to add.
        title: written first when the file does not exist yet.

    Raises:
        OSError: the file cannot be written (``IsALink``: it is a symbolic link).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    before: bytes | None = b""
    # O_EXCL decides "new file" and creates it in one step, so two appenders never both write a title.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | BINARY, 0o644)
        created = True
        data = (title + text).encode("utf-8")
    except FileExistsError:
        created = False
        fd = open_own(path, os.O_WRONLY | os.O_APPEND)  # a link is refused (IsALink), never appended through
        try:
            before = read_capped(path, MAX_NOTE_BYTES)
        except OSError:
            before = None
        decoded = decode(before) if before is not None else None
        # utf-8-sig's encoder would write a second BOM mid-file.
        codec = decoded[1] if decoded is not None and decoded[1] != "utf-8-sig" else "utf-8"
        data = text.encode(codec)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    _carry_record(path, before, created=created)


def _carry_record(path: Path, before: bytes | None, *, created: bool) -> None:
    """After an append: a file that was flower's (or a version already seen) stays so."""
    record = {} if created else _load_record(path)
    if before is None or record is None:
        # Unread before, or no record: ``Note.read`` judges a record-less note by its rendering,
        # which an append of flower's sections does not disturb.
        return
    try:
        after = read_capped(path, MAX_NOTE_BYTES)
    except OSError:
        return
    if created:
        _save_record(path, {"written": _digest(after)})
        return
    old = _digest(before)
    carried = {key: _digest(after) if value == old else value for key, value in record.items()}
    if carried != record:
        _save_record(path, carried)
