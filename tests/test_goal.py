"""目标.md: statement + checklist, aliases, the unverifiable marker, amend, write and load; other
encodings and headings a person uses; never replacing what a person wrote."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flower_magic.core import goal as goal_note
from flower_magic.core.goal import ALIASES, Goal, list_items
from flower_magic.core.note import record_path

GOAL_TEXT = """好的,目标如下。

# 目标
md2html.py 能把 README.md 转成 html

# 判定清单
- 运行 python md2html.py README.md 生成 README.html
- tests/ 下 pytest 全绿
"""


def test_parse_complete_goal() -> None:
    """goal_offline [1]: a goal with two checks is complete; one without checks is not."""
    goal = Goal.parse(GOAL_TEXT)
    assert goal.statement == "md2html.py 能把 README.md 转成 html"
    assert goal.checks == ["运行 python md2html.py README.md 生成 README.html", "tests/ 下 pytest 全绿"]
    assert goal.complete()
    assert not Goal.parse("# 目标\n只有目标,没有清单").complete()
    assert not Goal.parse("# 判定清单\n- 只有清单").complete()
    assert not Goal().complete()
    assert not Goal(statement="x", checks=["  "]).complete()


@pytest.mark.parametrize(
    ("text", "statement", "checks"),
    [
        ("## 完成标志\n转成 html\n## 判定条件\n- a", "转成 html", ["a"]),
        ("## 目标\n转成 html\n## 验收清单\n- a", "转成 html", ["a"]),
        ("## 目标\n转成 html\n## 检查项\n- a", "转成 html", ["a"]),
        ("## 目标\n转成 html\n## 判定\n- a", "转成 html", ["a"]),
        ("**目标**:转成 html\n**判定清单**:\n- a\n- b", "转成 html", ["a", "b"]),
        ("1. 目标\n转成 html\n2. 判定清单\n- a", "转成 html", ["a"]),
        ("# 目标\n转成 html\n```\n# 判定清单\n- 假的\n```\n# 判定清单\n- 真的", "转成 html", ["真的"]),
        ("# 目标\n转成 html\n# 判定清单\n(空)", "转成 html", []),
        ("# 目标\n(空)\n# 判定清单\n- a", "", ["a"]),
    ],
)
def test_parse_aliases_fences_placeholders(text: str, statement: str, checks: list[str]) -> None:
    assert Goal.parse(text) == Goal(statement=statement, checks=checks)


@pytest.mark.parametrize(
    ("body", "items"),
    [
        ("- a\n* b\n+ c", ["a", "b", "c"]),
        ("1. a\n2、b\n3) c\n4）d\n10. e", ["a", "b", "c", "d", "e"]),
        ("a\n\n   \nb", ["a", "b"]),
        ("  - 缩进的项  ", ["缩进的项"]),
        ("- [ ] 没勾的\n- [x] 勾了的\n- [X] 也勾了", ["没勾的", "勾了的", "也勾了"]),
        ("- [此环境无法验证:要 GPU] 训练收敛", ["[此环境无法验证:要 GPU] 训练收敛"]),
        ("- - 两层", ["- 两层"]),
        ("1.5 版本兼容", ["1.5 版本兼容"]),
        ("-没有空格", ["-没有空格"]),
        ("**加粗**开头", ["**加粗**开头"]),
        ("", []),
    ],
)
def test_list_items(body: str, items: list[str]) -> None:
    assert list_items(body) == items


def test_unverifiable() -> None:
    goal = Goal(
        statement="训练一个模型",
        checks=[
            "[此环境无法验证:要 GPU] 训练收敛",
            "[ 无法验证 ] 线上延迟",
            "[无法验证：需要真机] 手机上能装",
            "[此环境无法验证]",
            "单元测试全绿",
            "无法验证的说法不带方括号",
        ],
    )
    assert goal.unverifiable == goal.checks[:4]
    assert Goal.parse(goal.to_markdown()).unverifiable == goal.checks[:4]


def test_amend() -> None:
    goal = Goal(statement="转成 html", checks=["a"])
    amended = goal.amend("还要支持表格")
    assert amended.statement == "转成 html\n\n(已修改)还要支持表格"
    assert amended.checks == ["a"] and amended.checks is not goal.checks
    assert goal.statement == "转成 html"  # the original is untouched
    assert Goal.parse(amended.to_markdown()) == amended


def test_to_markdown_format() -> None:
    assert Goal(statement="转成 html", checks=["a", "b"]).to_markdown() == "# 目标\n转成 html\n\n# 判定清单\n- a\n- b\n"
    assert Goal(statement="转成 html").to_markdown() == "# 目标\n转成 html\n\n# 判定清单\n(空)\n"


def test_prompt_block() -> None:
    assert (
        Goal(statement="转成 html", checks=["a", "b"]).prompt_block() == "## 目标\n转成 html\n\n## 判定清单\n- a\n- b"
    )
    assert Goal(statement="转成 html").prompt_block() == "## 目标\n转成 html"


def test_write_and_load(tmp_path: Path) -> None:
    path = tmp_path / "notes" / "目标.md"
    goal = Goal.parse(GOAL_TEXT)
    goal.write(path)
    assert Goal.load(path) == goal
    assert sorted(p.name for p in path.parent.iterdir()) == [".目标.md.flower.json", "目标.md"]


def test_load_missing_unreadable_undecodable(tmp_path: Path) -> None:
    assert Goal.load(tmp_path / "nope.md") is None
    assert Goal.load(tmp_path) is None
    bad = tmp_path / "bad.md"
    bad.write_bytes(b"# \xe7\x9b\xae\xe6\xa0\x87\n\xff\xfe")
    assert Goal.load(bad) is None
    garbled = tmp_path / "garbled.md"
    garbled.write_text("噪声 ``` # 目", encoding="utf-8")
    loaded = Goal.load(garbled)
    assert loaded is not None and not loaded.complete()


# --- what a person does to the file ---------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-be", "gb18030"])
def test_load_reads_what_editors_save(tmp_path: Path, encoding: str) -> None:
    path = tmp_path / "目标.md"
    data = GOAL_TEXT.encode(encoding)
    path.write_bytes(b"\xfe\xff" + data if encoding == "utf-16-be" else data)
    assert Goal.load(path) == Goal.parse(GOAL_TEXT)


@pytest.mark.parametrize(
    ("text", "statement", "checks"),
    [
        ("# Goal\n转成 html\n\n# Checklist\n- a\n- b", "转成 html", ["a", "b"]),
        ("## goals\n转成 html\n## CHECKS\n- a", "转成 html", ["a"]),
        ("## Definition of done\n转成 html\n## Acceptance  criteria\n- a", "转成 html", ["a"]),
        ("### Objective:\n转成 html\n### Criteria:\n1. a", "转成 html", ["a"]),
        ("＃ 目标\n转成 html\n＃　判定清单\n- a", "转成 html", ["a"]),
        ("# 目标\n转成 html\n## 清单\n- a", "转成 html", ["a"]),
    ],
)
def test_heading_variants_a_person_types(text: str, statement: str, checks: list[str]) -> None:
    assert Goal.parse(text) == Goal(statement=statement, checks=checks)


def test_a_person_edit_is_kept_byte_for_byte_before_flower_writes(tmp_path: Path) -> None:
    path = tmp_path / "目标.md"
    goal = Goal.parse(GOAL_TEXT)
    assert goal.write(path) is None
    assert goal_note.read(path).is_ours
    assert Goal(statement="别的", checks=["c"]).write(path) is None  # flower's own: no copy
    edited = path.read_text(encoding="utf-8").replace("# 判定清单", "# Done when").encode("gb18030")
    path.write_bytes(edited)
    assert goal_note.read(path).is_news and not Goal.load(path).complete()  # type: ignore[union-attr]
    aside = goal.write(path)
    assert aside is not None and aside.name.startswith("目标.md.edited-")
    assert aside.read_bytes() == edited
    assert Goal.load(path) == goal and goal_note.read(path).is_ours


def test_without_a_record_flower_own_is_what_renders_as_itself(tmp_path: Path) -> None:
    path = tmp_path / "目标.md"
    path.write_text(Goal.parse(GOAL_TEXT).to_markdown(), encoding="utf-8")  # written by 0.1
    assert not record_path(path).exists() and goal_note.read(path).is_ours
    path.write_text(GOAL_TEXT, encoding="utf-8")  # written by hand
    assert goal_note.read(path).is_edited
    assert Goal(statement="x", checks=["y"]).write(path) is not None


# --- property: to_markdown -> parse is the identity -------------------------------------------

_ALPHABET = "目标完成标志判定清单条件验收检查项写一个脚本支持表格 abcXY0123456789.,、()（）!?-+>|[]"
_HEADING_WORD_RE = re.compile(
    r"^\s*(?:\d{1,3}\s*[.、)）]\s*)?(?:" + "|".join(sorted(ALIASES, key=len, reverse=True)) + ")"
)
_RULE_RE = re.compile(r"^\s*-(?:\s*-){2,}\s*$")
_BOX_RE = re.compile(r"^\[[ xX]\]\s")
PLACEHOLDER_BODIES = {"(未填)", "(空)", "(无)", "(暂无)", "（未填）", "（空）", "（无）", "（暂无）"}


def _plain_line(line: str) -> bool:
    return not _HEADING_WORD_RE.match(line) and not _RULE_RE.match(line)


lines = st.text(_ALPHABET, min_size=1, max_size=24).map(str.strip).filter(bool).filter(_plain_line)
statements = (
    st.lists(st.one_of(lines, st.just("")), max_size=5)
    .map("\n".join)
    .filter(lambda b: b == b.strip() and "\n\n\n" not in b and b not in PLACEHOLDER_BODIES)
)
# A check such as "--" is written as the line "- --", which Markdown reads as a rule, not an item.
checks = st.lists(
    lines.filter(lambda c: not _BOX_RE.match(c) and c not in PLACEHOLDER_BODIES and not _RULE_RE.match(f"- {c}")),
    max_size=6,
)


@settings(database=None, max_examples=150, deadline=None)
@given(statement=statements, items=checks)
def test_round_trip(statement: str, items: list[str]) -> None:
    goal = Goal(statement=statement, checks=items)
    assert Goal.parse(goal.to_markdown()) == goal
