"""The panel's manifest reader: reading a changed file again reuses rows by their bytes, and the
result is always exactly what a whole parse of the file gives."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from flower_magic.core import manifest
from flower_magic.panel import manifest_rows


def _row(i: int, tag: str = "") -> dict[str, Any]:
    return {
        "step": f"干活#round{i}{tag}",
        "session_id": f"s-{i}",
        "ok": i % 3 != 0,
        "cost_usd": 0.01 * i,
        "num_turns": i,
        "attempts": 1 + i % 2,
        "retired": [f"old-{i}"] if i % 4 == 0 else [],
        "errors": ["overloaded_error (529)"] if i % 5 == 0 else [],
        "started_at": 1000.0 + i,
        "ended_at": 1010.0 + i,
        "run": "r1",
        "extra": [{"k": i}, {"k": i + 1}],  # objects nested in a list: a row separator can hide in there
    }


def _expected(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any], int]:
    """What a whole parse with the json module gives, independent of the reader under test."""
    data = json.loads(path.read_text(encoding="utf-8-sig"))
    raw = [r for r in data if isinstance(r, dict)]
    rows = [manifest_rows.shape_row(i, r) for i, r in enumerate(raw)]
    return rows, manifest_rows.totals(raw, rows), len(data) - len(raw)


def _check(path: Path) -> None:
    got = manifest_rows.read(path)
    assert got is not None
    assert (got.rows, got.totals, got.skipped) == _expected(path)


def _write(path: Path, rows: list[Any], layout: str) -> None:
    if layout == "canonical":
        text = json.dumps(rows, ensure_ascii=False, indent=2)
    elif layout == "compact":
        text = json.dumps(rows, ensure_ascii=False)
    else:  # nested lists of objects laid out with the row separator inside a row
        text = json.dumps(rows, ensure_ascii=False, indent=2).replace(",\n      {", ",\n  {")
        assert text.count(",\n  {") >= len(rows) or not any(isinstance(r, dict) for r in rows)
    path.write_text(text, encoding="utf-8")


@pytest.fixture(autouse=True)
def _forget() -> None:
    manifest_rows._remembered.clear()


def test_random_edits_read_the_same_as_a_whole_parse(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    rng = random.Random(7)
    rows: list[Any] = [_row(i) for i in range(30)]
    layout = "canonical"
    for n in range(300):
        edit = rng.choice(["append", "append", "change", "remove", "move", "duplicate", "junk", "layout"])
        if edit == "append":
            rows.append(_row(len(rows), tag=str(n)))
        elif edit == "change" and rows:
            i = rng.randrange(len(rows))
            rows[i] = _row(i, tag=f"changed{n}")
        elif edit == "remove" and rows:
            rows.pop(rng.randrange(len(rows)))
        elif edit == "move" and rows:
            rows.insert(rng.randrange(len(rows) + 1), rows.pop(rng.randrange(len(rows))))
        elif edit == "duplicate" and rows:
            rows.insert(rng.randrange(len(rows) + 1), rows[rng.randrange(len(rows))])
        elif edit == "junk":
            rows.insert(rng.randrange(len(rows) + 1), rng.choice([1, "x", None, [{"step": "nested"}]]))
        else:
            layout = rng.choice(["canonical", "canonical", "compact", "separator-inside"])
        _write(path, rows, layout)
        _check(path)


def test_appending_a_row_with_the_real_writer_reuses_every_earlier_row(tmp_path: Path) -> None:
    own: list[dict[str, Any]] = []
    run = manifest.new_run_id()
    first = manifest_rows.read(tmp_path / manifest.MANIFEST)
    assert first is None
    shaped_before: list[dict[str, Any]] = []
    for i in range(20):
        own.append(_row(i))
        manifest.persist(tmp_path, run, own)
        got = manifest_rows.read(tmp_path / manifest.MANIFEST)
        assert got is not None
        assert (got.rows, got.totals, got.skipped) == _expected(tmp_path / manifest.MANIFEST)
        # The earlier rows are the very objects built before: not parsed or shaped again.
        assert all(a is b for a, b in zip(got.rows, shaped_before, strict=False))
        shaped_before = got.rows


def test_a_row_that_moves_gets_its_new_index(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    rows = [_row(i) for i in range(5)]
    _write(path, rows, "canonical")
    _check(path)
    _write(path, rows[1:], "canonical")
    got = manifest_rows.read(path)
    assert got is not None
    assert [r["index"] for r in got.rows] == [0, 1, 2, 3]
    assert [r["step"] for r in got.rows] == [r["step"] for r in rows[1:]]


def test_a_half_written_canonical_file_is_still_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    rows = [_row(i) for i in range(5)]
    _write(path, rows, "canonical")
    _check(path)
    text = json.dumps(rows, ensure_ascii=False, indent=2)
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    with pytest.raises(manifest_rows.ManifestUnreadable) as err:
        manifest_rows.read(path)
    assert err.value.status == 503


def test_only_a_few_files_are_remembered(tmp_path: Path) -> None:
    for i in range(manifest_rows.REMEMBERED_FILES + 3):
        path = tmp_path / f"m{i}.json"
        _write(path, [_row(i)], "canonical")
        _check(path)
    assert len(manifest_rows._remembered) == manifest_rows.REMEMBERED_FILES


@pytest.mark.parametrize("layout", ["canonical", "compact"])
def test_integers_past_64_bits_are_read_exactly(tmp_path: Path, layout: str) -> None:
    path = tmp_path / "manifest.json"
    _write(path, [{**_row(1), "num_turns": 2**64, "context": 10**30, "cost_usd": -(2**63) - 1}], layout)
    got = manifest_rows.read(path)
    assert got is not None
    assert (got.rows[0]["num_turns"], got.rows[0]["context"]) == (2**64, 10**30)
    assert got.totals["num_turns"] == 2**64
    _check(path)


@pytest.mark.parametrize("layout", ["canonical", "compact"])
def test_a_byte_order_mark_reads_as_the_cli_reads_it(tmp_path: Path, layout: str) -> None:
    path = tmp_path / "manifest.json"
    _write(path, [_row(1), _row(2)], layout)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    got = manifest_rows.read(path)
    assert got is not None and [r["step"] for r in got.rows] == [_row(1)["step"], _row(2)["step"]]
    _check(path)
