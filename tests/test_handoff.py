"""HandoffPolicy, windows and calibration, overflow detection, the hand-off document and its file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from flower_magic.core.compact import CompactPolicy
from flower_magic.core.handoff import (
    DEGRADED,
    DEGRADED_TASK_CHARS,
    HANDOFF_PROMPT,
    RESULT_TOO_BIG,
    SECTIONS,
    STOP_CMD,
    WINDOW_TOO_SMALL,
    ContextStop,
    Handoff,
    HandoffPolicy,
    calibrated_window,
    calibration_key,
    calibration_path,
    default_window,
    degraded,
    degraded_streak_error,
    generation_cap_error,
    handoff_path,
    handoff_prompt,
    is_context_stop,
    is_overflow,
    model_mismatch,
    remember_overflow,
    safe_step,
)
from flower_magic.core.rundir import RunDir
from flower_magic.core.sections import read_sections, strip_fences

SAMPLE = """好的,交接如下。

## 现在在做什么
在给 md2html 加代码块高亮,解析器已经改完,正在接渲染。

## 已经定下的
- 用 pygments:标准库没有高亮,pygments 是唯一不要网络的选择。

## 走不通的路
- markdown-it 的插件:要 node,环境里没有。
- 自己写词法分析:三种语言就写了 400 行,维护不起。

```markdown
## 下一步
这是代码块里的假标题,不能当真。
```

## 下一步
在干净的分支上跑 tests/test_render.py,修掉 2 个失败。

## 现场
- src/render.py(改了一半)
- 分支 feat/highlight
"""


# --- [1] parsing ------------------------------------------------------------------------------


def test_parse_sample_ignores_the_fenced_fake_heading() -> None:
    doc = Handoff.parse(SAMPLE, step="干活")
    assert doc.complete()
    assert doc.next == "在干净的分支上跑 tests/test_render.py,修掉 2 个失败。"
    assert "假标题" not in doc.to_markdown()
    assert len([ln for ln in doc.deadends.splitlines() if ln.startswith("- ")]) == 2
    assert doc.scene.startswith("- src/render.py")
    assert doc.step == "干活"
    assert not doc.degraded


def test_completeness_needs_doing_and_next_only() -> None:
    assert not Handoff.parse("## 现在在做什么\n写解析器").complete()
    assert Handoff.parse("## 现在在做什么\n写解析器").missing() == ["下一步"]
    assert Handoff.parse("## 现在在做什么\n写解析器\n\n## 下一步\n补测试").complete()
    assert not Handoff.parse("## 下一步\n补测试").complete()
    assert Handoff().missing() == ["现在在做什么", "下一步"]
    assert not Handoff.parse("").complete()


def test_prompt_block() -> None:
    block = Handoff.parse(SAMPLE).prompt_block()
    assert block.startswith("你在接手一段还没干完的活")
    assert "## 下一步\n在干净的分支上" in block
    assert "「下一步」" in block
    # empty sections are left out of the successor's prompt
    assert "## 已经定下的" not in Handoff(doing="a", next="b").prompt_block()


@pytest.mark.parametrize(
    ("text", "field", "body"),
    [
        ("## 当前进度\n写解析器", "doing", "写解析器"),
        ("## 现在在做\n写解析器", "doing", "写解析器"),
        ("### 进度:写解析器", "doing", "写解析器"),
        ("**现在在做什么?**\n写解析器", "doing", "写解析器"),
        ("## 已定的事\n用 pygments", "decided", "用 pygments"),
        ("## 决策\n用 pygments", "decided", "用 pygments"),
        ("## 试过不行的\nnode 插件", "deadends", "node 插件"),
        ("## 排除的路\nnode 插件", "deadends", "node 插件"),
        ("## 文件\nsrc/render.py", "scene", "src/render.py"),
        ("**下一步:** 跑测试", "next", "跑测试"),
        ("4. 下一步:跑测试", "next", "跑测试"),
    ],
)
def test_parse_aliases_and_decorations(text: str, field: str, body: str) -> None:
    assert getattr(Handoff.parse(text), field) == body


def test_to_markdown_round_trips() -> None:
    doc = Handoff.parse(SAMPLE, step="干活")
    text = doc.to_markdown()
    assert text.startswith("# 交接书(干活)\n")
    assert Handoff.parse(text, step="干活") == doc
    assert Handoff(doing="x", next="y").to_markdown().startswith("# 交接书\n")
    assert "## 走不通的路\n\n(空)\n" in Handoff(doing="x", next="y").to_markdown()
    assert Handoff.parse(Handoff(doing="x", next="y").to_markdown()) == Handoff(doing="x", next="y")


def test_no_dead_ends_placeholder_is_empty() -> None:
    doc = Handoff.parse("## 现在在做什么\na\n## 走不通的路\n(暂无)\n## 下一步\nb")
    assert doc.deadends == ""


# --- [5] degraded -----------------------------------------------------------------------------


def test_degraded_is_complete_and_marked() -> None:
    doc = degraded("干活", "  照这份需求做:写一个 md 转 html 的脚本  ", "缺下一步")
    assert doc.complete() and doc.degraded
    assert doc.doing.startswith(DEGRADED)
    assert "「干活」" in doc.doing and "(缺下一步)" in doc.doing
    assert doc.scene.endswith("照这份需求做:写一个 md 转 html 的脚本")
    assert DEGRADED in doc.prompt_block()
    assert Handoff.parse(doc.to_markdown()).degraded


def test_degraded_without_why_and_long_task() -> None:
    doc = degraded("干活", "x" * 5000)
    assert "()" not in doc.doing and "(" not in doc.doing.replace(DEGRADED, "")
    assert doc.scene.count("x") == DEGRADED_TASK_CHARS
    assert not Handoff(doing="在写", next="写完").degraded


# --- [7] [12] thresholds and compaction -------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "headroom", "room", "at", "warn_at"),
    [
        (200_000, 0, 50_000, 150_000, 130_000),
        (1_000_000, 0, 250_000, 750_000, 730_000),
        (1_000_000, 50_000, 50_000, 950_000, 930_000),
        (40_000, 25_000, 25_000, 15_000, 1_000),
        (20_000, 0, 50_000, 10_000, 1_000),
        (400_000, 0, 100_000, 300_000, 280_000),
        (-5, 0, 50_000, 10_000, 1_000),
    ],
)
def test_thresholds(window: int, headroom: int, room: int, at: int, warn_at: int) -> None:
    policy = HandoffPolicy(window=window, headroom=headroom)
    assert (policy.room, policy.at, policy.warn_at) == (room, at, warn_at)


def test_policy_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    for key in ("FLOWER_WINDOW", "ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL"):
        monkeypatch.delenv(key, raising=False)
    policy = HandoffPolicy()
    assert (policy.enabled, policy.window, policy.headroom, policy.max_generations) == (True, 1_000_000, 0, 8)
    assert (HandoffPolicy.HEADROOM_FRACTION, HandoffPolicy.HEADROOM_FLOOR) == (0.25, 50_000)


@pytest.mark.parametrize(
    ("policy", "env"),
    [
        (CompactPolicy(), {}),
        (CompactPolicy("no_summary"), {"DISABLE_AUTO_COMPACT": "1"}),
        (CompactPolicy("off"), {"DISABLE_COMPACT": "1"}),
        (CompactPolicy(window=180_000), {"CLAUDE_CODE_AUTO_COMPACT_WINDOW": "180000"}),
        (
            CompactPolicy("no_summary", window=90_000),
            {"DISABLE_AUTO_COMPACT": "1", "CLAUDE_CODE_AUTO_COMPACT_WINDOW": "90000"},
        ),
    ],
)
def test_compact_policy_env(policy: CompactPolicy, env: dict[str, str]) -> None:
    assert policy.env() == env


def test_compact_policy_unknown_mode() -> None:
    with pytest.raises(ValueError, match=r"'summary'.*no_summary"):
        CompactPolicy("summary")


# --- [7b] [7c] windows and calibration --------------------------------------------------------


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment whose calibration file lives in a temp dir."""
    return {"XDG_CONFIG_HOME": str(tmp_path / "config")}


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("claude-opus-5[1m]", 1_000_000),
        ("claude-sonnet-5-1m", 1_000_000),
        ("CLAUDE-SONNET-5-1M", 1_000_000),
        ("claude-opus-5", 1_000_000),
        ("claude-sonnet-5", 1_000_000),
        ("", 1_000_000),
        ("claude-haiku-5", 200_000),
        ("claude-haiku-5[1m]", 1_000_000),
        ("claude-haiku-5-11m", 200_000),
    ],
)
def test_window_guess_from_model_name(env: dict[str, str], model: str, window: int) -> None:
    assert default_window({**env, "ANTHROPIC_MODEL": model}) == window


def test_window_guess_falls_back_to_the_opus_model(env: dict[str, str]) -> None:
    assert default_window({**env, "ANTHROPIC_MODEL": "", "ANTHROPIC_DEFAULT_OPUS_MODEL": "claude-haiku-5"}) == 200_000
    assert default_window({**env, "ANTHROPIC_DEFAULT_OPUS_MODEL": "claude-haiku-5"}) == 200_000
    assert default_window(env) == 1_000_000


def test_explicit_window_is_respected(env: dict[str, str]) -> None:
    assert HandoffPolicy(window=200_000).window == 200_000


@pytest.mark.parametrize(("value", "window"), [("300000", 300_000), (" 250000 ", 250_000), ("1", 1)])
def test_flower_window_beats_the_guess(env: dict[str, str], value: str, window: int) -> None:
    assert default_window({**env, "ANTHROPIC_MODEL": "claude-haiku-5", "FLOWER_WINDOW": value}) == window


@pytest.mark.parametrize("value", ["abc", "0", "-5", "", "  ", "2e5", "1.5"])
def test_invalid_flower_window_is_ignored(env: dict[str, str], value: str) -> None:
    assert default_window({**env, "ANTHROPIC_MODEL": "claude-haiku-5", "FLOWER_WINDOW": value}) == 200_000


def test_calibration_keeps_the_minimum(env: dict[str, str]) -> None:
    assert calibrated_window(env) is None
    remember_overflow(174_000, env)
    assert calibrated_window(env) == 174_000
    assert default_window(env) == 174_000
    remember_overflow(160_000, env)
    assert calibrated_window(env) == 160_000
    remember_overflow(999_000, env)
    assert calibrated_window(env) == 160_000
    remember_overflow(0, env)
    remember_overflow(-3, env)
    assert calibrated_window(env) == 160_000


def test_calibration_file_location_and_format(tmp_path: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "ANTHROPIC_MODEL": "m1"}
    remember_overflow(123_000, env)
    path = tmp_path / "xdg" / "flower" / ".windows"
    assert calibration_path(env) == path
    assert json.loads(path.read_text(encoding="utf-8")) == {"default|m1": 123_000}
    assert calibration_path({"HOME": str(tmp_path / "h")}) == tmp_path / "h" / ".config" / "flower" / ".windows"
    assert calibration_path({"XDG_CONFIG_HOME": "", "HOME": str(tmp_path)}) == tmp_path / ".config/flower/.windows"


def test_flower_window_beats_calibration(env: dict[str, str]) -> None:
    remember_overflow(174_000, env)
    assert default_window({**env, "FLOWER_WINDOW": "500000"}) == 500_000
    assert default_window({**env, "FLOWER_WINDOW": "abc"}) == 174_000


def test_calibration_is_keyed_by_gateway_and_model(env: dict[str, str]) -> None:
    gw_a = {**env, "ANTHROPIC_BASE_URL": "http://gw-a:8080", "ANTHROPIC_MODEL": "claude-opus-5"}
    remember_overflow(174_000, gw_a)
    assert calibrated_window(gw_a) == 174_000
    assert calibrated_window({**gw_a, "ANTHROPIC_BASE_URL": "http://gw-b:8080"}) is None
    assert calibrated_window({**gw_a, "ANTHROPIC_MODEL": "claude-sonnet-5"}) is None
    assert calibrated_window({**env, "ANTHROPIC_MODEL": "claude-opus-5"}) is None  # no base url = 'default'
    only_opus = {**env, "ANTHROPIC_BASE_URL": "http://gw-a:8080", "ANTHROPIC_DEFAULT_OPUS_MODEL": "claude-opus-5"}
    assert calibrated_window(only_opus) == 174_000


def test_calibration_key_keeps_no_credentials(env: dict[str, str]) -> None:
    secret = {**env, "ANTHROPIC_BASE_URL": "https://user:s3cret@gw.example.com:8443/v1?key=s3cret#frag"}
    remember_overflow(150_000, secret)
    assert calibration_key(secret) == "https://gw.example.com:8443/v1|"
    assert "s3cret" not in calibration_path(secret).read_text(encoding="utf-8")
    assert calibrated_window(secret) == 150_000
    plain = {**env, "ANTHROPIC_BASE_URL": "http://127.0.0.1:8080/", "ANTHROPIC_MODEL": "m"}
    assert calibration_key(plain) == "http://127.0.0.1:8080/|m"
    assert calibration_key({}) == "default|"


def test_explicit_window_beats_everything(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_MODEL", raising=False)
    monkeypatch.delenv("ANTHROPIC_DEFAULT_OPUS_MODEL", raising=False)
    monkeypatch.setenv("FLOWER_WINDOW", "300000")
    remember_overflow(174_000)
    assert HandoffPolicy().window == 300_000
    assert HandoffPolicy(window=64_000).window == 64_000
    monkeypatch.delenv("FLOWER_WINDOW")
    assert HandoffPolicy().window == 174_000


def test_calibration_is_best_effort(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x", encoding="utf-8")
    env = {"XDG_CONFIG_HOME": str(blocker)}
    remember_overflow(100_000, env)  # cannot write: no exception
    assert calibrated_window(env) is None
    good = {"XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    path = calibration_path(good)
    path.parent.mkdir(parents=True)
    for garbage in ("{not json", "[1, 2]", '{"default|": "big"}', '{"default|": true}', '{"default|": -4}'):
        path.write_text(garbage, encoding="utf-8")
        assert calibrated_window(good) is None
        assert default_window(good) == 1_000_000
    remember_overflow(90_000, good)
    assert calibrated_window(good) == 90_000


# --- [7d] model mismatch ----------------------------------------------------------------------


def test_model_mismatch() -> None:
    text = model_mismatch("claude-opus-5[1m]", "claude-opus-5")
    assert text is not None
    assert "claude-opus-5[1m]" in text and "claude-opus-5" in text and "FLOWER_WINDOW" in text
    assert "--window" in text
    assert model_mismatch("Claude-Opus-5", "claude-opus-5") is None
    assert model_mismatch("", "claude-opus-5") is None
    assert model_mismatch("claude-opus-5", "") is None


# --- runaway errors ---------------------------------------------------------------------------


def test_runaway_errors() -> None:
    policy = HandoffPolicy(window=40_000, headroom=25_000)
    cap = generation_cap_error(8, policy)
    assert "8" in cap and "15000" in cap and "40000" in cap and "--no-handoff" in cap and "--window" in cap
    # Reaching the cap means each successor filled its own context; a start-up above the line stops
    # earlier with its own cause (issue 13: the cap blamed the start-up when one read was the cause).
    assert "启动" not in cap and "起步" not in cap and not is_context_stop(cap)
    streak = degraded_streak_error(2, policy)
    for word in ("降级", "烧钱", "窗口", "余量", "40000", "15000", "25000", "--window", "headroom"):
        assert word in streak


# --- the prompt -------------------------------------------------------------------------------


@pytest.mark.parametrize("lang", ["zh", "en"])
@pytest.mark.parametrize(
    "stop",
    [
        ContextStop(RESULT_TOO_BIG, line=10_000, window=40_000, floor=4_900, result=7_512, tool="Read"),
        ContextStop(RESULT_TOO_BIG, line=10_000, window=40_000, floor=0, result=99_000),
        ContextStop(WINDOW_TOO_SMALL, line=10_000, window=40_000, floor=12_345),
    ],
)
def test_context_stop_round_trips_through_its_error_text(stop: ContextStop, lang: str) -> None:
    """The error text is the phrase in the runtime's language; either reads back as the same stop."""
    text = stop.error(lang)
    assert ContextStop.parse(text) == stop and is_context_stop(text)
    assert str(stop.line) in text and str(stop.window) in text and str(stop.floor) in text
    assert "--window" in text
    if stop.cause == WINDOW_TOO_SMALL:
        assert "--no-handoff" in text and "Read" not in text
    else:
        assert "offset/limit" in text and str(stop.result) in text


def test_a_stop_text_with_its_command_spelled_two_ways_is_not_a_stop() -> None:
    """The window phrase names the command twice; a text where the two differ was not made by it."""
    text = ContextStop(WINDOW_TOO_SMALL, line=10_000, window=40_000, floor=12_345).error("en")
    assert text.count(STOP_CMD + " ") == 2
    assert ContextStop.parse(text.replace(STOP_CMD + " ", "other ", 1)) is None


@pytest.mark.parametrize("text", [None, "", "context-full-handoff", generation_cap_error(8, HandoffPolicy())])
def test_other_errors_are_not_context_stops(text: str | None) -> None:
    assert ContextStop.parse(text) is None and not is_context_stop(text)


def test_handoff_prompt() -> None:
    assert set(re.findall(r"\{(\w+)\}", HANDOFF_PROMPT)) == {"used", "window"}
    for heading in SECTIONS.values():
        assert f"\n## {heading}\n" in HANDOFF_PROMPT
    assert "(暂无)" in HANDOFF_PROMPT and "notes/" in HANDOFF_PROMPT
    text = handoff_prompt(150_230, 200_000)
    assert "150.2K" in text and "200K" in text and "{" not in text


# --- [8] paths and archive --------------------------------------------------------------------


def test_handoff_path_is_stable_and_archives(tmp_path: Path) -> None:
    rd = RunDir.at(tmp_path)
    notes, archive = rd.notes, rd.handoffs_archive
    assert archive == tmp_path / ".flower" / "notes" / "archive" / "交接"  # the original runtime's names
    first = handoff_path(notes, "干活", archive=archive)
    assert first == notes / "交接-干活.md"
    assert handoff_path(notes, "干活", archive=archive) == first  # nothing there yet: nothing archived
    assert not (notes / "archive").exists()
    first.parent.mkdir(parents=True)
    for generation in range(3):
        first.write_text(f"第 {generation} 代", encoding="utf-8")
        assert handoff_path(notes, "干活", archive=archive) == first
        assert not first.exists()
    archived = sorted((notes / "archive" / "交接").glob("干活-*.md"))
    assert len(archived) == 3  # three moves in (probably) one second: no overwrite
    assert sorted(p.read_text(encoding="utf-8") for p in archived) == ["第 0 代", "第 1 代", "第 2 代"]
    assert all(re.fullmatch(r"干活-\d{8}-\d{6}(-\d+)?\.md", p.name) for p in archived)


@pytest.mark.parametrize(
    ("step", "safe"),
    [
        ("干活", "干活"),
        ("a/b:c", "abc"),
        ('x\\y*z?"<>|', "xyz"),
        ("  干活·判定#1 ", "干活·判定#1"),
        ("/:*", "step"),
        ("", "step"),
    ],
)
def test_safe_step(tmp_path: Path, step: str, safe: str) -> None:
    assert safe_step(step) == safe
    path = handoff_path(tmp_path, step, archive=tmp_path / "archive")
    assert path.parent == tmp_path and path.name == f"交接-{safe}.md"


# --- [11] overflow ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "prompt is too long: 1012345 tokens > 1000000 maximum",
        "API Error: 400 Prompt is too long",
        "context_length_exceeded",
        "Context length exceeded",
        "This model's maximum context length is 200000 tokens",
        "input length and max_tokens exceed context limit: 190000 + 32000 > 200000",
        "input length and `max_tokens` exceed context limit",
        "input length and `max_tokens` exceed 200000",
        "the request exceeds the context window",
        "Request exceeds context limit",
        "too many total text bytes",
    ],
)
def test_is_overflow_true(text: str) -> None:
    assert is_overflow(text)
    assert is_overflow(None, "", text)


@pytest.mark.parametrize(
    "texts",
    [
        ("Connection reset by peer (ECONNRESET)",),
        (None,),
        ("",),
        (),
        ("API Error: 400 messages: bad thing", "529 Overloaded"),
        ("the context is growing",),
    ],
)
def test_is_overflow_false(texts: tuple[str | None, ...]) -> None:
    assert not is_overflow(*texts)


# --- the section reader itself ----------------------------------------------------------------


def test_strip_fences() -> None:
    assert strip_fences("a\n```\n## x\n```\nb") == "a\nb"
    assert strip_fences("a\n~~~py\n## x\n~~~\nb") == "a\nb"
    assert strip_fences("a\n````\n```\n## x\n````\nb") == "a\nb"  # a shorter fence does not close
    assert strip_fences("a\n```\n## x\n~~~\nb") == "a"  # unclosed: the rest is gone
    assert strip_fences("a\n```\n## x\n``` trailing\nb") == "a"  # a closing fence has nothing after it


def test_read_sections_other_heading_ends_a_section() -> None:
    aliases = {"现在在做什么": "doing", "下一步": "next"}
    text = "## 现在在做什么\n写解析器\n### 细节\n分两步\n## 备注\n不是交接的一部分\n## 下一步\n补测试"
    assert read_sections(text, aliases) == {"doing": "写解析器\n### 细节\n分两步", "next": "补测试"}
