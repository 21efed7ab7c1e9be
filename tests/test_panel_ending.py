"""``panel.ending``: the commands in an ending's way to continue, cut out for the panel to offer as copyable
code. (The run answer itself is tested over HTTP in ``tests/test_server.py``.)"""

from __future__ import annotations

import pytest

from flower_magic.core.words import LANGS
from flower_magic.front.outcome import Ending, Outcome
from flower_magic.panel.ending import NOTEBOOK_CMD, command_parts, describe


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("demo", [False, True])
@pytest.mark.parametrize("ending", list(Ending))
def test_every_way_to_continue_is_cut_into_prose_and_whole_magic_lines(ending: Ending, demo: bool, lang: str):
    """The parts joined are the cell's words; every command in them is a code part that starts with the
    magic line as typed there (``%flower --demo`` after a demo run) and no prose part holds one."""
    outcome = Outcome(ending, step="干活", demo=demo)
    answer = describe(outcome, lang)
    parts = answer["next_parts"]
    assert "".join(text for _, text in parts) == answer["next"] == outcome.next_step(lang, NOTEBOOK_CMD)
    typed = outcome.typed(NOTEBOOK_CMD)
    codes = [text for kind, text in parts if kind == "code"]
    assert codes and all(code.startswith(typed) for code in codes)
    assert all(NOTEBOOK_CMD not in text for kind, text in parts if kind == "")
    assert answer["headline"] == outcome.headline(lang) and answer["found"] is False


@pytest.mark.parametrize(
    ("text", "codes"),
    [
        (
            '%flower --rounds 3 for more rounds, or %flower "a sentence" to adjust',
            ["%flower --rounds 3", '%flower "a sentence"'],
        ),
        ('要改点什么:%flower "一句话";换一件事:%flower --new "任务"', ['%flower "一句话"', '%flower --new "任务"']),
        ("%flower continues where it stopped", ["%flower"]),
        ("%flower --status shows what this directory remembers", ["%flower --status"]),
        ("nothing to run here", []),
    ],
)
def test_a_command_takes_its_flags_and_quoted_words_and_stops_at_prose(text: str, codes: list[str]):
    parts = command_parts(text, "%flower")
    assert [t for kind, t in parts if kind == "code"] == codes
    assert "".join(t for _, t in parts) == text
