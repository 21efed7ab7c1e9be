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


def test_every_phrase_is_said_somewhere() -> None:
    """Issue 11 (6): a phrase nothing says is dead weight that misleads (``received_no_brief`` once made
    the CLI claim every remark went into the brief). Keys built at run time are named by prefix."""
    import pathlib

    from flower_magic.core import words

    composed = (
        "col_",
        "front_",
        "stop_",
        "writer_",
        "ask_",
        "state_",
        "run_locked",
        "session_busy",
        "foreign_wait",
        "minutes",
        "kind_",
        "role_",
        "reason_",
    )
    root = pathlib.Path(words.__file__).parents[1]
    code = "\n".join(p.read_text(encoding="utf-8") for p in root.rglob("*.py") if p.name != "words.py")
    unused = [
        k for k in words._TEXTS["zh"] if not k.startswith(composed) and f'"{k}"' not in code and f"'{k}'" not in code
    ]
    assert unused == []
