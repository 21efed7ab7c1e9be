"""``<run_dir>/manifest.json``: the cumulative run manifest, one row per step attempt, shared by processes.

Format (the original flower's): a JSON array of row objects, indent 2, ``ensure_ascii=False``. A row is
every ``StepResult`` field plus ``duration_s`` and ``run`` (the id of the process that wrote it).

Guarantees:
    - ``persist`` merges by run: under an exclusive OS lock on ``<run_dir>/.lock`` (created once,
      never replaced or deleted) it re-reads the file, keeps every row of other runs byte for byte
      and in file order, replaces this run's rows with the given ones, and writes the result with
      ``durable.write_atomic``. Concurrent ``persist`` calls from any number of processes lose no row,
      and a reader never sees a half-written file.
    - An unreadable manifest is never destroyed: ``persist`` moves it aside
      (``manifest.json.unreadable-<ts>``) and starts from an empty array. A readable array with
      elements that are not objects is kept aside too; its object rows carry over.
    - ``persist`` raises only ``OSError``, and only when the run dir cannot be written (or ``.lock`` is
      a symbolic link, which it never opens). The manifest itself is replaced by a rename, never
      written into, so a link in its place is replaced, its target untouched.
    - ``read_rows`` never raises and never writes.
    - ``new_run_id`` never hands out the same id twice in one process.
Cost:
    ``persist`` parses only rows it has not seen (this process remembers what it wrote last), so
    with 10K rows it takes tens of milliseconds, most of it the fsync of a ~10 MB file. The first
    ``persist`` of a process on a big file it never wrote parses every row (~0.13 s at 10K rows).
Not guaranteed:
    - Safety against writers that skip the lock. The original flower rewrites this file in place
      without a lock: a reader retries a parse that fails (it may be mid-write), but a row it writes
      at the same moment as ``persist`` can be lost, and a file it leaves half-written for longer
      than the retries is set aside as unreadable.
    - Exact indentation of rows kept from a file some other tool wrote compactly: they keep their
      own formatting (still valid JSON).
    - Non-finite floats: they are written as ``null`` (``NaN`` is not JSON and breaks browsers).
    - Distinct run ids across processes: two processes started in the same second collide with
      odds of 1 in 16.7 million (the original's format), and the later writer then replaces the
      other's rows.
    - Exclusion between hosts on a network filesystem: the lock (``core.oslock``: ``flock``, or
      ``LockFileEx`` on Windows) may be local to one host there.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from flower_magic.core import oslock
from flower_magic.core.bulk import orjson_is_exact
from flower_magic.core.durable import open_own, read_capped, set_aside, sweep_temps, write_atomic
from flower_magic.core.indented import encode_row

MANIFEST = "manifest.json"
LOCK = ".lock"

# 10K realistic rows are about 10 MB; 256 MiB is a manifest no run will reach, and still fits in memory.
MAX_MANIFEST_BYTES = 256 * 1024 * 1024

# The original flower rewrites the file in place; a parse that fails may have caught it mid-write,
# which lasts milliseconds. Three looks 50 ms apart outlast that without stalling a step's end.
READ_ATTEMPTS = 3
READ_PAUSE_S = 0.05

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

_issued: set[str] = set()
_issued_lock = threading.Lock()


def new_run_id() -> str:
    """A run id ``YYYYmmdd-HHMMSS-<6 hex>``, never one this process handed out before."""
    with _issued_lock:
        while True:
            run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
            if run_id not in _issued:
                _issued.add(run_id)
                return run_id


def row_of(result: Any, run_id: str) -> dict[str, Any]:
    """The manifest row of a ``StepResult`` (any dataclass instance): its fields, ``duration_s``, ``run``.

    Raises:
        TypeError: ``result`` is not a dataclass instance.
    """
    if not dataclasses.is_dataclass(result) or isinstance(result, type):
        raise TypeError(f"row_of() needs a dataclass instance, got {type(result).__name__}")
    row = dataclasses.asdict(result)
    started, ended = _number(row.get("started_at")), _number(row.get("ended_at"))
    # duration_s is a property on StepResult, so asdict() misses it.
    row["duration_s"] = round(ended - started, 2)
    row["run"] = run_id
    return row


# What one row adds to the totals: cost_usd, num_turns, duration_s, retries, hand-offs.
RowTotals = tuple[float, int, float, int, int]


def row_totals(row: Mapping[str, Any]) -> RowTotals:
    """One row's share of ``totals`` (a reader that keeps rows can keep these and sum them again)."""
    retired = row.get("retired")
    return (
        _number(row.get("cost_usd")),
        int(_number(row.get("num_turns"))),
        _number(row.get("duration_s")),
        max(int(_number(row.get("attempts", 1))) - 1, 0),
        len(retired) if isinstance(retired, list) else 0,
    )


def sum_totals(shares: Iterable[RowTotals]) -> dict[str, Any]:
    """``totals`` from the rows' shares, added in the same order (so the same floats)."""
    steps = turns = retries = handoffs = 0
    cost = duration = 0.0
    for row_cost, row_turns, row_duration, row_retries, row_handoffs in shares:
        steps += 1
        cost += row_cost
        turns += row_turns
        duration += row_duration
        retries += row_retries
        handoffs += row_handoffs
    return {
        "steps": steps,
        "cost_usd": round(cost, 4),
        "num_turns": turns,
        "duration_s": round(duration, 2),
        "retries": retries,
        "handoffs": handoffs,
    }


def totals(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Sums over manifest rows: steps, cost_usd, num_turns, duration_s, retries, handoffs."""
    return sum_totals(map(row_totals, rows))


def continued_rows(rows: Iterable[Mapping[str, Any]]) -> set[int]:
    """The positions of the rows that continued an earlier session instead of starting one: a retry
    after an outage (``resumed``), or a session an earlier row already used (the next round, a
    wake). That is what "continued" means to a person; ``resumed`` alone is only the outage retry.
    The panel's column says the same (``src/table.ts``, ``continuedRows``)."""
    seen: set[str] = set()
    found: set[int] = set()
    for i, row in enumerate(rows):
        session = row.get("session_id")
        if row.get("resumed") is True or (isinstance(session, str) and session in seen):
            found.add(i)
        if isinstance(session, str):
            seen.add(session)
    return found


def read_rows(
    run_dir: str | os.PathLike[str], *, attempts: int = READ_ATTEMPTS, pause_s: float = READ_PAUSE_S
) -> list[dict[str, Any]]:
    """The rows of ``<run_dir>/manifest.json``; [] when missing or unreadable. Never raises, never writes.

    A file that ends too early may be mid-write by a writer that does not write atomically: it is
    read again ``pause_s`` later, up to ``attempts`` reads, while it keeps changing. Elements that
    are not objects are dropped.
    """
    try:
        doc = _parse_settled(Path(run_dir) / MANIFEST, parse_json, attempts=attempts, pause_s=pause_s)
    except OSError:
        return []
    return [row for row in doc if isinstance(row, dict)] if isinstance(doc, list) else []


def persist(run_dir: str | os.PathLike[str], run_id: str, rows: Iterable[Mapping[str, Any]]) -> None:
    """Make ``rows`` (each stamped ``run=run_id``) this run's rows in the manifest; keep all others.

    Raises:
        OSError: the run dir, its lock file or the manifest cannot be written (read-only, full, not a
            folder). Nothing on disk was lost; the caller decides whether a missing row matters.
    """
    folder = Path(os.path.abspath(run_dir))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / MANIFEST
    # Encoded before taking the lock: other writers wait only for the merge itself.
    encoded = [encode_row({**row, "run": run_id}) for row in rows]
    with _exclusive(folder / LOCK):
        sweep_temps(path)
        scan = _load(path)
        if scan is None or scan.dropped:
            # Rewriting would lose the file (or its non-object elements): keep the original aside.
            moved = set_aside(path)
            if moved is None and os.path.lexists(path):
                raise OSError(f"cannot move the unreadable {path} aside; not overwriting it")
            _log.warning("%s was not a readable manifest; kept it as %s", path, moved)
        merged = _merge(scan or _EMPTY, run_id, encoded)
        write_atomic(path, merged.data)
        _last_written[path] = merged


@contextmanager
def _exclusive(lock: Path) -> Iterator[None]:
    # Read-only is enough for flock and LockFileEx, and works even if someone made .lock read-only.
    fd = open_own(lock, os.O_RDONLY | os.O_CREAT)  # a link there is refused (IsALink), never created through
    try:
        oslock.lock(fd)
        yield
    finally:
        os.close(fd)  # releases the lock


def _number(value: Any) -> float:
    kind = type(value)  # exact types: bool is not a number here
    if kind is float:
        return value if math.isfinite(value) else 0.0
    if kind is int:
        return float(value)
    return 0.0


# Reading under the lock: where each row's bytes are and which run it belongs to, so kept rows are
# copied rather than decoded and encoded again.


@dataclasses.dataclass(frozen=True)
class _Scan:
    data: bytes
    spans: list[tuple[int, int]]  # byte span of each object element
    runs: list[object]  # its "run" value
    dropped: int = 0  # elements that were not objects

    def known_rows(self) -> dict[bytes, object]:
        """Each row's exact bytes after its ``{`` -> its run. A row seen before is a valid object."""
        data = self.data
        return {data[s + 1 : e]: run for (s, e), run in zip(self.spans, self.runs, strict=True)}


_EMPTY = _Scan(b"", [], [])
_UNSEEN = object()
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# What this process last wrote to each manifest (one file's bytes per run dir). Under the lock the
# file is read again every time; when another process wrote since, most rows are still
# byte-identical to rows in here and need no parsing.
_last_written: dict[Path, _Scan] = {}


def _load(path: Path) -> _Scan | None:
    """The manifest under the lock: _EMPTY when missing, None when unreadable."""
    try:
        return _parse_settled(path, lambda data: _scan(data, _last_written.get(path)))
    except (FileNotFoundError, NotADirectoryError):
        return _EMPTY
    except OSError:
        return None


def parse_json(data: bytes) -> Any:
    """``data`` (UTF-8, a BOM allowed) as JSON, exactly as the json module reads it.

    orjson (a dependency; optional here) reads a 10K-row manifest ~4x faster. Whatever it refuses
    (a BOM, NaN, a file cut short) or would misread (huge integers) goes to the json module, whose
    errors the mid-write detection understands.

    Raises:
        ValueError: not JSON (a ``json.JSONDecodeError`` or ``UnicodeDecodeError`` from the json path).
        RecursionError: nested too deeply for the json module.
    """
    if _fast_loads is not None and orjson_is_exact(data):
        try:
            return _fast_loads(data)
        except ValueError:
            pass
    return json.loads(data.decode("utf-8-sig"))


def _orjson() -> Callable[[bytes], Any] | None:
    try:
        import orjson
    except ImportError:
        return None
    return orjson.loads


_fast_loads = _orjson()


def _parse_settled(
    path: Path, parse: Callable[[bytes], _T], *, attempts: int = READ_ATTEMPTS, pause_s: float = READ_PAUSE_S
) -> _T | None:
    """``parse`` the file; None when it does not parse. A file that ends too early is read again
    while it keeps changing (a non-atomic writer mid-write); garbage is given up on at once.

    Raises:
        OSError: the file is missing or cannot be read at all.
    """
    data = read_capped(path, MAX_MANIFEST_BYTES)
    for attempt in range(1, max(attempts, 1) + 1):
        try:
            return parse(data)
        except (ValueError, RecursionError) as exc:
            if attempt >= attempts or not _cut_short(exc):
                return None
        time.sleep(pause_s)
        try:
            again = read_capped(path, MAX_MANIFEST_BYTES)
        except OSError:
            return None
        if again == data:
            return None
        data = again
    return None


def _cut_short(exc: BaseException) -> bool:
    """Whether a parse failed the way a file still being written fails: at its end."""
    if isinstance(exc, UnicodeDecodeError):
        return exc.end >= len(exc.object)
    if isinstance(exc, json.JSONDecodeError):
        return exc.msg.startswith("Unterminated string") or _skip_ws(exc.doc, exc.pos) >= len(exc.doc)
    return False


def _scan(data: bytes, known: _Scan | None) -> _Scan:
    """Locate the elements of the JSON array in ``data``. Raises ValueError if it is not one."""
    if known is not None and data == known.data:
        return known
    pos = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    canonical = _canonical(data, pos, known)
    return canonical if canonical is not None else _general(data, pos)


# The layout json.dumps(indent=2) gives a list of objects: each top-level element starts on its own
# line after exactly two spaces. A raw newline never occurs inside a JSON string, so this separator
# is whitespace between tokens; once every piece between separators is a whole JSON object, the file
# is a valid array of exactly those objects.
_SEP = b",\n  "
_ROW_SEP = _SEP + b"{"


def canonical_pieces(data: bytes) -> list[bytes] | None:
    """Each row's bytes after its opening ``{`` when ``data`` has the layout above, else None.

    A piece is a whole JSON object (with its brace put back) only if the file really has that
    layout; callers parse each piece and treat a failure as "not canonical". A UTF-8 BOM is skipped.
    """
    pos = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    end = len(data.rstrip(b" \t\n\r"))
    if data[pos:end] == b"[]":
        return []
    if not data.startswith(b"[\n  {", pos) or not data.endswith(b"}\n]", 0, end):
        return None
    return data[pos + 5 : end - 2].split(_ROW_SEP)


def _canonical(data: bytes, pos: int, known: _Scan | None) -> _Scan | None:
    """The rows of ``data`` if it has the canonical layout, else None."""
    pieces = canonical_pieces(data)
    if pieces is None:
        return None
    seen = known.known_rows() if known is not None else {}
    spans: list[tuple[int, int]] = []
    runs: list[object] = []
    start = pos + 4
    # Each piece is a row without its opening brace (the separator ends with it).
    for piece in pieces:
        run = seen.get(piece, _UNSEEN)
        if run is _UNSEEN:
            row = piece_row(piece)
            if row is None:
                return None  # not the canonical layout after all, or not JSON: the general scan decides
            run = row.get("run")
        spans.append((start, start + 1 + len(piece)))
        runs.append(run)
        start += len(piece) + 5
    return _Scan(data, spans, runs)


def piece_row(piece: bytes) -> dict[str, Any] | None:
    """The row ``{`` + ``piece`` (a piece from ``canonical_pieces``) if that is exactly one JSON
    object, else None (the file does not have the canonical layout after all, or is not JSON)."""
    try:
        row = parse_json(b"{" + piece)  # trailing data is refused by both parsers
    except (ValueError, RecursionError):
        return None
    return row if isinstance(row, dict) else None


def _general(data: bytes, pos: int) -> _Scan:
    """Any JSON layout, one element at a time. Raises ValueError where ``data`` stops being an array."""
    text = data[pos:].decode("utf-8")
    offsets = _ByteOffsets(text, pos)
    spans: list[tuple[int, int]] = []
    runs: list[object] = []
    i = _skip_ws(text, 0)
    if not text.startswith("[", i):
        raise json.JSONDecodeError("Expecting '['", text, i)
    i = _skip_ws(text, i + 1)
    first, dropped = True, 0
    while not text.startswith("]", i):
        if not first:
            if not text.startswith(",", i):
                raise json.JSONDecodeError("Expecting ',' or ']'", text, i)
            i = _skip_ws(text, i + 1)
        value, end = _DECODER.raw_decode(text, i)
        if isinstance(value, dict):
            spans.append((offsets.at(i), offsets.at(end)))
            runs.append(value.get("run"))
        else:
            dropped += 1
        first = False
        i = _skip_ws(text, end)
    if _skip_ws(text, i + 1) != len(text):
        raise json.JSONDecodeError("Extra data", text, i + 1)
    return _Scan(data, spans, runs, dropped)


def _skip_ws(text: str, i: int) -> int:
    m = _WS.match(text, i)
    return m.end() if m else i


class _ByteOffsets:
    """Byte offset in the file of a str index into ``text`` (asked in increasing order)."""

    def __init__(self, text: str, base: int) -> None:
        self._text = text
        self._is_ascii = text.isascii()
        self._index = 0
        self._byte = base

    def at(self, index: int) -> int:
        if self._is_ascii:
            return self._byte + index
        self._byte += len(self._text[self._index : index].encode("utf-8"))
        self._index = index
        return self._byte


def _merge(scan: _Scan, run_id: str, encoded: list[bytes]) -> _Scan:
    """The canonical file: other runs' rows copied from ``scan`` in order, then this run's rows."""
    data, view = scan.data, memoryview(scan.data)
    parts: list[bytes | memoryview] = [b"[\n  "]
    spans: list[tuple[int, int]] = []
    runs: list[object] = []
    size = 4
    # Rows that sit next to each other in the old file are copied as one block.
    block_start = block_end = block_at = -1
    for (start, end), run in zip(scan.spans, scan.runs, strict=True):
        if run == run_id:
            continue
        if block_end >= 0 and start == block_end + 4 and data[block_end:start] == _SEP:
            block_end = end
        else:
            if block_end >= 0:
                parts += (view[block_start:block_end], _SEP)
                size += block_end - block_start + 4
            block_start, block_end, block_at = start, end, size
        spans.append((block_at + start - block_start, block_at + end - block_start))
        runs.append(run)
    if block_end >= 0:
        parts += (view[block_start:block_end], _SEP)
        size += block_end - block_start + 4
    for row in encoded:
        parts += (row, _SEP)
        spans.append((size, size + len(row)))
        runs.append(run_id)
        size += len(row) + 4
    if not spans:
        return _Scan(b"[]\n", [], [])
    parts[-1] = b"\n]\n"
    return _Scan(b"".join(parts), spans, runs)
