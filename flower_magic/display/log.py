"""The live log of a run: entries (one per thing shown), kept in fixed-size chunks, newest last.

Guarantees:
    - Bounded: at most ``max_chunks`` chunks of ``chunk_entries`` entries are kept; the oldest
      chunk is dropped whole and counted in ``dropped``. A chatty agent costs memory and render
      time proportional to the window, never to the run.
    - A chunk's HTML is rendered once and cached until an entry in it changes (``touch``), so a
      re-render sends only the chunks that changed (``take_dirty``).
    - Entries hold data only (sanitised text); HTML is built from them by ``display.html``, which
      escapes every piece.
Not guaranteed:
    - Thread safety: the owner (``RunState``) holds its lock around every call.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from flower_magic.display import html, markdown
from flower_magic.display.verdict import card_html
from flower_magic.front.phrases import Line

CHUNK_ENTRIES = 20  # small enough that one chunk's HTML is a cheap message to re-send
MAX_CHUNKS = 10  # 10 x 20 = the newest ~200 entries stay in the live view


@dataclass(eq=False)
class Entry:
    """One thing the log shows.

    Attributes:
        lines: phrase lines (text already sanitised): what ``text/plain`` and the terminal say.
        kind: ``line``; ``step`` (a step header); ``round`` (a round inside a step); ``text`` (the
            agent's words: its one line is Markdown, rendered as a document in HTML); ``tool`` (first
            line is the summary, ``details`` is shown collapsed under it); ``handoff`` (the hand-off
            block); ``judge`` (a judge's round: ``lines`` is its header, ``parts`` what it said and
            did, ``verdict`` its ruling, shown as one element); ``verdict`` (the verdict's line).
        details: data shown collapsed under a tool call (its input and result).
        sub: subagent output (indented).
        tool: for ``tool``, the tool's name (sanitised).
        parts: for ``judge``, its text and tool entries and then its verdict line, in order.
        verdict: for ``judge``, the verdict event's payload once it came (None while it judges).
        lang: for ``judge``, the language its element speaks.
        chunk: which chunk holds it (set by ``RunLog.append``; a part shares its judge's).
    """

    lines: list[Line]
    kind: str = "line"
    details: str = ""
    sub: bool = False
    tool: str = ""
    parts: list[Entry] = field(default_factory=list)
    verdict: dict[str, Any] | None = None
    lang: str = "zh"
    chunk: int = field(default=-1, repr=False)
    _markdown: str | None = field(default=None, init=False, repr=False)  # a text's HTML: it never changes

    def to_html(self) -> str:
        if self.kind == "step":
            return html.step_html(self.lines[0])
        if self.kind == "round":
            return html.round_html(self.lines[0])
        if self.kind == "text":
            if self._markdown is None:  # up to ~30 ms for a long text: not again on each re-render of its chunk
                self._markdown = markdown.block_html(html.line_text(self.lines[0]), sub=self.sub)
            return self._markdown
        if self.kind == "tool":
            return html.tool_html(self.lines[0], self.tool, self.details, sub=self.sub) + html.lines_html(
                self.lines[1:], sub=self.sub
            )
        if self.kind == "judge":
            said = "".join(part.to_html() for part in self.parts if part.kind != "verdict")
            return card_html(self.lines[0], said, self.verdict, self.lang)
        if self.kind == "handoff":
            return '<div class="fm-block">' + "".join(_handoff_line(line) for line in self.lines) + "</div>"
        return html.lines_html(self.lines, sub=self.sub)

    def to_text(self) -> str:
        if self.kind == "judge":
            return "\n".join([html.lines_text(self.lines), *(part.to_text() for part in self.parts)])
        text = html.lines_text(self.lines)
        if self.kind == "step":
            return f"\n{text}\n"
        if self.sub:
            return "    " + text.replace("\n", "\n    ")
        return text


def _handoff_line(line: Line) -> str:
    # phrases.handoff_block pads each section label (a bold segment after two spaces) with spaces
    is_label = len(line) > 1 and line[0][0] == "bold" and line[0][1].startswith("  ")
    return html.label_html(line) if is_label else html.line_html(line)


class RunLog:
    """The newest entries of a run, in chunks.

    Args:
        chunk_entries: entries per chunk.
        max_chunks: chunks kept.
    """

    def __init__(self, chunk_entries: int = CHUNK_ENTRIES, max_chunks: int = MAX_CHUNKS) -> None:
        self.chunk_entries = max(1, chunk_entries)
        self.max_chunks = max(1, max_chunks)
        self.total = 0
        self.dropped = 0
        self._chunks: deque[tuple[int, list[Entry]]] = deque()
        self._html: dict[int, str] = {}
        self._dirty: set[int] = set()

    def append(self, entry: Entry) -> None:
        number = self.total // self.chunk_entries
        if not self._chunks or self._chunks[-1][0] != number:
            self._chunks.append((number, []))
            if len(self._chunks) > self.max_chunks:
                old, entries = self._chunks.popleft()
                self.dropped += len(entries)
                self._html.pop(old, None)
                self._dirty.discard(old)
        entry.chunk = number
        self._chunks[-1][1].append(entry)
        self.total += 1
        self.touch(entry)

    def holds(self, entry: Entry) -> bool:
        """Whether ``entry`` is still in the window (not dropped)."""
        return bool(self._chunks) and entry.chunk >= self._chunks[0][0]

    def touch(self, entry: Entry) -> None:
        """``entry`` changed: its chunk is rendered again."""
        if self.holds(entry):
            self._html.pop(entry.chunk, None)
            self._dirty.add(entry.chunk)

    def numbers(self) -> list[int]:
        """The chunks in the window, oldest first."""
        return [number for number, _ in self._chunks]

    def entries(self) -> list[Entry]:
        return [entry for _, chunk in self._chunks for entry in chunk]

    def chunk_html(self, number: int) -> str:
        cached = self._html.get(number)
        if cached is None:
            chunk = next((c for n, c in self._chunks if n == number), [])
            cached = self._html[number] = "".join(e.to_html() for e in chunk)
        return cached

    def take_dirty(self) -> list[int]:
        """The chunks changed since the last call, oldest first (and forget them)."""
        dirty = sorted(self._dirty)
        self._dirty.clear()
        return dirty

    def is_dirty(self) -> bool:
        return bool(self._dirty)

    def to_html(self) -> str:
        return "".join(self.chunk_html(n) for n in self.numbers())

    def to_text(self) -> str:
        return "\n".join(e.to_text() for e in self.entries())
