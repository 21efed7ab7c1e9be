"""Verdict.parse (sections, bare answers, state words longest first) and feedback()."""

from __future__ import annotations

import pytest

from flower_magic.workflow.verdict import ACHIEVED, NOT_YET, UNREACHABLE, Verdict

FULL = """逐条看过了现场。

## 结论
未达成

## 理由
表格渲染没做,README 里的表格原样输出。

## 未通过
- tests/ 下 pytest 全绿
- 支持表格
"""


def test_full_verdict() -> None:
    v = Verdict.parse(FULL)
    assert v.state == NOT_YET and not v.ok
    assert v.reason == "表格渲染没做,README 里的表格原样输出。"
    assert v.failed == ["tests/ 下 pytest 全绿", "支持表格"]


@pytest.mark.parametrize(
    ("text", "state"),
    [
        # goal_offline [1]
        ("结论:达成", ACHIEVED),
        ("结论:未达成", NOT_YET),
        ("# 结论\n无法达成", UNREACHABLE),
        ("1", ACHIEVED),
        ("0", NOT_YET),
        # bare answers
        (" TRUE ", ACHIEVED),
        ("false\n", NOT_YET),
        # the conclusion section, decorated and aliased
        ("## 结论\n达成", ACHIEVED),
        ("**结论**:已达成", ACHIEVED),
        ("## 判定\n未达成", NOT_YET),
        ("结论：没达成", NOT_YET),
        ("## 结论\n尚未达成,还差两项", NOT_YET),
        ("## 结论\n不可达成", UNREACHABLE),
        ("## 结论\n此环境无法验证", UNREACHABLE),
        ("## 结论\n1", ACHIEVED),
        ("## 结论\n0", NOT_YET),
        ("## 结论\nachieved", ACHIEVED),
        ("## 结论\nNOT_YET", NOT_YET),
        # the conclusion wins over words elsewhere in the reply
        ("## 结论\n未达成\n## 理由\n大部分已达成", NOT_YET),
        ("## 理由\n没法全部做到\n## 结论\n达成", ACHIEVED),
        ("## 结论\n达成\n## 理由\n之前以为无法达成,现在都过了", ACHIEVED),
        # a fenced example is not the conclusion
        ("```\n## 结论\n达成\n```\n## 结论\n未达成", NOT_YET),
        # no section: the whole text, longest word first
        ("我认为已经达成了", ACHIEVED),
        ("目标未达成", NOT_YET),
        ("这个目标做不到", UNREACHABLE),
        ("尚未达成,但不是做不到", NOT_YET),  # the longer word wins, wherever it stands
        ("要真机,验证不了", UNREACHABLE),
        ("无法判定", UNREACHABLE),
        ("not yet", NOT_YET),
        ("Verdict: achieved", ACHIEVED),
        ("It is impossible here", UNREACHABLE),
        ("yes", ACHIEVED),
        ("no", NOT_YET),
        ("结果:1", ACHIEVED),
        # vague or empty: not achieved
        ("", ""),
        ("看起来还行吧", ""),
        ("unknown", ""),  # "no" inside a word is not "no"
        ("第1条还要再看", ""),  # a digit inside text is not a bare 1
        ("v1.0 做完了", ""),
    ],
)
def test_state(text: str, state: str) -> None:
    v = Verdict.parse(text)
    assert v.state == state
    assert v.ok is (state == ACHIEVED)


def test_vague_text_is_not_ok() -> None:
    """A judge that says nothing clear must never pass the round."""
    v = Verdict.parse("我看了一下,整体感觉还可以,有些地方可以再打磨。")
    assert v.state == "" and not v.ok


@pytest.mark.parametrize(
    ("text", "reason", "failed"),
    [
        ("## 结论\n达成\n## 理由\n都过了\n## 未通过\n(无)", "都过了", []),
        ("## 结论\n达成\n## 依据\n都过了\n## 未通过\n（无）", "都过了", []),
        ("## 结论\n未达成\n## 未通过\n1. a\n2. b", "", ["a", "b"]),
        ("结论:未达成\n理由:少了表格\n未通过:\n- 支持表格", "少了表格", ["支持表格"]),
    ],
)
def test_reason_and_failed(text: str, reason: str, failed: list[str]) -> None:
    v = Verdict.parse(text)
    assert (v.reason, v.failed) == (reason, failed)


def test_feedback() -> None:
    """goal_offline [1]: feedback carries the reason, the failed items and 接着做."""
    text = Verdict.parse(FULL).feedback()
    assert "表格渲染没做,README 里的表格原样输出。" in text
    assert "- tests/ 下 pytest 全绿\n- 支持表格" in text
    assert "接着做" in text
    assert "没有达成目标" in text


def test_feedback_without_reason_or_items() -> None:
    text = Verdict(state=NOT_YET).feedback()
    assert "(没给理由)" in text and "没通过的判定项" not in text and "接着做" in text


def test_defaults() -> None:
    v = Verdict()
    assert (v.state, v.reason, v.failed, v.ok) == ("", "", [], False)
    assert (ACHIEVED, NOT_YET, UNREACHABLE) == ("achieved", "not_yet", "unreachable")
