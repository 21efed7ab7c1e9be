"""需求.md: parsing (aliases, decorations, fences, duplicates), writing, loading, appending; other
encodings and headings a person uses; never replacing what a person wrote."""

from __future__ import annotations

import codecs
import os
import re
import stat
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flower_magic.core import brief as brief_note
from flower_magic.core.brief import (
    ALIASES,
    RUNTIME_LABEL,
    WAKE_LABEL,
    Brief,
    append_section,
)
from flower_magic.core.note import record_path

FULL = Brief(goal="写一个 md 转 html 的脚本", accept="pytest 全绿", bounds="不做 GUI", unknowns="假设只要 CommonMark")

CANONICAL = """# 需求确认书

## 目标
写一个 md 转 html 的脚本

## 验收标准
pytest 全绿

## 边界
不做 GUI

## 未知与假设
假设只要 CommonMark
"""


def test_parse_canonical() -> None:
    brief = Brief.parse(CANONICAL)
    assert brief == FULL
    assert brief.complete() and brief.missing() == []


@pytest.mark.parametrize(
    ("heading", "field"),
    [
        ("未知与假设", "unknowns"),
        ("未知项与假设", "unknowns"),
        ("未知项", "unknowns"),
        ("已知未知", "unknowns"),
        ("假设", "unknowns"),
        ("未知", "unknowns"),
        ("范围边界", "bounds"),
        ("不做什么", "bounds"),
        ("边界", "bounds"),
        ("验收标准", "accept"),
        ("验收条件", "accept"),
        ("验收", "accept"),
        ("目标", "goal"),
    ],
)
def test_every_alias(heading: str, field: str) -> None:
    brief = Brief.parse(f"## {heading}\n内容\n")
    assert getattr(brief, field) == "内容"
    assert sum(bool(getattr(brief, f)) for f in ("goal", "accept", "bounds", "unknowns")) == 1
    assert ALIASES[heading] == field


def test_longest_alias_wins() -> None:
    """未知与假设 must not be read as 未知 followed by a body "与假设"."""
    assert Brief.parse("## 未知与假设\n有一个").unknowns == "有一个"
    assert Brief.parse("**未知项与假设**:有一个").unknowns == "有一个"
    assert Brief.parse("## 验收标准\n全绿").accept == "全绿"


@pytest.mark.parametrize(
    "line",
    [
        "# 验收标准",
        "## 验收标准",
        "###### 验收标准",
        "##验收标准",
        "  ## 验收标准",
        "## 验收标准 ##",
        "**验收标准**",
        "__验收标准__",
        "## **验收标准**",
        "2. 验收标准",
        "2、验收标准",
        "2) 验收标准",
        "2）验收标准",
        "## 2. 验收标准",
        "**2. 验收标准**",
        "2. **验收标准**",
        "验收标准:",
        "验收标准：",
        "验收标准",
        "## 验收标准:",
        "**验收标准**:",
        "**验收标准:**",
        "**验收标准：**",
        "## 验收标准(必须能自动检查)",
        "## 验收标准（必须能自动检查）",
    ],
)
def test_heading_decorations(line: str) -> None:
    assert Brief.parse(f"{line}\npytest 全绿\n").accept == "pytest 全绿"


@pytest.mark.parametrize(
    ("line", "body"),
    [
        ("验收标准:pytest 全绿", "pytest 全绿"),
        ("验收标准： pytest 全绿", "pytest 全绿"),
        ("## 验收标准:pytest 全绿", "pytest 全绿"),
        ("## 验收标准 pytest 全绿", "pytest 全绿"),
        ("**验收标准**:pytest 全绿", "pytest 全绿"),
        ("**验收标准:** pytest 全绿", "pytest 全绿"),
        ("**验收标准:pytest 全绿**", "pytest 全绿"),
        ("**验收标准** pytest 全绿", "pytest 全绿"),
        ("3. 验收标准:pytest 全绿", "pytest 全绿"),
    ],
)
def test_body_on_the_heading_line(line: str, body: str) -> None:
    assert Brief.parse(line).accept == body
    assert Brief.parse(f"{line}\n第二行").accept == f"{body}\n第二行"


@pytest.mark.parametrize(
    "text",
    [
        "目标是写一个脚本",  # a sentence that starts with a heading word
        "目标 写一个脚本",  # no decoration and no colon: a sentence
        "## 目标用户\n程序员",  # another heading that starts with a heading word
        "**目标说明**\n写一个脚本",
        "- 目标:写一个脚本",  # a list item, not a heading
        "> ## 目标\n写一个脚本",  # a quote
    ],
)
def test_not_a_heading(text: str) -> None:
    assert Brief.parse(text).goal == ""


def test_fenced_blocks_are_ignored() -> None:
    text = CANONICAL.replace(
        "## 边界\n不做 GUI",
        "## 边界\n不做 GUI\n```markdown\n## 目标\n假目标\n## 验收标准\n假标准\n```\n~~~\n## 边界\n假边界\n~~~",
    )
    assert Brief.parse(text) == FULL


def test_fence_before_the_first_heading() -> None:
    text = "```\n## 目标\n示例里的目标\n```\n" + CANONICAL
    assert Brief.parse(text) == FULL


def test_unclosed_fence_discards_the_rest() -> None:
    text = "## 目标\n写脚本\n\n```python\nprint(1)\n## 验收标准\n全绿\n## 边界\n不做 GUI\n"
    brief = Brief.parse(text)
    assert brief == Brief(goal="写脚本")
    assert brief.missing() == ["验收标准", "边界", "未知与假设"]


def test_first_non_empty_duplicate_wins() -> None:
    text = "## 目标\n\n## 目标\n第一个\n## 目标\n第二个\n## 验收\n(未填)\n## 验收标准\n全绿\n## 验收条件\n别的"
    brief = Brief.parse(text)
    assert brief.goal == "第一个"
    assert brief.accept == "全绿"


def test_body_cleaning() -> None:
    text = "## 目标\n第一段\n\n\n\n\n第二段   \n---\n***\n- - -\n___\n第三段\n\n## 边界\n   \n\n不做 GUI\n\n\n"
    brief = Brief.parse(text)
    assert brief.goal == "第一段\n\n第二段\n第三段"
    assert brief.bounds == "不做 GUI"


def test_lists_in_bodies_survive() -> None:
    brief = Brief.parse("## 验收标准\n- pytest 全绿\n- ruff 干净\n1. 有 README\n")
    assert brief.accept == "- pytest 全绿\n- ruff 干净\n1. 有 README"


def test_deeper_headings_stay_in_the_body_and_others_end_it() -> None:
    text = "## 目标\n写脚本\n### 细节\n支持表格\n## 备注\n不属于任何一段\n# 附录\n也不属于"
    assert Brief.parse(text).goal == "写脚本\n### 细节\n支持表格"
    assert Brief.parse("**目标**\n写脚本\n## 备注\n不属于").goal == "写脚本"


def test_appended_sections_do_not_disturb_the_parse(tmp_path: Path) -> None:
    path = tmp_path / "需求.md"
    FULL.write(path)
    append_section(path, WAKE_LABEL, "顺便支持代码块高亮", now=datetime(2026, 1, 2, 3, 4, 5))
    append_section(path, RUNTIME_LABEL, "## 目标\n换个目标", now=datetime(2026, 1, 2, 3, 4, 6))
    assert Brief.load(path) == FULL
    assert "\n## 唤醒时追加(03:04:05)\n顺便支持代码块高亮\n" in path.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "随便写的一段话,没有任何标题。",
        "\x00\x01\x02 garbage \ufffd\ufffd",
        "## 目标\n(未填)\n## 验收标准\n(未填)\n## 边界\n(未填)\n## 未知与假设\n(未填)",
        "# 需求确认书\n\n> 由 clarify 步骤生成",
        "## 目标\n写脚本\n## 验收标准\n全绿\n## 边界\n不做 GUI",  # three of four
    ],
)
def test_incomplete(text: str) -> None:
    assert not Brief.parse(text).complete()


def test_missing_names_in_order() -> None:
    assert Brief().missing() == ["目标", "验收标准", "边界", "未知与假设"]
    assert Brief(goal="x", bounds="  ").missing() == ["验收标准", "边界", "未知与假设"]
    assert Brief(goal="a", accept="b", bounds="c", unknowns="d").missing() == []


def test_to_markdown_format() -> None:
    text = Brief(goal="写脚本", bounds="不做 GUI").to_markdown()
    assert text.splitlines()[:5] == [
        "# 需求确认书",
        "",
        "> 由 clarify 步骤生成并**冻结**。要改需求就改这个文件;",
        "> 想重新确认一遍,删掉它再跑。",
        "",
    ]
    assert "## 目标\n\n写脚本\n\n## 验收标准\n\n(未填)\n\n## 边界\n\n不做 GUI\n\n## 未知与假设\n\n(未填)\n" in text
    assert text.endswith("(未填)\n")


def test_write_and_load(tmp_path: Path) -> None:
    path = tmp_path / "notes" / "需求.md"
    FULL.write(path)
    assert Brief.load(path) == FULL
    assert Brief.load(path).complete()  # type: ignore[union-attr]
    Brief(goal="只有目标").write(path)
    assert Brief.load(path) == Brief(goal="只有目标")
    # no temp file left; the record of what flower wrote sits beside it
    assert sorted(p.name for p in path.parent.iterdir()) == [".需求.md.flower.json", "需求.md"]


def test_load_missing_unreadable_undecodable(tmp_path: Path) -> None:
    assert Brief.load(tmp_path / "nope.md") is None
    assert Brief.load(tmp_path) is None  # a directory
    bad = tmp_path / "bad.md"
    bad.write_bytes(b"## \xe7\x9b\xae\xe6\xa0\x87\n\xff\xfe\xfd not utf-8")
    assert Brief.load(bad) is None
    garbled = tmp_path / "garbled.md"
    garbled.write_bytes(os.urandom(0) + "噪声 ### ``` ## 目".encode())
    loaded = Brief.load(garbled)
    assert loaded is not None and not loaded.complete()


def test_prompt_block() -> None:
    assert FULL.prompt_block() == (
        "## 目标\n写一个 md 转 html 的脚本\n\n## 验收标准\npytest 全绿\n\n"
        "## 边界\n不做 GUI\n\n## 未知与假设\n假设只要 CommonMark"
    )
    assert Brief(accept="全绿", unknowns=" ").prompt_block() == "## 验收标准\n全绿"
    assert Brief().prompt_block() == ""


def test_append_section_creates_the_file_with_a_title(tmp_path: Path) -> None:
    path = tmp_path / "notes" / "需求.md"
    append_section(path, RUNTIME_LABEL, "加一条:支持表格", now=datetime(2026, 5, 6, 7, 8, 9))
    assert path.read_text(encoding="utf-8") == "# 运行中的补充\n\n## 运行中补充(07:08:09)\n加一条:支持表格\n"
    append_section(path, WAKE_LABEL, "再加一条", now=datetime(2026, 5, 6, 23, 59, 0))
    assert path.read_text(encoding="utf-8") == (
        "# 运行中的补充\n\n## 运行中补充(07:08:09)\n加一条:支持表格\n\n## 唤醒时追加(23:59:00)\n再加一条\n"
    )


def test_append_section_only_appends(tmp_path: Path) -> None:
    path = tmp_path / "需求.md"
    original = FULL.to_markdown().encode("utf-8") + b"no trailing newline"
    path.write_bytes(original)
    append_section(path, WAKE_LABEL, "顺便支持代码块高亮")
    data = path.read_bytes()
    assert data.startswith(original)
    assert b"# \xe8\xbf\x90" not in data[len(original) :]  # no "# 运行中的补充" title on an existing file
    assert re.fullmatch(r"\n## 唤醒时追加\(\d\d:\d\d:\d\d\)\n顺便支持代码块高亮\n", data[len(original) :].decode())


# --- property: to_markdown -> parse is the identity -------------------------------------------

_ALPHABET = "目标验收标准边界未知与假设项范围不做什么条件已知写一个脚本支持表格 abcXY0123456789.,、()（）!?-+>|"
_HEADING_WORD_RE = re.compile(
    r"^\s*(?:\d{1,3}\s*[.、)）]\s*)?(?:" + "|".join(sorted(ALIASES, key=len, reverse=True)) + ")"
)
_RULE_RE = re.compile(r"^\s*-(?:\s*-){2,}\s*$")
PLACEHOLDER_BODIES = {"(未填)", "(空)", "(无)", "(暂无)", "（未填）", "（空）", "（无）", "（暂无）"}


def _plain_line(line: str) -> bool:
    return not _HEADING_WORD_RE.match(line) and not _RULE_RE.match(line)


lines = st.text(_ALPHABET, min_size=1, max_size=24).map(str.strip).filter(bool).filter(_plain_line)
bodies = (
    st.lists(st.one_of(lines, st.just("")), max_size=6)
    .map("\n".join)
    .filter(lambda b: b == b.strip() and "\n\n\n" not in b and b not in PLACEHOLDER_BODIES)
)


@settings(database=None, max_examples=150, deadline=None)
@given(goal=bodies, accept=bodies, bounds=bodies, unknowns=bodies)
def test_round_trip(goal: str, accept: str, bounds: str, unknowns: str) -> None:
    brief = Brief(goal=goal, accept=accept, bounds=bounds, unknowns=unknowns)
    assert Brief.parse(brief.to_markdown()) == brief


def test_a_fifo_under_the_brief_name_does_not_hang(tmp_path: Path) -> None:
    """Regression: Path.read_text on a FIFO blocks forever; a run must not."""
    import os

    fifo = tmp_path / "需求.md"
    os.mkfifo(fifo)
    assert Brief.load(fifo) is None


# --- what a person does to the file: other encodings, other headings --------------------------


@pytest.mark.parametrize(
    "data",
    [
        CANONICAL.encode("utf-8-sig"),  # Notepad's "UTF-8 with BOM"
        CANONICAL.encode("utf-16"),  # a BOM, then little-endian (Notepad's "Unicode")
        codecs.BOM_UTF16_BE + CANONICAL.encode("utf-16-be"),
        CANONICAL.encode("gb18030"),  # an editor set to GBK / GB18030
        CANONICAL.encode("gbk"),
        CANONICAL.replace("\n", "\r\n").encode("gb18030"),  # and Windows line ends
    ],
)
def test_load_reads_what_editors_save(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "需求.md"
    path.write_bytes(data)
    assert Brief.load(path) == FULL


@pytest.mark.parametrize(
    "data",
    [
        CANONICAL.encode("utf-16-le"),  # no BOM: NULs between ASCII bytes, no way to tell it from binary
        b"\x00\x01\x02\x03 binary \x00",
        b"\xff\xfe## \xe7\x9b\xae\n\x00\x00",  # a UTF-16 BOM that is not UTF-16 text
    ],
)
def test_load_refuses_what_is_not_text(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "需求.md"
    path.write_bytes(data)
    assert Brief.load(path) is None


@pytest.mark.parametrize(
    ("heading", "field"),
    [
        ("## Goal", "goal"),
        ("# Goals", "goal"),
        ("### Objective", "goal"),
        ("## Acceptance criteria", "accept"),
        ("## acceptance CRITERIA", "accept"),
        ("##   Acceptance    criteria  ", "accept"),
        ("## Acceptance", "accept"),
        ("**Acceptance criteria**:", "accept"),
        ("2. Acceptance criteria", "accept"),
        ("## Definition of done", "accept"),
        ("## Scope", "bounds"),
        ("## Out of scope", "bounds"),
        ("## Non-goals", "bounds"),
        ("## Unknowns", "unknowns"),
        ("## Assumptions", "unknowns"),
        ("## Unknowns and assumptions", "unknowns"),
        ("## Unknowns & Assumptions:", "unknowns"),
        ("## Open questions", "unknowns"),
        ("＃＃ 验收标准", "accept"),  # full-width hashes from an IME
        ("##\u3000验收标准", "accept"),  # an ideographic space
        ("##\t验收标准", "accept"),
        ("## 验收标准\u3000", "accept"),
        ("**验收标准**：", "accept"),
        ("１．验收标准", "accept"),  # full-width numbering
        ("## 未知和假设", "unknowns"),
    ],
)
def test_heading_variants_a_person_types(heading: str, field: str) -> None:
    brief = Brief.parse(f"{heading}\n内容 body\n")
    assert getattr(brief, field) == "内容 body"
    assert sum(bool(getattr(brief, f)) for f in ("goal", "accept", "bounds", "unknowns")) == 1


@pytest.mark.parametrize(
    "text",
    [
        "## Scope creep\n内容",  # words run on after an English alias: another heading
        "## Goal setting\n内容",
        "Goals are nice\n内容",  # a sentence
        "## Goalkeeper\n内容",
        "- Goal: 内容",  # a list item
    ],
)
def test_english_words_that_are_not_headings(text: str) -> None:
    assert Brief.parse(text) == Brief()


def test_an_english_brief_is_complete() -> None:
    text = (
        "# Brief\n\n## Goal\nA md2html script.\n\n### Acceptance Criteria\n- `python md2html.py a.md` writes a.html\n\n"
        "## Out of scope\nNo GUI.\n\n## Unknowns / assumptions\nCommonMark only.\n"
    )
    brief = Brief.parse(text)
    assert brief.complete()
    assert brief.accept == "- `python md2html.py a.md` writes a.html"
    assert brief.unknowns == "CommonMark only."


def test_a_body_keeps_its_full_width_characters() -> None:
    """Headings are matched on half-width forms; the body after one is the person's, unchanged."""
    assert Brief.parse("＃＃ 验收标准：ｐｙｔｅｓｔ　全绿＃１").accept == "ｐｙｔｅｓｔ　全绿＃１"


# --- never replace what a person wrote ----------------------------------------------------------


def _asides(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.edited-*"))


def test_flower_replaces_its_own_file_without_a_copy(tmp_path: Path) -> None:
    path = tmp_path / "需求.md"
    assert FULL.write(path) is None  # nothing there
    assert brief_note.read(path).is_ours
    append_section(path, WAKE_LABEL, "顺便支持表格")  # flower's append keeps it flower's
    assert brief_note.read(path).is_ours
    assert Brief(goal="别的").write(path) is None
    assert _asides(path) == []


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: t.replace("## 验收标准", "## Acceptance"),  # a renamed heading (still complete)
        lambda t: t.replace("## 边界\n\n不做 GUI\n\n", ""),  # a removed section
        lambda t: t.replace("pytest 全绿", "pytest 全绿,覆盖率 90%"),  # a changed body
    ],
)
def test_a_person_edit_is_kept_byte_for_byte_before_flower_writes(tmp_path: Path, edit: Any) -> None:
    path = tmp_path / "需求.md"
    FULL.write(path)
    edited = edit(path.read_text(encoding="utf-8")).encode("utf-8")
    path.write_bytes(edited)
    now = brief_note.read(path)
    assert now.is_edited and now.is_news and not now.is_ours
    aside = FULL.write(path)
    assert aside is not None and aside.name.startswith("需求.md.edited-")
    assert aside.read_bytes() == edited
    assert _asides(path) == [aside]
    assert path.read_bytes() == FULL.to_markdown().encode("utf-8")
    assert brief_note.read(path).is_ours


@pytest.mark.parametrize("encoding", ["gb18030", "utf-16"])
def test_a_file_resaved_in_another_encoding_is_a_person_edit(tmp_path: Path, encoding: str) -> None:
    """The text is flower's, the bytes are the editor's: keep them (the person chose that encoding)."""
    path = tmp_path / "需求.md"
    FULL.write(path)
    resaved = path.read_text(encoding="utf-8").encode(encoding)
    path.write_bytes(resaved)
    now = brief_note.read(path)
    assert now.is_edited and now.text is not None and Brief.parse(now.text) == FULL
    aside = Brief(goal="新的").write(path)
    assert aside is not None and aside.read_bytes() == resaved


def test_appending_to_a_resaved_file_keeps_its_encoding(tmp_path: Path) -> None:
    for encoding in ("gb18030", "utf-16", "utf-8-sig"):
        path = tmp_path / encoding / "需求.md"
        path.parent.mkdir()
        path.write_bytes(CANONICAL.encode(encoding))
        append_section(path, WAKE_LABEL, "顺便支持表格", now=datetime(2026, 1, 2, 3, 4, 5))
        data = path.read_bytes()
        assert data.startswith(CANONICAL.encode(encoding))
        assert data.decode(encoding) == CANONICAL + "\n## 唤醒时追加(03:04:05)\n顺便支持表格\n"
        assert Brief.load(path) == FULL


def test_without_a_record_flower_own_is_what_renders_as_itself(tmp_path: Path) -> None:
    """A 需求.md from 0.1 or the original runtime (no record beside it): its own rendering is flower's,
    anything else a person's."""
    path = tmp_path / "需求.md"
    path.write_text(FULL.to_markdown() + "\n## 唤醒时追加(01:02:03)\n顺便支持表格\n", encoding="utf-8")
    assert brief_note.read(path).is_ours
    assert Brief(goal="别的").write(path) is None
    record_path(path).unlink()
    path.write_text(CANONICAL, encoding="utf-8")  # a hand-written brief: not flower's layout
    assert brief_note.read(path).is_edited
    assert Brief(goal="别的").write(path) is not None


def test_seen_is_per_version(tmp_path: Path) -> None:
    path = tmp_path / "需求.md"
    FULL.write(path)
    path.write_text(CANONICAL.replace("不做 GUI", "不做 GUI,也不做 CLI"), encoding="utf-8")
    brief_note.read(path).mark_seen()
    assert brief_note.read(path).is_edited and not brief_note.read(path).is_news
    append_section(path, WAKE_LABEL, "顺便支持表格")  # flower's append keeps a seen version seen
    assert not brief_note.read(path).is_news and brief_note.read(path).is_edited
    path.write_text(CANONICAL, encoding="utf-8")  # the person edits again: news again
    assert brief_note.read(path).is_news


def test_something_unreadable_under_the_name_is_moved_aside_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / "需求.md"
    os.mkfifo(path)
    aside = FULL.write(path)
    assert aside is not None and stat.S_ISFIFO(aside.lstat().st_mode)
    assert Brief.load(path) == FULL


def test_no_copy_no_write(tmp_path: Path) -> None:
    """When the person's version cannot be kept, flower does not write either. (The copy's name is
    made too long for the filesystem, which fails the same way every time; a test that took every free
    name raced the clock.)"""
    path = tmp_path / ("长" * 80 + ".md")  # 243 bytes: fits, but "<name>.edited-<ts>" does not (255)
    path.write_text(CANONICAL + "\n我加的一行:这是人写的\n", encoding="utf-8")  # a person's edit
    before = path.read_bytes()
    with pytest.raises(OSError):
        Brief(goal="别的").write(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


# --- property: whatever a person and flower do, in any order, every person's version survives ----

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from(["一", "二"])),
        st.tuples(
            st.just("edit"), st.text(_ALPHABET + "\n#", max_size=40), st.sampled_from(["utf-8", "gb18030", "utf-16"])
        ),
        st.tuples(st.just("append"), lines),
        st.tuples(st.just("seen"), st.just("")),
    ),
    max_size=12,
)


@settings(database=None, max_examples=120, deadline=None)
@given(ops=_ops)
def test_no_person_version_is_ever_lost(ops: list[tuple[str, ...]]) -> None:
    """After every operation: each version a person saved that flower then replaced is still on disk,
    byte for byte; one flower appended to is still the start of the file; and the file is flower's
    exactly when flower wrote last."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "需求.md"
        replaced: list[bytes] = []  # person's versions flower wrote over: each must be kept somewhere
        flower_wrote: bytes | None = None
        owner = "nobody"
        for op in ops:
            before = path.read_bytes() if path.exists() else b""
            if op[0] == "write":
                Brief(goal=op[1], accept="a", bounds="b", unknowns="c").write(path)
                if owner == "person":
                    replaced.append(before)
                owner, flower_wrote = "flower", path.read_bytes()
            elif op[0] == "edit":
                data = op[1].encode(op[2])
                path.write_bytes(data)
                owner = "flower" if data == flower_wrote else "person"
            elif op[0] == "append":
                append_section(path, WAKE_LABEL, op[1])
                assert path.read_bytes().startswith(before)
                owner = "flower" if owner == "nobody" else owner
                flower_wrote = path.read_bytes() if owner == "flower" else flower_wrote
            else:
                brief_note.read(path).mark_seen()
            kept = [p.read_bytes() for p in path.parent.glob("需求.md.edited-*")]
            assert all(data in kept for data in replaced)
            assert brief_note.read(path).is_ours == (owner != "person")


def test_remarks_are_the_appended_sections_in_order() -> None:
    from flower_magic.core.brief import RUNTIME_LABEL, WAKE_LABEL, remarks

    text = (
        "# 需求确认书\n\n## 目标\n做 X\n\n"
        f"## {WAKE_LABEL}(10:00:01)\n先说的\n\n"
        f"## {RUNTIME_LABEL}(10:00:02)\n后说的\n第二行\n\n"
        f"## {WAKE_LABEL}(10:00:03)\n\n"
    )
    assert remarks(text) == ["先说的", "后说的\n第二行"]
    assert remarks("# 需求确认书\n\n## 目标\n做 X\n") == []
