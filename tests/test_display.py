"""What a %flower cell shows: banner and --status bundles, the live RunView, escaping, throttling.

No kernel needed: ipywidgets 8 widgets work without one (their comm is a DummyComm), so the widget
path runs here; the kernel and the browser are the magic's tests.
"""

from __future__ import annotations

import html as std_html
import io
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import pytest
import wcwidth

import flower_magic.display as display
from flower_magic.core.events import Event
from flower_magic.core.rundir import RunDir, Snapshot
from flower_magic.core.words import say, step_name, tilde
from flower_magic.display import RunView, banner_bundle, status_bundle
from flower_magic.display.log import RunLog
from flower_magic.display.run import WIDGET_MIME, pick_mode
from flower_magic.display.state import RunState
from flower_magic.front.outcome import Ending, Outcome
from flower_magic.front.phrases import plain, result_line, step_header, total_line, wake_banner
from flower_magic.terminal import TerminalView

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
EVIL = f"a {SCRIPT} b {IMG} c"


def facts_at(workspace: str = "/tmp/flower-demo", **kw: Any) -> Snapshot:
    """What a run dir at ``workspace`` holds: a confirmed brief, 15 checks, woke twice, 80.2K context."""
    fields: dict[str, Any] = {"waking": True, "checks": 15, "woke": 2, "work_context": 80200, **kw}
    return Snapshot(RunDir(Path(workspace), Path(workspace) / "runs"), **fields)


FACTS = facts_at()
CHECKS = ["pytest 全绿", "README 写了安装步骤", "GPU 上跑通 [此环境无法验证:没有 GPU]"]
HOUR_S = 3600.0  # a render interval no test outlasts: renders happen only when the test asks


@dataclass
class FakeResult:
    """What ``on_step`` reads from a ``StepResult``."""

    ok: bool = True
    num_turns: int = 3
    cost_usd: float = 0.0123
    duration_s: float = 14.2
    error: str | None = None


class TagAudit(HTMLParser):
    """Every tag and attribute in an HTML fragment (to prove nothing but our markup got in)."""

    ALLOWED_TAGS = frozenset(
        {"div", "span", "style", "details", "summary", "table", "thead", "tbody", "tr", "th", "td", "ul", "li"}
        # what the agent's Markdown renders to (display.markdown)
        | {"p", "br", "h1", "h2", "h3", "h4", "h5", "h6", "ol", "em", "strong", "del", "code", "pre", "a"}
        | {"blockquote", "hr"}
    )
    ALLOWED_ATTRS = frozenset(
        {"class", "aria-hidden", "title", "role", "aria-label", "aria-valuemin", "aria-valuemax", "aria-valuenow"}
        | {"data-status", "data-state", "open", "href", "target", "rel"}
    )
    STYLE = re.compile(r"width:\d+(\.\d)?%")  # the only inline style: a bar's fill, a number we computed
    HREF = re.compile(r"(https?://|mailto:|#harmful-link$)")  # a link goes to a page, never runs code

    def __init__(self) -> None:
        super().__init__()
        self.bad: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in self.ALLOWED_TAGS:
            self.bad.append(f"<{tag}>")
        for name, value in attrs:
            if name == "style" and self.STYLE.fullmatch(value or ""):
                continue
            if name == "href" and not self.HREF.match(value or ""):
                self.bad.append(f"{tag}[href={value}]")
            if name not in self.ALLOWED_ATTRS:
                self.bad.append(f"{tag}[{name}]")


def html_values(widget: Any) -> list[str]:
    """The HTML of every ``HTML`` widget under ``widget``, and the sections' titles, in tree order."""
    out = [widget.value] if hasattr(widget, "value") and isinstance(widget.value, str) else []
    out += [std_html.escape(t) for t in getattr(widget, "titles", ())]
    for child in getattr(widget, "children", ()):
        out += html_values(child)
    return out


def log_slots(v: RunView) -> list[Any]:
    """The live view's log chunk widgets, every section's, oldest first."""
    assert v._widgets is not None
    return [slot for view in v._widgets._views.values() for _, slot in sorted(view.slots.items())]


def assert_safe(fragment: str, *, expect_evil: bool = True) -> None:
    """No raw agent markup, only our own tags and attributes; the agent's text shows as text."""
    assert SCRIPT not in fragment
    assert IMG not in fragment
    assert "<script" not in fragment.lower()
    assert "<img" not in fragment.lower()
    audit = TagAudit()
    audit.feed(fragment)
    audit.close()
    assert audit.bad == []
    if expect_evil:
        assert std_html.escape(SCRIPT) in fragment
        assert std_html.escape(IMG) in fragment


def view(**kwargs: Any) -> RunView:
    kwargs.setdefault("mode", "widget")
    kwargs.setdefault("interval_s", HOUR_S)
    return RunView(**kwargs)


def feed_everything(v: RunView, text: str = EVIL) -> None:
    """One of every kind of event, each carrying ``text`` wherever data can go."""
    s = v.sink
    s(Event("step", f"干活 {text}", payload={"index": 3, "total": 3, "resumed": True, "woke": 3}))
    s(Event("text", text, payload={"context": 1234, "subagent": False}))
    s(Event("text", "sub " + text, payload={"subagent": True}))
    s(Event("thinking", text))
    s(Event("tool_call", text, tool=f"Bash{text}", payload={"id": "t1", "input": {"command": text}}))
    s(Event("tool_result", text, payload={"tool_use_id": "t1", "is_error": False}))
    s(Event("tool_result", text, payload={"tool_use_id": "t1", "is_error": True}))
    s(Event("retry", text, payload={"step": "干活", "attempt": 1}))
    s(Event("notice", text, payload={"network_fs": "nfs4", "mount_point": text}))
    s(Event("error", text))
    s(Event("handoff", text, payload={"phase": "near", "context": 1, "window": 2}))
    sections = {"doing": text, "decided": text, "deadends": text, "next": text}
    s(Event("handoff", text, payload={"phase": "done", "context": 150000, "window": 200000, "path": text,
                                      "sections": sections, "degraded": True}))  # fmt: skip
    s(Event("ask", text, payload={"id": "q1", "options": [text, "b"], "state": "asked"}))
    s(Event("ask", text, payload={"id": "q1", "options": [text, "b"], "state": "answered", "answer": text}))
    s(Event("ask", text, payload={"id": "q2", "options": [], "state": "timeout"}))
    s(Event("ask", text, payload={"kind": "mail", "id": "m1", "state": "delivered"}))
    s(Event("task", text, payload={"unverifiable": [text], "total": 2, "path": text}))
    verdict_checks = [{"check": text, "passed": False}, {"check": CHECKS[0], "passed": True}]
    s(Event("task", "判定:not_yet", payload={"kind": "verdict", "verdict": "not_yet", "reason": text,
                                             "failed": [text], "round": 1, "checks": verdict_checks}))  # fmt: skip
    s(Event("result", "success", payload={"cost_usd": 0.5}))
    for kind in ("system", "prompt", "reset", "unknown"):
        s(Event(kind, text))
    v.on_step(None, FakeResult(ok=False, error=text))
    v.say("warn", text)


# -- banner and --status --------------------------------------------------------------------------


def test_banner_bundle_says_what_the_terminal_says() -> None:
    zh = banner_bundle(FACTS, "zh")
    assert set(zh) == {"text/plain", "text/html"}
    assert zh["text/plain"] == plain(wake_banner(FACTS, "zh"))
    for phrase in ("<- 在 flower-demo 接上上次", "需求已确认", "目标 15 条", "干活上下文 80.2K", "第 3 次唤醒"):
        assert phrase in zh["text/plain"]
        assert std_html.escape(phrase) in zh["text/html"]
    en = banner_bundle(FACTS, "en")
    for phrase in ("<- picking up in flower-demo", "brief confirmed", "15 goals", "work context 80.2K", "wake #3"):
        assert phrase in en["text/plain"]
        assert std_html.escape(phrase) in en["text/html"]
    assert "<style>" in en["text/html"] and 'class="flower-magic mathjax_ignore tex2jax_ignore"' in en["text/html"]


def test_banner_bundle_problem_line_and_hint() -> None:
    facts = facts_at(problem="bad json")
    zh = banner_bundle(facts, "zh", hint=True)
    assert "lineage.json 用不了(bad json):这次运行会把它另存一份,再从头开始" in zh["text/plain"]
    assert "%flower 接着做" in zh["text/plain"]
    assert "lineage.json cannot be used (bad json)" in banner_bundle(facts, "en")["text/plain"]
    assert "%flower" not in banner_bundle(FACTS, "zh")["text/plain"]


def test_banner_bundle_escapes_the_workspace_path() -> None:
    bundle = banner_bundle(facts_at(f"/tmp/{IMG}"), "zh")
    assert_safe(bundle["text/html"], expect_evil=False)
    assert std_html.escape(IMG) in bundle["text/html"]


def row(step: str, *, ok: bool = True, cost: float = 0.01, **extra: Any) -> dict[str, Any]:
    base = {"step": step, "ok": ok, "cost_usd": cost, "num_turns": 2, "duration_s": 65.0, "attempts": 1}
    return {**base, "resumed": False, "retired": [], "context": 12000, **extra}


def test_status_bundle_goal_marks_rows_and_totals() -> None:
    verdict = [{"check": CHECKS[0], "passed": True}, {"check": CHECKS[1], "passed": False}]
    rows = [
        row("确认需求"),
        row("干活", ok=False, cost=0.43, attempts=2, resumed=True, retired=["s1"], error="interrupted-by-human"),
    ]
    zh = status_bundle(FACTS, CHECKS, verdict, rows, "zh")
    text = zh["text/plain"]
    assert text.startswith(plain(wake_banner(FACTS, "zh")))
    assert "目标 3 条 · 通过 1 · 未通过 1 · 未判定 1" in text
    assert f"+ {CHECKS[0]}" in text and f"x {CHECKS[1]}" in text and f"! {CHECKS[2]}" in text
    assert "最近 2/2 步" in text
    assert re.search(r"干活\s+x\s+\$0\.4300\s+2\s+1:05\s+2\s+是\s+1\s+12\.0K\s+interrupted-by-human", text)
    assert "共 2 步 · 4 轮 · $0.4400 · 用时 2:10 · 重试 1 · 交接 1" in text
    page = zh["text/html"]
    assert '<span class="fm-ok">+</span>' in page and '<span class="fm-bad">x</span>' in page
    assert "<table" in page and "interrupted-by-human" in page
    en = status_bundle(FACTS, CHECKS, verdict, rows, "en")["text/plain"]
    assert "3 goals · passed 1 · failed 1 · not judged yet 1" in en
    assert "2 steps · 4 turns · $0.4400 · 2:10 · retries 1 · hand-offs 1" in en


def test_status_bundle_without_a_verdict_marks_nothing_judged() -> None:
    text = status_bundle(FACTS, CHECKS[:2], None, [row("干活")], "zh")["text/plain"]
    assert "通过 0 · 未通过 0 · 未判定 2" in text
    assert f"- {CHECKS[0]}" in text and f"- {CHECKS[1]}" in text


def test_status_bundle_shows_only_the_newest_rows_but_totals_all() -> None:
    rows = [row(f"step-{i:02d}") for i in range(50)]
    text = status_bundle(FACTS, [], None, rows, "en", max_rows=20)["text/plain"]
    assert "latest 20/50 steps" in text
    assert "step-49" in text and "step-30" in text and "step-29" not in text
    assert "50 steps · 100 turns · $0.5000" in text


def test_status_bundle_fresh_directory_and_empty_manifest() -> None:
    fresh = facts_at(waking=False, checks=0, woke=0)
    zh = status_bundle(fresh, [], None, [], "zh")["text/plain"]
    assert "还没有确认过的需求" in zh and "manifest.json 里还没有记录" in zh
    assert "接上上次" not in zh
    assert "no steps in manifest.json yet" in status_bundle(fresh, [], None, [], "en")["text/plain"]


def test_status_bundle_survives_junk_rows() -> None:
    """Rows are read from a file anyone can edit: wrong types read as absent, never raise."""
    junk = [
        {"step": None, "ok": "yes", "cost_usd": "1", "num_turns": float("nan"), "duration_s": True, "retired": "x"},
        {"context": -5, "attempts": None},
        {},
    ]
    text = status_bundle(FACTS, [], [{"check": 1}, "x"], junk, "en")["text/plain"]
    assert "latest 3/3 steps" in text


def test_status_bundle_escapes_rows_checks_and_paths() -> None:
    rows = [row(EVIL, ok=False, error=EVIL), row("干活")]
    verdict = [{"check": EVIL, "passed": False}]
    bundle = status_bundle(facts_at(f"/tmp/{IMG}"), [EVIL], verdict, rows, "zh")
    assert_safe(bundle["text/html"])


# -- the live view ----------------------------------------------------------------------------------


def test_run_view_escapes_agent_text_everywhere() -> None:
    """Agent text with <script> and <img onerror> shows as text in every part of every rendering."""
    v = view(banner_facts=facts_at(f"/tmp/{IMG}"), goal_checks=[EVIL], rounds=3, verbose=True)
    feed_everything(v)
    v.set_goal_checks([EVIL, CHECKS[0]])
    live = v._repr_mimebundle_()
    assert_safe(live["text/html"])
    v._render()
    widget_html = "".join(html_values(v._widgets.root))
    assert_safe(widget_html)
    v.close(Outcome(Ending.FAILED, step=EVIL, why=EVIL, cost_usd=1.0, manifest=f"/tmp/{SCRIPT}/manifest.json"))
    assert_safe(v.bundle()["text/html"])
    # every place the text went is in the final page, escaped (a dropped field would hide a hole)
    page = v.bundle()["text/html"]
    assert page.count(std_html.escape(SCRIPT)) >= 20


def test_text_plain_drops_terminal_escape_sequences() -> None:
    """A model cannot retitle the terminal or hide text through text/plain in terminal IPython."""
    v = view()
    v.sink(Event("text", "before\x1b]0;pwned\x07\x1b[2Jafter"))
    assert "beforeafter" in v.bundle()["text/plain"]
    assert "\x1b" not in v.bundle()["text/plain"] and "\x1b" not in v.bundle()["text/html"]
    v.close()


def test_step_header_and_result_lines_use_the_shared_phrases() -> None:
    v = view(lang="zh")
    v.sink(Event("step", "干活", payload={"index": 3, "total": 3, "resumed": True, "woke": 3}))
    v.on_step(None, FakeResult())
    text = v.bundle()["text/plain"]
    assert plain(step_header("干活", 3, 3, resumed=True, woke=3, width=80)) in text
    assert plain(result_line(True, 3, 0.0123, 14.2)) in text
    assert "3/3  &lt;- 接上次 · 第 3 次唤醒" in v.bundle()["text/html"]
    assert "+ 完成 3 轮 · $0.0123 · 用时 0:14" in text
    v.close()
    en = view(lang="en")
    en.sink(Event("step", "干活", payload={"index": 3, "total": 3, "resumed": True, "woke": 3}))
    en.on_step(None, FakeResult(ok=False))
    assert "<- continuing · wake #3" in en.bundle()["text/plain"]
    assert "x failed 3 turns · $0.0123 · 0:14" in en.bundle()["text/plain"]
    en.close()


@pytest.mark.parametrize(
    ("lang", "said"),
    [("zh", "智能体的一条消息超过 64 MiB"), ("en", "One message from the agent was over 64 MiB")],
)
def test_a_message_past_the_read_limit_is_one_line_saying_what_to_do(lang: str, said: str) -> None:
    """A step stopped by a message past the SDK's read limit: the cell says what happened and what to
    do (run %flower again, ask for smaller files), not the SDK's "Failed to decode JSON" text."""
    sdk = "CLIJSONDecodeError: Failed to decode JSON: JSON message exceeded maximum buffer size of 67108864 bytes..."
    v = view(lang=lang)
    v.on_step(None, FakeResult(ok=False, error=f"{sdk} — a hint"))
    text = v.bundle()["text/plain"]
    (line,) = [ln for ln in text.splitlines() if said in ln]
    assert '%flower "' in line and "Failed to decode JSON" not in text
    v.close()


@pytest.mark.parametrize(
    ("lang", "said", "cause"),
    [
        ("zh", "一个工具结果(Read)约 7.5K tokens", "result-too-big"),
        ("en", "one tool result (Read) of about 7.5K tokens", "result-too-big"),
        ("zh", "一个新会话光起步(系统提示、工具说明和交接)就要 12.3K", "window-too-small"),
        ("en", "a fresh session already needs 12.3K to start", "window-too-small"),
    ],
)
def test_a_step_that_cannot_fit_says_why_and_what_to_do_in_the_persons_language(
    lang: str, said: str, cause: str
) -> None:
    """Issue 13: the stop names the real cause (one result, or the window) and the flag to change, in
    the person's language whatever language the run that stopped wrote its error in."""
    from flower_magic.core.handoff import ContextStop

    floor = 12_300 if cause == "window-too-small" else 4_900
    stop = ContextStop(cause, line=10_000, window=40_000, floor=floor, result=7_500, tool="Read")
    v = view(lang=lang)
    v.on_step(None, FakeResult(ok=False, error=stop.error("zh" if lang == "en" else "en")))
    text = v.bundle()["text/plain"]
    (line,) = [ln for ln in text.splitlines() if said in ln]
    assert "%flower --window" in line and "10.0K" in line and "40.0K" in line
    assert ("offset/limit" in line) == (cause == "result-too-big")
    assert ("--no-handoff" in line) == (cause == "window-too-small")
    v.close()


def test_tool_calls_are_one_line_with_collapsed_details() -> None:
    v = view()
    v.sink(Event("tool_call", "ls -la", tool="Bash", payload={"id": "t1", "input": {"command": "ls -la"}}))
    v.sink(Event("tool_result", "total 0", payload={"tool_use_id": "t1", "is_error": False}))
    text, page = v.bundle()["text/plain"], v.bundle()["text/html"]
    assert "* [Bash] ls -la" in text and "total 0" not in text
    assert re.search(
        r'<details class="fm-tool"><summary><span class="fm-tool-name">Bash</span> '
        r'<span class="fm-tool-arg">ls -la</span></summary>.*&quot;command&quot;.*-&gt; total 0',
        page,
        re.S,
    )
    v.sink(Event("tool_result", "boom", payload={"tool_use_id": "t1", "is_error": True}))
    assert "  -> boom" in v.bundle()["text/plain"]
    v.close()


# What the Claude Code CLI writes as the result of a tool call stopped while it ran (sdk-notes.md).
CLI_STOPPED = (
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a file "
    "edit, the new_string was NOT written to the file). STOP what you are doing and wait for the user to tell "
    "you how to proceed. Correction to the text above: this call was stopped while running, not refused before "
    "it ran."
)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_a_call_stopped_while_it_ran_is_said_for_a_person(lang: str) -> None:
    """Issue 24: a stopped run's story (``--status``), the cell and the terminal showed the CLI's English
    note to the model ("STOP what you are doing and wait for the user") under the stopped call."""
    event = Event("tool_result", CLI_STOPPED, payload={"tool_use_id": "t1", "is_error": True})
    out = io.StringIO()
    TerminalView(lang, out=out)(event)
    v = view(lang=lang)
    v.sink(event)
    for text in (out.getvalue(), v.bundle()["text/plain"], v.bundle()["text/html"]):
        assert say("tool_stopped", lang) in text and "proceed" not in text
    v.close()


def test_subagent_thinking_and_system_events_only_when_verbose() -> None:
    events = [
        Event("text", "sub said", payload={"subagent": True}),
        Event("thinking", "pondering"),
        Event("system", "init"),
        Event("tool_result", "fine", payload={"tool_use_id": "x", "is_error": False}),
    ]
    quiet, loud = view(), view(verbose=True)
    for ev in events:
        quiet.sink(ev)
        loud.sink(ev)
    assert quiet.state.log.total == 0
    text = loud.bundle()["text/plain"]
    assert "    sub said" in text and "~ pondering" in text and "<system> init" in text and "  -> fine" in text
    page = loud.bundle()["text/html"]
    assert '<div class="fm-md jp-RenderedHTMLCommon fm-sub"><p>sub said</p></div>' in page  # indented
    quiet.close()
    loud.close()


def test_notices_and_the_hand_off_block() -> None:
    v = view(lang="zh")
    v.sink(Event("retry", "第 1 次失败(network),准备重试"))
    v.sink(Event("error", "API 挂了"))
    v.sink(Event("handoff", "上下文 150.0K/200K —— 正在写交接…", payload={"phase": "writing"}))
    sections = {"doing": "写 README\n第二行不显示", "decided": "用 sqlite", "deadends": "", "next": "跑 pytest"}
    payload = {"phase": "done", "context": 150000, "window": 200000, "path": "/x/交接.md", "sections": sections}
    v.sink(Event("handoff", "上下文满了", payload=payload))
    text = v.bundle()["text/plain"]
    for line in (
        "~ 第 1 次失败(network),准备重试",
        "! API 挂了",
        "# 上下文 150.0K/200K —— 正在写交接…",
        "# 上下文 150.0K/200K —— 写交接准备换代",
        "  现在在做  写 README",
        "<- 交接写在 /x/交接.md",
        "<- 新会话接手,上下文从 0 重新开始",
    ):
        assert line in text
    assert "第二行不显示" not in text and "走不通的" not in text
    assert '<span class="fm-label">现在在做</span>' in v.bundle()["text/html"]
    v.close()


def test_ask_is_updated_in_place_until_settled() -> None:
    v = view(lang="en")
    asked = {"id": "q1", "options": ["sqlite", "postgres"], "state": "asked"}
    v.sink(Event("ask", "Which database?", payload=asked))
    assert "  > waiting for an answer…" in v.bundle()["text/plain"]
    v.sink(Event("ask", "Which database?", payload=dict(asked, state="answered", answer="sqlite")))
    v.sink(Event("ask", "Anything else?", payload={"id": "q2", "state": "timeout"}))
    v.sink(Event("ask", "mail text", payload={"kind": "mail", "id": "m1", "state": "queued"}))
    v.sink(Event("ask", "mail text", payload={"kind": "mail", "id": "m1", "state": "delivered"}))
    text = v.bundle()["text/plain"]
    assert text.count("? Which database?") == 1
    assert "  1. sqlite\n  2. postgres\n  + sqlite" in text
    assert "waiting for an answer" not in text
    assert "? Anything else?\n  " + say("ask_timeout", "en") in text
    assert text.count("mail text") == 1 and "+ (m1) mail text" in text
    v.close()


def test_goal_list_marks_follow_the_verdicts() -> None:
    v = view(lang="zh", goal_checks=CHECKS, rounds=3)
    text = v.bundle()["text/plain"]
    assert "目标 3 条 · 通过 0 · 未通过 0 · 未判定 3" in text
    assert f"- {CHECKS[0]}" in text and f"! {CHECKS[2]}" not in text

    def verdict(n: int, state: str, passed: list[bool], reason: str) -> Event:
        checks = [{"check": c, "passed": p} for c, p in zip(CHECKS, passed, strict=True)]
        payload = {"kind": "verdict", "verdict": state, "reason": reason, "round": n, "checks": checks}
        return Event("task", f"判定:{state}", payload=payload)

    v.sink(Event("task", "验不了", payload={"unverifiable": [CHECKS[2]], "total": 3, "path": "/x"}))
    assert f"! {CHECKS[2]}" in v.bundle()["text/plain"]
    v.sink(verdict(1, "not_yet", [True, False, False], "README 没写"))
    text = v.bundle()["text/plain"]
    assert f"+ {CHECKS[0]}\nx {CHECKS[1]}\nx {CHECKS[2]}" in text
    assert "判定 #1: 未达成 — README 没写" in text
    v.sink(verdict(2, "achieved", [True, True, True], "都过了\n细节"))
    text = v.bundle()["text/plain"]
    assert "通过 3 · 未通过 0 · 未判定 0" in text and "判定 #2: 达成 — 都过了" in text and "细节" not in text
    page = v.bundle()["text/html"]
    assert page.count('data-state="pass"') == 3
    v.set_goal_checks([CHECKS[0], "新加的一条"])
    text = v.bundle()["text/plain"]
    assert f"+ {CHECKS[0]}\n- 新加的一条" in text
    v.close()


def test_status_line_context_cost_elapsed_and_round() -> None:
    v = view(lang="zh", rounds=3)
    s = v.state
    v.sink(Event("step", "干活", payload={"index": 3, "total": 3}))
    v.sink(Event("text", "hi", payload={"context": 80200, "subagent": False}))
    v.sink(Event("text", "sub", payload={"context": 5, "subagent": True}))
    v.sink(Event("result", "success", payload={"cost_usd": 0.1}))
    v.sink(Event("result", "success", payload={"cost_usd": 0.25}))
    assert plain(s.footer_lines(s.started + 125.5)[0]) == "- 上下文 80.2K · 累计 $0.35 · 2:05 · 第 1/3 轮"
    for n in range(1, 6):
        v.sink(Event("task", "", payload={"kind": "verdict", "verdict": "not_yet", "round": n, "checks": []}))
        if n == 1:
            assert plain(s.footer_lines(s.started)[0]).endswith("第 2/3 轮")
    assert plain(s.footer_lines(s.started + 3725.5)[0]) == "- 上下文 80.2K · 累计 $0.35 · 1:02:05 · 第 3/3 轮"
    v.close(Outcome(Ending.DONE, cost_usd=0.5, manifest="/x/manifest.json"))
    after = v.bundle()["text/plain"]
    assert "第 3/3 轮" in after  # after the run: the rounds judged, at most N
    assert "总花费 $0.5000 · 清单 /x/manifest.json" in after
    en = view(lang="en", rounds=0)
    assert plain(en.state.footer_lines(en.state.started)[0]) == "- context 0 · total $0.00 · 0:00"
    en.close()


def test_close_stops_the_clock_says_where_it_stopped_and_ignores_later_events() -> None:
    v = view(lang="zh")
    ended = Outcome(Ending.NOT_REACHED, step="干活", why="判定者说不行", manifest="/x/manifest.json")
    v.close(ended)
    text = v.bundle()["text/plain"]
    assert "总花费 $0.0000 · 清单 /x/manifest.json" in text
    assert f"! 判定者说不行\n{ended.headline('zh')}\n{ended.next_step('zh', '%flower')}" in text
    frozen = v.state.elapsed(time.monotonic() + 1000)
    assert frozen < 1000
    v.sink(Event("text", "too late"))
    v.on_step(None, FakeResult())
    assert "too late" not in v.bundle()["text/plain"]
    v.close()  # twice is fine
    assert text == v.bundle()["text/plain"]


def test_sink_never_raises_on_odd_events() -> None:
    v = view(verbose=True)
    odd: list[Any] = [
        Event("text", None, payload=None),  # type: ignore[arg-type]
        Event("tool_call", "x", tool=None, payload={"id": 5, "input": object()}),  # type: ignore[arg-type]
        Event("result", "", payload={"cost_usd": "lots"}),
        Event("ask", "q", payload={"options": "not a list", "state": None}),
        Event("task", "", payload={"kind": "verdict", "checks": "junk"}),
        Event("handoff", "", payload={"phase": "done", "sections": None, "window": "x"}),
        Event("step", "s", payload={"index": "1"}),
        Event("brand-new-kind", "?"),
        object(),
        None,
    ]
    for ev in odd:
        v.sink(ev)
    v.on_step(None, object())
    v.close()
    assert v.render_errors == []
    assert_safe(v.bundle()["text/html"], expect_evil=False)


def test_the_live_log_keeps_the_newest_entries_and_counts_the_rest() -> None:
    v = view(lang="zh")
    for i in range(500):
        v.sink(Event("text", f"line {i}"))
    text = v.bundle()["text/plain"]
    assert "… 前面还有 300 条" in text
    assert "line 499" in text and "line 300" in text and "line 299" not in text
    assert len(v.state.log.entries()) == 200
    v.close()
    assert "… 300 earlier entries" in RunState("en", log=_filled(RunLog(), 500)).to_text()


def _filled(log: RunLog, n: int) -> RunLog:
    from flower_magic.display.log import Entry

    for i in range(n):
        log.append(Entry([[("", f"line {i}")]]))
    return log


# -- throttling and threads --------------------------------------------------------------------------


def test_ten_thousand_events_cause_one_render_and_the_last_event_is_in_it() -> None:
    v = view()
    for i in range(10_000):
        v.sink(Event("text", f"event {i}"))
    assert v.renders == 0  # nothing re-renders between ticks
    v.close()
    assert v.renders == 1
    last = log_slots(v)[-1].value
    assert "event 9999" in last and "event 9999" in v.bundle()["text/html"]


def test_render_rate_is_bounded_by_the_interval() -> None:
    """A chatty agent: renders stay at one per interval however many events arrive."""
    interval = 0.02
    v = view(interval_s=interval)
    started = time.monotonic()
    n = 0
    while n < 20_000 or v.renders < 3:
        v.sink(Event("text", f"event {n}"))
        n += 1
    took = time.monotonic() - started
    v.close()
    assert v.renders <= took / interval + 2
    assert v.renders < n / 100
    assert "event " + str(n - 1) in v.bundle()["text/html"]


def test_an_idle_view_does_not_render_until_something_changes() -> None:
    v = view()
    v.sink(Event("text", "hello"))
    v._render()
    v._last_clock = time.monotonic() + HOUR_S  # the status clock is not due
    v._tick()
    assert v.renders == 1
    v.sink(Event("text", "again"))
    v._tick()
    assert v.renders == 2
    v._last_clock = 0.0  # the clock is due: the elapsed time moves even when nothing else does
    v._tick()
    assert v.renders == 3
    v.close()


def test_only_changed_chunks_are_sent_again() -> None:
    """Re-rendering sends the chunk that changed, not the whole log (the frontend is not flooded)."""
    v = view()
    for i in range(90):  # four full chunks and half of a fifth
        v.sink(Event("text", f"line {i}"))
    v._render()
    sent: list[str] = []
    for slot in log_slots(v):
        slot.observe(lambda change: sent.append(change["new"]), names="value")
    v.sink(Event("text", "one more"))
    v._render()
    assert len(sent) == 1 and "one more" in sent[0] and "line 0" not in sent[0]
    v.close()


def test_feeding_from_many_threads_while_rendering() -> None:
    # switch threads as often as possible, so an unlocked read-modify-write loses updates here
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        _feed_from_threads()
    finally:
        sys.setswitchinterval(old)


def _feed_from_threads() -> None:
    v = view(interval_s=0.001)
    threads_n, per_thread = 8, 400

    def worker(k: int) -> None:
        for i in range(per_thread):
            v.sink(Event("text", f"t{k} {i}", payload={"context": i}))
            v.sink(Event("tool_call", "x", tool="Bash", payload={"id": f"{k}-{i}", "input": {}}))
            v.sink(Event("tool_result", "ok", payload={"tool_use_id": f"{k}-{i}", "is_error": False}))
            v.sink(Event("ask", "q", payload={"id": f"q{k}", "state": "asked" if i % 2 else "answered"}))
            v.sink(Event("result", "", payload={"cost_usd": 0.001}))
            if i % 50 == 0:
                checks = [{"check": CHECKS[0], "passed": bool(i % 100)}]
                v.sink(Event("task", "", payload={"kind": "verdict", "verdict": "not_yet", "checks": checks}))
                v.on_step(None, FakeResult())

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(threads_n)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        v.bundle()  # the main thread reads while workers write and the render thread renders
    for t in threads:
        t.join()
    v.close()
    assert v.render_errors == []
    assert v.renders >= 1
    assert v.state.events == threads_n * per_thread * 5 + threads_n * (per_thread // 50)
    assert abs(v.state.cost - threads_n * per_thread * 0.001) < 1e-6
    assert v.state.rounds_seen == threads_n * (per_thread // 50)
    assert_safe(v.bundle()["text/html"], expect_evil=False)


def test_no_update_is_lost_between_threads() -> None:
    """Counters are read-modify-write: without the state's lock, concurrent feeds lose some."""
    state = RunState()
    threads_n, per_thread = 8, 20_000
    result = Event("result", "", payload={"cost_usd": 1.0})
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [
            threading.Thread(target=lambda: [state.feed(result) for _ in range(per_thread)]) for _ in range(threads_n)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert state.events == threads_n * per_thread
    assert state.cost == threads_n * per_thread


def test_close_from_the_main_thread_while_a_worker_still_feeds() -> None:
    v = view(interval_s=0.001)
    stop = threading.Event()

    def worker() -> None:
        i = 0
        while not stop.is_set():
            v.sink(Event("text", f"x {i}"))
            i += 1

    t = threading.Thread(target=worker)
    t.start()
    time.sleep(0.05)
    v.close()
    final = v.bundle()
    stop.set()
    t.join()
    assert v.bundle() == final  # nothing fed after close() reaches the view; the clock stopped
    assert v.render_errors == []


# -- the widget, the fallbacks, the terminal -----------------------------------------------------------


def test_widget_bundle_carries_the_view_and_its_static_fallbacks() -> None:
    v = view(banner_facts=FACTS, goal_checks=CHECKS, window=200_000)
    v.sink(Event("text", "hello"))
    live = v._repr_mimebundle_()
    assert set(live) == {WIDGET_MIME, "text/html", "text/plain"}
    assert live[WIDGET_MIME]["model_id"] == v._widgets.root.model_id
    assert "hello" in live["text/html"] and "hello" in live["text/plain"]
    v._render()
    values = html_values(v._widgets.root)
    assert "<style>" in values[0] and "接上上次" in values[0]
    # the header's context, as the banner says it
    assert "干活上下文 80.2K / 200K" in values[1] and 'aria-valuenow="80200"' in values[1]
    assert "目标 3 条" in values[2]
    assert any("hello" in value for value in values)
    assert sum(value.count("<style>") for value in values) == 1
    v.close()
    final = v._repr_mimebundle_()
    assert set(final) == {"text/html", "text/plain"}  # a saved notebook needs no widget state
    assert v._widgets.root.comm is None  # the widgets were closed


def test_html_mode_has_no_widgets() -> None:
    v = view(mode="html")
    v.sink(Event("text", "hello"))
    assert set(v._repr_mimebundle_()) == {"text/html", "text/plain"}
    v.close()
    assert "hello" in v.bundle()["text/html"]
    with pytest.raises(ValueError, match="unknown mode"):
        RunView(mode="fancy")


def test_outside_a_kernel_the_view_prints_like_the_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    assert pick_mode() == "terminal"
    events = [
        Event("step", "干活", payload={"index": 1, "total": 1, "resumed": False, "woke": 1}),
        Event("tool_call", "ls", tool="Bash", payload={"id": "t"}),
        Event("retry", "again"),
        Event("ask", "q?", payload={"id": "q1", "options": ["a"], "state": "answered", "answer": "a"}),
    ]
    v = RunView("zh", banner_facts=FACTS)
    assert v.mode == "terminal"
    v.show()
    for ev in events:
        v.sink(ev)
    v.on_step(None, FakeResult())
    v.close(Outcome(Ending.DONE, cost_usd=0.5, manifest="/x/manifest.json"))
    printed = capsys.readouterr().out
    expected = io.StringIO()
    terminal = TerminalView("zh", out=expected)
    terminal.line(wake_banner(FACTS, "zh"))
    for ev in events:
        terminal(ev)
    terminal.on_step(None, FakeResult())
    assert printed.startswith(expected.getvalue())
    done = Outcome(Ending.DONE)
    closing = f"总花费 $0.5000 · 清单 /x/manifest.json\n{done.headline('zh')}\n{done.next_step('zh', '%flower')}"
    assert printed.rstrip().endswith(closing)


@pytest.mark.slow
def test_nbconvert_export_shows_the_final_state_as_static_html() -> None:
    """A saved notebook exported to HTML carries the final view, escaped, also when the live widget
    output was never replaced (no widget state saved: nbconvert falls back to text/html)."""
    nbformat = pytest.importorskip("nbformat")
    from nbconvert import HTMLExporter

    v = view(goal_checks=CHECKS)
    feed_everything(v)
    live = v._repr_mimebundle_()
    v.close(Outcome(Ending.DONE, cost_usd=1.0, manifest="/x/manifest.json"))
    outputs = [
        nbformat.v4.new_output("display_data", data=v._repr_mimebundle_()),
        nbformat.v4.new_output("display_data", data=live),
    ]
    cell = nbformat.v4.new_code_cell("%flower 'x'", outputs=outputs)
    page, _ = HTMLExporter().from_notebook_node(nbformat.v4.new_notebook(cells=[cell]))
    assert page.count("总花费 $1.0000") == 1 and page.count("目标 2 条") == 2
    body = page[page.index("<body") :]
    assert SCRIPT not in body and IMG not in body
    assert std_html.escape(SCRIPT) in body


# -- guards ----------------------------------------------------------------------------------------


def test_all_is_exactly_the_public_names() -> None:
    assert set(display.__all__) == {"RunView", "banner_bundle", "status_bundle"}


def test_importing_the_display_package_loads_no_widgets_or_ipython() -> None:
    """%load_ext must stay fast: ipywidgets (about a second) loads only when a RunView is made."""
    probe = (
        "import sys, json\n"
        "import flower_magic.display\n"
        "from flower_magic.display import RunView, banner_bundle, status_bundle\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    heavy = ("ipywidgets", "IPython", "claude_agent_sdk", "jupyter_server", "tornado", "comm")
    assert [m for m in loaded if m.split(".")[0] in heavy] == []


KERNEL_CELL = """
import threading
from flower_magic.core.events import Event
from flower_magic.display import RunView
v = RunView("zh", rounds=3, goal_checks=["a"], interval_s=0.01, interactive={interactive})
v.show()
done = threading.Event()
def work():
    v.sink(Event("step", "干活", payload={{"index": 1, "total": 1, "resumed": False, "woke": 1}}))
    v.sink(Event("text", {evil!r}))
    checks = [{{"check": "a", "passed": True}}]
    v.sink(Event("task", "", payload={{"kind": "verdict", "verdict": "achieved", "checks": checks}}))
    while v.renders < 2:
        done.wait(0.01)
t = threading.Thread(target=work)
t.start()
t.join()
from flower_magic.front.outcome import Ending, Outcome
v.close(Outcome(Ending.DONE, cost_usd=0.5, manifest="/x/manifest.json"))
print("mode", v.mode, v.render_errors)
"""


@pytest.fixture
def kernel() -> Iterator[Any]:
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")
    try:
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _execute(kc: Any, code: str) -> dict[str, list[dict[str, Any]]]:
    """Run ``code``; the contents of every iopub message it caused, by message type."""
    msg_id = kc.execute(code)
    by_type: dict[str, list[dict[str, Any]]] = {}
    while True:
        msg = kc.get_iopub_msg(timeout=60)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        by_type.setdefault(msg["msg_type"], []).append(msg["content"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return by_type


def _assert_final_is_static(by_type: dict[str, list[dict[str, Any]]], shown: dict[str, Any]) -> None:
    final = by_type["update_display_data"][-1]
    assert final["transient"]["display_id"] == shown["transient"]["display_id"]
    assert set(final["data"]) == {"text/html", "text/plain"}
    assert "总花费 $0.5000" in final["data"]["text/plain"] and "+ a" in final["data"]["text/plain"]
    assert_safe(final["data"]["text/html"])


@pytest.mark.slow
def test_in_a_real_kernel_a_worker_thread_updates_the_widget_and_close_leaves_static_html(kernel: Any) -> None:
    """The workflow runs in its own thread: its events must reach the frontend as widget updates
    while the cell is still running, and the output left behind must need no widget state. The first
    output is the static view (a fresh kernel shows it before ipywidgets is imported), which the
    widgets then replace (issue 24, 8: nothing showed until the widgets were ready)."""
    by_type = _execute(kernel, KERNEL_CELL.format(interactive=True, evil=EVIL))
    assert "error" not in by_type
    assert "mode widget []" in "".join(c["text"] for c in by_type["stream"])
    (shown,) = by_type["display_data"]
    assert set(shown["data"]) == {"text/html", "text/plain"} and "fm-header" in shown["data"]["text/html"]
    live, _final = by_type["update_display_data"]
    assert live["transient"]["display_id"] == shown["transient"]["display_id"]
    assert set(live["data"]) == {WIDGET_MIME, "text/html", "text/plain"}
    updates = [c["data"]["state"]["value"] for c in by_type["comm_msg"] if "value" in c["data"].get("state", {})]
    assert any(std_html.escape(SCRIPT) in value for value in updates)
    assert not any(SCRIPT in value or IMG in value for value in updates)
    _assert_final_is_static(by_type, shown)
    opened = {c["comm_id"] for c in by_type["comm_open"]}
    assert opened == {c["comm_id"] for c in by_type["comm_close"]}  # no model outlives the run


@pytest.mark.slow
def test_in_a_real_kernel_without_a_person_the_view_is_a_display_handle(kernel: Any) -> None:
    """nbclient / papermill (``interactive=False``): no widgets, the handle is updated from the thread."""
    by_type = _execute(kernel, KERNEL_CELL.format(interactive=False, evil=EVIL))
    assert "error" not in by_type
    assert "mode html []" in "".join(c["text"] for c in by_type["stream"])
    assert "comm_open" not in by_type
    (shown,) = by_type["display_data"]
    assert set(shown["data"]) == {"text/html", "text/plain"}
    assert len(by_type["update_display_data"]) >= 2  # at least one live update, then the final one
    _assert_final_is_static(by_type, shown)


@pytest.mark.parametrize(
    ("path", "home", "kind", "shown"),
    [
        ("/home/jane doe/数据 清洗 🌻 with spaces", "/home/jane doe", PurePosixPath, "~/数据 清洗 🌻 with spaces"),
        ("/home/jane doe", "/home/jane doe", PurePosixPath, "~"),
        ("/home/jane doe2/x", "/home/jane doe", PurePosixPath, "/home/jane doe2/x"),  # a prefix is not a parent
        ("/srv/x", "/", PurePosixPath, "/srv/x"),
        (r"C:\Users\Jane Doe\数据 清洗 🌻", r"c:\users\jane doe", PureWindowsPath, "~\\数据 清洗 🌻"),
        (r"D:\work\x", r"C:\Users\Jane Doe", PureWindowsPath, r"D:\work\x"),
        (r"C:\work", "C:\\", PureWindowsPath, r"C:\work"),
    ],
)
def test_the_banner_shows_the_home_as_a_tilde_on_every_platform(path: str, home: str, kind: type, shown: str) -> None:
    """Drive letters and backslashes (any case) as well as spaces and CJK in a home directory."""
    assert tilde(path, home, kind) == shown


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_the_network_filesystem_notice_shows_in_the_notebook_and_the_terminal(lang: str) -> None:
    """What it means and what to do instead, in one line, as it came (issue 16, build item 3)."""
    from flower_magic.core.words import network_fs_line

    line = network_fs_line("/home/jane doe/proj/runs", "nfs4", "/home", lang)
    assert "-r" in line and "/home" in line and "nfs4" in line and "WAL" in line
    state = RunState(lang)
    state.feed(Event("notice", line, payload={"network_fs": "nfs4"}))
    assert state.to_text().count(line) == 1
    out = io.StringIO()
    TerminalView(lang, out=out)(Event("notice", line, payload={"network_fs": "nfs4"}))
    assert out.getvalue().count(line) == 1


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_the_terminal_and_the_notebook_say_the_same_for_every_event(lang: str) -> None:
    """Issue 11 (3): one mapping (front/view.py) decides what an event says; each view only lays it
    out. Every line the mapping gives appears, word for word, in both the terminal and the notebook."""
    from flower_magic.front.view import shown

    events = [
        Event("step", "干活", payload={"index": 3, "total": 3, "resumed": True, "woke": 2}),
        Event("text", "working on it"),
        Event("tool_call", "ls data", tool="Bash", payload={"id": "t1", "input": {"command": "ls data"}}),
        Event("tool_result", "no such file", payload={"tool_use_id": "t1", "is_error": True}),
        Event("retry", "attempt 1 failed"),
        Event("notice", "! a notice"),
        Event("error", "something broke"),
        Event("handoff", "writing the hand-off", payload={"phase": "writing"}),
        Event("ask", "Which database?", payload={"id": "q1", "options": ["sqlite"], "state": "timeout"}),
        Event("task", "verdict: not yet", payload={"kind": "verdict", "verdict": "not_yet", "checks": []}),
        Event("step", "干活·判定#1", payload={"judge": True}),
    ]
    out = io.StringIO()
    terminal = TerminalView(lang, out=out)
    v = view(lang=lang)
    for ev in events:
        terminal(ev)
        v.sink(ev)
    notebook = v.bundle()["text/plain"]
    v.close()
    printed = out.getvalue()
    for ev in events:
        what = shown(ev, lang=lang, verbose=False, width=80, clip=lambda t, n: t[:n])
        assert what is not None, ev
        for line in what.lines:
            words = "".join(text for _, text in line).strip().rstrip("-").strip()
            assert words in printed, (ev.kind, words)
            assert words in notebook, (ev.kind, words)


# -- issue 24: paths, the continued column, the context's step, the total after a wake ------------------

WS = "/srv/flower-ws"  # outside the home directory: said relative to itself, or by its name


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_the_cell_and_the_terminal_say_no_absolute_path(lang: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24, item 3: the [Write] line, its details, the tool's result, a step's error and the total
    line named the workspace's absolute path, so a saved notebook carried it (and the home directory)."""
    monkeypatch.setenv("HOME", "/home/jane")
    wrote = f"{WS}/flower_demo.md"
    events = [
        Event("step", "干活", payload={"index": 3, "total": 3}),
        Event("tool_call", wrote, tool="Write", payload={"id": "t1", "input": {"file_path": wrote}}),
        Event("tool_result", f"File created at: {wrote}", payload={"tool_use_id": "t1", "is_error": True}),
        Event("text", f"I also read /home/jane/.bashrc and {WS}."),
        Event(
            "task",
            "verdict",
            payload={
                "kind": "verdict",
                "verdict": "achieved",
                "reason": f"{wrote} is there",
                "round": 1,
                "checks": [{"check": f"{wrote} 存在", "passed": True}],
            },
        ),
    ]
    done = Outcome(Ending.DONE, cost_usd=0.1241, manifest=f"{WS}/runs/manifest.json", run_cost_usd=0.248)
    v = view(lang=lang, workspace=WS, mode="html", goal_checks=[f"{wrote} 存在"])
    out = io.StringIO()
    terminal = TerminalView(lang, out=out, workspace=WS)
    for ev in events:
        v.sink(ev)
        terminal(ev)
    v.on_step(None, FakeResult(ok=False, error=f"Permission denied: {WS}/runs/x"))
    v.close(done)
    terminal.line(total_line(done.cost_usd, done.manifest, lang, base=WS, run_cost=done.run_cost_usd))
    bundle, printed = v.bundle(), out.getvalue()
    for shown in (bundle["text/plain"], bundle["text/html"], printed):
        assert WS not in shown and "/home/jane" not in shown
        assert "flower_demo.md" in shown and "~/.bashrc" in shown
    for shown in (bundle["text/plain"], printed):
        assert "* [Write] flower_demo.md" in shown  # the HTML shows the tool as a tag beside the name
    assert "runs/x" in bundle["text/plain"]
    assert say("total_wake", lang, cost=0.1241, run=0.248, manifest="runs/manifest.json") in bundle["text/plain"]
    assert say("total_wake", lang, cost=0.1241, run=0.248, manifest="runs/manifest.json") in printed
    # --status: the goal checks, the latest verdict's marks and a row's error
    rows = [row("干活", ok=False, error=f"boom at {WS}/runs/x")]
    status = status_bundle(facts_at(WS), [f"{wrote} 存在"], [{"check": f"{wrote} 存在", "passed": True}], rows, lang)
    for shown in status.values():
        assert WS not in shown and "flower_demo.md 存在" in shown and "boom at runs/x" in shown


def test_the_total_line_says_this_wake_and_what_the_manifest_totals() -> None:
    """Issue 24, item 10: after a wake the total line covered that wake while the manifest totalled
    the run, with nothing to tell the two apart."""
    first = plain(total_line(0.1239, "/w/runs/manifest.json", "zh", base="/w", run_cost=0.1239))
    assert first == say("total", "zh", cost=0.1239, manifest="runs/manifest.json")
    woke = plain(total_line(0.1241, "/w/runs/manifest.json", "en", base="/w", run_cost=0.248))
    assert woke == say("total_wake", "en", cost=0.1241, run=0.248, manifest="runs/manifest.json")
    record = Outcome(Ending.DONE, cost_usd=0.1241, run_cost_usd=0.248).to_record()
    assert Outcome.from_record(record).run_cost_usd == 0.248  # --status and a follower say it too


def test_the_header_names_the_step_whose_context_it_shows() -> None:
    """Issue 24, item 10: during 设定目标 the header said "确认需求上下文 4.8K" (the last step's)."""
    s = RunState("zh", window=200_000)
    s.feed(Event("step", "确认需求", payload={"index": 1, "total": 3}))
    s.feed(Event("text", "?", payload={"context": 4800}))
    assert (s.header().context_step, s.header().context) == ("确认需求", 4800)
    s.feed(Event("step", "设定目标", payload={"index": 2, "total": 3}))
    assert (s.header().context_step, s.header().context) == ("设定目标", 0)
    assert say("hdr_context", "zh", step="设定目标", ctx="0", window="200K") in s.header_html()
    s.feed(Event("text", "## 目标", payload={"context": 4600}))
    assert (s.header().context_step, s.header().context) == ("设定目标", 4600)
    # Waking: the work session's context as the banner said it, from the work step's start.
    woke = RunState("zh", window=200_000, banner_facts=facts_at())
    woke.feed(Event("step", "确认需求", payload={"index": 1, "total": 3}))
    assert (woke.header().context_step, woke.header().context) == ("确认需求", 0)
    woke.feed(Event("step", "干活", payload={"index": 3, "total": 3}))
    assert (woke.header().context_step, woke.header().context) == ("干活", 80200)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_the_status_table_lines_up_and_marks_every_continued_row(lang: str) -> None:
    """Issue 24, item 10: a ``干活·判定#1`` row was one column short in text (``·`` counted two), and
    the continued column was blank for a wake's rows, which the panel marks ↻."""
    rows = [
        row("确认需求", session_id="c"),
        row("干活", session_id="w"),
        row("干活·判定#1", session_id="j"),
        row("确认需求", session_id="c"),  # the wake continues each session
        row("干活", session_id="w"),
        row("干活·判定#2", session_id="j2", resumed=True),  # a retry after an outage
    ]
    text = status_bundle(FACTS, [], None, rows, lang)["text/plain"]
    table = [ln for ln in text.splitlines() if ln.startswith(tuple(step_name(n, lang) for n in ("确认需求", "干活")))]
    assert len(table) == len(rows)
    # The ok column starts at the same column on every row, as a terminal counts them (wcwidth, which
    # prompt_toolkit brings with IPython: ``·`` takes one column there).
    marks = {wcwidth.wcswidth(ln[: ln.index(" + ")]) for ln in table}
    assert len(marks) == 1, table
    yes = say("yes", lang)
    assert [yes in ln.split("$", 1)[1] for ln in table] == [False, False, False, True, True, True]
