"""``GoOptions.check()``: the one validation both front ends share (here: the size of what is sent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flower_magic.core.handoff import WINDOW_1M_TOKENS, WINDOW_HAIKU_TOKENS
from flower_magic.front.launch import Launch
from flower_magic.front.options import (
    MAX_TASK_CHARS,
    GoError,
    GoOptions,
    TaskTooBig,
    cli_chars,
    task_limit_chars,
)
from flower_magic.stores.trim import budget_for_line


@pytest.fixture(autouse=True)
def no_window_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The window comes from the model's name only (no FLOWER_WINDOW, no calibration file)."""
    for key in ("FLOWER_WINDOW", "ANTHROPIC_MODEL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("FLOWER_LANG", "en")  # the messages below are read in English


def test_the_limit_leaves_the_cli_its_overhead_in_the_largest_window() -> None:
    # CLI 2.1.332 refused prompts from about 2.92 million characters with a 1M-token model (measured):
    # the largest task and the step's own words must stay under that.
    assert MAX_TASK_CHARS == task_limit_chars(WINDOW_1M_TOKENS) == 2_850_000
    assert task_limit_chars(WINDOW_HAIKU_TOKENS) == 450_000
    assert task_limit_chars(1000) == 1500  # a window smaller than the overhead still takes a short task


def test_characters_are_counted_as_the_cli_counts_them() -> None:
    assert cli_chars("abc") == 3 and cli_chars("字字") == 2
    assert cli_chars("🌸") == 2  # outside the BMP: two UTF-16 code units
    assert cli_chars("\udcff") == 1  # argv's undecodable bytes are measured, not an exception


@pytest.mark.parametrize(
    ("task", "window", "model", "fits"),
    [
        ("x" * MAX_TASK_CHARS, None, "", True),
        ("x" * (MAX_TASK_CHARS + 1), None, "", False),
        ("  " + "x" * MAX_TASK_CHARS + "\n\n", None, "", True),  # measured after the strip check() does
        ("字" * MAX_TASK_CHARS, None, "", True),  # characters, not bytes: the CLI counts characters
        ("字" * (MAX_TASK_CHARS + 1), None, "", False),
        ("🌸" * (MAX_TASK_CHARS // 2 + 1), None, "", False),
        ("x" * 450_000, 200_000, "", True),  # --window 200000
        ("x" * 450_001, 200_000, "", False),
        ("x" * 450_001, None, "claude-haiku-4-5", False),  # the window the hand-off also uses
        ("x" * (MAX_TASK_CHARS + 1), 2_000_000, "", True),  # a window past 1M is the person's word
    ],
)
def test_a_task_past_what_the_window_takes_is_refused(
    monkeypatch: pytest.MonkeyPatch, task: str, window: int | None, model: str, fits: bool
) -> None:
    if model:
        monkeypatch.setenv("ANTHROPIC_MODEL", model)
    opts = GoOptions(task=task, window=window)
    if fits:
        assert opts.check() is opts
        return
    with pytest.raises(TaskTooBig) as info:
        opts.check()
    err = info.value
    assert isinstance(err, GoError)  # the front ends' one-line path
    assert err.size_chars == cli_chars(task.strip()) and err.limit_chars == task_limit_chars(err.window_tokens)
    assert err.window_tokens == (window or (WINDOW_HAIKU_TOKENS if model else WINDOW_1M_TOKENS))
    message = str(err)
    assert "\n" not in message and f"{err.size_chars:,} characters" in message
    assert "nothing was written" in message and "spec.md" in message


def test_a_wake_phrase_and_a_cell_body_are_the_same_field() -> None:
    """Both front ends put what was said (a task, a phrase at wake, a %%flower body) in ``task``;
    ``/new`` is still a command, not a task."""
    assert GoOptions(task=" /new ").check().new
    with pytest.raises(TaskTooBig):
        GoOptions(task="多行\n" * (MAX_TASK_CHARS // 3 + 1)).check()


@pytest.mark.parametrize(("window", "trim"), [(40_000, True), (200_000, True), (200_000, False)])
def test_the_runs_store_trims_to_a_budget_sized_from_the_runs_own_window(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, window: int, trim: bool
) -> None:
    """Issue 13: the budget scales with the window the run hands off in (--window), not a default."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    opts = GoOptions(task="x", workspace=tmp_path / "ws", window=window, trim=trim).check()
    launch = Launch(opts, front_end="terminal")
    launch.plan()
    launch.apply()
    rt = launch.rt
    try:
        assert rt.handoff.window == window
        assert rt.store.trims is trim
        assert rt.store.trim_policy.budget_tokens == budget_for_line(rt.handoff.at)
    finally:
        launch.abandon()
