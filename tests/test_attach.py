"""A cell that follows a run from its event log (display/attach.py) and the last run's story in
``--status`` (display/story.py), from logs recorded by the real ``core.live.LiveRun`` (issue 15,
build items 3 and 4). Real kernels: tests/e2e/test_background.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flower_magic.core.events import Event
from flower_magic.core.live import LiveRun
from flower_magic.core.words import say
from flower_magic.display.attach import follow
from flower_magic.display.bundles import status_of
from flower_magic.display.story import story
from flower_magic.front.options import GoOptions
from flower_magic.front.outcome import Ending, Outcome

HOSTILE = "<script>alert(1)</script>"
ANSWER = "Markdown & more"


def _record(run_dir: Path, *, ended: bool = True, texts: int = 1) -> LiveRun:
    """A run's log as a runner writes it: a step, agent text, a question, its answer from the panel,
    the step's result and (``ended``) the end."""
    run_dir.mkdir(parents=True, exist_ok=True)
    live = LiveRun(
        run_dir, front_end="background", start={"lang": "en", "verbose": False, "rounds": 2, "window": 200_000}
    )
    live.sink(Event("step", "确认需求", payload={"index": 1, "total": 3}))
    for i in range(texts):
        live.sink(Event("text", f"{HOSTILE} line {i}", payload={"context": 1234}))
    live.sink(Event("ask", "Which format?", payload={"id": "q1", "options": ["Markdown", "Text"], "state": "asked"}))
    live.log.record("heard", op="answer", text=ANSWER, id="q1", **{"from": "panel"}, took=True)
    live.sink(Event("ask", "Which format?", payload={"id": "q1", "state": "answered", "answer": ANSWER}))
    live.on_step(None, type("R", (), {"ok": True, "num_turns": 3, "cost_usd": 0.25, "duration_s": 4.0})())
    if ended:
        live.end(Outcome(Ending.DONE, cost_usd=0.25, manifest=str(run_dir / "manifest.json")).to_record())
    else:
        live.log.close()  # killed: no end record, and nobody holds the lock
    return live


def _follow(run_dir: Path, **kw: Any) -> Any:
    attached = follow(run_dir, lang="zh", mode="html", poll_s=0.01, **kw)
    attached.join(30)
    assert attached.over
    return attached


def test_a_finished_run_replays_into_the_view_and_closes_with_its_total(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs"
    _record(run_dir)
    lead = [[("dim", "LEAD")]]
    attached = _follow(run_dir, lead=lead, goal_checks=["clean.py exists"])
    view = attached.view
    assert view.state.lang == "en"  # the run's language (its start record), not the caller's zh
    assert (view.state.rounds, view.state.window) == (2, 200_000)
    bundle = view.bundle()
    plain, page = bundle["text/plain"], bundle["text/html"]
    assert plain.index("LEAD") < plain.index("line 0")  # the lead first, then the replay
    assert say("live_heard_answer", "en", source=say("front_panel", "en"), text=ANSWER) in plain
    assert "$0.2500" in plain and "manifest.json" in plain  # closed from the end record
    assert Outcome(Ending.DONE).headline("en") in plain  # the ending, from the end record
    assert Outcome(Ending.KILLED).headline("en").split(" during")[0] not in plain
    assert "clean.py exists" in plain
    assert HOSTILE not in page and "&lt;script&gt;" in page  # agent text is escaped
    assert say("live_answer_elsewhere", "en") in plain  # no widgets here: it says where to answer


def test_a_lead_line_about_following_is_said_otherwise_once_the_run_ended(tmp_path: Path) -> None:
    """A --bg cell's "run %flower again to follow it" stayed after the run ended (issue 24, 6)."""
    run_dir = tmp_path / "runs"
    _record(run_dir)
    follow_words = say("runner_started", "en", pid=4321, follow=say("runner_follow_magic", "en"))
    ended_words = say("runner_ended", "en", pid=4321)
    attached = _follow(run_dir, lead=[[("dim", follow_words)], [("dim", "KEPT")]], lead_ended=[[("dim", ended_words)]])
    plain = attached.view.bundle()["text/plain"]
    assert follow_words not in plain and say("runner_follow_magic", "en") not in plain
    assert plain.index(ended_words) < plain.index("line 0") and "KEPT" in plain


def test_a_run_gone_without_an_end_record_says_so(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs"
    _record(run_dir, ended=False)
    attached = _follow(run_dir)
    assert attached.watch.gone
    plain = attached.view.bundle()["text/plain"]
    # The ending a later start will record, found the same way: killed in the step the log last began.
    assert "line 0" in plain and Outcome(Ending.KILLED, step="确认需求").headline("en") in plain
    assert Outcome(Ending.KILLED).next_step("en", "%flower") in plain


def test_status_tells_the_last_runs_story_capped_and_escaped(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    run_dir = ws / "runs"
    _record(run_dir, texts=30)
    opts = GoOptions(task="", workspace=ws, lang="en").check()
    bundle = status_of(opts)
    n = sum(1 for line in (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines() if line.strip())
    assert say("live_status_story", "en", n=n) in bundle["text/plain"]
    assert say("live_status_over", "en") in bundle["text/plain"]
    assert "line 29" in bundle["text/plain"] and "$0.2500" in bundle["text/plain"]
    assert HOSTILE not in bundle["text/html"] and "line 29" in bundle["text/html"]
    lines = story(run_dir, "en", max_lines=5)
    texts = ["".join(t for _, t in line) for line in lines]
    assert any(t.startswith("… ") and "earlier lines" in t for t in texts)
    assert len(lines) == 5 + 3  # the head (story, not live, how many left out) and the newest five
    # The newest: the total, then the ending and how to continue, as the run's own front end said them.
    assert "line 0" not in "\n".join(texts) and "$0.2500" in texts[-3]
    assert texts[-2:] == [Outcome(Ending.DONE).headline("en"), Outcome(Ending.DONE).next_step("en", "%flower")]


def test_no_event_log_no_story(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "runs").mkdir(parents=True)
    (ws / "runs" / "manifest.json").write_text(json.dumps([]), encoding="utf-8")
    opts = GoOptions(task="", workspace=ws, lang="en").check()
    assert say("live_status_story", "en", n=0).split("(")[0] not in status_of(opts)["text/plain"]
    assert story(ws / "runs", "en") == []
