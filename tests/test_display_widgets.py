"""The widget view of a run (display/widgets.py, header.py, ask.py) without a kernel: the header's
facts, the sections per step, the goal badges, the question widget and the routing hook it rides on.

ipywidgets work without a kernel here (their comm is a DummyComm); ``Button.click()`` runs the
handlers a frontend click would. The browser test (tests/e2e/test_widget_view.py) clicks for real.
"""

from __future__ import annotations

import html as std_html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flower_magic.core.events import Event
from flower_magic.core.human import ASK_TOOL
from flower_magic.core.rundir import RunDir, Snapshot
from flower_magic.core.words import say, step_name
from flower_magic.display import RunView
from flower_magic.display.ask import AskWidget, tap
from flower_magic.display.header import Header, header_html, human_window
from flower_magic.display.state import RunState
from flower_magic.front.outcome import Ending, Outcome
from flower_magic.front.phrases import plain

HOUR_S = 3600.0  # no render happens unless a test asks for one
CHECKS = ["clean.py 存在", "输出里没有空行"]


@dataclass
class FakeResult:
    ok: bool = True
    num_turns: int = 1
    cost_usd: float = 0.01
    duration_s: float = 3.0
    error: str | None = None


def step(name: str, index: int, total: int = 3) -> Event:
    return Event("step", name, payload={"index": index, "total": total, "resumed": False, "woke": 1})


def verdict(n: int, passed: list[bool]) -> Event:
    checks = [{"check": c, "passed": p} for c, p in zip(CHECKS, passed, strict=True)]
    state = "achieved" if all(passed) else "not_yet"
    return Event("task", "", payload={"kind": "verdict", "verdict": state, "reason": "r", "round": n, "checks": checks})


def view(**kwargs: Any) -> RunView:
    kwargs.setdefault("mode", "widget")
    kwargs.setdefault("interval_s", HOUR_S)
    return RunView(**kwargs)


# -- the header --------------------------------------------------------------------------------------


def test_the_header_says_status_step_round_time_cost_and_context_against_the_window() -> None:
    s = RunState("en", rounds=2, window=200_000)
    s.feed(step("确认需求", 1))
    assert (s.header().round_n, s.header().rounds) == (0, 0)  # rounds belong to the judged (last) step
    s.feed(step("干活", 3))
    s.feed(Event("text", "hi", payload={"context": 50_000}))
    s.feed(Event("result", "", payload={"cost_usd": 0.25}))
    h = s.header(s.started + 65)
    assert (h.status, h.step, h.index, h.total, h.round_n, h.rounds) == ("running", "干活", 3, 3, 1, 2)
    assert (h.context, h.context_step, h.window, h.context_share) == (50_000, "干活", 200_000, 0.25)
    page = header_html(h, "en")
    # Issue 24 (4): the step's name too is said in English (on disk it stays 干活)
    assert "running" in page and "step 3/3 · Work" in page and "round 1/2" in page
    assert "1:05 elapsed" in page and "total $0.25" in page and "Work context 50.0K of 200K" in page
    assert "干活" not in page
    assert 'aria-valuenow="50000"' in page and 'style="width:25.0%"' in page
    assert page.count("fm-seg-done") == 2 and page.count("fm-seg-run") == 1


def test_the_header_context_is_the_banners_until_the_step_reports_and_never_a_judges() -> None:
    """Issue 12: the footer said 上下文 0 under a banner that said 5.4K."""
    facts = Snapshot(RunDir(Path("/w"), Path("/w/runs")), waking=True, checks=2, woke=1, work_context=5400)
    s = RunState("zh", banner_facts=facts, window=1_000_000)
    assert "干活上下文 5.4K / 1M" in header_html(s.header(), "zh")
    assert plain(s.footer_lines()[0]).startswith("- 上下文 5.4K")
    s.feed(step("干活", 3))
    s.feed(Event("text", "work", payload={"context": 7000}))
    s.feed(Event("step", "干活·判定#1", payload={"judge": True, "round": 1}))
    s.feed(Event("text", "judge", payload={"context": 90_000}))
    s.feed(Event("text", "sub", payload={"context": 120_000, "subagent": True}))
    assert (s.context, s.context_step) == (7000, "干活")
    s.feed(Event("step", "干活#round2", payload={"attempt": 2, "resumed": True}))
    s.feed(Event("text", "work again", payload={"context": 8000}))
    assert s.context == 8000


def test_the_header_status_follows_questions_and_the_end() -> None:
    v = view(lang="en")
    v.attach(lambda _id, _text: True, in_place=True)
    v.sink(step("确认需求", 1))
    assert v.state.header().status == "running"
    v.sink(Event("ask", "Q?", payload={"id": "q1", "options": [], "state": "asked"}))
    assert v.state.header().status == "asking"
    v.sink(Event("ask", "Q?", payload={"id": "q1", "options": [], "state": "answered", "answer": "a"}))
    assert v.state.header().status == "running"
    v.on_step(None, FakeResult(ok=False, error="boom"))
    v.close(Outcome(Ending.FAILED, step="确认需求", cost_usd=0.1, manifest="/m.json"))
    assert v.state.header().status == "failed"
    assert 'data-status="failed"' in v.bundle()["text/html"]


@pytest.mark.parametrize(("tokens", "shown"), [(200_000, "200K"), (1_000_000, "1M"), (1_500_000, "1.5M"), (900, "900")])
def test_a_window_reads_as_people_name_it(tokens: int, shown: str) -> None:
    assert human_window(tokens) == shown


def test_the_header_says_it_waits_for_the_agent_until_the_first_event() -> None:
    """The first paint comes before the SDK's import; it must say what it waits for, not look stuck
    (issue 24, 8), and stop saying it once the run has begun."""
    waiting = say("hdr_wait_agent", "en")
    v = view(lang="en")
    v.wait_for(waiting)
    assert waiting in v.bundle()["text/plain"] and "fm-wait" in v.bundle()["text/html"]
    assert v.state.header().waiting == waiting
    v.line([("dim", "a notice is not the run")])
    assert waiting in v.bundle()["text/plain"]
    v.sink(step("确认需求", 1))
    assert waiting not in v.bundle()["text/plain"] and "fm-wait" not in v.bundle()["text/html"]
    v.close()


def test_a_view_let_go_is_static_keeps_its_question_and_says_how_to_go_on() -> None:
    """A kernel that went left a following cell with live-looking buttons that reached nobody
    (issue 24, 7): the view let go has no question card, keeps the question as a line, says why."""
    v = view(lang="en")
    v.attach(lambda ask_id, text: None, in_place=True)
    v.sink(step("确认需求", 1))
    v.sink(Event("ask", "Which format?", payload={"id": "q1", "options": ["md", "txt"], "state": "asked"}))
    v._render()
    assert v._widgets is not None and v._widgets._asks  # the card is up
    gone = say("follow_let_go", "en", pid=77)
    v.let_go([[("note", gone)]])
    final = v._repr_mimebundle_()
    assert set(final) == {"text/html", "text/plain"}  # nothing that needs the kernel's widgets
    assert say("question", "en", question="Which format?") in final["text/plain"] and gone in final["text/plain"]
    assert v.state.header().status == "let_go" and say("run_let_go", "en") in final["text/html"]
    assert v._widgets._asks == {}  # the card is closed (the rest stays: a dropped update leaves no blank)
    v.close(Outcome(Ending.DONE))  # a later close changes nothing
    assert v.bundle()["text/plain"] == final["text/plain"]


def test_a_question_card_says_what_to_do_once_its_kernel_is_gone() -> None:
    """Only the frontend knows the kernel went (it marks the widgets disconnected): the card carries the
    words, hidden, and the style shows them and dims the buttons then (issue 24, 7)."""
    from flower_magic.display.html import STYLE

    card = AskWidget("q1", "Which format?", ["md"], "en", lambda ask_id, text: None, in_place=False)
    assert 'class="fm-ask-gone' in card.question.value and say("ask_gone", "en") in card.question.value
    assert ".fm-ask.jupyter-widgets-disconnected .fm-ask-gone{display:block}" in STYLE
    assert ".fm-ask.jupyter-widgets-disconnected .fm-ask-row{pointer-events:none" in STYLE
    card.close()


def test_the_live_header_says_once_disconnected_that_the_view_no_longer_changes() -> None:
    """A restart in JupyterLab drops what the going kernel says last, so the view stayed with a live
    pill ("waiting for you") and dead parts (issue 24, 7): the live header carries, hidden, a pill and
    a line that the style shows in place of the live pill once the widgets are disconnected; the
    static view (a saved notebook, nbconvert, GitHub, which drops the style) does not carry them."""
    from flower_magic.display.html import STYLE

    v = view(lang="en")
    v.sink(step("确认需求", 1))
    v._render()
    assert v._widgets is not None
    live = v._widgets.header.value
    assert f'class="fm-chip fm-gone">{say("run_let_go", "en")}<' in live and say("view_gone", "en") in live
    static = v.bundle()["text/html"]
    assert say("view_gone", "en") not in static and "fm-gone" not in static.split("</style>")[-1]
    assert ".flower-magic .fm-gone{display:none}" in STYLE
    assert ".jupyter-widgets-disconnected .fm-header .fm-gone{display:inline-flex}" in STYLE
    assert ".jupyter-widgets-disconnected .fm-header .fm-chip{display:none}" in STYLE
    v.close()


def test_a_header_without_a_window_shows_no_bar() -> None:
    page = header_html(Header("running", context=1200, context_step="干活"), "zh")
    assert "干活上下文 1.2K" in page and "fm-bar" not in page


# -- sections and badges ------------------------------------------------------------------------------


def test_each_step_is_a_section_open_while_it_runs_and_collapsed_to_its_summary_after() -> None:
    v = view(lang="zh")
    v.sink(step("确认需求", 1))
    v.sink(Event("tool_call", "ls", tool="Bash", payload={"id": "t1", "input": {"command": "ls"}}))
    v._render()
    (first,) = v._widgets.sections.children
    assert first.selected_index == 0 and first.titles[0].startswith("… 确认需求")
    v.on_step(None, FakeResult(num_turns=1))
    v.sink(step("定目标", 2))
    v._render()
    first, second = v._widgets.sections.children
    assert first.selected_index is None and second.selected_index == 0
    title = first.titles[0]
    assert title.startswith("✓ 确认需求 · 1/3 · 完成 · 1 轮 · $0.0100") and title.endswith("工具调用 1 次")
    first.selected_index = 0  # a person opens it again: it stays open
    v._render()
    assert first.selected_index == 0
    v.close()


def test_a_tool_call_is_one_line_with_its_details_collapsed_in_its_section() -> None:
    v = view(lang="en")
    v.sink(step("干活", 3))
    v.sink(Event("tool_call", "ls -la", tool="Bash", payload={"id": "t1", "input": {"command": "ls -la"}}))
    section = v.state.sections[-1]
    assert section.tools == 1
    page = section.to_html("en")
    assert page.count('<details class="fm-tool">') == 1
    assert '<summary><span class="fm-tool-name">Bash</span> <span class="fm-tool-arg">ls -la</span></summary>' in page
    v.close()


def test_the_goal_badges_change_as_the_judge_rules() -> None:
    v = view(lang="en", goal_checks=CHECKS, rounds=2)
    v._render()
    assert v._widgets.goals.value.count('data-state="pending"') == 2
    v.sink(verdict(1, [True, False]))
    v._render()
    goals = v._widgets.goals.value
    assert 'data-state="pass"' in goals and 'data-state="fail"' in goals
    assert say("badge_fail", "en") in goals and say("badge_pass", "en") in goals
    v.sink(verdict(2, [True, True]))
    v._render()
    assert v._widgets.goals.value.count('data-state="pass"') == 2
    v.close()


# -- the question --------------------------------------------------------------------------------------


def _asked(options: list[str] | None = None) -> Event:
    return Event("ask", "Where to?", payload={"id": "q1", "options": options or ["stdout", "file"], "state": "asked"})


def test_a_question_is_shown_once_as_a_widget_and_a_click_answers_it() -> None:
    answers: list[tuple[str, str]] = []
    v = view(lang="en")
    v.attach(lambda ask_id, text: answers.append((ask_id, text)), in_place=True)
    v.sink(step("确认需求", 1))
    v.sink(Event("tool_call", "Where to?", tool=ASK_TOOL, payload={"id": "t1", "input": {"question": "Where to?"}}))
    v.sink(_asked())
    v._render()
    ((ask_id, (section, widget)),) = v._widgets._asks.items()
    assert (ask_id, section) == ("q1", 1)
    assert [b.description for b in widget.options] == ["stdout", "file"]
    assert widget.decide.description == "Let the agent decide"
    assert "Where to?" not in v.state.to_text()  # not in the log as well: once, in the widget
    assert widget.box in v._widgets._views[1].body.children
    widget.options[1].click()
    widget.options[0].click()  # a second click settles nothing
    assert answers == [("q1", "file")]
    v.sink(
        Event(
            "ask",
            "Where to?",
            payload={"id": "q1", "options": ["stdout", "file"], "state": "answered", "answer": "file"},
        )
    )
    v._render()
    assert v._widgets._asks == {}
    text = v.state.to_text()
    assert text.count("? Where to?") == 1 and "  + file" in text
    v.close()


def test_an_empty_answer_lets_the_agent_decide_and_says_so() -> None:
    """Issue 12: an empty answer showed "(declined)" instead of "let the agent decide"."""
    answers: list[str] = []
    v = view(lang="en")
    v.attach(lambda _id, text: answers.append(text), in_place=True)
    v.sink(_asked())
    v._render()
    ((_, widget),) = v._widgets._asks.values()
    widget.text.value = "   "
    widget.send.click()
    assert answers == ["   "]  # the channel reads blank as "let the agent decide"
    v.sink(Event("ask", "Where to?", payload={"id": "q1", "state": "declined", "answer": ""}))
    assert "let the agent decide" in v.state.to_text()
    v.sink(Event("ask", "Other?", payload={"id": "q2", "state": "declined", "answer": "interrupted"}))
    assert say("ask_cancelled", "en") in v.state.to_text()
    v.close()


def test_without_in_place_answers_the_question_stays_in_the_log() -> None:
    """Where no click can reach a busy kernel, the notebook asks with input(); the view shows the
    question in the log (the prompt only says how to answer)."""
    v = view(lang="en")
    v.attach(lambda _id, _text: None, in_place=False)
    assert not v.answers_in_place
    v.sink(_asked())
    assert "? Where to?" in v.state.to_text() and v.state.open_asks == {}
    assert "Where to?" not in say("answer_prompt", "en")
    v.close()


def test_the_html_view_takes_no_channel() -> None:
    v = view(mode="html")
    v.attach(lambda _id, _text: None, in_place=True)
    assert not v.answers_in_place
    v.close()


class FakeComm:
    """A comm with ipykernel 7's routing hook; records what it routed."""

    def __init__(self) -> None:
        self.routed: list[Any] = []

    def _reply_subshell_for(self, data: Any, default: Any) -> Any:
        self.routed.append(data)
        return default


@dataclass
class FakeWidget:
    comm: Any


def test_tap_sees_each_message_first_and_routes_it_on_even_when_the_handler_fails() -> None:
    comm = FakeComm()
    seen: list[Any] = []
    assert tap(FakeWidget(comm), seen.append)
    click = {"method": "custom", "content": {"event": "click"}}
    assert comm._reply_subshell_for(click, "main") == "main"
    assert seen == [click] and comm.routed == [click]

    def broken(_data: Any) -> None:
        raise RuntimeError("a bug in a handler")

    other = FakeComm()
    assert tap(FakeWidget(other), broken)
    assert other._reply_subshell_for(click, None) is None and other.routed == [click]
    assert not tap(FakeWidget(object()), seen.append)  # no hook in this kernel: nothing changed


def test_clicks_seen_on_the_routing_thread_settle_the_question_once() -> None:
    answers: list[str] = []
    widget = AskWidget("q1", "Where?", ["a", "b"], "en", lambda _id, text: answers.append(text), in_place=False)
    typed = {"method": "update", "state": {"value": "my own"}, "buffer_paths": []}
    click = {"method": "custom", "content": {"event": "click"}}
    widget._on_text(typed)
    widget._on_send(click)
    widget._on_click("b")(click)
    assert answers == ["my own"]
    widget.close()


def test_the_static_html_collapses_finished_steps_and_keeps_the_last_open() -> None:
    """What nbconvert and a saved notebook show: the same sections, as ``<details>``."""
    v = view(lang="zh")
    v.sink(step("确认需求", 1))
    v.on_step(None, FakeResult(num_turns=1))
    v.sink(step("干活", 3))
    v.sink(Event("text", "工作中"))
    v.close(Outcome(Ending.DONE, cost_usd=0.02, manifest="/m.json"))
    page = v.bundle()["text/html"]
    assert page.count('<details class="fm-sec">') == 1 and page.count('<details class="fm-sec" open>') == 1
    assert page.index('<details class="fm-sec">') < page.index("确认需求") < page.index("1 轮 · $0.0100")


# -- the run as a document ---------------------------------------------------------------------------

JUDGE_SAID = "## 结论\n未达成\n\n## 理由\n还有 `空行`\n\n## 未通过\n- 输出里没有空行"


def _judged_round(v: RunView) -> None:
    """A work round, its judge (who reads a file and rules "not yet"), and the next round's words."""
    v.sink(step("干活", 3))
    v.sink(Event("text", "## 做了什么\n- 写了 clean.py"))
    v.sink(Event("step", "干活·判定#1", payload={"judge": True, "round": 1}))
    v.sink(Event("tool_call", "clean.py", tool="Read", payload={"id": "j1", "input": {"file_path": "clean.py"}}))
    v.sink(Event("text", JUDGE_SAID))
    checks = [{"check": CHECKS[0], "passed": True}, {"check": CHECKS[1], "passed": False}]
    payload = {"kind": "verdict", "verdict": "not_yet", "reason": "还有 `空行`", "round": 1, "checks": checks}
    v.sink(Event("task", "判定:未达成", payload=payload))
    v.sink(Event("text", "第二轮开始"))


def test_the_agents_words_are_a_document_in_html_and_text_in_text() -> None:
    """Agent text was shown as raw Markdown (``## 结论``) in a monospace block (issue 24, item 5)."""
    v = view(lang="zh")
    _judged_round(v)
    page, text = v.bundle()["text/html"], v.bundle()["text/plain"]
    assert '<div class="fm-md jp-RenderedHTMLCommon"><h2>做了什么</h2>\n<ul>\n<li>写了 clean.py</li>' in page
    assert "##" not in page and "-- 干活·判定#1" not in page
    assert "## 做了什么\n- 写了 clean.py" in text  # the text views keep the words as written
    v.close()


def test_the_judges_ruling_is_its_own_element_with_its_reason_and_the_checks_it_failed() -> None:
    """The judge's verdict text was printed inline in the work step (issue 24, item 5)."""
    v = view(lang="zh", goal_checks=CHECKS)
    v.sink(step("干活", 3))
    v.sink(Event("step", "干活·判定#1", payload={"judge": True, "round": 1}))
    v.sink(Event("text", "看了一遍"))
    ruling = v.state.section.to_html("zh")
    assert '<div class="fm-verdict" data-state="judging">' in ruling and say("judging", "zh") in ruling
    v.close()

    v = view(lang="zh", goal_checks=CHECKS)
    _judged_round(v)
    page = v.state.section.to_html("zh")
    start, end = page.index('<div class="fm-verdict"'), page.index("第二轮开始")
    card = page[start:end]
    assert card.startswith('<div class="fm-verdict" data-state="not_yet">')
    assert '<span class="fm-verdict-name">干活·判定#1</span> <span class="fm-chip fm-st-failed">未达成</span>' in card
    assert say("verdict_counts", "zh", passed=1, total=2) in card
    assert "<p>还有 <code>空行</code></p>" in card  # the reason, as Markdown
    failed = card[card.index('<ul class="fm-checks">') : card.index("</ul>")]
    assert CHECKS[1] in failed and CHECKS[0] not in failed and 'data-state="fail"' in failed
    said = card[card.index('<details class="fm-said">') :]
    assert say("judge_said", "zh") in said and "<h2>结论</h2>" in said and 'class="fm-tool-name">Read<' in said
    assert "判定:未达成" not in page  # the ruling says it; the text line is for the text views
    assert page.index("做了什么") < start  # the worker's words before it, the next round's after it
    text = v.bundle()["text/plain"]
    lines = [line for line in text.splitlines() if line.strip()]
    at = next(i for i, line in enumerate(lines) if line.startswith("-- 干活·判定#1 ---"))
    assert lines[at + 1 : at + 3] == ["* [Read] clean.py", "## 结论"] and "! 判定:未达成" in lines
    v.close()


def _bare_text(page: str) -> str:
    """The page's text as a renderer without our style block shows it (GitHub strips it): text nodes
    joined as they are, the style's content left out, blocks on lines of their own."""
    page = re.sub(r"<style>.*?</style>", "", page, flags=re.S)
    page = re.sub(r"</?(div|li|ul|p|h\d|summary|details)\b[^>]*>", "\n", page)
    return std_html.unescape(re.sub(r"<[^>]+>", "", page))


def test_without_the_style_block_the_saved_view_still_reads() -> None:
    """The header, the badges and a step's summary ran together ("donestep 3/3", "✓ passedclean.py")
    where a page's styles are stripped, as on GitHub (issue 24: the saved notebook without the extension)."""
    v = view(lang="en", goal_checks=CHECKS)
    _judged_round(v)
    v.on_step(None, FakeResult())
    v.close(Outcome(Ending.DONE, cost_usd=0.02, manifest="m.json"))
    text = _bare_text(v.bundle()["text/html"])
    work, judged = step_name("干活", "en"), step_name("干活·判定#1", "en")
    assert f"{say('pill_done', 'en')} " in text and f"{say('hdr_step', 'en', n=3, total=3, name=work)} " in text
    assert f"✓ {say('badge_pass', 'en')} {CHECKS[0]}" in text and f"✗ {say('badge_fail', 'en')} {CHECKS[1]}" in text
    assert f"{work} 3/3" in text  # the step's name, then its tail
    assert f"{judged} {say('state_not_yet', 'en')} {say('verdict_counts', 'en', passed=1, total=2)}" in text
    assert "Read clean.py" in text  # a tool call's name, then what it was called on
    v.close()
