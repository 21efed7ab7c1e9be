"""Text from outside made safe to show: what a terminal would act on instead of printing is taken out.

Text that flower did not write itself reaches people: the model's words, its tool calls and their
results, a remark or an answer someone sent to a live run, 需求.md / 目标.md, a step's error. In a
terminal, some characters are commands, not text: ``ESC ] 52 ; c ; … BEL`` writes the clipboard,
``ESC ] 0 ; … BEL`` retitles the window, ``ESC [ 2 J`` clears the screen, ``\\r`` lets what follows
overwrite what came before. ``printable`` is the one place that takes them out; the terminal's printing
(``terminal.TerminalView.line``, ``terminal.echo``) and every HTML or plain text the notebook renders
(``display.html``) pass their text through it.

Guarantees:
    - No C0 control character but newline and tab, no DEL, no C1 control (U+0080–U+009F) survives:
      so no escape sequence can, 7-bit (``ESC [``) or 8-bit (U+009B), whatever it asks for.
    - A whole sequence goes, not only its ESC: a CSI's parameters and final byte, an OSC's, DCS's,
      SOS's, PM's or APC's payload up to its terminator (BEL or ST) or, unterminated, to the end of
      its line; an ESC's intermediates and final byte. What a terminal would not have shown is not
      shown, and nothing of a sequence is left behind as stray text.
    - ``\\r\\n`` becomes ``\\n`` and a lone ``\\r`` becomes ``\\n``: text after a carriage return
      starts a line of its own instead of overwriting the one before. A backspace is removed, so
      nothing is erased: both what was "deleted" and what replaced it stay visible.
    - The bidirectional embedding, override and isolate controls (U+202A–U+202E, U+2066–U+2069) are
      removed: they reorder how the rest of a line reads.
    - A lone surrogate (what invalid UTF-8 decodes to with ``surrogateescape``, or JSON's
      ``"\\ud800"``) becomes U+FFFD, so the text can be written to a UTF-8 stream at all.
    - Everything else is kept as it is: Chinese, emoji (with their zero-width joiners and variation
      selectors), combining marks, every script.
    - ``unwritable_at`` finds what no file, JSON body or prompt can hold (a lone surrogate): front ends
      refuse such input with one line before they write anything, rather than fail half-way.
Not guaranteed:
    - Text that only looks like flower's own lines (a model may write "+ done") is shown as text.
    - Look-alike characters (homoglyphs) and zero-width characters inside words are kept.
"""

from __future__ import annotations

import re

# One escape sequence (ECMA-48): CSI with its parameters, intermediates and final byte; a control
# string (OSC, DCS, SOS, PM, APC) with its payload up to BEL or ST, or to the end of its line when it
# is not terminated (a terminal would go on swallowing text; stopping at the line keeps the rest
# readable); any other ESC with its intermediates and final byte. 7-bit and 8-bit introducers alike.
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
)
# What is left to remove one character at a time: C0 but newline and tab, DEL, C1, the bidi controls.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# Everything that can need work; text without any of these is returned as it is.
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` as a terminal or a page may show it: see the module's guarantees."""
    if not _UNSAFE.search(text):
        return text
    if _SURROGATE.search(text):
        # Pairs that were never joined (a "\ud83d\ude00" literal) join; a lone half is U+FFFD.
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    text = _SEQUENCE.sub("", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", text)


def unwritable_at(text: str) -> int | None:
    """Where ``text`` first holds a character UTF-8 cannot encode (a lone surrogate: invalid UTF-8
    bytes decoded with ``surrogateescape``, as a command line's are, or a ``"\\ud800"`` from JSON), as
    an index; None when all of it can be written."""
    found = _SURROGATE.search(text)
    return None if found is None else found.start()
