"""Trimming on resume with the real CLI: 30 large tool results, the oldest 10 spilled to files
(issue 3, acceptance e)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from flower_magic import AgentSpec, Runtime
from flower_magic.testing import FakeAnthropic, text, tool_use

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

N_RESULTS = 30


async def test_resume_spills_all_but_the_newest_twenty(
    fake_api: FakeAnthropic, fake_api_env: dict[str, str], workspace: Path
) -> None:
    for i in range(N_RESULTS):
        body = "\n".join(f"file {i} line {n}: " + "x" * 60 for n in range(40))  # ~3,000 characters
        (workspace / f"f{i:02d}.txt").write_text(body, encoding="utf-8")
        fake_api.add(tool_use("Read", {"file_path": str(workspace / f"f{i:02d}.txt")}))
    fake_api.add(text("读完了"), text("接着来"))
    spec = AgentSpec(name="reader", instructions="", allowed_tools=["Read"])
    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False, handoff=False)
    try:
        first = await rt.run(spec, "把这些文件都读一遍。")
    finally:
        rt.close()
    assert first.ok, first.error
    full = fake_api.requests[-1]
    originals = [str(r["content"]) for r in full.tool_results()]
    assert len(originals) == N_RESULTS and all(len(c) >= 2000 for c in originals)

    rt = Runtime(workspace=workspace, run_dir=workspace / "runs", resilience=False, handoff=False, trim=True)
    try:
        again = await rt.run(spec, "继续。", resume=first.session_id)
        report = dict(rt.store.last_report)
    finally:
        rt.close()
    assert again.ok, again.error
    resumed = fake_api.requests[-1]
    contents = [str(r["content"]) for r in resumed.tool_results()]
    assert len(contents) == N_RESULTS  # every call keeps its result block
    pointers, kept = contents[:10], contents[10:]
    assert kept == originals[10:]
    for original, pointer in zip(originals[:10], pointers, strict=True):
        match = re.search(r"\.flower/spill/([0-9a-f]{16})\.txt", pointer)
        assert match, pointer
        spilled = workspace / ".flower" / "spill" / f"{match.group(1)}.txt"
        assert spilled.read_text(encoding="utf-8") == original  # nothing lost
        assert match.group(1) == hashlib.sha256(original.encode()).hexdigest()[:16]
    assert report["cleared"] == 10 and report["kept"] == 20
    assert len(resumed.all_text) < len(full.all_text) - 9 * 2000
    print(f"\nrequest text before trimming {len(full.all_text):,} chars, after {len(resumed.all_text):,}")
