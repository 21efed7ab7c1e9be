"""The two wake facts the panel shows from ``.flower/notes``: is the brief complete, how many goal checks.

Read-only and forgiving: a missing or unreadable file reads as "no brief" / 0 checks. The parsing
follows the file formats of 需求.md and 目标.md (reference §1.5, §1.6) only as far as these two
facts need; the full parsers live in ``flower_magic.workflow``.
"""

from __future__ import annotations

import re
from pathlib import Path

BRIEF_NAME = "需求.md"
GOAL_NAME = "目标.md"

# Notes are a few KiB; anything far larger is not a note and is not read.
MAX_NOTE_BYTES = 4 * 1024 * 1024

# Heading aliases -> section, longest first so "未知与假设" wins over "未知".
_BRIEF_ALIASES = sorted(
    {
        "未知与假设": "unknowns",
        "未知项与假设": "unknowns",
        "未知项": "unknowns",
        "已知未知": "unknowns",
        "假设": "unknowns",
        "未知": "unknowns",
        "范围边界": "bounds",
        "不做什么": "bounds",
        "边界": "bounds",
        "验收标准": "accept",
        "验收条件": "accept",
        "验收": "accept",
        "目标": "goal",
    }.items(),
    key=lambda kv: -len(kv[0]),
)
_GOAL_ALIASES = sorted(
    {
        "目标": "statement",
        "完成标志": "statement",
        "判定清单": "checks",
        "判定条件": "checks",
        "验收清单": "checks",
        "检查项": "checks",
        "判定": "checks",
    }.items(),
    key=lambda kv: -len(kv[0]),
)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s*(.*?)\s*#*\s*$")
_BOLD = re.compile(r"^\s*(?:\*\*|__)(.+?)(?:\*\*|__)\s*(.*)$")
_NUMBERING = re.compile(r"^\s*\d+\s*[.、)]\s*")
_FENCE = re.compile(r"^\s*(```|~~~)")
_RULE = re.compile(r"^\s*([-*_])(\s*\1){2,}\s*$")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\s*[.、)])\s*")


def _read(path: Path) -> str | None:
    try:
        if path.stat().st_size > MAX_NOTE_BYTES:
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _unfenced(text: str) -> list[str]:
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    # An unclosed fence discards everything from it onward, as the original does.
    return lines


def _heading(line: str, aliases: list[tuple[str, str]]) -> tuple[str, str] | None:
    m = _HEADING.match(line) or _BOLD.match(line)
    if not m:
        return None
    title = _NUMBERING.sub("", m.group(1)).strip()
    rest = m.group(2).strip() if m.re is _BOLD and m.lastindex and m.lastindex >= 2 else ""
    for alias, name in aliases:
        if title.startswith(alias):
            tail = title[len(alias) :].lstrip(":： ").strip()
            if tail and title[len(alias) :][:1] not in (":", "：", " "):
                continue
            return name, (tail + "\n" + rest).strip()
    return None


def _sections(text: str, aliases: list[tuple[str, str]]) -> dict[str, str]:
    """Section -> body; when a section repeats, the first non-empty body wins."""
    bodies: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for line in _unfenced(text):
        hit = _heading(line, aliases)
        if hit is not None:
            current = [hit[1]]
            bodies.append((hit[0], current))
        elif _HEADING.match(line):
            current = None  # another, unrelated section
        elif current is not None and not _RULE.match(line):
            current.append(line)
    found: dict[str, str] = {}
    for name, lines in bodies:
        body = "\n".join(lines).strip()
        if body and not found.get(name):
            found[name] = body
    return found


def brief_complete(path: Path) -> bool:
    """All four sections of 需求.md are non-empty (``(未填)`` counts as empty)."""
    text = _read(path)
    if text is None:
        return False
    sections = _sections(text, _BRIEF_ALIASES)
    return all(sections.get(f, "") not in ("", "(未填)") for f in ("goal", "accept", "bounds", "unknowns"))


def goal_checks(path: Path) -> int:
    """How many checklist items 目标.md holds (0 without the file)."""
    text = _read(path)
    if text is None:
        return 0
    body = _sections(text, _GOAL_ALIASES).get("checks", "")
    items = [_ITEM.sub("", line).strip() for line in body.splitlines()]
    return sum(1 for item in items if item and item != "(空)")
