"""durable.py: atomic writes, bounded reads, sweeping dead writers' temps, setting files aside."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from flower_magic.core.durable import STALE_TEMP_AGE_S, read_capped, set_aside, sweep_temps, write_atomic


def test_write_atomic_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "file.json"
    write_atomic(target, b"one")
    write_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert os.listdir(target.parent) == ["file.json"]


def test_write_atomic_failure_leaves_target_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "file.json"
    target.mkdir()  # os.replace of a file onto a folder fails
    with pytest.raises(OSError):
        write_atomic(target, b"data")
    assert target.is_dir()
    assert os.listdir(tmp_path) == ["file.json"]


def test_read_capped(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert read_capped(path, 10) == b"x" * 10
    with pytest.raises(OSError) as info:
        read_capped(path, 9)
    assert info.value.errno == errno.EFBIG
    with pytest.raises(FileNotFoundError):
        read_capped(tmp_path / "missing", 10)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError) as info:
        read_capped(tmp_path / "fifo", 10)  # must not block waiting for a writer
    assert info.value.errno == errno.EINVAL


def test_sweep_removes_only_stale_temps_of_that_file(tmp_path: Path) -> None:
    target = tmp_path / "lineage.json"
    mine = tmp_path / f".lineage.json.{os.getpid()}.0badf00d.tmp"
    impossible = tmp_path / ".lineage.json.99999999999999999999999.0badf00d.tmp"
    old_live = tmp_path / f".lineage.json.{os.getppid()}.0badf00d.tmp"
    other_file = tmp_path / ".manifest.json.99999999999999999999999.0badf00d.tmp"
    for p in (mine, impossible, old_live, other_file):
        p.write_text("x")
    aged = time.time() - STALE_TEMP_AGE_S - 60
    os.utime(old_live, (aged, aged))  # a live pid that is not the writer any more: it was reused

    removed = sweep_temps(target)
    assert sorted(removed) == sorted([impossible, old_live])
    assert mine.exists() and other_file.exists()


def test_set_aside_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    path.write_text("first")
    first = set_aside(path)
    path.write_text("second")
    second = set_aside(path)
    assert first is not None and second is not None and first != second
    assert (first.read_text(), second.read_text()) == ("first", "second")
    assert not path.exists()
    assert set_aside(path) is None  # gone: nothing to move
    # a dangling symlink occupying a candidate name is not replaced either
    path.write_text("third")
    now = time.time()
    for stamp in {time.strftime("%Y%m%d-%H%M%S", time.localtime(now + d)) for d in range(3)}:
        for n in range(3):
            suffix = f"-{n}" if n else ""
            (tmp_path / f"manifest.json.odd-{stamp}{suffix}").symlink_to(tmp_path / "nowhere")
    third = set_aside(path, "odd")
    assert third is not None and third.name.endswith("-3")
    assert third.read_text() == "third" and not third.is_symlink()


def test_a_name_near_the_filesystem_limit_can_be_written(tmp_path: Path) -> None:
    """The temp file's name once carried the whole target name, so a 243-byte name failed to write."""
    target = tmp_path / ("长" * 80 + ".md")
    write_atomic(target, b"ok")
    assert target.read_bytes() == b"ok"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
