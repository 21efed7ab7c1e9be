"""No secret of the notebook leaves it, and no object in it stops %flower (issue 22, acceptance b and d):
a real kernel, the real CLI against the fake API, a real PostgreSQL, a real jupyter server with auth."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from flower_magic.core import notebook as nb
from flower_magic.testing import FakeAnthropic, Request, text, tool_use
from flower_magic.testing.roles import as_role, role_of
from tests.e2e.kernel import Kernel
from tests.e2e.lab import running_lab
from tests.pg import PgServer
from tests.plants import PLANTS

pytestmark = pytest.mark.slow

BRIEF = "## 目标\n整理 users\n\n## 验收标准\n- 有结果\n\n## 边界\n只读\n\n## 未知与假设\n- 无"
GOAL = "## 目标\n整理 users\n\n## 判定清单\n- 有结果"
PASS = "## 结论\n达成\n\n## 理由\n都在。\n\n## 未通过\n(无)"
# The environment's own credentials, whatever their shape (item 7): the panel and the log keep neither.
GATEWAY = "gw-e2e-9f8e7d6c5b4a3210"
SPARE_KEY = "sk-ant-api03-E2ECANARY-abcdefghijklmnop"


def _role(api: FakeAnthropic, role: str) -> list[Request]:
    return [r for r in api.requests if role_of(r) == role]


def _bodies(api: FakeAnthropic) -> str:
    return "\n".join(json.dumps(r.body, ensure_ascii=ascii) for r in api.requests for ascii in (False, True))


def _files(folder: Path) -> str:
    """Every file under ``folder``, as text (undecodable bytes replaced)."""
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in sorted(folder.rglob("*")) if p.is_file())


def _tables(url: str) -> str:
    """Every row of every table of the database, as text."""
    import psycopg

    out = []
    with psycopg.connect(url) as conn:
        names = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        for name in names:
            out += [repr(row) for row in conn.execute(f'SELECT * FROM "{name}"')]
    assert out, "the store holds nothing: the check below would prove nothing"
    return "\n".join(out)


def _panel(url: str, token: str, route: str, **query: str) -> str:
    request = urllib.request.Request(
        f"{url}/flower/api/{route}?{urllib.parse.urlencode(query)}", headers={"Authorization": f"token {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read().decode("utf-8")


def test_no_planted_secret_reaches_a_request_the_store_the_event_log_or_the_panel(
    fake_api: FakeAnthropic, child_env: dict[str, str], workspace: Path, tmp_path: Path, pg_server: PgServer
) -> None:
    """Acceptance b: the store's password given three ways (``%config FlowerMagics.sessions``,
    ``%flower --sessions``, ``os.environ["FLOWER_SESSIONS"]``) and the 20 planted values; the agent
    reads variables and cells with the tools and runs ``env``; a second wake sees the first %flower cell."""
    pg_url = pg_server.fresh_url()
    password = pg_server.password
    env = {**child_env, "ANTHROPIC_AUTH_TOKEN": GATEWAY, "SPARE_ANTHROPIC_KEY": SPARE_KEY}
    kernel = Kernel(workspace, env)
    try:
        number = {"load": 1}
        kernel.run("%load_ext flower_magic")
        for plant in PLANTS:
            kernel.run(plant.cell)
            number[plant.shape] = len(number) + 1
        kernel.run(f'%config FlowerMagics.sessions = "{pg_url}"')
        number["config"] = len(number) + 1
        kernel.run(f'import os\nos.environ["FLOWER_SESSIONS"] = "{pg_url}"')
        number["environ"] = len(number) + 1
        cell = nb.CELL_TOOL
        fake_api.add(
            as_role("clarifier", text(BRIEF)),
            as_role("goal", text(GOAL)),
            *[
                as_role("worker", tool_use(nb.VARIABLE_TOOL, {"name": name}))
                for name in ("users", "client", "settings", "accounts", "env_text", "headers", "dbPassword")
            ],
            *[
                as_role("worker", tool_use(cell, {"number": number[key]}))
                for key in ("a secret in an exception message", "an attribute shown by a repr", "config", "environ")
            ],
            as_role("worker", tool_use(cell, {"number": number["a DataFrame password column"]})),
            as_role("worker", tool_use("Bash", {"command": "env"})),
            as_role("worker", text("整理好了")),
            as_role("judge", text(PASS)),
        )
        first = kernel.run(f'%flower --sessions {pg_url} "整理一下 users 表"')
        assert first.status == "ok", first.text
        flower_cell = len(number) + 1
        fake_api.add(
            as_role("goal", text(GOAL)),
            as_role("worker", tool_use(cell, {"number": flower_cell})),
            as_role("worker", text("又看了一眼")),
            as_role("judge", text(PASS)),
        )
        second = kernel.run('%flower "再看一眼"')
        assert second.status == "ok", second.text
    finally:
        kernel.close()

    workers = _role(fake_api, "worker")
    # The tools answered (not refused), and the wake saw the first %flower cell, its password hidden.
    answers = [json.dumps(r.tool_results(), ensure_ascii=False) for r in workers]
    assert any("password" in a and "[redacted]" in a and "ann" in a for a in answers)
    assert any(f"--sessions postgresql://flower:[redacted]@127.0.0.1:{pg_server.port}" in a for a in answers)
    assert any("HOME=" in a for a in answers), "the agent's env ran"
    assert nb.BLOCK_HEAD in workers[0].last_user_text

    # The places acceptance b names, and the panel over this run (the server's own FLOWER_SESSIONS
    # lets it read the store; it knows neither the gateway token nor the spare key).
    places = {
        "request bodies": _bodies(fake_api),
        "store tables": _tables(pg_url),
        "run dir and notes": _files(workspace),
    }
    log = workspace / "runs" / "events.jsonl"
    assert log.is_file() and not (workspace / "runs" / "sessions.db").exists()
    root = workspace.parent  # the panel's root; the run is at "ws"
    lineage = json.loads((workspace / "runs" / "lineage.json").read_text())
    sessions = set(lineage["steps"].values())
    with running_lab(tmp_path / "lab", root, {"FLOWER_SESSIONS": pg_url, "FLOWER_LANG": "zh"}) as lab:
        ws = workspace.name
        panel = [_panel(lab.url, lab.token, "run", path=ws), _panel(lab.url, lab.token, "rundirs", path=ws)]
        for sid in sorted(sessions):
            for view in ("raw", "resumed"):
                for everything in ("0", "1"):
                    query = {"path": ws, "session": sid, "view": view, "all": everything, "limit": "500"}
                    panel.append(_panel(lab.url, lab.token, "transcript", **query))
    assert any("整理好了" in p for p in panel), "the panel served no transcript: the check below would prove nothing"
    places["panel answers"] = "\n".join(panel)

    leaks = {
        plant.shape: [where for where, said in places.items() if any(v in said for v in plant.values)]
        for plant in PLANTS
    }
    leaks["the store's password, given three ways"] = [w for w, said in places.items() if password in said]
    caught = [shape for shape, where in leaks.items() if not where]
    print(f"\ncaught {len(caught)} of {len(leaks)}: " + "; ".join(f"{k}: {v}" for k, v in leaks.items() if v))
    assert {k: v for k, v in leaks.items() if v} == {}
    # Item 7: the environment's credentials, which the agent's `env` printed, in neither the log nor the panel.
    for secret in (GATEWAY, SPARE_KEY):
        assert secret not in places["run dir and notes"] and secret not in places["panel answers"]


HOSTILE = """
import threading
from unittest.mock import Mock

class Blocking:
    def __getattribute__(self, name):
        threading.Event().wait()

class ForeverStr:
    def __str__(self):
        threading.Event().wait()
        return "7"

class Shaped:
    def __init__(self):
        self.shape = (ForeverStr(), 3)

class ClassProperty:
    @property
    def __class__(self):
        raise RuntimeError("no class")

class RaisingStr:
    def __str__(self):
        raise ValueError("no str")

class Columned:
    def __init__(self):
        self.shape, self.columns = (2, 2), [RaisingStr(), "b"]

blocking, shaped, as_str, as_dict = Blocking(), Shaped(), Mock(spec=str), Mock(spec=dict)
weird, columned = ClassProperty(), Columned()
orders = list(range(1234))
"""
HOSTILE_NAMES = ("blocking", "shaped", "as_str", "as_dict", "weird", "columned")


def test_hostile_objects_in_the_namespace_are_shown_unreadable_and_the_run_completes(
    fake_api: FakeAnthropic, kernel: Kernel
) -> None:
    """Acceptance d: an object whose attribute reads block, a shape element whose str blocks,
    Mock(spec=str), Mock(spec=dict), a __class__ property, a column whose str raises: the cell hung
    until a kernel interrupt or raised a 10-12 frame traceback, and no run started."""
    kernel.run("%load_ext flower_magic")
    assert kernel.run(HOSTILE).status == "ok"
    fake_api.add(
        as_role("clarifier", text(BRIEF)),
        as_role("goal", text(GOAL)),
        as_role("worker", tool_use(nb.VARIABLE_TOOL, {"name": "blocking"})),
        as_role("worker", tool_use(nb.VARIABLE_TOOL, {"name": "as_dict"})),
        as_role("worker", text("做完了")),
        as_role("judge", text(PASS)),
    )
    sent = time.time()
    run = kernel.run('%flower "整理 orders"', timeout=240)
    assert run.status == "ok" and not run.errors, run.text
    first_request_s = fake_api.requests[0].at - sent
    block = _role(fake_api, "clarifier")[0].last_user_text
    for name in HOSTILE_NAMES:
        line = next(x for x in block.splitlines() if x.startswith(f"- {name}:"))
        assert line.endswith(f"[{nb.UNREADABLE_NOTE}]"), line
    assert "- orders: list, 长度 1234" in block
    assert _role(fake_api, "judge"), "the run did not reach its judge"
    answers = [json.dumps(r.tool_results(), ensure_ascii=False) for r in _role(fake_api, "worker")[1:3]]
    assert nb.UNREADABLE_NOTE in answers[0] and "取不出来" in answers[1]
    # How long building the block holds the cell, in this kernel (a fresh context reads them all again).
    timed = kernel.run(
        "import time\n"
        "from flower_magic.core.notebook import NotebookContext\n"
        "from flower_magic.kernel import CellErrors, Proposals, ShellSource\n"
        "_t = time.perf_counter()\n"
        "NotebookContext(ShellSource(get_ipython(), CellErrors(), Proposals(get_ipython(), 'zh'))).take()\n"
        "print(f'block {time.perf_counter() - _t:.3f}')"
    )
    print(f"\n%flower sent -> first request: {first_request_s:.2f} s; {timed.stream.strip()} s")
