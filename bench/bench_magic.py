"""The notebook surface, measured in real kernels (issue 5, h):

- ``%load_ext flower_magic`` in a warm kernel (target ≤ 150 ms), in a fresh directory and in one
  that holds a run (the wake banner is computed and shown);
- ``%flower --status`` on a run dir with a 10K-row manifest and a ~1 GB sessions.db (target ≤ 200 ms);
- the magic's overhead over calling the workflow directly, same scripted run (target ≤ 5 %).

Usage: ``python bench/bench_magic.py [--db-gb 1.0]``. The big sessions.db is cached in /tmp.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flower_magic.core.project import project_key  # noqa: E402
from flower_magic.stores.schema import SCHEMA  # noqa: E402
from flower_magic.testing import FakeAnthropic, text  # noqa: E402
from flower_magic.testing.roles import as_role  # noqa: E402
from tests.e2e.kernel import Kernel  # noqa: E402

BRIEF = "## 目标\n清洗\n\n## 验收标准\n- a\n\n## 边界\nb\n\n## 未知与假设\n- c"
GOAL = "## 目标\n清洗\n\n## 判定清单\n- a 存在\n- b 为空"
PASS = "## 结论\n达成\n\n## 理由\n好。\n\n## 未通过\n(无)"


def _timed(kernel: Kernel, code: str) -> float:
    cell = f"import time as _t\n_t0 = _t.perf_counter()\n{code}\nprint('ELAPSED', _t.perf_counter() - _t0)"
    res = kernel.run(cell)
    assert res.status == "ok", res.text
    line = next(ln for ln in res.stream.splitlines() if ln.startswith("ELAPSED"))
    return float(line.split()[1])


def _magic(line: str) -> str:
    name, _, rest = line.partition(" ")
    return f"get_ipython().run_line_magic({name!r}, {rest!r})"


def make_run_dir(ws: Path, *, rows: int, db_gb: float) -> None:
    """A directory with a confirmed brief, goals, lineage, a big manifest and a big sessions.db."""
    notes = ws / ".flower" / "notes"
    notes.mkdir(parents=True, exist_ok=True)
    (notes / "需求.md").write_text(BRIEF, encoding="utf-8")
    (notes / "目标.md").write_text("# 目标\n清洗\n\n# 判定清单\n- a 存在\n- b 为空\n", encoding="utf-8")
    runs = ws / "runs"
    runs.mkdir(exist_ok=True)
    sid = "3f0c6b1e-8a2d-4c5e-9f70-1a2b3c4d5e6f"
    (runs / "lineage.json").write_text(json.dumps({"workspace": str(ws.resolve()), "woke": 7, "steps": {"干活": sid}}))
    row = {
        "step": "干活",
        "session_id": sid,
        "ok": True,
        "cost_usd": 0.1,
        "num_turns": 3,
        "text": "x" * 400,
        "error": None,
        "started_at": 1.0,
        "ended_at": 31.0,
        "attempts": 1,
        "errors": [],
        "resumed": True,
        "retired": [],
        "context": 80_000,
        "duration_s": 30.0,
        "run": "20260101-000000-abcdef",
    }
    (runs / "manifest.json").write_text(json.dumps([row] * rows, ensure_ascii=False, indent=2), encoding="utf-8")
    cache = Path(tempfile.gettempdir()) / f"flower-bench-sessions-{db_gb:.1f}gb-{project_key(ws)[-40:]}.db"
    if not cache.exists():
        build_db(cache, ws, sid, db_gb)
    target = runs / "sessions.db"
    if not target.exists():
        os.link(cache, target) if cache.stat().st_dev == runs.stat().st_dev else target.write_bytes(cache.read_bytes())


def build_db(path: Path, ws: Path, sid: str, gb: float) -> None:
    payload = json.dumps({"type": "user", "message": {"role": "user", "content": "y" * 10_000}})
    n = int(gb * 1024**3 / len(payload))
    con = sqlite3.connect(path)
    con.executescript(SCHEMA)  # the store's own tables
    key = f"{project_key(ws)}/{sid}"
    last = json.dumps(
        {"type": "assistant", "message": {"role": "assistant", "content": [], "usage": {"input_tokens": 80_000}}}
    )
    con.executemany("INSERT INTO entries VALUES (?,?,?,?)", ((key, i, None, payload) for i in range(n)))
    con.execute("INSERT INTO entries VALUES (?,?,?,?)", (key, n, None, last))
    con.execute("INSERT INTO meta VALUES (?,?,?)", (key, 1, n + 1))
    con.commit()
    con.close()


def bench_load_ext(env: dict[str, str], base: Path) -> None:
    for label, waking in (("fresh directory", False), ("directory with a run", True)):
        times = []
        for i in range(5):
            ws = base / f"load-{int(waking)}-{i}"
            ws.mkdir(parents=True)
            if waking:
                make_run_dir(ws, rows=100, db_gb=0.01)
            k = Kernel(ws, env)
            try:
                k.run("import IPython.display, json, sqlite3")  # a warm kernel: what any notebook has loaded
                times.append(_timed(k, _magic("load_ext flower_magic")))
            finally:
                k.close()
        print(
            f"%load_ext flower_magic, {label}: median {statistics.median(times) * 1000:.0f} ms "
            f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}; target ≤ 150 ms)"
        )


def bench_status(env: dict[str, str], base: Path, db_gb: float) -> None:
    ws = base / "status"
    ws.mkdir()
    make_run_dir(ws, rows=10_000, db_gb=db_gb)
    size = (ws / "runs" / "sessions.db").stat().st_size / 1024**3
    k = Kernel(ws, env)
    try:
        k.run("%load_ext flower_magic")
        times = [_timed(k, _magic("flower --status")) for _ in range(5)]
    finally:
        k.close()
    print(
        f"%flower --status, 10K-row manifest, {size:.2f} GB sessions.db: "
        f"median {statistics.median(times) * 1000:.0f} ms "
        f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}; target ≤ 200 ms)"
    )


DIRECT = """
import asyncio, threading, time
from flower_magic.front.launch import Launch
from flower_magic.front.options import GoOptions
from pathlib import Path
opts = GoOptions(task="清洗", workspace=Path.cwd() / "{sub}", run_dir=Path.cwd() / "{sub}" / "runs").check()
def work():
    launch = Launch(opts, front_end="terminal")
    launch.plan()
    launch.apply()
    launch.run()
t = threading.Thread(target=work); t.start(); t.join()
"""


def bench_overhead(api: FakeAnthropic, env: dict[str, str], base: Path) -> None:
    magic, direct = [], []
    for i in range(3):
        for kind in ("magic", "direct"):
            api.add(
                as_role("clarifier", text(BRIEF)),
                as_role("goal", text(GOAL)),
                as_role("worker", text("好了")),
                as_role("judge", text(PASS)),
            )
            ws = base / f"{kind}{i}"
            ws.mkdir()
            k = Kernel(ws, env)  # the magic's workspace is the kernel's (the notebook's) directory
            try:
                k.run("%load_ext flower_magic")
                if kind == "magic":
                    magic.append(_timed(k, _magic("flower 清洗")))
                else:
                    direct.append(_timed(k, DIRECT.replace("{sub}", ".")))
            finally:
                k.close()
    m, d = statistics.median(magic), statistics.median(direct)
    print(
        f"a scripted 4-step run: %flower median {m:.2f} s, direct median {d:.2f} s, "
        f"overhead {100 * (m - d) / d:+.1f} % (target ≤ 5 %)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db-gb", type=float, default=1.0)
    parser.add_argument("--skip-overhead", action="store_true")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-magic-"))
    with FakeAnthropic() as api:
        home = base / "home"
        home.mkdir()
        env = dict(os.environ, **api.env(home))
        bench_load_ext(env, base)
        bench_status(env, base, args.db_gb)
        if not args.skip_overhead:
            bench_overhead(api, env, base)


if __name__ == "__main__":
    main()
