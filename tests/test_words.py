"""The phrase tables (core/words.py): one table per language, the same phrases in both."""

from __future__ import annotations

import string

from flower_magic.core import words


def _fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def test_both_languages_have_the_same_phrases_with_the_same_fields() -> None:
    zh, en = words._TEXTS["zh"], words._TEXTS["en"]
    assert sorted(zh) == sorted(en)
    different = {k: (_fields(zh[k]), _fields(en[k])) for k in zh if _fields(zh[k]) != _fields(en[k])}
    assert different == {}


def test_an_unknown_language_falls_back_to_chinese() -> None:
    assert words.say("done", "fr") == words.say("done", "zh")
