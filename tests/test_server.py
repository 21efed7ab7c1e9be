"""The Flower panel's jupyter_server extension, on a real server with authentication on (pytest-jupyter).

Every test talks HTTP to a real ServerApp whose root is a temp folder holding a run written with the
real file formats: manifest.json, lineage.json, sessions.db (the original schema) and .flower/notes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import subprocess
import sys
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPResponse

from flower_magic.core import words
from flower_magic.core.events import Event
from flower_magic.core.live import EventLog, LiveRun
from flower_magic.front.outcome import Ending, Outcome
from flower_magic.panel import transcript
from flower_magic.panel.redaction import REDACTED
from tests.helpers import LockHolder, no_key_env

pytest_plugins = ["pytest_jupyter.jupyter_server"]

CANARY = "sk-ant-api03-CANARY-flower-panel-must-never-echo-this-0123456789"
OTHER_SECRET = "hunter2-but-longer-than-eight"
OUTSIDE_MARK = "OUTSIDE-THE-ROOT-do-not-serve"
SID = "0b8f5a0e-3c1d-4e2a-9f6b-7a1c2d3e4f50"
SID2 = "9d3c2b1a-0f9e-4d8c-8b7a-6f5e4d3c2b1a"
ENTRIES = 250
ROUTES = ("run", "transcript", "rundirs", "words")  # the reads
ALL_ROUTES = (*ROUTES, "live")  # and the one write
VERBS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")


# -- a run on disk, written with the real formats ---------------------------------------------------


def row(step: str, **extra: Any) -> dict[str, Any]:
    base = {
        "step": step,
        "session_id": SID,
        "ok": True,
        "cost_usd": 0.25,
        "num_turns": 3,
        "text": "done",
        "error": None,
        "started_at": 1_750_000_000.0,
        "ended_at": 1_750_000_010.5,
        "attempts": 1,
        "errors": [],
        "resumed": False,
        "retired": [],
        "context": 12_000,
        "duration_s": 10.5,
        "run": "20260101-000000-abcdef",
    }
    base.update(extra)
    return base


def write_db(db: Path, sessions: dict[str, list[dict[str, Any]]]) -> None:
    """sessions.db with the original schema; keys are full store keys."""
    conn = sqlite3.connect(db)
    conn.executescript(
        "CREATE TABLE IF NOT EXISTS entries(store_key TEXT NOT NULL, seq INTEGER NOT NULL, uid TEXT,"
        " payload TEXT NOT NULL, PRIMARY KEY(store_key, seq));"
        "CREATE TABLE IF NOT EXISTS meta(store_key TEXT PRIMARY KEY, mtime INTEGER NOT NULL,"
        " next_seq INTEGER NOT NULL);"
        "CREATE TABLE IF NOT EXISTS summaries(project_key TEXT NOT NULL, session_id TEXT NOT NULL,"
        " mtime INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY(project_key, session_id));"
    )
    for key, entries in sessions.items():
        conn.executemany(
            "INSERT INTO entries VALUES (?, ?, ?, ?)",
            [(key, i, e.get("uuid"), json.dumps(e)) for i, e in enumerate(entries)],
        )
        conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?, ?)", (key, 1, len(entries)))
    conn.commit()
    conn.close()


API_ERROR_AT = 5  # this entry of the main session is a synthetic API error, which a resume drops


def entry(i: int, text: str = "") -> dict[str, Any]:
    role = "user" if i % 2 == 0 else "assistant"
    out: dict[str, Any] = {
        "type": role,
        "uuid": f"u-{i:05d}",
        "message": {"role": role, "content": text or f"entry {i}"},
    }
    if i == API_ERROR_AT:
        out["isApiErrorMessage"] = True
        out["message"] = {
            "role": "assistant",
            "model": "<synthetic>",
            "content": [{"type": "text", "text": "API Error: Connection error."}],
        }
    return out


@dataclass
class Layout:
    root: Path
    outside: Path
    proj: Path
    urls: list[str] = field(default_factory=list)


@pytest.fixture
def server_lang() -> str:
    """The server's FLOWER_LANG (English here, so messages read as written; a test may ask for zh)."""
    return "en"


@pytest.fixture
def canary(monkeypatch: pytest.MonkeyPatch, server_lang: str) -> str:
    monkeypatch.setenv("FLOWER_LANG", server_lang)
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    monkeypatch.setenv("SOME_SERVICE_TOKEN", OTHER_SECRET)
    return CANARY


@pytest.fixture
def jp_server_config(canary: str) -> dict[str, Any]:
    # Requesting ``canary`` here puts the key in the environment before the server starts.
    return {"ServerApp": {"jpserver_extensions": {"flower_magic": True}}}


@pytest.fixture
def layout(jp_root_dir: Path, tmp_path: Path) -> Layout:
    root = Path(jp_root_dir)
    outside = tmp_path / "outside"
    (outside / "runs").mkdir(parents=True)
    (outside / "runs" / "manifest.json").write_text(json.dumps([row(OUTSIDE_MARK)]))
    (outside / "runs" / "lineage.json").write_text(json.dumps({"workspace": OUTSIDE_MARK}))
    (outside / "secret.txt").write_text(OUTSIDE_MARK)
    (outside / "需求.md").write_text(f"## 目标\n{OUTSIDE_MARK}\n")
    write_db(outside / "runs" / "sessions.db", {f"{transcript.project_key(outside)}/{SID}": [entry(0, OUTSIDE_MARK)]})

    proj = root / "proj"
    runs = proj / "runs"
    runs.mkdir(parents=True)
    rows = [
        row("确认需求", cost_usd=0.5, num_turns=4, duration_s=20.0),
        row(
            "设定目标",
            cost_usd=0.25,
            num_turns=2,
            duration_s=5.5,
            attempts=3,
            errors=["overloaded", "connection reset"],
            resumed=True,
        ),
        row(
            "干活",
            cost_usd=1.25,
            num_turns=30,
            duration_s=600.0,
            retired=[SID2, SID2.replace("9d", "8d")],
            text=f"agent said {CANARY} and {OTHER_SECRET}",
            errors=[f"echo {CANARY}"],
        ),
    ]
    (runs / "manifest.json").write_text(json.dumps(rows, ensure_ascii=False, indent=2), encoding="utf-8")
    (runs / "lineage.json").write_text(
        json.dumps({"workspace": os.path.realpath(proj), "woke": 2, "steps": {"干活": SID}}, ensure_ascii=False)
    )
    notes = proj / ".flower" / "notes"
    notes.mkdir(parents=True)
    (notes / "需求.md").write_text(
        "# 需求确认书\n\n## 目标\n\nX\n\n## 验收标准\n\nY\n\n## 边界\n\nZ\n\n## 未知与假设\n\nW\n", encoding="utf-8"
    )
    (notes / "目标.md").write_text("# 目标\nX\n\n# 判定清单\n- a\n- b\n- c\n", encoding="utf-8")
    pk = transcript.project_key(proj)
    write_db(
        runs / "sessions.db",
        {
            f"{pk}/{SID}": [entry(i, f"key {CANARY}" if i == 7 else "") for i in range(ENTRIES)],
            f"{pk}/{SID}/subagents/agent-x": [entry(i, "subagent") for i in range(5)],
            f"-other-project/{SID2}": [entry(0, "other project")],
        },
    )

    # Ways out of the root and into hidden places, each of which must read as "not found".
    (root / "link_out").symlink_to(outside, target_is_directory=True)
    (proj / "runs_out").symlink_to(outside / "runs", target_is_directory=True)
    (proj / "up").symlink_to(root.parent, target_is_directory=True)
    (root / ".hidden" / "runs").mkdir(parents=True)
    (root / ".hidden" / "runs" / "manifest.json").write_text(json.dumps([row(OUTSIDE_MARK)]))
    (root / "to_hidden").symlink_to(root / ".hidden", target_is_directory=True)
    (proj / ".flower" / "runs").mkdir()
    (proj / ".flower" / "runs" / "manifest.json").write_text(json.dumps([row(OUTSIDE_MARK)]))
    # A run dir inside the root whose files point out of it.
    leaky = root / "leaky" / "runs"
    leaky.mkdir(parents=True)
    (leaky / "manifest.json").symlink_to(outside / "runs" / "manifest.json")
    (leaky / "lineage.json").symlink_to(outside / "runs" / "lineage.json")
    (leaky / "sessions.db").symlink_to(outside / "runs" / "sessions.db")
    (root / "leaky" / ".flower" / "notes").mkdir(parents=True)
    (root / "leaky" / ".flower" / "notes" / "需求.md").symlink_to(outside / "需求.md")
    return Layout(root, outside, proj)


# -- HTTP helpers -------------------------------------------------------------------------------------


@pytest.fixture
def call(jp_serverapp: Any, http_server_client: Any, jp_base_url: str, jp_auth_header: dict[str, str]):
    """``call(route, query, method=..., token=True)`` -> response (never raises on status)."""

    async def _call(
        route: str, query: str | dict[str, str] = "", *, method: str = "GET", token: bool | str = True
    ) -> HTTPResponse:
        if isinstance(query, dict):
            query = urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
        url = f"{jp_base_url}flower/api/{route}" + (f"?{query}" if query else "")
        headers = {}
        if token is True:
            headers.update(jp_auth_header)
        elif token:
            headers["Authorization"] = f"token {token}"
        body = b"{}" if method in ("POST", "PUT", "PATCH") else None
        return await http_server_client.fetch(
            url,
            method=method,
            headers=headers,
            body=body,
            raise_error=False,
            follow_redirects=False,
            allow_nonstandard_methods=True,
        )

    return _call


def text_of(response: HTTPResponse) -> str:
    return response.body.decode("utf-8", errors="replace") if response.body else ""


def assert_no_leak(response: HTTPResponse, layout: Layout) -> None:
    body = text_of(response)
    assert OUTSIDE_MARK not in body
    assert CANARY not in body and OTHER_SECRET not in body
    assert str(layout.root) not in body and str(layout.outside) not in body
    assert "Traceback" not in body


# -- authentication and verbs -------------------------------------------------------------------------


@pytest.mark.parametrize("route", ALL_ROUTES)
@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("token", [False, "not-the-token"])
async def test_every_route_and_verb_without_a_valid_token_is_403(call, layout, route, verb, token):
    """Guards against a handler (or a verb like OPTIONS) that answers without authentication."""
    response = await call(route, {"path": "proj", "session": SID}, method=verb, token=token)
    assert response.code == 403
    assert_no_leak(response, layout)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("verb", ["POST", "PUT", "PATCH", "DELETE"])
async def test_writing_verbs_are_refused_even_with_a_token(call, layout, route, verb):
    before = (layout.proj / "runs" / "manifest.json").read_bytes()
    response = await call(route, {"path": "proj", "session": SID}, method=verb)
    assert response.code == 405
    assert response.headers.get("Allow") == "GET"
    assert (layout.proj / "runs" / "manifest.json").read_bytes() == before
    assert_no_leak(response, layout)


async def test_a_user_not_authorised_for_contents_gets_403(jp_serverapp, call, layout):
    """The handlers ask the authorizer about the contents resource, not just whether someone logged in."""
    from jupyter_server.auth.authorizer import Authorizer

    class DenyContents(Authorizer):
        def is_authorized(self, handler, user, action, resource):
            return resource != "contents"

    jp_serverapp.web_app.settings["authorizer"] = DenyContents(parent=jp_serverapp)
    for route in ROUTES:
        response = await call(route, {"path": "proj", "session": SID})
        assert response.code == 403
        assert_no_leak(response, layout)


# -- confinement ---------------------------------------------------------------------------------------


def _traversal_cases(layout: Layout) -> list[tuple[str, str]]:
    """(route, raw query string) pairs, each a way to reach outside the root or a hidden place."""
    out, root = str(layout.outside), str(layout.root)
    # Values the server must see exactly as written (we percent-encode them for the wire).
    paths = [
        "..",
        "../",
        "../..",
        "../../..",
        "../outside",
        "proj/..",
        "proj/../..",
        "proj/../../outside",
        "./..",
        ".",
        "./",
        "proj/./../..",
        "proj/runs/../../..",
        "....//",
        "..././",
        "..;/",
        ".. ",
        " ..",
        "%2e%2e",
        "%2e%2e/outside",
        "%2E%2E%2Foutside",
        "..%2f",
        "..%2F..%2F",
        "%252e%252e",
        "%252e%252e%252foutside",
        "%25252e%25252e",
        "%2fetc",
        "%5c..%5c",
        "/",
        "/etc",
        "//etc",
        "/proc/self/environ",
        out,
        out + "/runs",
        root,
        root + "/proj",
        "~",
        "~/",
        "~root",
        "C:\\",
        "c:/windows",
        "..\\outside",
        "proj\\..\\..",
        "\\etc",
        "\\\\server\\share",
        "\x00",
        "proj\x00",
        "proj/\x00/..",
        "..\x00",
        "proj\x00/../..",
        "proj\n",
        "proj\r\n..",
        "\x7f",
        "link_out",
        "link_out/",
        "link_out/runs",
        "proj/runs_out",
        "proj/up",
        "proj/up/outside",
        ".hidden",
        ".hidden/",
        "to_hidden",
        "to_hidden/runs",
        "proj/.flower",
        "proj/.flower/notes",
        "proj/.flower/runs",
        ".git",
        "proj/.git",
        "proj/runs/manifest.json",
        "proj/runs/sessions.db",
        "no/such/dir",
        "x" * 5000,
    ]
    run_dirs = [
        "..",
        "../..",
        "../../outside",
        "../link_out/runs",
        "runs/../..",
        "runs/../../..",
        out,
        out + "/runs",
        "/tmp",
        "/",
        "runs_out",
        "up",
        "up/outside/runs",
        ".flower",
        ".flower/runs",
        ".flower/notes",
        "%2e%2e",
        "%252e%252e",
        "..%2f..",
        "runs\x00",
        "\x00",
        "..\\..",
        "runs\\..\\..",
        "",
        "~",
        "runs/manifest.json",
    ]
    sessions = [
        "../../etc/passwd",
        f"{SID}/subagents/agent-x",
        f"{SID}/..",
        f"{SID}%00",
        f"{SID}\x00",
        "%2e%2e%2f",
        "' OR 1=1 --",
        "*",
        "%",
        f"{SID} ",
        f" {SID}",
        SID.replace("-", ""),
        SID[:-1],
        f"{SID}/",
        SID2,
        SID.upper(),
    ]
    cases: list[tuple[str, str]] = []

    def q(**kw: str) -> str:
        return urllib.parse.urlencode(kw, quote_via=urllib.parse.quote)

    for p in paths:
        cases.append(("run", q(path=p)))
        cases.append(("transcript", q(path=p, session=SID)))
    for r in run_dirs:
        cases.append(("run", q(path="proj", run_dir=r)))
        cases.append(("transcript", q(path="proj", run_dir=r, session=SID)))
    for s in sessions:
        cases.append(("transcript", q(path="proj", session=s)))
    # Sent as written: Tornado decodes these once (to "..", "../..", NUL, overlong UTF-8 ...).
    for raw in [
        "path=%2e%2e",
        "path=%2e%2e%2f%2e%2e",
        "path=..%2foutside",
        "path=%2E%2E",
        "path=proj%2f%2e%2e%2f%2e%2e",
        "path=proj%00",
        "path=%00",
        "path=%c0%ae%c0%ae",
        "path=%ff%fe",
        "path=%252e%252e",
        "path=%2fetc",
        "path=proj&path=..",
        "path=proj&run_dir=%2e%2e",
        "path=proj&run_dir=..%2f..",
        "path=..&path=proj",
    ]:
        cases.append(("run", raw))
        cases.append(("transcript", raw + f"&session={SID}"))
    return cases


async def test_more_than_100_traversal_attempts_are_404_with_nothing_leaked(call, layout):
    """Guards the confinement: ``..``, encodings, absolute paths, symlinks out, hidden dirs, NUL."""
    cases = _traversal_cases(layout)
    assert len(cases) >= 100
    wrong = []
    for route, query in cases:
        response = await call(route, query)
        assert_no_leak(response, layout)
        if response.code != 404 or json.loads(response.body)["message"] != "Not found":
            wrong.append((route, query, response.code))
    assert wrong == []


async def test_files_linked_out_of_the_root_are_not_read(call, layout):
    """A run dir inside the root whose manifest, lineage and notes are symlinks out of it."""
    response = await call("run", {"path": "leaky"})
    assert response.code == 200
    body = json.loads(response.body)
    assert body["rows"] == [] and body["lineage"]["woke"] == 0
    assert body["wake"]["has_brief"] is False
    assert len(body["problems"]) == 3
    assert_no_leak(response, layout)
    response = await call("transcript", {"path": "leaky", "session": SID})
    assert response.code == 404
    assert_no_leak(response, layout)


# -- the run endpoint ----------------------------------------------------------------------------------


async def test_run_serves_rows_totals_lineage_and_wake_facts(call, layout):
    response = await call("run", {"path": "proj"})
    assert response.code == 200
    body = json.loads(response.body)
    assert body["workspace"] == "proj" and body["run_dir"] == "proj/runs" and body["has_run"] is True
    assert [r["step"] for r in body["rows"]] == ["确认需求", "设定目标", "干活"]
    assert body["rows"][2]["retired"] == [SID2, SID2.replace("9d", "8d")]
    assert body["rows"][1]["errors"] == ["overloaded", "connection reset"]
    assert body["totals"] == {
        "steps": 3,
        "ok": 3,
        "cost_usd": 2.0,
        "num_turns": 36,
        "duration_s": 625.5,
        "retries": 2,
        "handoffs": 2,
    }
    assert body["lineage"] == {"woke": 2, "steps": {"干活": SID}}
    assert body["wake"] == {"brief_complete": True, "goal_checks": 3, "has_brief": True, "has_goal": True}
    assert body["problems"] == [] and body["has_sessions"] is True
    assert_no_leak(response, layout)


async def test_run_and_transcript_answer_while_a_run_holds_the_directory(call, layout):
    """The panel only reads: a run holding the run dir's lock (issue 10) never makes it wait or fail."""
    with LockHolder(layout.proj / "runs", "notebook", "干活"):
        response = await call("run", {"path": "proj"})
        assert response.code == 200
        assert [r["step"] for r in json.loads(response.body)["rows"]] == ["确认需求", "设定目标", "干活"]
        page = await call("transcript", {"path": "proj", "session": SID, "limit": "5"})
        assert page.code == 200 and json.loads(page.body)["entries"]


async def test_polling_with_the_etag_gets_304_until_a_file_changes(
    call, layout, http_server_client, jp_base_url, jp_auth_header
):
    """Guards the cheap poll: an unchanged run answers 304, and any change (a new row) answers 200."""
    url = f"{jp_base_url}flower/api/run?path=proj"
    first = await http_server_client.fetch(url, headers=jp_auth_header)
    etag = first.headers["Etag"]
    assert json.loads(first.body)["stamp"] == etag.strip('"')
    again = await http_server_client.fetch(url, headers={**jp_auth_header, "If-None-Match": etag}, raise_error=False)
    assert again.code == 304 and not again.body
    manifest = layout.proj / "runs" / "manifest.json"
    manifest.write_text(json.dumps([*json.loads(manifest.read_text()), row("new")]))
    changed = await http_server_client.fetch(url, headers={**jp_auth_header, "If-None-Match": etag})
    assert changed.code == 200 and changed.headers["Etag"] != etag
    assert json.loads(changed.body)["rows"][-1]["step"] == "new"
    unauthenticated = await http_server_client.fetch(url, headers={"If-None-Match": etag}, raise_error=False)
    assert unauthenticated.code == 403


async def test_run_of_a_directory_without_a_run_is_empty_not_an_error(call, layout):
    (layout.root / "fresh").mkdir()
    response = await call("run", {"path": "fresh"})
    assert response.code == 200
    body = json.loads(response.body)
    assert body["has_run"] is False and body["rows"] == [] and body["totals"]["steps"] == 0


async def test_the_server_root_itself_can_hold_a_run(call, layout):
    """Regression: the root resolved to ".", which read as a hidden path, so path="" was always 404."""
    (layout.root / "runs").mkdir()
    (layout.root / "runs" / "manifest.json").write_text(json.dumps([row("at the root")]))
    response = await call("run", {"path": ""})
    assert response.code == 200
    body = json.loads(response.body)
    assert body["workspace"] == "" and body["run_dir"] == "runs"
    assert [r["step"] for r in body["rows"]] == ["at the root"]


async def test_run_dir_can_be_chosen(call, layout):
    other = layout.proj / "runs2"
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps([row("only")]))
    body = json.loads((await call("run", {"path": "proj", "run_dir": "runs2"})).body)
    assert [r["step"] for r in body["rows"]] == ["only"]


@pytest.mark.parametrize(
    ("content", "status", "reason"),
    [
        (b'[{"step": "a", "ok": tr', 503, "ManifestUnparseable"),  # half-written, caught mid-write
        (b"", 503, "ManifestUnparseable"),  # created, nothing written yet
        (b"[", 503, "ManifestUnparseable"),
        (b"\xff\xfe garbage", 503, "ManifestUnparseable"),
        (b"NaN-not-json", 503, "ManifestUnparseable"),
        (b'{"step": "a"}', 422, "ManifestNotAList"),
        (b'"just a string"', 422, "ManifestNotAList"),
    ],
)
async def test_a_malformed_or_half_written_manifest_gets_a_clear_status(call, layout, content, status, reason):
    """Guards against a 500 traceback while a run is writing its manifest."""
    (layout.proj / "runs" / "manifest.json").write_bytes(content)
    response = await call("run", {"path": "proj"})
    assert response.code == status
    body = json.loads(response.body)
    assert body["reason"] == reason and "manifest.json" in body["message"]
    assert_no_leak(response, layout)


async def test_rows_of_the_wrong_shape_are_skipped_and_reported(call, layout):
    rows = [row("good"), 7, "text", None, {"step": "odd", "cost_usd": "free", "attempts": True, "retired": 3}]
    (layout.proj / "runs" / "manifest.json").write_text(json.dumps(rows))
    body = json.loads((await call("run", {"path": "proj"})).body)
    assert [r["step"] for r in body["rows"]] == ["good", "odd"]
    assert body["rows"][1]["cost_usd"] is None and body["rows"][1]["retired"] == []
    assert body["problems"] == ["manifest.json: 3 rows that are not objects were skipped"]


async def test_a_lineage_of_another_workspace_is_reported_not_used(call, layout):
    (layout.proj / "runs" / "lineage.json").write_text(
        json.dumps({"workspace": "/elsewhere", "woke": 9, "steps": {"a": SID}})
    )
    body = json.loads((await call("run", {"path": "proj"})).body)
    assert body["lineage"] == {"woke": 0, "steps": {}}
    assert any("another workspace" in p for p in body["problems"])


async def test_a_run_made_in_a_sub_folder_viewed_from_above_is_that_folders_run(call, layout):
    """Issue 12 (4): no false "copied or moved" warning; the sub-folder's notes and sessions are read."""
    sub = layout.proj / "sub"
    (sub / "runs").mkdir(parents=True)
    (sub / "runs" / "lineage.json").write_text(
        json.dumps({"workspace": str(sub.resolve()), "woke": 1, "steps": {"a": SID}})
    )
    (sub / "runs" / "manifest.json").write_text(json.dumps([row("a")]))
    (sub / ".flower" / "notes").mkdir(parents=True)
    (sub / ".flower" / "notes" / "目标.md").write_text("# 目标\nX\n\n# 判定清单\n- a\n", encoding="utf-8")
    write_db(sub / "runs" / "sessions.db", {f"{transcript.project_key(sub.resolve())}/{SID}": [entry(0, "from sub")]})
    body = json.loads((await call("run", {"path": "proj", "run_dir": "sub/runs"})).body)
    assert body["problems"] == [] and body["workspace"] == "proj/sub"
    assert body["lineage"]["woke"] == 1 and body["wake"]["goal_checks"] == 1
    page = json.loads((await call("transcript", {"path": "proj", "run_dir": "sub/runs", "session": SID})).body)
    assert page["entries"][0]["entry"]["message"]["content"] == "from sub"
    # a copy of that run dir in another folder still says it was copied
    copy = layout.proj / "copy" / "runs"
    copy.mkdir(parents=True)
    (copy / "lineage.json").write_bytes((sub / "runs" / "lineage.json").read_bytes())
    body = json.loads((await call("run", {"path": "proj/copy"})).body)
    assert any("another workspace" in p for p in body["problems"])


async def test_a_client_holding_the_rows_gets_only_the_new_ones(call, layout):
    """Issue 12 (4): a changed poll of a run that appended sends the new rows, not the whole table."""
    manifest = layout.proj / "runs" / "manifest.json"
    rows = [row(f"step {i}") for i in range(50)]
    manifest.write_text(json.dumps(rows, indent=2, ensure_ascii=False), encoding="utf-8")  # flower's layout
    full = json.loads((await call("run", {"path": "proj"})).body)
    assert len(full["rows"]) == 50 and full["rows_mark"].startswith("50:") and "rows_from" not in full

    manifest.write_text(json.dumps([*rows, row("step 50")], indent=2, ensure_ascii=False), encoding="utf-8")
    response = await call("run", {"path": "proj", "have": full["rows_mark"]})
    tail = json.loads(response.body)
    assert tail["rows_from"] == 50 and [r["step"] for r in tail["rows"]] == ["step 50"]
    assert tail["rows"][0]["index"] == 50 and tail["totals"]["steps"] == 51 and tail["rows_mark"].startswith("51:")
    assert len(response.body) < len(json.dumps(full)) / 10

    # an earlier row changed, or a mark that names nothing: the whole table
    rows[3]["ok"] = False
    manifest.write_text(json.dumps([*rows, row("step 50")], indent=2, ensure_ascii=False), encoding="utf-8")
    for have in (tail["rows_mark"], full["rows_mark"], "50:0000", "x", "9" * 5000, "0:"):
        body = json.loads((await call("run", {"path": "proj", "have": have})).body)
        assert "rows_from" not in body and len(body["rows"]) == 51, have[:20]


async def test_run_says_when_new_started_the_folder_over(call, layout, tmp_path):
    """By the archive folders' own times: their names are in the local time of whoever ran --new."""
    archive = layout.proj / ".flower" / "notes" / "archive"
    for name, at in (("20260101-120000", 1_767_000_000), ("20260101-120000-1", 1_767_000_100), ("20251231-2359", 5)):
        (archive / name).mkdir(parents=True)
        os.utime(archive / name, (at, at))
    (archive / "20200101-000000").write_text("a file, not an archive")
    (archive / "交接").mkdir()  # hand-offs kept aside: not a start-over
    body = json.loads((await call("run", {"path": "proj"})).body)
    assert body["starts_over"] == [1_767_000_000, 1_767_000_100]
    # an archive reached through a link out of the root is not read
    outside = tmp_path / "elsewhere-notes"
    (outside / "notes" / "archive" / "20200101-120000").mkdir(parents=True)
    leak = layout.root / "leak2"
    (leak / "runs").mkdir(parents=True)
    (leak / "runs" / "manifest.json").write_text("[]")
    (leak / ".flower").symlink_to(outside, target_is_directory=True)
    assert json.loads((await call("run", {"path": "leak2"})).body)["starts_over"] == []


async def test_rundirs_finds_run_dirs_beside_a_folder_of_many_files(call, layout):
    big = layout.proj / "big"
    (big / "data").mkdir(parents=True)
    for i in range(3000):
        (big / "data" / f"f{i}").mkdir()
    for rel in ("runs", "exp/runs"):
        (big / rel).mkdir(parents=True)
        (big / rel / "manifest.json").write_text("[]")
    body = json.loads((await call("rundirs", {"path": "proj/big"})).body)
    assert body["run_dirs"] == ["runs", "exp/runs"]


async def test_a_hostile_have_or_a_looping_manifest_is_never_a_500(call, layout):
    for query in ("have=1&have=2", "have=%ff", "have=%ff%fe"):
        response = await call("run", f"path=proj&{query}")
        assert response.code == 200 and len(json.loads(response.body)["rows"]) > 0, query
    manifest = layout.proj / "runs" / "manifest.json"
    manifest.unlink()
    manifest.symlink_to(manifest)  # a loop
    response = await call("run", {"path": "proj"})
    assert response.code == 422 and json.loads(response.body)["reason"] == "ManifestNotAFile"


async def test_rundirs_lists_the_run_dirs_under_a_folder_runs_first(call, layout):
    for rel in ("sub/runs", "a/b/exp", ".hidden2/runs", "a/b/c/d/too-deep"):
        (layout.proj / rel).mkdir(parents=True)
        (layout.proj / rel / "manifest.json").write_text("[]")
    body = json.loads((await call("rundirs", {"path": "proj"})).body)
    assert body["run_dirs"] == ["runs", "sub/runs", "a/b/exp"]
    assert (await call("rundirs", {"path": "../x"})).code == 404


# -- the transcript endpoint ----------------------------------------------------------------------------


async def test_transcript_pages_through_one_session(call, layout):
    seen = []
    for offset in range(0, ENTRIES + 100, 100):
        response = await call("transcript", {"path": "proj", "session": SID, "offset": str(offset), "limit": "100"})
        assert response.code == 200
        body = json.loads(response.body)
        assert body["total"] == ENTRIES and body["view"] == "raw"
        seen += [(e["seq"], e["entry"]["uuid"], e["mark"]) for e in body["entries"]]
        assert_no_leak(response, layout)
    assert seen == [(i, f"u-{i:05d}", None) for i in range(ENTRIES)]


async def test_transcript_default_page_and_bad_arguments(call, layout):
    body = json.loads((await call("transcript", {"path": "proj", "session": SID})).body)
    assert len(body["entries"]) == 200 and body["offset"] == 0
    for bad in (
        {"limit": "0"},
        {"limit": "501"},
        {"limit": "-1"},
        {"offset": "-5"},
        {"offset": "1e3"},
        {"view": "cooked"},
        {"limit": "١٠"},
    ):
        response = await call("transcript", {"path": "proj", "session": SID, **bad})
        assert response.code == 400, bad
        assert "must be" in json.loads(response.body)["message"]


async def test_numbers_too_long_to_parse_are_400_not_500(call, layout):
    """Issue 12: a 5000-digit offset once reached ``int()`` (which refuses past 4,300 digits): a 500."""
    for name in ("offset", "limit"):
        response = await call("transcript", {"path": "proj", "session": SID, name: "9" * 5000})
        assert response.code == 400, name
        assert "must be a whole number" in json.loads(response.body)["message"]


async def test_a_fifo_manifest_is_refused_and_the_endpoint_keeps_answering(call, layout):
    """Issue 12: a FIFO named manifest.json once hung every request (the reader blocked on open)."""
    manifest = layout.proj / "runs" / "manifest.json"
    manifest.unlink()
    os.mkfifo(manifest)
    answers = await asyncio.wait_for(asyncio.gather(*(call("run", {"path": "proj"}) for _ in range(8))), 30)
    assert {r.code for r in answers} == {422}
    body = json.loads(answers[0].body)
    assert body["reason"] == "ManifestNotAFile" and "named pipe" in body["message"]
    assert (await call("run", {"path": "proj", "run_dir": "elsewhere"})).code == 200  # it still serves the rest


async def test_words_are_the_panel_phrases_in_every_language(call, layout):
    body = json.loads((await call("words")).body)
    assert body["lang"] == "en"
    said = {lang: {**words.phrases(lang, "lab_"), **words.phrases(lang, "stepname_")} for lang in words.LANGS}
    assert body["langs"] == said and body["words"] == said["en"] and body["words"]["lab_raw"] == "Raw"
    assert body["steps"] == words.STEP_PHRASES and "(?<judge>" in body["step_pattern"]  # JavaScript's spelling


@pytest.mark.parametrize("server_lang", ["zh"])
async def test_a_chinese_server_says_its_panel_words_problems_and_errors_in_chinese(call, layout, server_lang):
    body = json.loads((await call("words")).body)
    assert body["lang"] == "zh" and body["words"]["lab_raw"] == words.say("lab_raw", "zh")
    rows = [row("good"), 7]
    (layout.proj / "runs" / "manifest.json").write_text(json.dumps(rows))
    body = json.loads((await call("run", {"path": "proj"})).body)
    assert body["lang"] == "zh" and body["problems"] == [words.say("lab_rows_skipped", "zh", n=1)]
    response = await call("transcript", {"path": "proj", "session": SID, "view": "cooked"})
    assert json.loads(response.body)["message"] == words.say("lab_bad_view", "zh", got="'cooked'")
    assert json.loads((await call("run", {"path": "../x"})).body)["message"] == words.say("lab_http_404", "zh")
    # the panel says which language it speaks (JupyterLab's): its messages are said in it (issue 24)
    asked = {"path": "proj", "session": SID, "view": "cooked", "lang": "en"}
    response = await call("transcript", asked)
    assert json.loads(response.body)["message"] == words.say("lab_bad_view", "en", got="'cooked'")
    body = json.loads((await call("run", {"path": "proj", "lang": "en"})).body)
    assert body["lang"] == "en" and body["problems"] == [words.say("lab_rows_skipped", "en", n=1)]


def _cli_session() -> list[dict[str, Any]]:
    """A session as the Claude Code CLI stores it: the prompt queued (a copy of it), attachments, a
    meta message, latch and last-prompt records around one tool call and one answer."""
    return [
        {"type": "queue-operation", "operation": "enqueue", "content": "tidy the CSVs"},
        {"type": "queue-operation", "operation": "dequeue"},
        {"type": "user", "uuid": "c-1", "message": {"role": "user", "content": "tidy the CSVs"}},
        {"type": "attachment", "uuid": "c-2", "attachment": {"type": "date", "date": "2026-12-02"}},
        {"type": "user", "uuid": "c-3", "isMeta": True, "message": {"role": "user", "content": "<caveat>"}},
        {"type": "atis-latch"},
        {
            "type": "assistant",
            "uuid": "c-4",
            "message": {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}],
            },
        },
        {"type": "last-prompt"},
        {
            "type": "user",
            "uuid": "c-5",
            "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a,b"}]},
        },
        {"type": "assistant", "uuid": "c-6", "message": {"role": "assistant", "content": "done"}},
        {"type": "mode", "mode": "default"},
    ]


async def test_a_run_dir_on_postgres_is_read_from_there_and_its_password_is_in_no_answer(
    call, layout, pg_server, pg_url, monkeypatch
):
    """Issue 17 (build 2, acceptance d): a run dir whose store.json names PostgreSQL is read from there,
    read-only, the password coming from the server's own FLOWER_SESSIONS; no answer carries it, and
    without a password the page is a 503 that says so by type name only."""
    from flower_magic.core.storage import StoreLocation, record_store
    from flower_magic.stores import PostgresSessionStore

    sid = "7a7a7a7a-1111-4222-8333-955555555555"
    team = layout.root / "team"
    (team / "runs").mkdir(parents=True)
    (team / "runs" / "lineage.json").write_text(
        json.dumps({"workspace": os.path.realpath(team), "woke": 1, "steps": {"干活": sid}})
    )
    where = StoreLocation.parse(pg_url)
    store = PostgresSessionStore(where)
    await store.append({"project_key": transcript.project_key(team), "session_id": sid}, _cli_session())
    store.close()
    record_store(team / "runs", where)
    monkeypatch.setenv("FLOWER_SESSIONS", pg_url)
    answers = [await call("run", {"path": "team"})]
    assert json.loads(answers[0].body)["has_sessions"] is True
    for view in ("raw", "resumed"):
        body = json.loads((await call("transcript", {"path": "team", "session": sid, "view": view})).body)
        assert [(e["seq"], e["entry"].get("uuid")) for e in body["entries"]] == [
            (2, "c-1"),
            (6, "c-4"),
            (8, "c-5"),
            (9, "c-6"),
        ], view
        assert (body["total"], body["hidden"]) == (4, 7)
        answers.append(await call("transcript", {"path": "team", "session": sid, "view": view, "all": "1"}))
        assert json.loads(answers[-1].body)["total"] == 11
    page = await call("transcript", {"path": "team", "session": sid, "all": "1", "offset": "9", "limit": "5"})
    assert [e["seq"] for e in json.loads(page.body)["entries"]] == [9, 10]
    monkeypatch.delenv("FLOWER_SESSIONS")
    refused = await call("transcript", {"path": "team", "session": sid})
    assert refused.code == 503
    for response in [*answers, page, refused]:
        assert pg_server.password not in text_of(response)
        assert_no_leak(response, layout)
    assert not (team / "runs" / "sessions.db").exists()


async def test_a_transcript_shows_the_conversation_and_hides_the_clis_records_until_asked(call, layout):
    """Issue 12 (4): the prompt once, the tool call and its result, the answer; the CLI's plumbing
    (queue operations repeating the prompt, attachments, meta, latches) only with ``all=1``."""
    sid = "5e5e5e5e-1111-4222-8333-944444444444"
    write_db(layout.proj / "runs" / "sessions.db", {f"{transcript.project_key(layout.proj)}/{sid}": _cli_session()})
    for view in ("raw", "resumed"):
        body = json.loads((await call("transcript", {"path": "proj", "session": sid, "view": view})).body)
        said = [(e["seq"], e["entry"].get("uuid")) for e in body["entries"]]
        assert said == [(2, "c-1"), (6, "c-4"), (8, "c-5"), (9, "c-6")], view
        assert (body["total"], body["hidden"], body["all"]) == (4, 7, False)
        everything = json.loads(
            (await call("transcript", {"path": "proj", "session": sid, "view": view, "all": "1"})).body
        )
        assert (everything["total"], everything["hidden"], len(everything["entries"])) == (11, 0, 11)
    page = json.loads((await call("transcript", {"path": "proj", "session": sid, "offset": "2", "limit": "1"})).body)
    assert [e["entry"]["uuid"] for e in page["entries"]] == ["c-5"]

    # the session grows while a run writes it: the new entries appear, at their positions
    key = f"{transcript.project_key(layout.proj)}/{sid}"
    db = sqlite3.connect(layout.proj / "runs" / "sessions.db")
    more = [{"type": "attachment"}, {"type": "user", "uuid": "c-7", "message": {"role": "user", "content": "more"}}]
    db.executemany(
        "INSERT INTO entries VALUES (?, ?, ?, ?)", [(key, 11 + i, None, json.dumps(e)) for i, e in enumerate(more)]
    )
    db.commit()
    body = json.loads((await call("transcript", {"path": "proj", "session": sid})).body)
    assert [(e["seq"], e["entry"].get("uuid")) for e in body["entries"]][-1] == (12, "c-7") and body["hidden"] == 8
    # ...and when something before the end goes away, the index is built again
    db.execute("DELETE FROM entries WHERE store_key = ? AND seq <= 1", (key,))
    db.commit()
    db.close()
    body = json.loads((await call("transcript", {"path": "proj", "session": sid})).body)
    assert [(e["seq"], e["entry"].get("uuid")) for e in body["entries"]] == [
        (0, "c-1"),
        (4, "c-4"),
        (6, "c-5"),
        (7, "c-6"),
        (10, "c-7"),
    ]


async def test_an_unknown_session_is_404(call, layout):
    response = await call("transcript", {"path": "proj", "session": "11111111-2222-4333-8444-555555555555"})
    assert response.code == 404


async def test_the_resumed_view_marks_what_pruning_removes_and_writes_nothing(call, layout):
    """Guards against serving raw entries labelled as resumed, and against a viewer that spills files."""
    before = sorted(p.relative_to(layout.proj) for p in layout.proj.rglob("*"))
    response = await call("transcript", {"path": "proj", "session": SID, "view": "resumed", "limit": "20"})
    assert response.code == 200
    body = json.loads(response.body)
    assert body["view"] == "resumed" and body["total"] == ENTRIES
    marks = {e["entry"]["uuid"]: e["mark"] for e in body["entries"]}
    assert marks[f"u-{API_ERROR_AT:05d}"] == "dropped"
    assert [u for u, m in marks.items() if m] == [f"u-{API_ERROR_AT:05d}"]
    raw = json.loads((await call("transcript", {"path": "proj", "session": SID, "limit": "20"})).body)
    assert all(e["mark"] is None for e in raw["entries"])
    assert sorted(p.relative_to(layout.proj) for p in layout.proj.rglob("*")) == before
    assert_no_leak(response, layout)


@dataclass
class FakeResumeView:
    entries: list[dict[str, Any]]
    dropped: set[str]
    rewritten: set[str]
    added: set[str]


def test_merge_marks_interleaves_dropped_rewritten_and_added_entries():
    raw = [entry(i) for i in range(6)]
    rewritten = dict(raw[3], message={"content": "[spilled]"})
    injected = {"type": "user", "uuid": "new-1", "message": {"content": "healed orphan"}}
    view = FakeResumeView([raw[0], raw[2], rewritten, injected, raw[5]], {"u-00001", "u-00004"}, {"u-00003"}, {"new-1"})
    marked = transcript.merge_marks(raw, view.entries, dropped=view.dropped, rewritten=view.rewritten, added=view.added)
    assert [(m["seq"], m["entry"]["uuid"], m["mark"]) for m in marked] == [
        (0, "u-00000", None),
        (1, "u-00001", "dropped"),
        (2, "u-00002", None),
        (3, "u-00003", "rewritten"),
        (None, "new-1", "added"),
        (4, "u-00004", "dropped"),
        (5, "u-00005", None),
    ]
    assert marked[3]["entry"]["message"]["content"] == "[spilled]"


# -- secrets --------------------------------------------------------------------------------------------


async def test_an_api_key_in_the_environment_never_appears_in_a_response_or_a_log_line(
    call, layout, caplog: pytest.LogCaptureFixture, jp_serverapp: Any
):
    """The canary is in the server's environment, in manifest text and in a transcript entry."""
    caplog.set_level(logging.DEBUG)
    assert os.environ["ANTHROPIC_API_KEY"] == CANARY
    bodies = []
    for route, query in [
        ("run", {"path": "proj"}),
        ("transcript", {"path": "proj", "session": SID}),
        ("transcript", {"path": "proj", "session": SID, "view": "resumed"}),
        ("run", {"path": "../.."}),
        ("transcript", {"path": "proj", "session": SID, "limit": "x"}),
    ]:
        for token in (True, False):
            bodies.append(text_of(await call(route, query, token=token)))
    (layout.proj / "runs" / "manifest.json").write_text("[{")
    bodies.append(text_of(await call("run", {"path": "proj"})))
    everything = "\n".join(bodies)
    assert CANARY not in everything and OTHER_SECRET not in everything
    assert REDACTED in bodies[0] and REDACTED in bodies[2]  # redacted, not dropped
    json.loads(bodies[0])  # still valid JSON after redaction
    assert caplog.records, "no log line was captured; the check below would prove nothing"
    logged = "\n".join(r.getMessage() + str(r.exc_text or "") for r in caplog.records)
    assert CANARY not in logged and OTHER_SECRET not in logged


async def test_secrets_the_server_does_not_hold_are_not_served_either(call, layout) -> None:
    """Issue 22 items 2 and 7: a gateway token not shaped like sk-ant- (ANTHROPIC_AUTH_TOKEN=gw-...) was
    served verbatim when the agent ran `env`; a store URL's password in a transcript, 6 of 6 views."""
    gateway, store_pw, cookie = "gw-panel-9f8e7d6c5b4a", "Pg-panel-Pass-42", "sid-panel-c00kie"
    env_output = f"HOME=/root\nANTHROPIC_AUTH_TOKEN={gateway}\nFLOWER_SESSIONS=postgresql://u:{store_pw}@db/runs"
    team = layout.root / "envrun" / "runs"
    team.mkdir(parents=True)
    sid = "5c5c5c5c-1111-4222-8333-944444444444"
    workspace = team.parent
    (team / "lineage.json").write_text(
        json.dumps({"workspace": os.path.realpath(workspace), "woke": 1, "steps": {"干活": sid}})
    )
    (team / "manifest.json").write_text(json.dumps([row("干活", session_id=sid, text=f"ran env: {env_output}")]))
    tool_result = {"type": "tool_result", "tool_use_id": "t1", "content": env_output}
    entries = [
        entry(0, "run env"),
        {"type": "user", "uuid": "u-env", "message": {"role": "user", "content": [tool_result]}},
        {"type": "assistant", "uuid": "a-h", "message": {"role": "assistant", "content": f'{{"Cookie": "{cookie}"}}'}},
    ]
    write_db(team / "sessions.db", {f"{transcript.project_key(workspace)}/{sid}": entries})
    bodies = [text_of(await call("run", {"path": "envrun"}))]
    for view in ("raw", "resumed"):
        for everything in ("0", "1"):
            query = {"path": "envrun", "session": sid, "view": view, "all": everything}
            bodies.append(text_of(await call("transcript", query)))
    assert all(json.loads(b) for b in bodies)
    assert "HOME=/root" in bodies[1]  # the rest of the output is served
    for body in bodies:
        assert gateway not in body and store_pw not in body and cookie not in body


# -- weight ---------------------------------------------------------------------------------------------


def test_the_server_extension_imports_no_ipython_magic_or_sdk_code():
    code = (
        "import sys, flower_magic.server, flower_magic.stores.prune; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('IPython', 'ipywidgets', 'claude_agent_sdk')"
        " or m in ('flower_magic.magics',)]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_project_key_matches_the_sdk(tmp_path: Path):
    from claude_agent_sdk._internal.sessions import project_key_for_directory

    for name in ("ws", "wörk space_1.x", f"{'a' * 120}/{'长' * 60}", f"{'b' * 200}/{'c' * 40}"):
        folder = tmp_path / name
        folder.mkdir(parents=True)
        assert transcript.project_key(folder) == project_key_for_directory(folder)


def test_jupyter_server_finds_no_handler_without_authentication(tmp_path: Path):
    """jupyter_server's own audit: it warns about any handler method lacking an auth decorator."""
    code = """
import sys, warnings
from jupyter_server.serverapp import ServerApp
from jupyter_server.utils import JupyterServerAuthWarning
app = ServerApp(allow_unauthenticated_access=False, jpserver_extensions={"flower_magic": True},
                reraise_server_extension_failures=True, root_dir=sys.argv[1])
with warnings.catch_warnings(record=True) as records:
    warnings.simplefilter("always")
    app.initialize(argv=[], find_extensions=False, new_httpserver=False)
print([str(r.message) for r in records if issubclass(r.category, JupyterServerAuthWarning)])
print("flower_magic.panel" in app.web_app.settings)
"""
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"), JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"))
    argv = [sys.executable, "-c", code, str(tmp_path)]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    warnings_line, routed = out.stdout.strip().splitlines()[-2:]
    assert warnings_line == "[]"
    assert routed == "True"


def test_a_missing_panel_build_is_said_in_one_line_and_a_present_one_is_not(tmp_path: Path):
    """Installed from a checkout without Node, the panel is silently absent: the server log says so."""
    from flower_magic.server import panel_missing_line

    first, second = tmp_path / "user", tmp_path / "env"
    (second / "flower-magic").mkdir(parents=True)
    (second / "flower-magic" / "install.json").write_text("{}")  # what an editable install without Node leaves
    line = panel_missing_line([str(first), str(second)])
    assert line is not None and "Node.js" in line and "\n" not in line
    (second / "flower-magic" / "package.json").write_text("{}")
    assert panel_missing_line([str(first), str(second)]) is None


# -- the one write: POST live (issue 15) ---------------------------------------------------------------

WRITING_VERBS = ("POST", "PUT", "PATCH", "DELETE")
ASK = {"id": "ask-1", "question": "Which format?", "options": ["SVG", "PNG"]}


def write_live(run_dir: Path, pid: int, **extra: Any) -> None:
    """``live.json`` as ``core.live.LiveRun`` writes it, for the process ``pid``."""
    state = {
        "pid": pid,
        "front_end": "background",
        "state": "waiting",
        "step": "确认需求",
        "round": 0,
        "asks": [ASK],
        "since": 1_767_000_000.0,
        "updated": 1_767_000_001.0,
        "n": 7,
        "run": "abc",
        **extra,
    }
    (run_dir / "live.json").write_text(json.dumps(state, ensure_ascii=False), encoding="utf-8")


@pytest.fixture
def live_run(layout: Layout) -> Any:
    """proj/runs held by a real process whose live.json says it waits for an answer."""
    runs = layout.proj / "runs"
    with LockHolder(runs, "background", "确认需求") as holder:
        write_live(runs, holder.pid)
        yield holder


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes: "changed nothing" is this, unchanged."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def inbox(run_dir: Path) -> list[dict[str, Any]]:
    box = run_dir / "inbox"
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(box.glob("*.json"))] if box.is_dir() else []


@pytest.fixture
def send(http_server_client: Any, jp_base_url: str, jp_auth_header: dict[str, str]):
    """``send(query, body, headers=None, method="POST", token=True)``: a request to ``flower/api/live``."""

    async def _send(
        query: dict[str, str] | str,
        body: Any,
        *,
        headers: dict[str, str] | None = None,
        method: str = "POST",
        token: bool = True,
        route: str = "live",
    ) -> HTTPResponse:
        if isinstance(query, dict):
            query = urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return await http_server_client.fetch(
            f"{jp_base_url}flower/api/{route}?{query}",
            method=method,
            headers={**(jp_auth_header if token else {}), **(headers or {})},
            body=raw if method in ("POST", "PUT", "PATCH") else None,
            raise_error=False,
            follow_redirects=False,
            allow_nonstandard_methods=True,
        )

    return _send


async def test_run_carries_the_live_state_and_its_etag_changes_when_the_runner_is_killed(
    call, layout, http_server_client, jp_base_url, jp_auth_header
):
    """Guards the live strip's source: ``live`` in the poll, and a poll holding the old ETag told at
    once (200, not 304) when the runner dies by kill -9, which changes no file."""
    runs = layout.proj / "runs"
    url = f"{jp_base_url}flower/api/run?path=proj"
    quiet = await http_server_client.fetch(url, headers=jp_auth_header)
    assert json.loads(quiet.body)["live"] is None
    with LockHolder(runs, "background", "确认需求") as holder:
        write_live(runs, holder.pid)
        first = await http_server_client.fetch(url, headers=jp_auth_header)
        etag = first.headers["Etag"]
        assert etag != quiet.headers["Etag"] and json.loads(first.body)["stamp"] == etag.strip('"')
        live = json.loads(first.body)["live"]
        assert live == {
            "state": "waiting",
            "live": True,
            "step": "确认需求",
            "round": 0,
            "asks": [ASK],
            "pid": holder.pid,
            "front_end": "background",
            "since": 1_767_000_000.0,
            "updated": 1_767_000_001.0,
        }
        same = await http_server_client.fetch(url, headers={**jp_auth_header, "If-None-Match": etag}, raise_error=False)
        assert same.code == 304
        write_live(runs, holder.pid, state="running", asks=[], step="干活")
        moved = await http_server_client.fetch(url, headers={**jp_auth_header, "If-None-Match": etag})
        assert moved.code == 200 and json.loads(moved.body)["live"]["state"] == "running"
        etag = moved.headers["Etag"]
        # the rows a client holds still come back as the tail only, with the live state beside them
        held = json.loads(moved.body)
        tail = await call("run", {"path": "proj", "have": held["rows_mark"]})
        assert json.loads(tail.body)["rows_from"] == 3 and json.loads(tail.body)["live"]["live"] is True
        holder.proc.kill()
        holder.proc.wait()
    gone = await http_server_client.fetch(url, headers={**jp_auth_header, "If-None-Match": etag})
    assert gone.code == 200
    assert json.loads(gone.body)["live"]["live"] is False
    assert json.loads(gone.body)["rows"] == held["rows"]


async def test_a_live_json_linked_out_of_the_root_is_not_read(call, layout):
    runs = layout.proj / "runs"
    write_live(layout.outside / "runs", os.getpid(), step=OUTSIDE_MARK)
    (runs / "live.json").symlink_to(layout.outside / "runs" / "live.json")
    response = await call("run", {"path": "proj"})
    assert json.loads(response.body)["live"] is None
    assert_no_leak(response, layout)


async def test_an_answer_from_the_panel_lands_in_the_live_runs_inbox(send, layout, live_run):
    runs = layout.proj / "runs"
    response = await send({"path": "proj"}, {"op": "answer", "text": "SVG", "id": "ask-1"})
    assert response.code == 202 and json.loads(response.body) == {"ok": True}
    for op, text in (("remark", "use five petals"), ("stop", "")):
        assert (await send({"path": "proj", "run_dir": "runs"}, {"op": op, "text": text})).code == 202
    got = [(m["op"], m["text"], m["id"], m["from"]) for m in inbox(runs)]
    assert got == [
        ("answer", "SVG", "ask-1", "panel"),
        ("remark", "use five petals", "", "panel"),
        ("stop", "", "", "panel"),
    ]


async def test_the_write_without_a_token_or_with_a_wrong_one_is_403_and_writes_nothing(send, layout, live_run):
    before = tree(layout.proj)
    for headers in ({}, {"Authorization": "token not-the-token"}):
        response = await send({"path": "proj"}, {"op": "stop"}, headers=headers, token=False)
        assert response.code == 403
        assert_no_leak(response, layout)
    assert tree(layout.proj) == before


async def test_a_user_who_may_only_read_files_may_not_write(jp_serverapp, send, call, layout, live_run):
    """The write asks the authorizer for ``write`` on contents, not ``read``."""
    from jupyter_server.auth.authorizer import Authorizer

    class ReadOnly(Authorizer):
        def is_authorized(self, handler, user, action, resource):
            return action == "read"

    jp_serverapp.web_app.settings["authorizer"] = ReadOnly(parent=jp_serverapp)
    before = tree(layout.proj)
    assert (await call("run", {"path": "proj"})).code == 200
    assert (await send({"path": "proj"}, {"op": "stop"})).code == 403
    assert tree(layout.proj) == before


async def _login_cookies(http_server_client: Any, jp_base_url: str, token: str) -> dict[str, str]:
    """Log in as a browser does and keep the cookies it is given: ``_xsrf`` from the login page, the
    login cookie from the token, once, in the URL."""
    cookies: dict[str, str] = {}
    for url in (f"{jp_base_url}login", f"{jp_base_url}api/status?token={token}"):
        response = await http_server_client.fetch(
            url,
            headers={"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())} if cookies else {},
            raise_error=False,
            follow_redirects=False,
        )
        for header in response.headers.get_list("Set-Cookie"):
            name, _, rest = header.partition("=")
            cookies[name.strip()] = rest.split(";", 1)[0]
    return cookies


async def test_a_cookie_authenticated_write_needs_the_xsrf_token_as_jupyter_servers_own_writes_do(
    jp_serverapp, http_server_client, jp_base_url, send, layout, live_run
):
    """The browser's case: logged in by cookie, a POST without ``X-XSRFToken`` is 403 (another site's
    form could send it); with the header matching the ``_xsrf`` cookie it is 202. A token in the
    ``Authorization`` header needs no XSRF token (no browser sends that header by itself)."""
    cookies = await _login_cookies(http_server_client, jp_base_url, jp_serverapp.identity_provider.token)
    xsrf = cookies.pop("_xsrf")
    assert cookies, "no login cookie was set; the checks below would test nothing"
    jar = "; ".join(f"{k}={v}" for k, v in {**cookies, "_xsrf": xsrf}.items())
    runs = layout.proj / "runs"
    # the login cookie works: a read passes, and jupyter_server's own write refuses without the header
    read = await send({"path": "proj"}, None, method="GET", route="run", headers={"Cookie": jar}, token=False)
    assert read.code == 200
    own = await http_server_client.fetch(
        f"{jp_base_url}api/contents/proj/x.txt",
        method="PUT",
        headers={"Cookie": jar},
        body=json.dumps({"type": "file", "format": "text", "content": "x"}),
        raise_error=False,
    )
    assert own.code == 403
    body = {"op": "remark", "text": "hello"}
    refused = await send({"path": "proj"}, body, headers={"Cookie": jar}, token=False)
    assert refused.code == 403 and inbox(runs) == []
    forged = await send({"path": "proj"}, body, headers={"Cookie": jar, "X-XSRFToken": "forged"}, token=False)
    assert forged.code == 403 and inbox(runs) == []
    taken = await send({"path": "proj"}, body, headers={"Cookie": jar, "X-XSRFToken": xsrf}, token=False)
    assert taken.code == 202 and len(inbox(runs)) == 1
    assert (await send({"path": "proj"}, body)).code == 202  # token-authenticated: no XSRF token needed
    assert len(inbox(runs)) == 2


async def test_the_write_outside_the_root_is_404_like_the_reads(send, layout, live_run):
    """Absolute paths, ``..``, symlinks out, hidden folders: 404 with the generic body, nothing written;
    also a live run's inbox or live.json linked out of the root."""
    outside_runs = layout.outside / "runs"
    with LockHolder(outside_runs, "background", "确认需求") as other:
        write_live(outside_runs, other.pid)
        before = tree(layout.outside)
        queries = [
            {"path": str(layout.outside)},
            {"path": "/" + str(layout.outside).lstrip("/")},
            {"path": "../" + layout.outside.parent.name + "/outside"},
            {"path": "proj/../.."},
            {"path": "link_out"},
            {"path": "proj", "run_dir": "runs_out"},
            {"path": "proj", "run_dir": "../../outside/runs"},
            {"path": "proj", "run_dir": str(outside_runs)},
            {"path": "proj/up"},
            {"path": ".hidden"},
            {"path": "to_hidden"},
            {"path": "proj", "run_dir": ".flower/runs"},
            {"path": "proj%2F..%2F.."},
            {"path": "nowhere"},
            {"path": "proj", "run_dir": "no_such_runs"},
        ]
        for query in queries:
            response = await send(query, {"op": "stop"})
            assert (response.code, json.loads(response.body)["message"]) == (404, "Not found"), query
            assert_no_leak(response, layout)
        assert tree(layout.outside) == before
    runs = layout.proj / "runs"
    (runs / "inbox").symlink_to(outside_runs, target_is_directory=True)
    response = await send({"path": "proj"}, {"op": "remark", "text": "x"})
    assert response.code == 404
    (runs / "inbox").unlink()
    (runs / "inbox").symlink_to(layout.root / "leaky", target_is_directory=True)  # under the root, still a link
    assert (await send({"path": "proj"}, {"op": "remark", "text": "x"})).code == 404
    (runs / "inbox").unlink()
    assert tree(layout.outside) == before and not list((layout.root / "leaky").glob("*.json"))
    assert (await send({"path": "proj"}, {"op": "remark", "text": "x"})).code == 202


async def test_a_run_that_is_not_live_is_409_and_nothing_is_written(send, layout):
    """No live.json; a live.json whose process is gone (killed); one that says it ended."""
    runs = layout.proj / "runs"
    cases = []
    with LockHolder(runs, "background", "确认需求") as holder:
        write_live(runs, holder.pid, state="ended", asks=[])
        cases.append("ended")
        before = tree(layout.proj)
        response = await send({"path": "proj"}, {"op": "stop"})
        assert (response.code, json.loads(response.body)["reason"]) == (409, "NotLive")
        assert tree(layout.proj) == before
        write_live(runs, holder.pid)
        holder.proc.kill()
        holder.proc.wait()
    before = tree(layout.proj)
    response = await send({"path": "proj"}, {"op": "answer", "text": "SVG"})
    assert response.code == 409
    assert json.loads(response.body)["message"] == words.say("lab_live_not_live", "en")
    (runs / "live.json").unlink()
    assert (await send({"path": "proj"}, {"op": "stop"})).code == 409
    (layout.root / "fresh" / "runs").mkdir(parents=True)
    assert (await send({"path": "fresh"}, {"op": "stop"})).code == 409
    assert not (runs / "inbox").exists() and not (layout.root / "fresh" / "runs" / "inbox").exists()
    assert {k: v for k, v in tree(layout.proj).items() if k != "runs/live.json"} == {
        k: v for k, v in before.items() if k != "runs/live.json"
    }


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[1, 2]",
        b'"stop"',
        b"{",
        b"[" * 100_000,
        {"op": "launch"},
        {"op": None},
        {"op": ["stop"]},
        {"text": "no op"},
        {"op": "answer"},
        {"op": "remark", "text": "   "},
        {"op": "remark", "text": 5},
        {"op": "answer", "text": "x" * 64_001},
        {"op": "answer", "text": "SVG", "id": 3},
        {"op": "answer", "text": "SVG", "id": "i" * 101},
        {"op": "stop", "path": "/etc"},
    ],
)
async def test_a_bad_body_is_400_with_a_message_and_nothing_is_written(send, layout, live_run, body):
    before = tree(layout.proj)
    response = await send({"path": "proj"}, body)
    assert response.code == 400, response.body
    reply = json.loads(response.body)
    assert reply["reason"] == "BadRequest" and reply["message"] and "Traceback" not in reply["message"]
    assert tree(layout.proj) == before


@pytest.mark.parametrize(
    ("body", "name", "at"),
    [
        (b'{"op": "remark", "text": "a\\ud800b"}', "text", 2),
        (b'{"op": "answer", "text": "half \\ud83d of an emoji"}', "text", 6),
        (b'{"op": "answer", "text": "\\udcff\\udcfe"}', "text", 1),
        (b'{"op": "answer", "text": "SVG", "id": "ask-\\udfff"}', "id", 5),
        (b'{"op": "stop", "id": "\\ud800"}', "id", 1),
    ],
)
async def test_a_lone_surrogate_in_the_body_is_400_and_nothing_is_written(send, layout, live_run, body, name, at):
    """Guards the 500 a lone surrogate gave: JSON's "\\ud800" decodes to one, which no inbox file holds."""
    before = tree(layout.proj)
    response = await send({"path": "proj"}, body)
    assert response.code == 400, response.body
    reply = json.loads(response.body)
    assert reply == {"message": words.say("lab_live_not_text", "en", name=name, at=at), "reason": "BadRequest"}
    assert tree(layout.proj) == before


async def test_a_huge_body_is_413_before_it_is_parsed(send, layout, live_run):
    before = tree(layout.proj)
    huge = b'{"op": "remark", "text": "' + b"x" * (1024 * 1024) + b'"}'
    response = await send({"path": "proj"}, huge)
    assert (response.code, json.loads(response.body)["reason"]) == (413, "TooLarge")
    assert tree(layout.proj) == before


@pytest.mark.parametrize("verb", ["GET", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])
async def test_live_takes_only_post(send, layout, live_run, verb):
    before = tree(layout.proj)
    response = await send({"path": "proj"}, {"op": "stop"}, method=verb)
    assert response.code == 405 and response.headers.get("Allow") == "POST"
    assert tree(layout.proj) == before


def _flower_routes(app: Any) -> dict[str, type]:
    """Every route the server answers under ``flower/api/`` -> its handler, read from Tornado's routers."""
    found: dict[str, type] = {}

    def walk(router: Any) -> None:
        for rule in getattr(router, "rules", []):
            target = rule.target
            if hasattr(target, "rules"):
                walk(target)
                continue
            pattern = getattr(getattr(rule, "matcher", None), "regex", None)
            if pattern is not None and "flower/api/" in pattern.pattern:
                found[pattern.pattern.split("flower/api/")[1].rstrip("$")] = target

    walk(app.wildcard_router)
    walk(app.default_router)
    return found


async def test_no_route_but_live_accepts_a_write(jp_serverapp, send, layout, live_run):
    """Lists the server's own routes (a route added later is covered too) and sends every writing
    verb, with a body the live route would take, to each: only ``POST live`` is not 405."""
    routes = _flower_routes(jp_serverapp.web_app)
    assert set(routes) == set(ALL_ROUTES), routes
    before = tree(layout.root)
    taken = []
    for route in routes:
        for verb in WRITING_VERBS:
            response = await send({"path": "proj", "session": SID}, {"op": "stop"}, method=verb, route=route)
            if response.code != 405:
                taken.append((route, verb, response.code))
    assert taken == [("live", "POST", 202)]
    assert [m["op"] for m in inbox(layout.proj / "runs")] == ["stop"]
    changed = {k for k in set(tree(layout.root)) ^ set(before)}
    assert len(changed) == 1 and changed.pop().startswith("proj/runs/inbox/")


# -- how the last run ended (issue 23: the panel's run answer) ------------------------------------------

# Each ending the launch writes, as its Outcome: the panel must say it in the cell's words.
ENDED = {
    "done": Outcome(Ending.DONE, cost_usd=0.42, rows=4),
    "not_reached": Outcome(Ending.NOT_REACHED, step="干活", rows=5),
    "interrupted": Outcome(Ending.INTERRUPTED, step="确认需求", asked=True),
    "stopped": Outcome(Ending.STOPPED, step="干活"),
    "failed": Outcome(Ending.FAILED, step="设定目标", why="the goals could not be written: disk full"),
    "demo": Outcome(Ending.INTERRUPTED, step="干活", demo=True),
}


def log_run(
    run_dir: Path, outcome: Outcome | None, *, step: str = "干活", demo: bool = False, lang: str = "en"
) -> LiveRun:
    """The event log of a run, written by the real writer (``core.live.LiveRun``, as the launch drives
    it): its start (the run spoke ``lang``), its step, and its end record (``outcome``, as ``Launch``
    records it); without an outcome the log stays without an end, as a run killed with ``kill -9``
    leaves it."""
    live = LiveRun(run_dir, front_end="notebook", start={"lang": lang, "demo": demo, "front_end": "notebook"})
    live.sink(Event("step", step))
    if outcome is not None:
        live.end(outcome.to_record())
    else:
        live.log.close()
    return live


def said(outcome: Outcome, lang: str, *, found: bool = False) -> dict[str, Any]:
    """What the panel must answer for ``outcome``: the cell's words, its way to continue as ``%flower``."""
    return {
        "ending": outcome.ending.value,
        "step": outcome.step,
        "style": outcome.style,
        "pill": words.say(f"pill_{outcome.ending.value}", lang),
        "headline": outcome.headline(lang),
        "why": outcome.why,
        "next": outcome.next_step(lang, "%flower"),
        "found": found,
    }


async def ending_of(call: Any) -> dict[str, Any] | None:
    response = await call("run", {"path": "proj"})
    assert response.code == 200
    ending: dict[str, Any] | None = json.loads(response.body)["ending"]
    if ending is not None:
        assert "".join(text for _, text in ending.pop("next_parts")) == ending["next"]
    return ending


@pytest.mark.parametrize("server_lang", ["en", "zh"])
@pytest.mark.parametrize("case", list(ENDED))
async def test_the_run_answer_says_how_the_last_run_ended_in_the_cells_words(call, layout, case, server_lang):
    """Each ending the launch records is in the panel's run answer in the words the cell, the terminal
    and --status say (the end_/next_/pill_ phrases, in the run's language), with the notebook's
    way to continue (``%flower``; ``%flower --demo`` after a demo run)."""
    assert await ending_of(call) is None  # no event log: nothing to say
    outcome = ENDED[case]
    log_run(layout.proj / "runs", outcome, step=outcome.step or "干活", demo=outcome.demo, lang=server_lang)
    assert await ending_of(call) == said(outcome, server_lang)
    if outcome.demo:
        assert "%flower --demo" in outcome.next_step(server_lang, "%flower")


@pytest.mark.parametrize("server_lang", ["en", "zh"])
async def test_a_run_killed_under_the_panel_is_said_killed_and_found(
    call, layout, server_lang, http_server_client, jp_base_url, jp_auth_header
):
    """Guards the ending of a run that left no word: nothing while it is live (the live strip says what
    goes on), then, once its runner is killed with -9 (no file changes), the poll that holds the old
    ETag gets 200 and ``killed`` at its step, found; the next start's recorded end says the same."""
    runs = layout.proj / "runs"
    url = f"{jp_base_url}flower/api/run?path=proj"
    with LockHolder(runs, "background", "干活") as holder:
        log_run(runs, None, step="干活", lang=server_lang)
        write_live(runs, holder.pid, state="running", asks=[], step="干活")
        first = await http_server_client.fetch(url, headers=jp_auth_header)
        body = json.loads(first.body)
        assert body["live"]["live"] is True and body["ending"] is None
        holder.proc.kill()
        holder.proc.wait()
    gone = await http_server_client.fetch(url, headers={**jp_auth_header, "If-None-Match": first.headers["Etag"]})
    assert gone.code == 200 and json.loads(gone.body)["live"]["live"] is False
    killed = Outcome(Ending.KILLED, step="干活")
    assert await ending_of(call) == said(killed, server_lang, found=True)
    # the next start writes what the killed run could not (front.launch.record_found): the same ending
    EventLog.append_end(runs, dict(killed.to_record(), found=True))
    assert await ending_of(call) == said(killed, server_lang, found=True)


async def test_no_ending_while_the_run_is_live_even_if_its_log_holds_an_end(call, layout):
    """A run whose lock is held (a start taking over, a run winding down) has no ending yet; the same
    log is said once nobody holds the lock."""
    runs = layout.proj / "runs"
    with LockHolder(runs, "notebook", "干活") as holder:
        log_run(runs, ENDED["stopped"])  # its end written, its live state not yet: it is live
        write_live(runs, holder.pid, state="running", asks=[])
        assert await ending_of(call) is None
        log_run(runs, None)
        write_live(runs, holder.pid, state="running", asks=[])
        assert await ending_of(call) is None
        # a start that holds the lock and has not written its live state yet: live.json still says the
        # last run ended, the new log has no end; that is not a killed run
        write_live(runs, holder.pid + 1, state="ended", asks=[])
        assert await ending_of(call) is None
        holder.release()
    assert (await ending_of(call) or {}).get("ending") == "killed"


async def test_a_new_end_record_changes_the_etag_and_an_unchanged_one_answers_304(
    call, layout, http_server_client, jp_base_url, jp_auth_header
):
    """Guards the cache: the event log is not one of the summary's files and here no live.json changes
    (there is none), yet the ending's change answers 200 (the lock let go, an end record landing)
    and an ended run polled again answers 304."""
    runs = layout.proj / "runs"
    url = f"{jp_base_url}flower/api/run?path=proj"

    async def poll(etag: str = "") -> HTTPResponse:
        headers = {**jp_auth_header, **({"If-None-Match": etag} if etag else {})}
        response: HTTPResponse = await http_server_client.fetch(url, headers=headers, raise_error=False)
        return response

    log_run(runs, None)
    (runs / "live.json").unlink()
    with LockHolder(runs, "notebook", "干活") as holder:
        held = await poll()
        assert json.loads(held.body)["ending"] is None and json.loads(held.body)["live"] is None
        holder.release()
    free = await poll(held.headers["Etag"])
    assert free.code == 200 and json.loads(free.body)["ending"]["ending"] == "killed"
    EventLog.append_end(runs, Outcome(Ending.STOPPED, step="干活").to_record())
    ended = await poll(free.headers["Etag"])
    assert ended.code == 200 and json.loads(ended.body)["ending"]["ending"] == "stopped"
    again = await poll(ended.headers["Etag"])
    assert again.code == 304


async def test_the_ending_is_redacted_and_a_log_linked_out_of_the_root_is_not_read(call, layout):
    """A reason holding a key (an end record written without the log's own redaction) is served
    redacted; an events.jsonl that links out of the root says nothing of what it points to."""
    runs = layout.proj / "runs"
    log_run(runs, None)
    EventLog.append_end(runs, Outcome(Ending.FAILED, step="干活", why=f"echo {CANARY} {OTHER_SECRET}").to_record())
    response = await call("run", {"path": "proj"})
    ending = json.loads(response.body)["ending"]
    assert ending["ending"] == "failed" and REDACTED in ending["why"]
    assert_no_leak(response, layout)

    outside = layout.outside / "runs"
    log_run(outside, Outcome(Ending.FAILED, step=OUTSIDE_MARK, why=OUTSIDE_MARK), step=OUTSIDE_MARK)
    (runs / "events.jsonl").unlink()
    (runs / "events.jsonl").symlink_to(outside / "events.jsonl")
    response = await call("run", {"path": "proj"})
    assert json.loads(response.body)["ending"] is None
    assert_no_leak(response, layout)


@pytest.mark.slow
@pytest.mark.parametrize("server_lang", ["en", "zh"])
async def test_a_real_demo_runs_ending_is_in_the_run_answer(call, layout, server_lang, tmp_path):
    """A real ``flower --demo`` run to its end (the launch writes the end record): the panel says it
    done, in the terminal's headline, and how to continue as ``%flower --demo``."""
    ws = layout.root / "demo"
    ws.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "flower_magic.cli", "--demo", "write hello.txt with a greeting"],
        cwd=ws,
        env=no_key_env(tmp_path, server_lang),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    outcome = Outcome(Ending.DONE, demo=True)
    assert outcome.headline(server_lang) in done.stdout  # the terminal said it so
    response = await call("run", {"path": "demo"})
    ending = json.loads(response.body)["ending"]
    ending.pop("next_parts")
    assert ending == said(outcome, server_lang)
    assert ending["next"].count("%flower --demo") == 2
