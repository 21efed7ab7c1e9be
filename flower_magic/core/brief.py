"""需求.md, the frozen brief: four sections the clarify step writes and every later step reads.

Sections (canonical heading → field): 目标 → ``goal``, 验收标准 → ``accept``, 边界 → ``bounds``,
未知与假设 → ``unknowns``; English headings (Goal, Acceptance criteria, Scope, Out of scope,
Unknowns, Assumptions, …) are read as the same sections. The file is also where a person's later words
go: ``append_section`` adds ``## 唤醒时追加(HH:MM:SS)`` or ``## 运行中补充(HH:MM:SS)`` sections, whose
headings are not canonical, so they never disturb the four-section parse.

Guarantees:
    - ``Brief.load`` never raises: a missing, unreadable or undecodable file is None (the clarify
      step then runs again), a file without the four sections is an incomplete ``Brief``. UTF-8,
      UTF-8/UTF-16 with a BOM and GB18030 are read (``core.note``).
    - ``write`` replaces the file atomically, and never a person's version: a 需求.md whose bytes are
      not what flower last wrote is kept aside first as ``需求.md.edited-<ts>`` (``core.note``).
      With no record of what flower wrote, flower's own is a file that ``renders`` as itself.
    - ``append_section`` only ever appends, in the file's own encoding.
    - ``Brief.parse(b.to_markdown()) == b`` for bodies without headings or fences.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path

from flower_magic.core import note
from flower_magic.core.sections import read_sections

# field -> canonical heading, in document order
SECTIONS: dict[str, str] = {
    "goal": "目标",
    "accept": "验收标准",
    "bounds": "边界",
    "unknowns": "未知与假设",
}
# heading -> field; read_sections tries the longest first, so 未知与假设 is never read as 未知
ALIASES: dict[str, str] = {
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
    "未知和假设": "unknowns",
    "未知及假设": "unknowns",
    "待定与假设": "unknowns",
    # English, as a person writes them (matched in any case, any spacing)
    "Unknowns and assumptions": "unknowns",
    "Unknowns & assumptions": "unknowns",
    "Unknowns / assumptions": "unknowns",
    "Open questions": "unknowns",
    "Assumptions": "unknowns",
    "Unknowns": "unknowns",
    "Out of scope": "bounds",
    "Non-goals": "bounds",
    "Boundaries": "bounds",
    "Bounds": "bounds",
    "Scope": "bounds",
    "Acceptance criteria": "accept",
    "Acceptance tests": "accept",
    "Definition of done": "accept",
    "Done when": "accept",
    "Acceptance": "accept",
    "Objectives": "goal",
    "Objective": "goal",
    "Goals": "goal",
    "Goal": "goal",
}

TITLE = "# 需求确认书"
EMPTY_BODY = "(未填)"
WAKE_LABEL = "唤醒时追加"
RUNTIME_LABEL = "运行中补充"
APPEND_TITLE = "# 运行中的补充"

# Where the person's later words start: the parser leaves these sections out of the four.
_ADDED_RE = re.compile(rf"^## (?:{WAKE_LABEL}|{RUNTIME_LABEL})(?:\(|$)", re.MULTILINE)


def additions(text: str) -> str:
    """The sections appended to a brief's text (wake phrases, mid-run words), verbatim; "" if none."""
    found = _ADDED_RE.search(text)
    return text[found.start() :].strip() if found else ""


_ADDED_HEAD_RE = re.compile(rf"^## (?:{WAKE_LABEL}|{RUNTIME_LABEL})(?:\([^)\n]*\))?[ \t]*$", re.MULTILINE)


def remarks(text: str) -> list[str]:
    """What the person said later, one entry per appended section (wake phrases, mid-run words), in
    the order they were said."""
    heads = list(_ADDED_HEAD_RE.finditer(text))
    ends = [h.start() for h in heads[1:]] + [len(text)]
    out: list[str] = []
    for head, end in zip(heads, ends[: len(heads)], strict=True):
        body = text[head.end() : end].strip()
        if body:
            out.append(body)
    return out


def rendered(text: str) -> bool:
    """Whether ``text`` is exactly what flower writes for the brief it holds (plus flower's appends):
    how a 需求.md with no record of flower's writes (from 0.1 or the original runtime) is judged."""
    found = _ADDED_RE.search(text)
    head = text[: found.start()] if found else text
    return head.rstrip("\n") == Brief.parse(head).to_markdown().rstrip("\n")


def read(path: Path) -> note.Note:
    """需求.md as it is on disk, and whose it is (never raises)."""
    return note.Note.read(path, renders=rendered)


@dataclass
class Brief:
    """The four sections of 需求.md.

    Attributes:
        goal: 目标, what is to be built and why.
        accept: 验收标准, how to tell it is done.
        bounds: 边界, what is out of scope.
        unknowns: 未知与假设, open questions and the assumptions made instead.
    """

    goal: str = ""
    accept: str = ""
    bounds: str = ""
    unknowns: str = ""

    @classmethod
    def parse(cls, text: str) -> Brief:
        """Read a brief out of a model's reply or a 需求.md (see ``read_sections`` for the rules)."""
        return cls(**read_sections(text or "", ALIASES))

    @classmethod
    def load(cls, path: Path) -> Brief | None:
        """Read ``path``; None when it is missing, unreadable, not a regular file or not text."""
        text = note.read_note(path)
        return None if text is None else cls.parse(text)

    def complete(self) -> bool:
        """Whether all four sections have a body."""
        return not self.missing()

    def missing(self) -> list[str]:
        """The canonical headings of the empty sections, in document order."""
        return [SECTIONS[f.name] for f in fields(self) if not getattr(self, f.name).strip()]

    def to_markdown(self) -> str:
        """The 需求.md text."""
        lines = [
            TITLE,
            "",
            "> 由 clarify 步骤生成并**冻结**。要改需求就改这个文件;",
            "> 想重新确认一遍,删掉它再跑。",
            "",
        ]
        for name, heading in SECTIONS.items():
            lines += [f"## {heading}", "", getattr(self, name).strip() or EMPTY_BODY, ""]
        return "\n".join(lines)

    def write(self, path: Path, *, added: str = "") -> Path | None:
        """Replace ``path`` with this brief (and ``added``, the appended sections to keep), atomically.

        Returns:
            Where a person's version of the file was kept (``需求.md.edited-<ts>``), or None.

        Raises:
            OSError: the folder cannot be written; the old file is untouched.
        """
        text = self.to_markdown() + (f"\n{added.strip()}\n" if added.strip() else "")
        return note.replace(Path(path), text.encode("utf-8"), renders=rendered)

    def prompt_block(self) -> str:
        """The non-empty sections as ``## <heading>\\n<body>``, blank-line separated: what later steps get."""
        return "\n\n".join(
            f"## {heading}\n{getattr(self, name).strip()}"
            for name, heading in SECTIONS.items()
            if getattr(self, name).strip()
        )


def append_section(path: Path, label: str, text: str, now: datetime | None = None) -> None:
    """Append ``\\n## <label>(HH:MM:SS)\\n<text>\\n`` to ``path``; never rewrites what is there.

    A file that does not exist yet is created with the title ``# 运行中的补充`` first; an existing one
    is appended to in its own encoding (``core.note.append``).

    Args:
        path: the brief (需求.md).
        label: ``WAKE_LABEL``, ``RUNTIME_LABEL`` or another non-canonical heading.
        text: what the person said.
        now: the time stamped on the heading; defaults to the local time.

    Raises:
        OSError: the file cannot be written.
    """
    stamp = (now or datetime.now()).strftime("%H:%M:%S")
    note.append(Path(path), f"\n## {label}({stamp})\n{text}\n", title=APPEND_TITLE + "\n")
