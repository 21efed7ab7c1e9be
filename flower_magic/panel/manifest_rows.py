"""Read ``<run_dir>/manifest.json`` for the panel: rows shaped for display, totals, and what went wrong.

Guarantees:
- Never raises for file content. An unparseable file (empty, truncated mid-write, not JSON) and a
  file of the wrong shape are reported as ``ManifestUnreadable`` with an HTTP status and a message
  saying what to do; the caller decides how to answer.
- Rows that are not JSON objects are skipped and counted; fields of the wrong type read as absent
  (``None``) instead of failing the whole table.
- Agent text in a row (``text``, ``errors``) is capped at ``MAX_TEXT_CHARS`` per string, so one
  runaway row cannot make the response huge.
- Reading a file again after it changed parses only the rows whose bytes changed, when the file has
  the layout flower writes (``core.manifest.canonical_pieces``); other layouts are parsed whole. The
  rows are the same either way.

Not guaranteed:
- Reading while a writer replaces the file gives the old or the new content, never a mix, only
  because writers replace it atomically (``os.replace``); a writer that writes in place can be caught
  half-way, which reads as ``ManifestUnreadable`` (503: try again).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flower_magic.core import manifest
from flower_magic.core.bulk import gc_paused
from flower_magic.core.durable import read_capped
from flower_magic.core.errors import kind_of
from flower_magic.panel.errors import PanelError, Phrase

FILENAME = manifest.MANIFEST

# Per-string cap on agent text sent to the panel; the full text stays in manifest.json.
MAX_TEXT_CHARS = 4000
# Beyond this a manifest is not a run's manifest; refusing bounds the memory one request can take.
MAX_MANIFEST_BYTES = 256 * 1024 * 1024


class ManifestUnreadable(PanelError):
    """manifest.json exists but gives no rows. ``status`` is the HTTP status to answer with."""


def _num(value: Any) -> float | int | None:
    # type() rather than isinstance(): bool is an int subclass and is not a number here. x - x is
    # 0.0 only for finite floats (inf - inf and nan - nan are nan).
    kind = type(value)
    if kind is int or (kind is float and value - value == 0.0):
        return value  # type: ignore[no-any-return]
    return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = value if type(value) is str else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + " …[truncated]"


def _texts(value: Any) -> list[str]:
    if type(value) is not list:
        return []
    if all(type(v) is str and len(v) <= MAX_TEXT_CHARS for v in value):
        return value  # the common case, as flower writes it
    return [t for t in (_text(v) for v in value) if t is not None]


def _flag(value: Any) -> bool | None:
    return value if type(value) is bool else None


def shape_row(index: int, row: dict[str, Any]) -> dict[str, Any]:
    """One manifest row as the panel shows it: known fields only, each of its documented type.

    Runs once per row of a changed manifest (10K rows for a long run), so it stays flat and cheap.
    """
    get = row.get
    started, ended, duration = _num(get("started_at")), _num(get("ended_at")), _num(get("duration_s"))
    if duration is None and started is not None and ended is not None and ended >= started:
        duration = round(ended - started, 2)
    session, turns, attempts, context = (
        get("session_id"),
        _num(get("num_turns")),
        _num(get("attempts")),
        _num(get("context")),
    )
    return {
        "index": index,
        "step": _text(get("step")) or "",
        "session_id": session if type(session) is str else None,
        "ok": _flag(get("ok")),
        "cost_usd": _num(get("cost_usd")),
        "num_turns": None if turns is None else int(turns),
        "duration_s": duration,
        "attempts": None if attempts is None else int(attempts),
        "resumed": _flag(get("resumed")),
        "retired": _texts(get("retired")),
        "context": None if context is None else int(context),
        "started_at": started,
        "ended_at": ended,
        "error": _text(get("error")),
        "errors": _texts(get("errors")),
        "text": _text(get("text")),
        "run": _text(get("run")),
    }


def totals(raw_rows: list[dict[str, Any]], shaped: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's sums as ``core.manifest.totals`` computes them (the CLI's numbers), plus steps that ended ok."""
    return _with_ok(manifest.totals(raw_rows), shaped)


def _with_ok(sums: dict[str, Any], shaped: list[dict[str, Any]]) -> dict[str, Any]:
    return {**sums, "ok": sum(1 for r in shaped if r["ok"] is True)}


@dataclass(frozen=True)
class Manifest:
    rows: list[dict[str, Any]]
    totals: dict[str, Any]
    skipped: int
    # Each row's bytes, when the file has the layout flower writes (see ``prefix_mark``).
    pieces: list[bytes] | None = None


def prefix_mark(pieces: list[bytes], count: int) -> str:
    """``"<count>:<digest>"`` of the first ``count`` rows' bytes: equal marks mean those rows are the
    same, so a client holding them needs only the rows after them."""
    digest = hashlib.sha1()
    for piece in pieces[:count]:
        digest.update(len(piece).to_bytes(8, "little"))
        digest.update(piece)
    return f"{count}:{digest.hexdigest()[:24]}"


# Manifests whose rows are remembered by their bytes (a few open panels is the usual case).
REMEMBERED_FILES = 4
# A row as the reader keeps it: (as shown, its share of the totals).
_Kept = tuple[dict[str, Any], manifest.RowTotals]
# path -> {row bytes after its "{": the row as kept}
_remembered: OrderedDict[Path, dict[bytes, _Kept]] = OrderedDict()
_remembered_lock = threading.Lock()


def _rows_by_piece(path: Path, data: bytes) -> tuple[list[dict[str, Any]], dict[str, Any], list[bytes]] | None:
    """(shaped rows, totals, row bytes) of a canonical-layout file, reusing rows seen in this file before;
    None when the file does not have that layout after all (the caller parses it whole)."""
    pieces = manifest.canonical_pieces(data)
    if pieces is None:
        return None
    with _remembered_lock:
        known = _remembered.get(path, {})
    seen: dict[bytes, _Kept] = {}
    rows: list[dict[str, Any]] = []
    shares: list[manifest.RowTotals] = []
    for index, piece in enumerate(pieces):
        hit = known.get(piece) or seen.get(piece)
        if hit is None:
            value = manifest.piece_row(piece)
            if value is None:
                return None  # a separator inside a row: not the canonical layout
            hit = (shape_row(index, value), manifest.row_totals(value))
        seen[piece] = hit
        shaped, share = hit
        rows.append(shaped if shaped["index"] == index else {**shaped, "index": index})
        shares.append(share)
    with _remembered_lock:
        _remembered[path] = seen
        _remembered.move_to_end(path)
        while len(_remembered) > REMEMBERED_FILES:
            _remembered.popitem(last=False)
    return rows, _with_ok(manifest.sum_totals(shares), rows), pieces


def read(path: Path) -> Manifest | None:
    """The manifest at ``path``, shaped; ``None`` when there is no file (a run that has not ended a step).

    Raises:
        ManifestUnreadable: the file exists but is empty, not JSON, too big or not a list.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a symlink loop, a name too long, a folder that cannot be searched
        raise ManifestUnreadable(422, "ManifestNotAFile", "lab_manifest_not_file", kind=Phrase("kind_other")) from exc
    if st.st_size > MAX_MANIFEST_BYTES:
        raise ManifestUnreadable(
            413, "ManifestTooLarge", "lab_manifest_too_large", size=st.st_size, limit=MAX_MANIFEST_BYTES
        )
    if not stat.S_ISREG(st.st_mode):
        # A FIFO would block the reader; a directory or a device is not a manifest either.
        raise ManifestUnreadable(422, "ManifestNotAFile", "lab_manifest_not_file", kind=Phrase(kind_of(st.st_mode)))
    try:
        raw_bytes = read_capped(path, MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _unparseable(exc) from exc
    with gc_paused():
        by_piece = _rows_by_piece(path, raw_bytes)
        if by_piece is not None:
            rows, sums, pieces = by_piece
            return Manifest(rows, sums, 0, pieces)
        try:
            data = manifest.parse_json(raw_bytes)  # the CLI's reader: a BOM is fine, big integers exact
        except (ValueError, RecursionError) as exc:
            raise _unparseable(exc) from exc
    if not isinstance(data, list):
        raise ManifestUnreadable(422, "ManifestNotAList", "lab_manifest_not_list", kind=type(data).__name__)
    with gc_paused():
        raw = [r for r in data if isinstance(r, dict)]
        rows = [shape_row(i, r) for i, r in enumerate(raw)]
    return Manifest(rows, totals(raw, rows), len(data) - len(rows))


def _unparseable(exc: Exception) -> ManifestUnreadable:
    # A run replacing the file, or one written in place by an older tool, can be caught half-way.
    return ManifestUnreadable(503, "ManifestUnparseable", "lab_manifest_unparseable", why=type(exc).__name__)
