"""``core.context_watch.ContextWatch``: the runtime's one record of its context, lent to succession.

The runtime and succession once kept these facts as ten private fields of ``Runtime`` that succession
read and wrote from outside (issue 23, item 4); these tests hold what the one object promises.
"""

from __future__ import annotations

from flower_magic.core.context_watch import ContextWatch
from flower_magic.core.handoff import HandoffPolicy

POLICY = HandoffPolicy(window=200_000)  # the line at 150K, the warning at 130K


def test_near_the_line_is_said_once_per_watch_and_never_for_a_gate() -> None:
    watch = ContextWatch(POLICY)
    watch.start_step(announce=False)  # a judge's session: the person does not steer it
    assert watch.see(POLICY.warn_at) is False
    watch.start_step(announce=True)
    assert watch.see(POLICY.warn_at - 1) is False
    assert watch.see(POLICY.warn_at) is True
    assert watch.see(POLICY.warn_at + 1) is False  # said once
    watch.start_step(announce=True)
    assert watch.see(POLICY.at) is False  # once per runtime, not per step


def test_only_a_fresh_sessions_first_request_is_its_floor() -> None:
    watch = ContextWatch(POLICY)
    watch.start_attempt(fresh=True)
    watch.see(5_000)
    watch.see(9_000)
    assert (watch.floor, watch.watermark) == (5_000, 9_000)
    watch.start_attempt(fresh=False)  # a resume: its first request is the whole conversation so far
    watch.see(12_000)
    assert watch.floor == 5_000
    with watch.writing():
        watch.start_attempt(fresh=True)  # the hand-off's own turn is no start-up size
        watch.see(11_000)
    assert watch.floor == 5_000


def test_the_line_is_not_due_while_a_hand_off_is_written() -> None:
    watch = ContextWatch(POLICY)
    watch.see(POLICY.at)
    assert watch.is_due()
    with watch.writing():
        assert watch.writing_handoff and not watch.is_due()
    assert not watch.writing_handoff and watch.is_due()
    assert not ContextWatch(HandoffPolicy(enabled=False), watermark=POLICY.at).is_due()


def test_room_made_and_hand_off_start_the_context_again() -> None:
    watch = ContextWatch(POLICY)
    watch.start_attempt(fresh=True)
    watch.see(POLICY.at + 1)
    assert watch.made_room() is True and watch.watermark == 0
    watch.see(POLICY.at)
    assert watch.made_room() is False  # "made room" said once
    watch.handed_off()
    assert (watch.watermark, watch.floor) == (0, 0)
    assert not watch.starts_small()
    assert ContextWatch(POLICY, floor=POLICY.at).starts_small()
