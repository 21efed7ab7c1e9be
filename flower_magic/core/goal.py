"""目标.md: the goal statement and the checklist an independent judge checks every round.

Sections (canonical heading → field): 目标 → ``statement``, 判定清单 → ``checks`` (one item per
line). A check the environment cannot verify carries ``[此环境无法验证:<why>]``; the goal step warns
about those, because the judge can never pass them.

English headings (Goal, Checklist, Checks, Acceptance criteria, …) are read as the same sections.

Guarantees:
    - ``Goal.load`` never raises: a missing, unreadable or undecodable file is None. UTF-8,
      UTF-8/UTF-16 with a BOM and GB18030 are read (``core.note``).
    - ``write`` replaces the file atomically, and never a person's version: a 目标.md whose bytes are
      not what flower last wrote is kept aside first as ``目标.md.edited-<ts>`` (``core.note``).
      With no record of what flower wrote, flower's own is a file that ``renders`` as itself.
    - ``Goal.parse(g.to_markdown()) == g`` for single-line checks without list markers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from flower_magic.core import note
from flower_magic.core.sections import read_sections

ALIASES: dict[str, str] = {
    "目标": "statement",
    "完成标志": "statement",
    "判定清单": "checks",
    "判定条件": "checks",
    "验收清单": "checks",
    "检查项": "checks",
    "判定": "checks",
    "清单": "checks",
    # English, as a person writes them (matched in any case, any spacing)
    "Definition of done": "statement",
    "Objective": "statement",
    "Goals": "statement",
    "Goal": "statement",
    "Acceptance criteria": "checks",
    "Acceptance checks": "checks",
    "Checklist": "checks",
    "Criteria": "checks",
    "Checks": "checks",
}
EMPTY_BODY = "(空)"
AMENDED = "(已修改)"

UNVERIFIABLE_RE = re.compile(r"\[\s*(?:此环境)?无法验证\s*[:：]?")
# "- x", "* x", "+ x", "1. x", "1、x", "1) x", optionally followed by a task-list box "[ ]" / "[x]"
_ITEM_MARK_RE = re.compile(r"^[ \t]*(?:[-*+](?=\s|$)|\d{1,3}[.、)）](?!\d))[ \t]*(?:\[[ xX]\][ \t]+)?")


def list_items(body: str) -> list[str]:
    """One item per non-empty line, with its list marker (``-`` ``*`` ``+`` ``1.`` ``1、`` ``1)``) removed."""
    items = []
    for line in body.splitlines():
        item = _ITEM_MARK_RE.sub("", line, count=1).strip()
        if item:
            items.append(item)
    return items


@dataclass
class Goal:
    """目标.md.

    Attributes:
        statement: what "done" means, in a sentence or two.
        checks: the checklist, each item checkable by looking at the workspace.
    """

    statement: str = ""
    checks: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> Goal:
        """Read a goal out of a model's reply or a 目标.md (see ``read_sections`` for the rules)."""
        found = read_sections(text or "", ALIASES)
        return cls(statement=found.get("statement", ""), checks=list_items(found.get("checks", "")))

    @classmethod
    def load(cls, path: Path) -> Goal | None:
        """Read ``path``; None when it is missing, unreadable, not a regular file or not text."""
        text = note.read_note(path)
        return None if text is None else cls.parse(text)

    def complete(self) -> bool:
        """Whether there is a statement and at least one check."""
        return bool(self.statement.strip()) and any(c.strip() for c in self.checks)

    @property
    def unverifiable(self) -> list[str]:
        """The checks marked as impossible to verify in this environment."""
        return [c for c in self.checks if UNVERIFIABLE_RE.search(c)]

    def amend(self, extra: str) -> Goal:
        """A copy whose statement has ``extra`` added under an ``(已修改)`` mark."""
        return replace(self, statement=f"{self.statement}\n\n{AMENDED}{extra}", checks=list(self.checks))

    def to_markdown(self) -> str:
        """The 目标.md text."""
        checks = "\n".join(f"- {c}" for c in self.checks) or EMPTY_BODY
        return f"# 目标\n{self.statement.strip() or EMPTY_BODY}\n\n# 判定清单\n{checks}\n"

    def write(self, path: Path) -> Path | None:
        """Replace ``path`` with this goal, atomically.

        Returns:
            Where a person's version of the file was kept (``目标.md.edited-<ts>``), or None.

        Raises:
            OSError: the folder cannot be written; the old file is untouched.
        """
        return note.replace(Path(path), self.to_markdown().encode("utf-8"), renders=rendered)

    def prompt_block(self) -> str:
        """``## 目标`` and, when there are checks, ``## 判定清单``: what the worker and the judge get."""
        block = f"## 目标\n{self.statement.strip()}"
        if self.checks:
            block += "\n\n## 判定清单\n" + "\n".join(f"- {c}" for c in self.checks)
        return block


def rendered(text: str) -> bool:
    """Whether ``text`` is exactly what flower writes for the goal it holds: how a 目标.md with no
    record of flower's writes (from 0.1 or the original runtime) is judged."""
    return text == Goal.parse(text).to_markdown()


def read(path: Path) -> note.Note:
    """目标.md as it is on disk, and whose it is (never raises)."""
    return note.Note.read(path, renders=rendered)
