"""lineage.json: format, workspace guard, corrupt files kept aside, archive, durable writes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import unicodedata
from pathlib import Path, PurePosixPath, PureWindowsPath

import pytest

from flower_magic.core.lineage import FILENAME, MAX_LINEAGE_BYTES, Lineage, same_workspace


def _listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _expected(ws: Path, woke: int, steps: dict[str, str]) -> str:
    return json.dumps({"workspace": str(ws), "woke": woke, "steps": steps}, indent=2, ensure_ascii=False) + "\n"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "proj"
    path.mkdir()
    return path


@pytest.fixture
def run_dir(ws: Path) -> Path:
    return ws / "runs"


def test_round_trip_in_the_original_format(ws: Path, run_dir: Path) -> None:
    lin = Lineage.open(run_dir, ws)
    assert (lin.steps, lin.woke, lin.problem) == ({}, 0, None)
    assert lin.bump() == 1
    lin.remember("干活", "47395075-bec7-466e-80cd-f4d60b360235")
    lin.remember("确认需求", "sid-2")
    text = (run_dir / FILENAME).read_text(encoding="utf-8")
    assert text == _expected(ws, 1, {"干活": "47395075-bec7-466e-80cd-f4d60b360235", "确认需求": "sid-2"})
    assert list(json.loads(text)) == ["workspace", "woke", "steps"]

    again = Lineage.open(run_dir, ws)
    assert again.steps == {"干活": "47395075-bec7-466e-80cd-f4d60b360235", "确认需求": "sid-2"}
    assert (again.woke, again.problem, again.workspace, again.path) == (1, None, ws, run_dir / FILENAME)
    assert again.bump() == 2
    assert Lineage.open(run_dir, ws).woke == 2


def test_reads_a_file_the_original_wrote(ws: Path, run_dir: Path) -> None:
    """The original writes json.dumps(indent=2, ensure_ascii=False) with no trailing newline."""
    run_dir.mkdir()
    doc = {"workspace": str(ws), "woke": 3, "steps": {"干活": "sid-a"}}
    (run_dir / FILENAME).write_text(json.dumps(doc, indent=2, ensure_ascii=False), encoding="utf-8")
    lin = Lineage.open(run_dir, ws)
    assert (lin.steps, lin.woke, lin.problem) == ({"干活": "sid-a"}, 3, None)


def test_workspace_is_resolved(ws: Path, run_dir: Path) -> None:
    Lineage.open(run_dir, ws).remember("a", "sid-a")
    (ws.parent / "link").symlink_to(ws)
    for spelling in (ws / "." / ".." / ws.name, ws.parent / "link"):
        assert Lineage.open(run_dir, spelling).steps == {"a": "sid-a"}


@pytest.mark.parametrize(
    "recorded",
    [
        r"C:\Users\Jane Doe\数据 清洗 🌻 with spaces",
        r"c:\users\jane doe\数据 清洗 🌻 with spaces",  # Windows paths are not case-sensitive
        "C:/Users/Jane Doe/数据 清洗 🌻 with spaces",  # either separator
        "C:/Users/Jane Doe/数据 清洗 🌻 with spaces/",
        r"\\?\C:\Users\Jane Doe\数据 清洗 🌻 with spaces",  # the long-path form
    ],
)
def test_the_workspace_guard_reads_windows_paths(recorded: str) -> None:
    """A lineage written on Windows (by this tool or the original, in any spelling) is this workspace's."""
    assert same_workspace(recorded, PureWindowsPath(r"C:\Users\Jane Doe\数据 清洗 🌻 with spaces"))


@pytest.mark.parametrize(
    ("recorded", "workspace"),
    [
        (r"D:\Users\Jane Doe\proj", r"C:\Users\Jane Doe\proj"),  # another drive
        (r"C:\Users\Jane Doe\proj-copy", r"C:\Users\Jane Doe\proj"),
        (r"\\server\share\proj", r"C:\proj"),
        ("", r"C:\proj"),
    ],
)
def test_the_workspace_guard_tells_windows_workspaces_apart(recorded: str, workspace: str) -> None:
    assert not same_workspace(recorded, PureWindowsPath(workspace))
    assert same_workspace(r"\\?\UNC\server\share\proj", PureWindowsPath(r"\\server\share\proj"))


def test_the_workspace_guard_on_posix_keeps_case_and_reads_decomposed_unicode() -> None:
    ws = "/Users/jane/数据 清洗 🌻/Café"
    assert same_workspace(unicodedata.normalize("NFD", ws), PurePosixPath(ws))  # macOS may hand back NFD
    assert not same_workspace(ws.lower(), PurePosixPath(ws))  # a POSIX path is case-sensitive as text
    assert not same_workspace(r"C:\Users\jane", PurePosixPath("/Users/jane"))


def test_one_directory_under_two_spellings_is_one_workspace(ws: Path, run_dir: Path) -> None:
    """A case-insensitive disk (macOS, Windows) spells one directory many ways; the guard asks the disk."""
    Lineage.open(run_dir, ws).remember("a", "sid-a")
    doc = json.loads((run_dir / FILENAME).read_text(encoding="utf-8"))
    (ws.parent / "another name").symlink_to(ws)  # two spellings of one directory, as such a disk has
    doc["workspace"] = str(ws.parent / "another name")
    (run_dir / FILENAME).write_text(json.dumps(doc), encoding="utf-8")
    assert Lineage.open(run_dir, ws).steps == {"a": "sid-a"}


def test_other_workspace_starts_empty_and_keeps_the_foreign_file(ws: Path, run_dir: Path, tmp_path: Path) -> None:
    """A copied directory: the old lineage names sessions of another project; never resume them."""
    Lineage.open(run_dir, ws).remember("干活", "sid-old")
    foreign = (run_dir / FILENAME).read_bytes()
    before = _listing(run_dir)
    other = tmp_path / "copy"
    other.mkdir()

    lin = Lineage.open(run_dir, other)
    assert (lin.steps, lin.woke) == ({}, 0)
    assert lin.problem == f"other workspace: {ws}"
    assert _listing(run_dir) == before  # open() is read-only

    lin.remember("干活", "sid-new")
    assert lin.last_error is None
    assert lin.set_aside_as is not None and lin.set_aside_as.name.startswith("lineage.json.other-workspace-")
    assert lin.set_aside_as.read_bytes() == foreign
    assert (run_dir / FILENAME).read_text(encoding="utf-8") == _expected(other, 0, {"干活": "sid-new"})
    lin.remember("干活", "sid-newer")  # set aside once, not at every flush
    assert sorted(p.name for p in run_dir.iterdir()) == sorted([FILENAME, lin.set_aside_as.name])


def test_remember_ignores_empty_step_or_session(ws: Path, run_dir: Path) -> None:
    lin = Lineage.open(run_dir, ws)
    lin.remember("", "sid")
    lin.remember("step", "")
    assert lin.steps == {}
    assert not run_dir.exists()


def test_remember_overwrites_the_step_and_bump_counts(ws: Path, run_dir: Path) -> None:
    lin = Lineage.open(run_dir, ws)
    lin.remember("干活", "sid-1")
    lin.remember("干活", "sid-2")  # a hand-off successor takes the step over
    assert [lin.bump(), lin.bump(), lin.bump()] == [1, 2, 3]
    assert Lineage.open(run_dir, ws).steps == {"干活": "sid-2"}
    assert Lineage.open(run_dir, ws).woke == 3


def test_liberal_where_harmless(ws: Path, run_dir: Path) -> None:
    run_dir.mkdir()
    path = run_dir / FILENAME
    cases = [
        ({"workspace": str(ws), "woke": "3", "steps": {"a": "s"}}, 3),
        ({"workspace": str(ws), "woke": 4.0, "steps": {"a": "s"}}, 4),
        ({"workspace": str(ws) + "/", "woke": 5, "steps": {"a": "s"}}, 5),
        ({"workspace": str(ws), "steps": {"a": "s"}}, 0),
    ]
    for doc, woke in cases:
        path.write_text(json.dumps(doc), encoding="utf-8")
        lin = Lineage.open(run_dir, ws)
        assert (lin.woke, lin.steps, lin.problem) == (woke, {"a": "s"}, None), doc
    path.write_text(json.dumps({"workspace": str(ws), "woke": 1}), encoding="utf-8")
    assert (Lineage.open(run_dir, ws).steps, Lineage.open(run_dir, ws).problem) == ({}, None)


def test_bad_step_entries_are_skipped_and_the_original_kept(ws: Path, run_dir: Path) -> None:
    run_dir.mkdir()
    path = run_dir / FILENAME
    doc = {"workspace": str(ws), "woke": 2, "steps": {"a": "sid-a", "b": 5, "c": "", "d": None, "": "sid-e"}}
    path.write_text(json.dumps(doc), encoding="utf-8")
    original = path.read_bytes()
    lin = Lineage.open(run_dir, ws)
    assert (lin.steps, lin.woke) == ({"a": "sid-a"}, 2)
    assert lin.problem is not None and "4" in lin.problem
    lin.bump()
    assert lin.set_aside_as is not None and lin.set_aside_as.read_bytes() == original
    assert path.read_text(encoding="utf-8") == _expected(ws, 3, {"a": "sid-a"})


def _bad_lineages(ws: Path) -> list[tuple[str, bytes]]:
    """More than 200 unusable lineage.json contents, each with a name."""
    good = json.dumps(
        {"workspace": str(ws), "woke": 3, "steps": {"干活": "sid-干活", "确认需求": "sid-2"}},
        indent=2,
        ensure_ascii=False,
    ).encode()
    cases: list[tuple[str, bytes]] = [(f"cut-{n}", good[:n]) for n in range(len(good))]
    rng = random.Random(20260907)
    cases += [(f"random-{n}", rng.randbytes(rng.randrange(1, 400))) for n in range(40)]
    cases += [(f"random-obj-{n}", b"{" + rng.randbytes(rng.randrange(1, 100))) for n in range(20)]
    for name, raw in [
        ("empty", b""),
        ("spaces", b" \n\t "),
        ("null", b"null"),
        ("list", b"[]"),
        ("list-of-doc", b"[" + good + b"]"),
        ("number", b"3"),
        ("string", b'"lineage"'),
        ("true", b"true"),
        ("two-docs", good + good),
        ("nul-bytes", b"\x00" * 64),
        ("nul-in-doc", good[:20] + b"\x00" + good[20:]),
        ("nul-in-string", good.replace(b"sid-2", b"sid\x00-2")),
        ("invalid-utf8", good.replace("干活".encode(), b"\xff\xfe")),
        ("cesu-surrogate", good.replace(b"sid-2", b"\xed\xa0\x80")),
        ("latin1", good.decode().encode("utf-16")),
        ("deep-list", b"[" * 200_000),
        ("deep-object", b'{"a":' * 100_000),
        ("bom-garbage", b"\xef\xbb\xbf{nope"),
        ("huge", b'{"workspace": "x", "steps": {"a": "' + b"x" * (MAX_LINEAGE_BYTES + 1) + b'"}}'),
        ("trailing-garbage", good + b"}"),
    ]:
        cases.append((name, raw))

    def doc(**fields: object) -> bytes:
        base: dict[str, object] = {"workspace": str(ws), "woke": 1, "steps": {"a": "sid-a"}}
        base.update(fields)
        return json.dumps(base, ensure_ascii=False).encode()

    bad_wokes: list[object] = ["abc", None, [], {}, True, False, -1, "-1", 2.5, "", "1e3", "٣", [3]]
    for n, woke in enumerate(bad_wokes):
        cases.append((f"woke-{n}-{woke!r}", doc(woke=woke)))
    for raw_woke in [b"1e309", b"-1e309", b"NaN", b"Infinity", b"-0.5", b"1" * 5000]:
        cases.append((f"woke-raw-{raw_woke[:8]!r}", doc(woke=0).replace(b'"woke": 0', b'"woke": ' + raw_woke)))
    for n, steps in enumerate([[], "干活", 5, None, True, [["a", "sid"]], 1.5]):
        cases.append((f"steps-{n}", doc(steps=steps)))
    bad_workspaces: list[object] = [None, 5, [], {"path": str(ws)}, "", "/elsewhere", str(ws.parent)]
    bad_workspaces += [str(ws) + "-copy", ws.name, str(ws).upper()]
    for n, workspace in enumerate(bad_workspaces):
        cases.append((f"workspace-{n}", doc(workspace=workspace)))
    cases.append(("no-workspace", json.dumps({"woke": 1, "steps": {"a": "sid"}}).encode()))
    return cases


def test_generated_bad_files_start_fresh_and_are_kept_aside(tmp_path: Path) -> None:
    """Acceptance e: a corrupt or foreign lineage never raises, starts empty, and survives aside."""
    ws = tmp_path / "proj"
    ws.mkdir()
    cases = _bad_lineages(ws)
    assert len(cases) >= 200
    for n, (name, raw) in enumerate(cases):
        run_dir = tmp_path / f"r{n}"
        run_dir.mkdir()
        (run_dir / FILENAME).write_bytes(raw)

        lin = Lineage.open(run_dir, ws)
        assert (lin.steps, lin.woke) == ({}, 0), name
        assert lin.problem, name
        assert lin.problem.startswith(("unreadable: ", "other workspace: ")), (name, lin.problem)
        assert _listing(run_dir) == {FILENAME: raw}, name  # open() wrote and moved nothing

        assert lin.bump() == 1, name
        assert lin.last_error is None, (name, lin.last_error)
        assert lin.set_aside_as is not None, name
        assert lin.set_aside_as.parent == run_dir, name
        assert _listing(run_dir) == {FILENAME: _expected(ws, 1, {}).encode(), lin.set_aside_as.name: raw}, name
        assert Lineage.open(run_dir, ws).problem is None, name


def test_special_files_do_not_hang_or_raise(ws: Path, run_dir: Path) -> None:
    """A FIFO named lineage.json would block a plain open() forever; a folder would raise."""
    run_dir.mkdir()
    os.mkfifo(run_dir / FILENAME)
    lin = Lineage.open(run_dir, ws)
    assert (lin.steps, lin.problem) == ({}, "unreadable: not a regular file")
    lin.remember("a", "sid-a")
    assert lin.set_aside_as is not None and lin.set_aside_as.is_fifo()
    assert Lineage.open(run_dir, ws).steps == {"a": "sid-a"}

    other = ws / "runs2"
    (other / FILENAME).mkdir(parents=True)
    lin = Lineage.open(other, ws)
    assert lin.problem == "unreadable: not a regular file"
    lin.remember("a", "sid-a")
    assert lin.set_aside_as is not None and lin.set_aside_as.is_dir()
    assert Lineage.open(other, ws).steps == {"a": "sid-a"}


def test_a_bad_file_replaced_before_the_flush_is_judged_again(ws: Path, run_dir: Path) -> None:
    """Two processes open the same bad file: the second must not set aside the first one's good write."""
    run_dir.mkdir()
    (run_dir / FILENAME).write_bytes(b"garbage")
    first, second = Lineage.open(run_dir, ws), Lineage.open(run_dir, ws)
    first.remember("a", "sid-a")
    assert first.set_aside_as is not None
    second.remember("b", "sid-b")
    assert second.set_aside_as is None
    assert sorted(p.name for p in run_dir.iterdir()) == sorted([FILENAME, first.set_aside_as.name])
    assert Lineage.open(run_dir, ws).steps == {"b": "sid-b"}  # whole-file overwrite, as in the original


def test_garbage_written_after_open_is_not_overwritten(ws: Path, run_dir: Path) -> None:
    run_dir.mkdir()
    (run_dir / FILENAME).write_bytes(b"bad one")
    lin = Lineage.open(run_dir, ws)
    (run_dir / FILENAME).write_bytes(b"bad two, written after open")
    lin.remember("a", "sid-a")
    assert lin.set_aside_as is not None
    assert lin.set_aside_as.read_bytes() == b"bad two, written after open"


def test_unwritable_folder_never_raises(tmp_path: Path, ws: Path) -> None:
    """A failed write must never abort a run (we run as any user, so a path under a file it is)."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    run_dir = blocker / "runs"
    lin = Lineage.open(run_dir, ws)
    assert (lin.steps, lin.problem) == ({}, None)
    lin.remember("干活", "sid-1")
    assert lin.steps == {"干活": "sid-1"}
    assert isinstance(lin.last_error, OSError)
    assert lin.bump() == 1
    assert isinstance(lin.last_error, OSError)
    lin.archive(blocker / "archive", extra=[blocker])
    assert blocker.read_text() == "a file, not a folder"


def test_a_write_that_recovers_clears_last_error(tmp_path: Path, ws: Path) -> None:
    blocker = tmp_path / "runs"
    blocker.write_text("in the way")
    lin = Lineage.open(blocker, ws)
    lin.remember("a", "sid-a")
    assert lin.last_error is not None
    blocker.unlink()
    lin.remember("b", "sid-b")
    assert lin.last_error is None
    assert Lineage.open(blocker, ws).steps == {"a": "sid-a", "b": "sid-b"}


def _notes(ws: Path) -> tuple[Path, Path, Path]:
    notes = ws / ".flower" / "notes"
    notes.mkdir(parents=True)
    brief, goal = notes / "需求.md", notes / "目标.md"
    brief.write_text("# 需求\n", encoding="utf-8")
    goal.write_text("# 目标\n", encoding="utf-8")
    return notes, brief, goal


def test_archive_moves_exactly_the_three_files(ws: Path, run_dir: Path) -> None:
    notes, brief, goal = _notes(ws)
    (notes / "问答记录.md").write_text("stays", encoding="utf-8")
    lin = Lineage.open(run_dir, ws)
    lin.bump()
    lin.remember("干活", "sid-1")
    lineage_bytes = lin.path.read_bytes()
    (run_dir / "manifest.json").write_text("[]")

    dest = lin.archive(notes / "archive", extra=[brief, str(goal), notes / "missing.md"])
    assert dest.parent == notes / "archive"
    assert time.strptime(dest.name, "%Y%m%d-%H%M%S")
    assert _listing(dest) == {
        FILENAME: lineage_bytes,
        "需求.md": "# 需求\n".encode(),
        "目标.md": "# 目标\n".encode(),
    }
    assert sorted(p.name for p in run_dir.iterdir()) == ["manifest.json"]
    assert sorted(p.name for p in notes.iterdir()) == ["archive", "问答记录.md"]
    assert (lin.steps, lin.woke) == ({}, 0)
    assert lin.bump() == 1
    assert Lineage.open(run_dir, ws).steps == {}


def test_archive_never_overwrites_an_earlier_archive(ws: Path, run_dir: Path) -> None:
    notes, brief, goal = _notes(ws)
    into = notes / "archive"
    # Occupy every name the next few seconds could produce, so the test does not depend on timing.
    now = time.time()
    taken = [into / time.strftime("%Y%m%d-%H%M%S", time.localtime(now + d)) for d in range(-1, 5)]
    for folder in taken:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "earlier.txt").write_text(folder.name)

    lin = Lineage.open(run_dir, ws)
    lin.remember("a", "sid-a")
    first = lin.archive(into, extra=[brief, goal])
    lin.remember("b", "sid-b")
    second = lin.archive(into, extra=[brief, goal])

    assert first != second
    assert first.name.endswith("-1") and first.name[:-2] in {f.name for f in taken}
    assert json.loads((first / FILENAME).read_text())["steps"] == {"a": "sid-a"}
    assert json.loads((second / FILENAME).read_text())["steps"] == {"b": "sid-b"}
    assert (first / "需求.md").exists() and not (second / "需求.md").exists()
    for folder in taken:
        assert _listing(folder) == {"earlier.txt": folder.name.encode()}


def test_no_temp_files_are_left_and_stale_ones_are_swept(ws: Path, run_dir: Path) -> None:
    run_dir.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    stale = run_dir / f".{FILENAME}.{dead_pid}.0badf00d.tmp"
    stale.write_text("half a lineage")
    live = run_dir / f".{FILENAME}.{os.getppid()}.0badf00d.tmp"  # the test runner's parent is alive
    live.write_text("being written")

    lin = Lineage.open(run_dir, ws)
    assert stale.exists()  # open() writes nothing, sweeps nothing
    for n in range(20):
        lin.remember(f"s{n % 3}", f"sid-{n}")
        lin.bump()
    assert not stale.exists()
    assert sorted(p.name for p in run_dir.iterdir()) == sorted([FILENAME, live.name])


_KILL_LOOP = """
import sys
from flower_magic.core.lineage import Lineage
lin = Lineage.open(sys.argv[1], sys.argv[2])
n = 0
while True:
    n += 1
    lin.remember("step-" + str(n % 3), "sid-" + sys.argv[3] + "-" + str(n) + "-" + "x" * (n % 97))
    if n == 1:
        print("writing", flush=True)
"""


def test_kill_minus_9_mid_write_leaves_a_whole_file(ws: Path, run_dir: Path) -> None:
    """A hard kill at any moment leaves lineage.json parseable (the reason writes are atomic)."""
    script = ws / "loop.py"
    script.write_text(textwrap.dedent(_KILL_LOOP))
    rng = random.Random(7)
    for kill in range(15):
        proc = subprocess.Popen(
            [sys.executable, str(script), str(run_dir), str(ws), str(kill)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None and proc.stdout.readline() == "writing\n"
            time.sleep(rng.uniform(0.0, 0.03))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        lin = Lineage.open(run_dir, ws)
        assert lin.problem is None
        assert any(sid.startswith(f"sid-{kill}-") for sid in lin.steps.values())

    Lineage.open(run_dir, ws).bump()  # sweeps the temps the killed writers left
    assert sorted(p.name for p in run_dir.iterdir()) == [FILENAME]


def test_archiving_nothing_makes_no_folder(ws: Path, run_dir: Path) -> None:
    """``--new`` in a fresh folder left an empty archive folder and said "archived to ..."; the
    panel would read that folder as a start-over."""
    notes = ws / ".flower" / "notes"
    lin = Lineage.open(run_dir, ws)
    assert lin.archive(notes / "archive", extra=[notes / "需求.md"]) is None
    assert not (notes / "archive").exists()
