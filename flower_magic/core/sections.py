"""Reading headed Markdown sections: the one parser behind 需求.md, 目标.md, verdicts and hand-offs.

Guarantees:
    - A heading inside a fenced code block is never read as a section; an unclosed fence hides the
      rest of the text.
    - A heading of the same or a higher level ends the current section, so appended sections
      (``## 唤醒时追加(…)``) never leak into the body before them.
    - Headings are matched the way a person types them: any case, any run of spaces between the
      words of an alias, full-width ``＃`` / ``＊`` / ``＿`` / ``．`` / digits / spaces as their
      half-width forms; bodies are kept exactly as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache

# Bodies that mean "nothing here": written by our own to_markdown() or asked for by our prompts.
PLACEHOLDERS = frozenset(
    f"{o}{word}{c}"
    for word in ("未填", "空", "无", "暂无", "none", "None", "empty", "n/a")
    for o, c in (("(", ")"), ("（", "）"))
)

_FENCE_RE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")
_ATX_RE = re.compile(r"^[ \t]{0,3}(#{1,6})(?:[ \t]|$)")
_RULE_RE = re.compile(r"^[ \t]{0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")


def strip_fences(text: str) -> str:
    """Drop fenced code blocks (```` ``` ```` or ``~~~``); an unclosed fence drops the rest."""
    out: list[str] = []
    fence = ""
    for line in text.splitlines():
        m = _FENCE_RE.match(line)
        if not fence:
            if m:
                fence = m.group(1)
            else:
                out.append(line)
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line[m.end() :].strip():
            fence = ""
    return "\n".join(out)


# Full-width forms an IME leaves in a heading, one character for one, so offsets in a translated
# line are offsets in the original (the body after a heading is sliced from the original).
_HALF_WIDTH = str.maketrans(
    {"＃": "#", "＊": "*", "＿": "_", "．": ".", "\u3000": " ", **{chr(0xFF10 + d): str(d) for d in range(10)}}
)


def heading_key(name: str) -> str:
    """How an alias is compared: case-folded, runs of spaces as one."""
    return " ".join(name.split()).casefold()


@lru_cache(maxsize=32)
def _heading_re(names: tuple[str, ...]) -> re.Pattern[str]:
    alternation = "|".join(
        r"[ \t]+".join(re.escape(word) for word in n.split()) for n in sorted(names, key=len, reverse=True)
    )
    return re.compile(
        r"^[ \t]{0,3}(?P<atx>#{1,6})?[ \t]*"
        r"(?P<b1>\*\*|__)?[ \t]*"
        r"(?P<num>\d{1,3}[ \t]*[.、)）])?[ \t]*"
        r"(?P<b2>\*\*|__)?[ \t]*"
        rf"(?P<name>{alternation})"
        r"(?:[ \t]*[(（][^)）]*[)）])?[?？]?"  # a qualifier such as (可选) belongs to the heading
        r"(?:[ \t]*(?P<c1>[:：]))?"
        r"(?:[ \t]*(?P<close>\*\*|__))?"
        r"(?:[ \t]*(?P<c2>[:：]))?"
        r"(?P<rest>.*)$",
        re.IGNORECASE,
    )


def _match_heading(line: str, names: tuple[str, ...]) -> tuple[str, int, str] | None:
    """Return (name, level, same-line body) when ``line`` heads one of ``names``."""
    m = _heading_re(names).match(line.translate(_HALF_WIDTH))
    if not m:
        return None
    bold = m.group("b1") or m.group("b2")
    if m.group("close") and not bold:
        return None
    colon = m.group("c1") or m.group("c2")
    rest = line[m.start("rest") :]
    if bold and not m.group("close") and rest.rstrip().endswith(bold):
        rest = rest.rstrip()[: -len(bold)]  # **目标:做一个 X**
    decorated = bool(m.group("atx") or bold or m.group("num"))
    if m.group("atx") and not rest.strip("# \t"):
        rest = ""  # closing hashes: "## 目标 ##"
    if not colon:
        # "目标是做一个 X" is a sentence, not the heading 目标 with a body.
        if rest and not rest[0].isspace():
            return None
        if not decorated and rest.strip():
            return None
        # Words run on after an English alias ("## Scope creep", "## Goal setting"): another heading.
        if rest.strip() and m.group("name")[-1].isascii():
            return None
    level = len(m.group("atx")) if m.group("atx") else 7
    return m.group("name"), level, rest.strip()


def _clean(lines: list[str]) -> str:
    kept = [line.rstrip() for line in lines if not _RULE_RE.match(line)]
    body = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()
    return "" if body in PLACEHOLDERS else body


def read_sections(text: str, aliases: Mapping[str, str]) -> dict[str, str]:
    """Read headed sections out of Markdown a person or a model wrote.

    A heading is any alias (longest first, any case, any spacing between its words), optionally
    decorated: ``#``…``######``, ``**X**`` / ``__X__``, numbering (``3.`` ``3、`` ``3)``), a trailing
    ``:``/``：``, full-width marks; text after it on the same line is body. Fenced code blocks are
    ignored, horizontal rules dropped, runs of blank lines collapsed. Any other ``#`` heading of the
    same or a higher level ends the current section (so appended ``## 唤醒时追加(…)`` notes never leak
    into the last section). A body that is only a placeholder such as ``(未填)`` counts as empty.

    Args:
        text: the document.
        aliases: heading text -> field name.

    Returns:
        field -> body for every field with a non-empty body; when a field appears more than once, the
        first non-empty body wins.
    """
    names = tuple(aliases)
    fields = {heading_key(name): field for name, field in aliases.items()}
    out: dict[str, str] = {}
    current: str | None = None
    level = 7
    buf: list[str] = []

    def flush() -> None:
        if current is not None and current not in out:
            body = _clean(buf)
            if body:
                out[current] = body

    for line in strip_fences(text).splitlines():
        head = _match_heading(line, names)
        if head is not None:
            flush()
            name, level, rest = head
            current, buf = fields[heading_key(name)], ([rest] if rest else [])
            continue
        atx = _ATX_RE.match(line.translate(_HALF_WIDTH))
        if atx and current is not None and len(atx.group(1)) <= level:
            flush()
            current, buf = None, []
            continue
        if current is not None:
            buf.append(line)
    flush()
    return out
