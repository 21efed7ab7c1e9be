"""Reads that may hang or raise, time-boxed (core/timebox.py, issue 22 item 6)."""

from __future__ import annotations

import threading

from flower_magic.core import timebox
from flower_magic.core.timebox import NOT_REACHED, OK, RAISED, TIMED_OUT, call_within, read_each


def test_an_item_that_raises_or_hangs_is_marked_and_the_rest_are_read() -> None:
    release = threading.Event()

    def read(item: str) -> str:
        if item == "raises":
            raise SystemExit("even this")
        if item == "hangs":
            release.wait(30)
            return "late"
        return item.upper()

    try:
        got = read_each(["a", "raises", "b", "hangs", "c"], read, item_s=0.2, budget_s=5)
    finally:
        release.set()
    assert got.values == ["A", None, "B", None, "C"]
    assert {i: o.status for i, o in got.failed.items()} == {1: RAISED, 3: TIMED_OUT}
    assert isinstance(got.failed[1].error, SystemExit)


def test_items_past_the_budget_are_not_reached_and_a_late_reader_writes_nothing() -> None:
    release = threading.Event()
    late: list[str] = []

    def read(item: int) -> int:
        release.wait(30)
        late.append("read")
        return item

    got = read_each([1, 2, 3], read, item_s=5, budget_s=0.2)
    release.set()
    assert got.values == [None, None, None]
    assert [got.failed[i].status for i in range(3)] == [TIMED_OUT, NOT_REACHED, NOT_REACHED]
    for thread in threading.enumerate():
        if thread.name == "flower-timebox":
            thread.join(5)
    assert late and got.values == [None, None, None]


def test_call_within() -> None:
    assert call_within(lambda: 42, 1).status == OK and call_within(lambda: 42, 1).value == 42
    assert call_within(lambda: 1 / 0, 1).status == RAISED


def test_safe_type_refuses_a_metaclass_that_runs_code_on_attribute_reads() -> None:
    class Meta(type):
        def __getattribute__(cls, name: str) -> object:
            raise RuntimeError(name)

    class Hostile(metaclass=Meta):
        pass

    assert timebox.safe_type(Hostile()) is None and timebox.safe_type(3) is int
