"""Sessions on PostgreSQL, end to end (issue 17): a run moves to a machine with nothing of the first
one's but the workspace and the database (acceptance c), and the URL's password is nowhere (d)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flower_magic.core.rundir import RunDir
from flower_magic.core.storage import StoreLocation, StoreMismatch, choose_store, record_store
from flower_magic.front.options import snapshot
from flower_magic.testing import FakeAnthropic, text, tool_use
from tests.helpers import run_script, stored_session, write_script
from tests.pg import PgServer

SCRIPT = """
    import asyncio, json

    from flower_magic import AgentSpec, Runtime, Step, Workflow

    spec = AgentSpec(name="reader", instructions="简短回答。", allowed_tools=["Read", "Bash"], max_turns=6)


    async def main() -> None:
        wf = Workflow([Step("干活", spec, "读 seed.txt,只回文件里那个词。")])
        rt = Runtime(workspace=".", run_dir="runs")
        try:
            ctx = await wf.run(rt)
        finally:
            rt.close()
        print(json.dumps({"woke": ctx["_woke"], "sessions": ctx["_sessions"], "failed": ctx.get("_failed_at")}))


    asyncio.run(main())
"""


def files_holding(root: Path, secret: str) -> list[str]:
    """Every file under ``root`` whose bytes hold ``secret`` (as text, or percent-encoded in a URL)."""
    needles = [secret.encode(), secret.replace("-", "%2D").encode()]
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if any(n in data for n in needles):
                found.append(str(path))
    return found


def flower(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flower_magic.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_a_run_continues_on_a_new_machine_from_the_database_alone(
    pg_server: PgServer, fake_api: FakeAnthropic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Acceptance c and d. The first run has HOME A; then HOME A is gone (the CLI's local copy of the
    transcript with it) and there is no sessions.db: HOME B is empty, only the workspace's run dir
    (lineage, manifest, store.json) and the database remain. The second run resumes the same session
    with the first's turns in its request. The canary password is in no file, output or log."""
    for name in ("FLOWER_SESSIONS", "PGPASSWORD", "PGPASSFILE"):
        monkeypatch.delenv(name, raising=False)  # this process reads the store only as the test says
    url = pg_server.fresh_url()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "seed.txt").write_text("向日葵\n", encoding="utf-8")
    script = write_script(ws / "pod.py", SCRIPT)
    outputs: list[str] = []

    def machine(home: Path) -> dict[str, str]:
        home.mkdir()
        env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("ANTHROPIC_", "FLOWER_"))}
        env.update(fake_api.env(home), FLOWER_SESSIONS=url, PYTHONUNBUFFERED="1", FLOWER_LANG="en")
        return env

    env_a = machine(tmp_path / "home-a")
    # The agent looks at its environment first: FLOWER_SESSIONS is there, emptied (core.runtime).
    fake_api.add(tool_use("Bash", {"command": "env"}), tool_use("Read", {"file_path": str(ws / "seed.txt")}))
    fake_api.add(text("向日葵"))
    first = run_script(script, cwd=ws, env=env_a)
    outputs.append(json.dumps(first))
    assert first["woke"] == 1 and first["failed"] is None
    sid = first["sessions"]["干活"]
    assert json.loads((ws / "runs" / "store.json").read_text()) == {
        "kind": "postgresql",
        "host": "127.0.0.1",
        "port": pg_server.port,
        "database": StoreLocation.parse(url).database,
        "user": "flower",
        "query": "",
    }
    status = flower(["--status"], ws, env_a)
    outputs += [status.stdout, status.stderr]
    leaks = files_holding(tmp_path / "home-a", pg_server.password)

    # The pod moves: a new machine, an empty HOME, nothing machine-local of the first one.
    shutil.rmtree(tmp_path / "home-a")
    assert not (ws / "runs" / "sessions.db").exists()
    env_b = machine(tmp_path / "home-b")
    assert list((tmp_path / "home-b").iterdir()) == []
    n_first = len(fake_api.requests)
    fake_api.add(text("还是向日葵"))
    second = run_script(script, cwd=ws, env=env_b)
    outputs.append(json.dumps(second))
    assert second["woke"] == 2 and second["sessions"]["干活"] == sid
    resumed = fake_api.requests[n_first]
    assert "向日葵" in resumed.all_text and any(r.get("tool_use_id") for r in resumed.tool_results())
    assert resumed.n_messages > fake_api.requests[0].n_messages
    assert not (ws / "runs" / "sessions.db").exists()
    assert stored_session(ws / "runs", sid, ws) is None  # store.json holds no password: a reader needs one
    assert snapshot(RunDir.at(ws)).work_context == 0
    assert snapshot(RunDir.at(ws), url).work_context > 0  # --status with --sessions reads with its password
    monkeypatch.setenv("PGPASSWORD", pg_server.password)  # libpq's own source, as a reader's pod has
    assert stored_session(ws / "runs", sid, ws) is not None

    # --sessions on the command line, the same store: --status reads it (and says it in no output).
    env_flag = {k: v for k, v in env_b.items() if k != "FLOWER_SESSIONS"}
    by_env = flower(["--status"], ws, env_b)
    by_flag = flower(["--sessions", url, "--status"], ws, env_flag)
    assert by_flag.returncode == 0, by_flag.stderr
    outputs += [by_env.stdout, by_env.stderr, by_flag.stdout, by_flag.stderr]
    assert by_flag.stdout == by_env.stdout

    leaks += files_holding(ws, pg_server.password) + files_holding(tmp_path / "home-b", pg_server.password)
    leaks += [f"output {i}" for i, out in enumerate(outputs) if pg_server.password in out]
    leaks += files_holding(pg_server.root, pg_server.password)  # the server's own log
    env_seen = [str(r.get("content")) for q in fake_api.requests for r in q.tool_results() if "HOME=" in str(r)]
    assert env_seen and "FLOWER_SESSIONS=" in env_seen[0]  # the agent ran env, and saw the variable empty
    leaks += [f"request {i}" for i, q in enumerate(fake_api.requests) if pg_server.password in q.all_text]
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM flower_entries WHERE strpos(payload, %s) > 0", (pg_server.password,))
        leaks += ["the database"] * int(row.fetchone()[0])  # type: ignore[index]
    assert leaks == []


@pytest.mark.slow
def test_a_bad_or_refused_url_is_said_without_its_password(pg_server: PgServer, tmp_path: Path) -> None:
    """Acceptance d, for the errors: a URL that does not parse, a wrong password, an unknown database."""
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("ANTHROPIC_", "FLOWER_"))}
    env.update(HOME=str(tmp_path / "home"), FLOWER_LANG="en")
    secret = pg_server.password
    bad = [
        f"postgresql://flower:{secret}@127.0.0.1:notaport/x",
        f"mysql://flower:{secret}@127.0.0.1/x",
        pg_server.url("postgres", password="wrong-" + secret),
        pg_server.url("no_such_db"),
    ]
    said = []
    for url in bad:
        out = flower(["--sessions", url, "--demo", "--rounds", "1", "write a.txt"], ws, env)
        assert out.returncode != 0
        said.append(out.stdout + out.stderr)
    assert "--sessions" in said[0] and "--sessions" in said[1]
    assert "password authentication failed" in said[2] and "no_such_db" in said[3]
    assert [s for s in said if secret in s] == []
    assert files_holding(ws, secret) == []


def test_a_run_dir_keeps_to_its_store(pg_server: PgServer, tmp_path: Path) -> None:
    """Switching stores under a run would lose its sessions: refused, naming where they are (no password)."""
    url = pg_server.fresh_url()
    runs = tmp_path / "runs"
    runs.mkdir()
    where = StoreLocation.parse(url)
    record_store(runs, where)
    assert choose_store(runs, "") == where  # no setting: the recorded store
    assert choose_store(runs, url).password == pg_server.password  # the same place: the given password
    other = pg_server.url("elsewhere")
    for setting in (other, "sqlite"):
        with pytest.raises(StoreMismatch) as caught:
            choose_store(runs, setting)
        assert where.redacted in str(caught.value) and pg_server.password not in str(caught.value)
    local = tmp_path / "local"
    local.mkdir()
    (local / "sessions.db").write_bytes(b"")
    (local / "lineage.json").write_text("{}")
    with pytest.raises(StoreMismatch):
        choose_store(local, url)  # its sessions are in sessions.db
