"""Reading objects that may hang or raise — a person's namespace — on a thread of their own, with a
time limit per object and for all of them.

A notebook can hold anything: an object whose ``__getattribute__`` sleeps forever, a ``Mock`` that
claims to be a ``str``, a ``__str__`` that raises. Whatever reads such objects for the agent (the
notebook block, the tools' previews) reads them here, so the reader's caller — the kernel's own
thread, before a run starts — never waits longer than it chose and never sees an exception.

Guarantees:
    - ``read_each`` returns within about ``budget_s`` (plus one ``POLL_S``) whatever ``read`` does,
      and never raises; it gives one ``Outcome`` per item, in order.
    - An item whose read raises (any ``BaseException``) is ``RAISED``, with its exception; an item
      whose read takes longer than ``item_s`` is ``TIMED_OUT``, and the items after it are read on a
      new thread; items not started when the budget ran out are ``NOT_REACHED``.
    - A read abandoned by its caller never writes into a later call's results.
Not guaranteed:
    - A thread whose read timed out is left behind (a daemon thread: it does not keep the process
      alive) and runs until its read ends, possibly never. Callers keep such objects aside
      (``core.notebook`` remembers them across wakes) so each one costs at most one thread.
    - A read that holds the GIL without ever releasing it (a C extension spinning) stops every
      thread of the process, the waiting one included.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

OK, RAISED, TIMED_OUT, NOT_REACHED = "ok", "raised", "timed_out", "not_reached"
# How often the waiting thread looks at the reader's progress: each look takes the GIL from the
# reader, so not much more often than a tenth of the shortest limit callers give (0.2 s).
POLL_S = 0.02


@dataclass(frozen=True)
class Outcome(Generic[R]):
    """What reading one item gave.

    Attributes:
        status: ``OK``, ``RAISED``, ``TIMED_OUT`` or ``NOT_REACHED``.
        value: what ``read`` returned (``OK`` only).
        error: what it raised (``RAISED`` only).
    """

    status: str
    value: R | None = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK


class _Reader:
    """One thread reading items ``begin..`` in order; ``at`` is (item, when it started)."""

    def __init__(self, begin: int) -> None:
        self.at = (begin, time.monotonic())
        self.live = True
        self.done = threading.Event()


@dataclass
class Reads(Generic[R]):
    """What ``read_each`` gave: ``values[i]`` for an item read, ``failed[i]`` for one that was not.

    Values are kept as they are (no wrapper per item): a namespace of 10,000 variables would
    otherwise leave 10,000 more objects for the garbage collector to walk mid-build.
    """

    values: list[R | None]
    failed: dict[int, Outcome[R]]


def read_each(items: Sequence[T], read: Callable[[T], R], *, item_s: float, budget_s: float) -> Reads[R]:
    """``read(item)`` for each item, on reader threads, bounded per item and in all (see the module)."""
    n = len(items)
    values: list[R | None] = [None] * n
    failed: dict[int, Outcome[R]] = {}
    deadline = time.monotonic() + budget_s
    begin = 0
    while begin < n:
        reader = _Reader(begin)

        def work(me: _Reader = reader, first: int = begin, failed: dict[int, Outcome[R]] = failed) -> None:
            for i in range(first, n):
                me.at = (i, time.monotonic())  # one assignment: the waiting thread reads it whole
                try:
                    value = read(items[i])
                except BaseException as exc:  # a hostile object may raise anything, SystemExit included
                    if me.live:
                        failed[i] = Outcome(RAISED, error=exc)
                    continue
                if not me.live:
                    return
                values[i] = value
            me.done.set()

        threading.Thread(target=work, name="flower-timebox", daemon=True).start()
        while not reader.done.wait(POLL_S):
            i, since = reader.at
            now = time.monotonic()
            if now >= deadline:
                reader.live = False
                given_up = dict(failed)  # the reader may still write into the one it holds
                given_up.setdefault(i, Outcome(TIMED_OUT))
                for k in range(i + 1, n):
                    given_up[k] = Outcome(NOT_REACHED)
                return Reads(list(values), given_up)
            if now - since > item_s:
                reader.live = False
                failed[i] = Outcome(TIMED_OUT)
                begin = i + 1
                break
        else:
            break
    return Reads(values, failed)


def call_within(fn: Callable[[], R], timeout_s: float) -> Outcome[R]:
    """``fn()`` on a thread of its own, given up after ``timeout_s`` (see ``read_each``)."""
    got = read_each([None], lambda _: fn(), item_s=timeout_s, budget_s=timeout_s)
    return got.failed.get(0) or Outcome(OK, got.values[0])


def safe_type(value: Any) -> type | None:
    """``type(value)`` when its metaclass is a plain one whose attribute reads cannot run user code."""
    cls = type(value)
    plain: bool = getattr(type(cls), "__getattribute__", None) is type.__getattribute__
    return cls if plain else None
