"""manifest.json: run ids, rows, merge by run under a lock, corrupt files kept aside, concurrency."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from flower_magic.core.manifest import (
    LOCK,
    MANIFEST,
    MAX_MANIFEST_BYTES,
    new_run_id,
    persist,
    read_rows,
    row_of,
    totals,
)


@dataclass
class StepResultLike:
    """The shape of the runtime's StepResult (row_of must accept any dataclass)."""

    step: str
    session_id: str | None = None
    ok: bool = False
    cost_usd: float = 0.0
    num_turns: int = 0
    text: str = ""
    error: str | None = None
    started_at: float = 0.0
    ended_at: float = 0.0
    attempts: int = 1
    errors: list[str] = field(default_factory=list)
    resumed: bool = False
    retired: list[str] = field(default_factory=list)
    context: int = 0


def _dumped(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, indent=2, ensure_ascii=False) + "\n"


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_new_run_id_format_and_unique() -> None:
    """20,000 ids in about a second: 6 random hex digits alone would collide; the id set prevents it."""
    ids = [new_run_id() for _ in range(20_000)]
    assert all(re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_row_of_adds_duration_and_run() -> None:
    result = StepResultLike(
        "干活#round2", "sid", True, 0.5, 7, "做完了", None, 100.0, 163.456, 2, ["API Error"], True, ["old"], 8000
    )
    row = row_of(result, "20261130-101010-abcdef")
    assert list(row) == [
        "step", "session_id", "ok", "cost_usd", "num_turns", "text", "error", "started_at", "ended_at",
        "attempts", "errors", "resumed", "retired", "context", "duration_s", "run",
    ]  # fmt: skip
    assert (row["duration_s"], row["run"], row["errors"]) == (63.46, "20261130-101010-abcdef", ["API Error"])
    row["errors"].append("x")
    assert result.errors == ["API Error"]  # a copy, not the live list
    with pytest.raises(TypeError):
        row_of({"step": "x"}, "r")
    with pytest.raises(TypeError):
        row_of(StepResultLike, "r")


def test_totals() -> None:
    rows: list[dict[str, Any]] = [
        {"cost_usd": 0.25, "num_turns": 3, "duration_s": 10.5, "attempts": 3, "retired": ["a", "b"]},
        {"cost_usd": 0.5, "num_turns": 4, "duration_s": 1.25, "attempts": 1, "retired": []},
        {"cost_usd": "junk", "num_turns": None, "attempts": True, "retired": "x"},
    ]
    assert totals(rows) == {
        "steps": 3,
        "cost_usd": 0.75,
        "num_turns": 7,
        "duration_s": 11.75,
        "retries": 2,
        "handoffs": 2,
    }
    assert totals([])["steps"] == 0


def test_persist_writes_the_original_format(tmp_path: Path) -> None:
    rows = [row_of(StepResultLike("确认需求", "sid-1", True, text='好的\n"引号"'), "r1")]
    persist(tmp_path, "r1", rows)
    assert (tmp_path / MANIFEST).read_text(encoding="utf-8") == _dumped(rows)
    assert read_rows(tmp_path) == rows
    assert _names(tmp_path) == [LOCK, MANIFEST]


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=10), _json_values, max_size=6), max_size=4))
@example([{"": -(2**63) - 1, "big": 2**64, "huge": 10**30}])  # past 64 bits: orjson would read a float
def test_persist_text_equals_json_dumps(rows: list[dict[str, Any]]) -> None:
    """Our fast encoder must write exactly what json.dumps(indent=2, ensure_ascii=False) writes."""
    with tempfile.TemporaryDirectory() as tmp:
        persist(tmp, "run-a", [{"step": "first"}])
        persist(tmp, "run-b", rows)
        expected = [{"step": "first", "run": "run-a"}] + [{**r, "run": "run-b"} for r in rows]
        assert Path(tmp, MANIFEST).read_text(encoding="utf-8") == _dumped(expected)
        assert read_rows(tmp) == expected


def test_odd_values_still_make_valid_json(tmp_path: Path) -> None:
    row: dict[Any, Any] = {"cost_usd": float("nan"), "big": float("inf"), "path": tmp_path, "lone": "a\ud800b"}
    row[(1, 2)] = "k"  # json.dumps would refuse this key; a row must still be written
    persist(tmp_path, "r", [row])
    text = (tmp_path / MANIFEST).read_text(encoding="utf-8")
    json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    (got,) = read_rows(tmp_path)
    assert (got["cost_usd"], got["big"], got["path"], got["lone"], got["(1, 2)"]) == (
        None,
        None,
        str(tmp_path),
        "a\ud800b",
        "k",
    )


def test_merge_across_two_runs(tmp_path: Path) -> None:
    """Reference lineage_offline [7]: two runtimes; the second persists twice; no duplicates."""
    first, second = new_run_id(), new_run_id()
    persist(tmp_path, first, [{"step": "第一次"}])
    persist(tmp_path, second, [{"step": "第二次"}])
    persist(tmp_path, second, [{"step": "第二次"}])
    assert read_rows(tmp_path) == [{"step": "第一次", "run": first}, {"step": "第二次", "run": second}]


def test_other_runs_rows_are_untouched_and_in_order(tmp_path: Path) -> None:
    """A file the original flower wrote (no trailing newline), rows of three runs interleaved."""
    theirs: list[dict[str, Any]] = [
        {"step": "a", "run": "X", "text": "第一\n行", "errors": ["e1", {"nested": [1, 2.5, None]}]},
        {"step": "b", "run": "Y", "extra": {"k": "v"}},
        {"step": "c", "run": "X", "ok": True},
        {"step": "mine-stale", "run": "A"},
        {"step": "d", "run": None},
        {"step": "e"},
    ]
    (tmp_path / MANIFEST).write_text(json.dumps(theirs, indent=2, ensure_ascii=False), encoding="utf-8")
    kept = [r for r in theirs if r.get("run") != "A"]
    persist(tmp_path, "A", [{"step": "a1"}])
    assert read_rows(tmp_path) == [*kept, {"step": "a1", "run": "A"}]
    persist(tmp_path, "A", [{"step": "a1"}, {"step": "a2"}])
    persist(tmp_path, "A", [{"step": "a1"}, {"step": "a2"}, {"step": "a3"}])
    mine = [{"step": f"a{n}", "run": "A"} for n in (1, 2, 3)]
    assert (tmp_path / MANIFEST).read_text(encoding="utf-8") == _dumped([*kept, *mine])
    persist(tmp_path, "A", [])
    assert read_rows(tmp_path) == kept


def test_rows_from_a_compact_file_are_kept(tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_text('[{"run":"X","step":"x"},\t{"run":"Y","step":"y"} ]', encoding="utf-8")
    persist(tmp_path, "A", [{"step": "a"}])
    assert read_rows(tmp_path) == [{"run": "X", "step": "x"}, {"run": "Y", "step": "y"}, {"step": "a", "run": "A"}]
    (tmp_path / MANIFEST).write_bytes(b"\xef\xbb\xbf" + (tmp_path / MANIFEST).read_bytes())  # a BOM is harmless
    persist(tmp_path, "B", [{"step": "b"}])
    assert [r["step"] for r in read_rows(tmp_path)] == ["x", "y", "a", "b"]
    assert _names(tmp_path) == [LOCK, MANIFEST]


def test_a_file_that_only_looks_like_ours_is_parsed_properly(tmp_path: Path) -> None:
    """The fast path splits on ",\\n  {"; here one such split falls inside a nested list."""
    raw = '[\n  {"a": [{},\n  {"x": 1}], "run": "X"}, {"b": 2, "run": "A"},\n  {"c": [{},\n  {}], "run": "Y"}\n]'
    (tmp_path / MANIFEST).write_text(raw, encoding="utf-8")
    persist(tmp_path, "A", [{"step": "a"}])
    assert read_rows(tmp_path) == [
        {"a": [{}, {"x": 1}], "run": "X"},
        {"c": [{}, {}], "run": "Y"},
        {"step": "a", "run": "A"},
    ]


def test_changes_by_another_writer_are_seen(tmp_path: Path) -> None:
    """What this process wrote last is only a hint: the file is re-read under the lock every time."""
    persist(tmp_path, "A", [{"step": "a1", "text": "aaaa"}])
    persist(tmp_path, "B", [{"step": "b1", "text": "bbbb"}, {"step": "b2"}])
    path = tmp_path / MANIFEST
    # Same length, first row changed: a cache trusted without comparing bytes would miss it.
    path.write_bytes(path.read_bytes().replace(b'"aaaa"', b'"AAAA"'))
    persist(tmp_path, "C", [{"step": "c1"}])
    assert [r.get("text") for r in read_rows(tmp_path)] == ["AAAA", "bbbb", None, None]
    # Another writer appended a row and edited the last one.
    rows = read_rows(tmp_path)
    rows[-1]["text"] = "edited"
    path.write_text(_dumped([*rows, {"step": "z1", "run": "Z"}]), encoding="utf-8")
    persist(tmp_path, "A", [{"step": "a1", "text": "again"}])
    assert [(r["step"], r.get("text")) for r in read_rows(tmp_path)] == [
        ("b1", "bbbb"),
        ("b2", None),
        ("c1", "edited"),
        ("z1", None),
        ("a1", "again"),
    ]
    # Another writer removed rows at the end.
    path.write_text(_dumped(read_rows(tmp_path)[:1]), encoding="utf-8")
    persist(tmp_path, "A", [{"step": "a1"}])
    assert [r["step"] for r in read_rows(tmp_path)] == ["b1", "a1"]


def _bad_manifests() -> list[tuple[str, bytes, list[dict[str, Any]]]]:
    """More than 200 unusable manifest.json contents: (name, bytes, the object rows in it)."""
    good = json.dumps([{"run": "o", "step": "干"}], ensure_ascii=False).encode()
    cases: list[tuple[str, bytes, list[dict[str, Any]]]] = [(f"cut-{n}", good[:n], []) for n in range(len(good))]
    rng = random.Random(20260907)
    cases += [(f"random-{n}", rng.randbytes(rng.randrange(1, 400)), []) for n in range(80)]
    cases += [(f"random-list-{n}", b"[" + rng.randbytes(rng.randrange(1, 100)), []) for n in range(40)]
    cases += [(f"random-row-{n}", b'[{"run": "o", ' + rng.randbytes(rng.randrange(1, 100)), []) for n in range(30)]
    full = json.dumps([{"run": "o", "step": "干", "text": "x" * 50}], indent=2, ensure_ascii=False).encode()
    for name, raw in [
        ("empty", b""),
        ("spaces", b"\n  \n"),
        ("null", b"null"),
        ("object", b'{"rows": []}'),
        ("wrapped", b'{"rows": ' + full + b"}"),
        ("number", b"42"),
        ("string", b'"manifest"'),
        ("true", b"true"),
        ("two-arrays", b"[][]"),
        ("trailing-garbage", full + b"x"),
        ("trailing-comma", b'[{"run": "o"},]'),
        ("missing-comma", b'[{"run": "o"} {"run": "p"}]'),
        ("nul-bytes", b"\x00" * 100),
        ("nul-in-row", full.replace(b'"step"', b'"st\x00ep"')),
        ("nul-after", full + b"\x00"),
        ("invalid-utf8", full.replace("干".encode(), b"\xff")),
        ("cesu-surrogate", full.replace("干".encode(), b"\xed\xa0\x80")),
        ("utf16", full.decode().encode("utf-16")),
        ("deep", b"[" * 200_000),
        ("deep-in-row", b'[{"a": ' + b"[" * 200_000),
        ("single-quotes", b"[{'run': 'o'}]"),
        ("js-comment", b"// rows\n[]"),
    ]:
        cases.append((name, raw, []))
    for n, junk in enumerate([[1], ["row"], [None], [[{"run": "o"}]], [True, 2.5]]):
        cases.append((f"no-object-rows-{n}", json.dumps(junk).encode(), []))
    kept = [{"run": "o", "step": "kept"}, {"run": "new", "step": "replaced?"}]
    for n, junk in enumerate([5, "x", None, [], [kept[0]]]):
        raw = json.dumps([kept[0], junk, kept[1]], indent=2).encode()
        cases.append((f"some-object-rows-{n}", raw, kept))
    return cases


def test_generated_bad_manifests_are_kept_aside(tmp_path: Path) -> None:
    """Acceptance e: persist on a bad manifest never raises, keeps it aside, and writes only good rows."""
    cases = _bad_manifests()
    assert len(cases) >= 200
    new = [{"step": "新", "ok": True}]
    for n, (name, raw, objects) in enumerate(cases):
        run_dir = tmp_path / f"r{n}"
        run_dir.mkdir()
        (run_dir / MANIFEST).write_bytes(raw)
        assert read_rows(run_dir, pause_s=0.001) == objects, name  # tolerant, and read-only:
        assert _names(run_dir) == [MANIFEST], name

        persist(run_dir, "new", new)

        names = _names(run_dir)
        aside = [p for p in names if p.startswith(f"{MANIFEST}.unreadable-")]
        assert len(aside) == 1 and len(names) == 3 and LOCK in names, (name, names)
        assert (run_dir / aside[0]).read_bytes() == raw, name
        others = [r for r in objects if r.get("run") != "new"]
        assert read_rows(run_dir) == [*others, {"step": "新", "ok": True, "run": "new"}], name


def test_huge_manifest_is_kept_aside_unread(tmp_path: Path) -> None:
    path = tmp_path / MANIFEST
    with path.open("wb") as fh:
        fh.truncate(MAX_MANIFEST_BYTES + 1)  # sparse: costs no disk
    assert read_rows(tmp_path) == []
    persist(tmp_path, "r", [{"step": "a"}])
    (aside,) = tmp_path.glob(f"{MANIFEST}.unreadable-*")
    assert aside.stat().st_size == MAX_MANIFEST_BYTES + 1
    assert read_rows(tmp_path) == [{"step": "a", "run": "r"}]


def test_special_manifest_files_are_kept_aside(tmp_path: Path) -> None:
    fifo_dir, dir_dir = tmp_path / "fifo", tmp_path / "dir"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / MANIFEST)  # a plain open() would block forever
    (dir_dir / MANIFEST).mkdir(parents=True)
    for run_dir in (fifo_dir, dir_dir):
        assert read_rows(run_dir) == []
        persist(run_dir, "r", [{"step": "a"}])
        assert read_rows(run_dir) == [{"step": "a", "run": "r"}]
        assert len(list(run_dir.glob(f"{MANIFEST}.unreadable-*"))) == 1


def test_read_rows_is_tolerant_and_read_only(tmp_path: Path) -> None:
    assert read_rows(tmp_path / "missing") == []
    (tmp_path / "a-file").write_text("[]")
    assert read_rows(tmp_path / "a-file") == []
    (tmp_path / MANIFEST).write_text('[{"a": 1}, 2, "x", null, {"b": 2}]')
    assert read_rows(tmp_path) == [{"a": 1}, {"b": 2}]
    assert _names(tmp_path) == ["a-file", MANIFEST]


def test_read_rows_waits_out_a_writer_mid_write(tmp_path: Path) -> None:
    """The original flower rewrites manifest.json in place: a read can catch it half-written."""
    path = tmp_path / MANIFEST
    whole = _dumped([{"step": "a", "run": "X", "text": "y" * 1000}]).encode()
    path.write_bytes(whole[: len(whole) // 2])

    def finish() -> None:
        time.sleep(0.02)
        path.write_bytes(whole)

    writer = threading.Thread(target=finish)
    writer.start()
    try:
        rows = read_rows(tmp_path, attempts=5, pause_s=0.5)
    finally:
        writer.join()
    assert [r["step"] for r in rows] == ["a"]


def test_persist_raises_only_when_the_run_dir_cannot_be_written(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file")
    with pytest.raises(OSError):
        persist(blocker / "runs", "r", [{"step": "a"}])
    locked_out = tmp_path / "runs"
    (locked_out / LOCK).mkdir(parents=True)  # the lock file cannot be opened
    with pytest.raises(OSError):
        persist(locked_out, "r", [{"step": "a"}])
    assert _names(locked_out) == [LOCK]


def test_lock_file_is_created_once_and_never_replaced(tmp_path: Path) -> None:
    persist(tmp_path, "a", [{"step": "1"}])
    lock = tmp_path / LOCK
    inode = lock.stat().st_ino
    for n in range(5):
        persist(tmp_path, f"r{n}", [{"step": str(n)}])
    (tmp_path / MANIFEST).write_text("garbage")
    persist(tmp_path, "z", [])
    assert lock.stat().st_ino == inode
    assert lock.read_bytes() == b""


def test_no_temp_left_and_stale_temps_swept(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".{MANIFEST}.{int(dead.stdout)}.0badf00d.tmp"
    stale.write_text("[half")
    for n in range(10):
        persist(tmp_path, "r", [{"step": str(i)} for i in range(n)])
    assert _names(tmp_path) == [LOCK, MANIFEST]


_WRITER = """
import sys, time
from pathlib import Path
from flower_magic.core.manifest import new_run_id, persist

run_dir, go, count, index = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
run_id = new_run_id() + "-p" + index  # process ids alone may share a second and, rarely, the hex
print("ready", flush=True)
while not go.exists():
    time.sleep(0.001)
rows = []
for i in range(count):
    rows.append({"step": "step-" + str(i), "i": i, "ok": True, "cost_usd": 0.01, "text": ("文本 " * 40) + str(i)})
    persist(run_dir, run_id, rows)
print(run_id, flush=True)
"""


@pytest.mark.slow
def test_eight_processes_lose_no_row_and_a_reader_never_sees_half_a_file(tmp_path: Path) -> None:
    """Acceptance d: 8 processes x 200 rows, each persisting after every row, into one manifest."""
    processes, count = 8, 200
    run_dir, go = tmp_path / "runs", tmp_path / "go"
    script = tmp_path / "writer.py"
    script.write_text(textwrap.dedent(_WRITER), encoding="utf-8")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(run_dir), str(go), str(count), str(k)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(processes)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        go.touch()
        reads, unparseable = 0, []
        path = run_dir / MANIFEST
        while any(p.poll() is None for p in procs):
            time.sleep(0.002)  # leave the two-core CI box to the writers now and then
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            try:
                json.loads(data)
            except ValueError as exc:
                unparseable.append(f"{exc} ({len(data)} bytes)")
            else:
                reads += 1
        run_ids = [p.communicate(timeout=60)[0].strip() for p in procs]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert [p.returncode for p in procs] == [0] * processes
    assert unparseable == []
    assert reads > 0

    rows = read_rows(run_dir)
    assert len(rows) == processes * count
    assert len({(r["run"], r["i"]) for r in rows}) == processes * count
    for run_id in run_ids:
        assert [r["i"] for r in rows if r["run"] == run_id] == list(range(count))
    assert _names(run_dir) == [LOCK, MANIFEST]
    print(f"{reads} good reads while writing")
