"""%flower in real kernels with the real CLI and the fake API: restart, kill -9, %cd, %%flower,
--new, Interrupt and bad input (issue 5, acceptance a–e)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from flower_magic.testing import FakeAnthropic, text, tool_use
from flower_magic.testing.roles import as_role
from tests.e2e.kernel import Kernel, alive, children
from tests.helpers import wait_until

pytestmark = pytest.mark.slow

BRIEF = "## 目标\n清洗 CSV\n\n## 验收标准\n- clean.py 存在\n\n## 边界\n只处理 data/\n\n## 未知与假设\n- UTF-8"
GOAL = "## 目标\nclean.py 可用\n\n## 判定清单\n- clean.py 存在\n- 跑完没有空行"
PASS = "## 结论\n达成\n\n## 理由\n都在。\n\n## 未通过\n(无)"


def _first_run(api: FakeAnthropic) -> None:
    api.add(
        as_role("clarifier", text(BRIEF)),
        as_role("goal", text(GOAL)),
        as_role("worker", text("做完了")),
        as_role("judge", text(PASS)),
    )


def _rows(ws: Path) -> list[dict[str, object]]:
    return list(json.loads((ws / "runs" / "manifest.json").read_text(encoding="utf-8")))


def _lineage(ws: Path) -> dict[str, object]:
    return dict(json.loads((ws / "runs" / "lineage.json").read_text(encoding="utf-8")))


# A work step that runs a two-minute command: time to interrupt, restart or kill the kernel mid-step.
SLOW_TOOL = tool_use("Bash", {"command": "python3 -c 'import time; time.sleep(120)'"})


def _start_work_on_a_slow_tool(api: FakeAnthropic, kernel: Kernel) -> None:
    """``%flower`` in a fresh directory, sent without waiting; returns once the work step's command runs."""
    api.add(as_role("clarifier", text(BRIEF)), as_role("goal", text(GOAL)), as_role("worker", SLOW_TOOL))
    kernel.run("%load_ext flower_magic")
    kernel.start('%flower "清洗 CSV"')
    wait_until(lambda: _worker_requests(api), "the work step's first request")
    time.sleep(2.0)  # the tool is running now


def _worker_requests(api: FakeAnthropic) -> list[object]:
    from flower_magic.testing.roles import role_of

    return [r for r in api.requests if role_of(r) == "worker"]


def test_restart_and_kill_then_resume_the_same_work_session(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path, kernel: Kernel
) -> None:
    _first_run(fake_api)
    assert kernel.run("%load_ext flower_magic").status == "ok"
    first = kernel.run('%flower "清洗 data/ 里的 CSV"')
    assert first.status == "ok", first.text
    assert [r["step"] for r in _rows(workspace)] == ["确认需求", "设定目标", "干活", "干活·判定#1"]
    work_sid = _lineage(workspace)["steps"]["干活"]  # type: ignore[index]

    # (i) a restarted kernel shows what it remembers and continues the same session
    kernel.restart()
    loaded = kernel.run("%load_ext flower_magic")
    assert "第 2 次唤醒" in loaded.text and "需求已确认" in loaded.text, loaded.text
    fake_api.add(as_role("worker", text("接着做完了")), as_role("judge", text(PASS)))
    n = len(_worker_requests(fake_api))
    again = kernel.run("%flower")
    assert again.status == "ok", again.text
    resumed = _worker_requests(fake_api)[n]
    assert resumed.n_messages > 2 and "做完了" in resumed.all_text  # type: ignore[attr-defined]
    assert _lineage(workspace)["steps"]["干活"] == work_sid  # type: ignore[index]

    # (ii) SIGKILL in the middle of the work step: the CLI dies with the kernel
    fake_api.add(as_role("worker", SLOW_TOOL))
    n = len(_worker_requests(fake_api))
    kernel.start("%flower")
    wait_until(lambda: len(_worker_requests(fake_api)) > n, "the resumed work step's request")
    time.sleep(2.0)  # the tool is running now
    clis = [c for c in children(kernel.pid) if alive(c)]
    assert clis, "no CLI child while the step runs"
    kernel.kill()
    deadline = time.monotonic() + 5
    while any(alive(c) for c in clis) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(c) for c in clis), "a claude process outlived its kernel"

    fresh = Kernel(workspace, child_env)
    try:
        loaded = fresh.run("%load_ext flower_magic")
        assert "第 4 次唤醒" in loaded.text, loaded.text
        fake_api.add(as_role("worker", text("被打断后接着做完了")), as_role("judge", text(PASS)))
        n = len(_worker_requests(fake_api))
        last = fresh.run("%flower")
        assert last.status == "ok", last.text
        resumed = _worker_requests(fake_api)[n]
        assert resumed.headers.get("x-claude-code-session-id") in (None, work_sid)  # type: ignore[attr-defined]
        assert "接着做完了" in resumed.all_text  # type: ignore[attr-defined]  # the earlier conversation came back
        assert _lineage(workspace)["steps"]["干活"] == work_sid  # type: ignore[index]
    finally:
        fresh.close()


def test_cd_elsewhere_still_continues_the_notebook_directory(
    fake_api: FakeAnthropic, workspace: Path, tmp_path: Path, kernel: Kernel
) -> None:
    _first_run(fake_api)
    kernel.run("%load_ext flower_magic")
    assert kernel.run('%flower "清洗 CSV"').status == "ok"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    fake_api.add(as_role("worker", text("继续")), as_role("judge", text(PASS)))
    res = kernel.run(f"%cd {elsewhere}\n%flower")
    assert res.status == "ok", res.text
    assert not (elsewhere / "runs").exists()
    assert _lineage(workspace)["woke"] == 2


def test_cell_magic_body_and_new_archive(fake_api: FakeAnthropic, workspace: Path, kernel: Kernel) -> None:
    _first_run(fake_api)
    kernel.run("%load_ext flower_magic")
    res = kernel.run("%%flower --rounds 1\n清洗 CSV:\n- 去掉空行\n- 去掉重复行")
    assert res.status == "ok", res.text
    first_prompt = next(r for r in fake_api.requests if "去掉空行" in r.last_user_text)
    assert "清洗 CSV:\n- 去掉空行\n- 去掉重复行" in first_prompt.last_user_text  # the body, verbatim, multi-line
    _first_run(fake_api)
    res = kernel.run('%flower --new "另一件事"')
    assert res.status == "ok", res.text
    archives = list((workspace / ".flower" / "notes" / "archive").iterdir())
    assert len(archives) == 1
    assert sorted(p.name for p in archives[0].iterdir()) == sorted(["lineage.json", "目标.md", "诉求.md", "需求.md"])
    assert _lineage(workspace)["woke"] == 1


def test_interrupt_stops_records_and_resumes_with_words(
    fake_api: FakeAnthropic, workspace: Path, kernel: Kernel
) -> None:
    _start_work_on_a_slow_tool(fake_api, kernel)
    kernel.interrupt()
    # the cell ends on its own once the agent stopped; wait for the row
    wait_until(
        lambda: (workspace / "runs" / "manifest.json").exists() and any(r["step"] == "干活" for r in _rows(workspace)),
        "the interrupted work step's row",
    )
    work = [r for r in _rows(workspace) if r["step"] == "干活"][-1]
    assert work["error"] == "interrupted-by-human"
    sid = _lineage(workspace)["steps"]["干活"]  # type: ignore[index]
    assert work["session_id"] == sid
    time.sleep(1.0)
    fake_api.add(as_role("goal", text(GOAL)), as_role("worker", text("改好了")), as_role("judge", text(PASS)))
    n = len(_worker_requests(fake_api))
    res = kernel.run('%flower "改成只处理 2024 年的文件"')
    assert res.status == "ok", res.text
    resumed = _worker_requests(fake_api)[n]
    assert "改成只处理 2024 年的文件" in resumed.last_user_text  # type: ignore[attr-defined]
    assert resumed.n_messages > 2  # type: ignore[attr-defined]
    assert _lineage(workspace)["steps"]["干活"] == sid  # type: ignore[index]


BAD_INPUTS = [
    "%flower --no-such-flag",
    "%flower --rounds -1 x",
    "%flower --rounds abc x",
    "%flower --rounds 1.5 x",
    "%flower --window x y",
    "%flower --window 0 y",
    "%flower --window -5 y",
    "%flower --asks many x",
    "%flower --timeout soon x",
    "%flower --timeout nan x",
    '%flower "unbalanced',
    "%flower 'unbalanced",
    "%flower -r notes.txt x",
    "%flower --run-dir notes.txt x",
    "%flower",
    "%flower --new",
    "%flower --new ''",
    '%flower ""',
    "%flower /new",
    "%%flower\n",
    "%%flower\n   \n",
    "%%flower --new\n",
    "%%flower x\nand a body",
    "%flower --lang xx x",
    "%flower --lang '' --new",
    "%flower --rounds",
    "%flower --window",
    "%flower -r",
    "%flower --status --rounds abc",
    "%flower --judge-can-run --no-goal --rounds=-3 x",
    "%flower --timeout",
]


def _tree(ws: Path) -> dict[str, tuple[int, float]]:
    return {str(p.relative_to(ws)): (p.stat().st_size, p.stat().st_mtime) for p in sorted(ws.rglob("*"))}


def test_bad_input_is_one_usage_error_and_changes_nothing(
    fake_api: FakeAnthropic, workspace: Path, kernel: Kernel
) -> None:
    (workspace / "notes.txt").write_text("a file, not a folder")
    kernel.run("%load_ext flower_magic")
    before = _tree(workspace)
    assert len(BAD_INPUTS) >= 30
    for code in BAD_INPUTS:
        res = kernel.run(code)
        assert res.status == "error", code
        assert [e["ename"] for e in res.errors] == ["UsageError"], (code, res.errors)
        (err,) = res.errors
        assert "\n" not in err["evalue"].strip(), (code, err["evalue"])
        assert not any("Traceback" in line for line in err.get("traceback", [])), code
    assert _tree(workspace) == before
    assert fake_api.requests == []


def test_kernel_restart_mid_run_records_the_step(fake_api: FakeAnthropic, workspace: Path, kernel: Kernel) -> None:
    """A restart (or shutdown) while the agent works: the step in flight lands in the manifest."""
    _start_work_on_a_slow_tool(fake_api, kernel)
    kernel.restart()
    work = [r for r in _rows(workspace) if r["step"] == "干活"]
    assert work and work[-1]["error"] in ("killed-by-signal", "interrupted-by-human"), _rows(workspace)
    assert work[-1]["session_id"] == _lineage(workspace)["steps"]["干活"]  # type: ignore[index]


def test_words_after_a_kill_mid_clarification_reach_the_clarifier_once(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path, kernel: Kernel
) -> None:
    """Issue 22 (item 1) through ``%flower``: the kernel dies (-9) while the clarifier's first request
    is in flight; ``%flower "words"`` in a new kernel sends them to the clarifier, once; that kernel dies
    too once they are stored, and a bare ``%flower`` in a third does not send them again."""
    from tests.test_heard import TASK, WORDS, Model, _count, _next_clarifier, _stored

    model = Model(asks=False)
    fake_api.default = model
    kernel.run("%load_ext flower_magic")
    kernel.start(f'%flower "{TASK}"')
    _next_clarifier(fake_api, 0)
    wait_until(lambda: _stored(workspace, TASK), "the task reaching the store")
    kernel.kill()

    for said in (WORDS, ""):
        n = len(fake_api.requests)
        fresh = Kernel(workspace, child_env)
        try:
            fresh.run("%load_ext flower_magic")
            if said:
                fresh.start(f'%flower "{said}"')
                heard = _next_clarifier(fake_api, n)
                assert _count(heard, WORDS) == 1, heard.last_user_text
                wait_until(lambda: _stored(workspace, WORDS), "the words reaching the store")
                fresh.kill()
            else:
                model.gate.set()
                done = fresh.run("%flower")
                assert done.status == "ok", done.text
                again = _next_clarifier(fake_api, n)
                assert _count(again, WORDS) == 1, again.last_user_text
        finally:
            fresh.close()
