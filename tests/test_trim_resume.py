"""Trimming on resume with the real CLI: the budget rule (the default), the turn in progress never
trimmed, every spilled result recoverable byte for byte (issue 13, acceptance c), and the reference's
count rule still available (issue 3, acceptance e)."""

from __future__ import annotations

import hashlib
import re
import threading
from pathlib import Path

import pytest

from flower_magic import AgentSpec, Runtime
from flower_magic.core.events import Event
from flower_magic.core.handoff import HandoffPolicy
from flower_magic.stores.trim import CHARS_PER_TOKEN, REFERENCE_KEEP_RECENT, TrimPolicy, budget_for_line
from flower_magic.testing import FakeAnthropic, Request, text, tool_use

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

N_RESULTS = 30
POINTER = re.compile(r"\.flower/spill/([0-9a-f]{16})\.txt")
READER = AgentSpec(name="reader", instructions="", allowed_tools=["Read", "Bash"])


def _files(workspace: Path, n: int, lines: int = 40) -> list[Path]:
    paths = []
    for i in range(n):
        body = "\n".join(f"file {i} line {k}: Résultat — 结果 ✓ " + "x" * 60 for k in range(lines))
        path = workspace / f"f{i:02d}.txt"
        path.write_text(body, encoding="utf-8")
        paths.append(path)
    return paths


def _contents(request: Request) -> list[str]:
    return [str(r["content"]) for r in request.tool_results()]


def _assert_recoverable(workspace: Path, original: str, pointer: str) -> None:
    """A pointer names a spill file that holds the original text, byte for byte, under its hash."""
    match = POINTER.search(pointer)
    assert match, pointer
    spilled = workspace / ".flower" / "spill" / f"{match.group(1)}.txt"
    assert spilled.read_bytes() == original.encode("utf-8")
    assert match.group(1) == hashlib.sha256(original.encode("utf-8")).hexdigest()[:16]


async def test_count_rule_spills_all_but_the_newest_twenty(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    for path in _files(workspace, N_RESULTS):
        fake_api.add(tool_use("Read", {"file_path": str(path)}))
    fake_api.add(text("读完了"), text("接着来"))
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False, handoff=False)
    try:
        first = await rt.run(READER, "把这些文件都读一遍。")
    finally:
        rt.close()
    assert first.ok, first.error
    full = fake_api.requests[-1]
    originals = _contents(full)
    assert len(originals) == N_RESULTS and all(len(c) >= 2000 for c in originals)

    count = TrimPolicy(keep_recent=REFERENCE_KEEP_RECENT)
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False, handoff=False, trim=count)
    try:
        again = await rt.run(READER, "继续。", resume=first.session_id)
        report = dict(rt.store.last_report)
    finally:
        rt.close()
    assert again.ok, again.error
    resumed = fake_api.requests[-1]
    contents = _contents(resumed)
    assert len(contents) == N_RESULTS  # every call keeps its result block
    assert contents[10:] == originals[10:]
    for original, pointer in zip(originals[:10], contents[:10], strict=True):
        _assert_recoverable(workspace, original, pointer)
    assert report["cleared"] == 10 and report["kept"] == 20
    assert len(resumed.all_text) < len(full.all_text) - 9 * 2000


async def test_budget_keeps_the_newest_results_that_fit_and_every_spill_is_recoverable(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """The default rule: old results stay newest first while they fit in a share of the hand-off line."""
    for path in _files(workspace, N_RESULTS):
        fake_api.add(tool_use("Read", {"file_path": str(path)}))
    fake_api.add(text("读完了"), text("接着来"))
    handoff = HandoffPolicy(window=80_000, headroom=20_000)  # the line at 60K: a budget of 9K tokens
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False, handoff=handoff)
    try:
        first = await rt.run(READER, "把这些文件都读一遍。")
    finally:
        rt.close()
    assert first.ok, first.error
    originals = _contents(fake_api.requests[-1])

    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False, handoff=handoff, trim=True)
    try:
        again = await rt.run(READER, "继续。", resume=first.session_id)
        report = dict(rt.store.last_report)
    finally:
        rt.close()
    assert again.ok, again.error
    contents = _contents(fake_api.requests[-1])
    budget = budget_for_line(handoff.at) * CHARS_PER_TOKEN
    kept = [c for c in contents if not POINTER.search(c)]
    # The kept ones are the newest stretch, as large as fits, and the next older one would not fit.
    assert kept == originals[len(originals) - len(kept) :] and 0 < len(kept) < N_RESULTS
    assert sum(map(len, kept)) <= budget < sum(map(len, kept)) + len(originals[-len(kept) - 1])
    assert report["cleared"] == N_RESULTS - len(kept)
    for original, pointer in zip(originals, contents[: N_RESULTS - len(kept)], strict=False):
        _assert_recoverable(workspace, original, pointer)


async def test_a_turn_cut_short_keeps_its_results_on_resume(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    """Guards the rule that the turn in progress is never trimmed: an interrupt lands after six large
    reads of a turn, far past the budget; the resumed request still holds all six in full, because
    the model is in the middle of using them."""
    paths = _files(workspace, 6, lines=200)  # ~16K characters each
    for path in paths:
        fake_api.add(tool_use("Read", {"file_path": str(path)}))
    fake_api.add(tool_use("Bash", {"command": "python3 -c 'import time; time.sleep(30)'"}), text("好,接着做完了"))
    handoff = HandoffPolicy(window=40_000, headroom=25_000, enabled=False)  # a budget of 2,250 tokens
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False, handoff=handoff, trim=True)

    def sink(ev: Event) -> None:
        if ev.kind == "tool_call" and ev.tool == "Bash":
            threading.Timer(0.5, rt.interrupt, args=("先停一下",)).start()

    try:
        result = await rt.run(READER, "把这些文件都读一遍。", on_event=sink)
        report = dict(rt.store.last_report)
    finally:
        rt.close()
    assert result.ok, result.error
    resumed = fake_api.requests[-1]
    assert "先停一下" in resumed.last_user_text
    contents = _contents(resumed)
    assert len([c for c in contents if len(c) > 10_000]) == 6
    assert not any(POINTER.search(c) for c in contents)
    assert report["cleared"] == 0 and report["protected"] == 6
