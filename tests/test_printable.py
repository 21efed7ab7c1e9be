"""``core.printable``: text from outside made safe for a terminal or a page (issue 22, item 7: a remark's
OSC 52 / OSC 0 / CSI 2J reached the terminal and ``--attach`` followers raw), and what no file can hold
found before anything is written."""

from __future__ import annotations

import pytest

from flower_magic.core.printable import printable, unwritable_at

# (what a hostile or careless text holds, what a person must see instead)
CASES = [
    # the three of the issue, each removed whole: nothing of the payload is left as stray text
    ("a\x1b]52;c;ZWNobyBwd25lZA==\x07b", "ab"),  # OSC 52: writes the clipboard
    ("a\x1b]0;you are hacked\x07b", "ab"),  # OSC 0: retitles the window (BEL-terminated)
    ("a\x1b]0;title\x1b\\b", "ab"),  # ... ST-terminated
    ("a\x1b[2Jb", "ab"),  # CSI 2J: clears the screen
    ("a\x1b[1;31;48;5;196mred\x1b[0mb", "aredb"),  # CSI with parameters (colour)
    ("a\x1b[?1049hb", "ab"),  # private parameters: the alternate screen
    ("a\x1b[10;20Hb", "ab"),  # cursor moves
    ("a\x9b2Jb", "ab"),  # 8-bit CSI
    ("a\x9d0;title\x9cb", "ab"),  # 8-bit OSC ... ST
    ("a\x1bP1$r0m\x1b\\b", "ab"),  # DCS with its payload
    ("a\x1b_apc\x1b\\b", "ab"),  # APC
    ("a\x1bcb", "ab"),  # RIS: a full reset
    ("a\x1b(0b", "ab"),  # a charset switch (line drawing from then on)
    ("a\x1b#8b", "ab"),  # DECALN: fills the screen with E
    ("a\x1bb", "a"),  # ESC + a final byte goes as one (ESC b)
    ("a\x1b", "a"),  # a bare ESC at the end
    ("a\x1b中", "a中"),  # a bare ESC before text that is no final byte: only the ESC goes
    ("a\x1b]0;never ended\nnext line", "a\nnext line"),  # an unterminated OSC ends at its line
    ("ring\x07", "ring"),  # BEL
    ("de\x7fl", "del"),  # DEL
    ("a\x00b\x01c\x1fd", "abcd"),  # other C0 controls
    ("a\x85b\x8db", "abb"),  # C1 controls (NEL, RI)
    # overwriting tricks: both what was "erased" and what replaced it stay visible
    ("rm -rf ~\rls", "rm -rf ~\nls"),
    ("safe\x08\x08\x08\x08evil", "safeevil"),
    ("windows\r\nline", "windows\nline"),
    ("vertical\x0btab\x0cfeed", "verticaltabfeed"),
    # a line reordered for its reader
    ("file\u202etxt.exe", "filetxt.exe"),
    ("a\u2066b\u2069c", "abc"),
    # what cannot be written at all
    ("lone \ud800 half", "lone \ufffd half"),
    ("joined \ud83d\ude00", "joined 😀"),
]

KEPT = [
    "plain ASCII, with\ttab and\nnewline",
    "中文:清洗 CSV,输出到 clean.csv。",
    "emoji 😀 🌸 👩🏽‍💻 👨‍👩‍👧 ❤️",  # skin tones, zero-width joiners, a variation selector
    "combining: e\u0301 a\u0308 \u0928\u093f",  # e + acute, a + diaeresis, Devanagari
    "right to left: שלום مرحبا",
    "",
]


@pytest.mark.parametrize(("text", "shown"), CASES)
def test_escape_sequences_and_control_characters_are_taken_out_whole(text: str, shown: str) -> None:
    assert printable(text) == shown


@pytest.mark.parametrize("text", KEPT)
def test_ordinary_text_is_kept_as_it_is(text: str) -> None:
    assert printable(text) == text


@pytest.mark.parametrize(("text", "_"), CASES)
def test_what_is_left_holds_no_control_character_and_can_be_written(text: str, _: str) -> None:
    out = printable(text)
    assert not any((ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F for c in out)
    out.encode("utf-8")  # strict: a lone surrogate would raise
    assert printable(out) == out  # once is enough


def test_unwritable_at_finds_the_first_lone_surrogate() -> None:
    """A command line's invalid UTF-8 (surrogateescape) and JSON's "\\ud800" are found, so a front end
    refuses them with one line instead of failing while it writes."""
    assert unwritable_at("fine 中文 😀") is None
    assert unwritable_at("\udcff\udcfe") == 0
    assert unwritable_at("ab\ud800") == 2
    assert unwritable_at("a\x00b") is None  # a NUL can be written (paths check it themselves)
