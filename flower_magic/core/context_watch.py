"""What a runtime knows about its main thread's context: how full it is, how full a fresh session
starts, and which notices about it the person has heard.

One ``ContextWatch`` per ``Runtime`` (``Runtime.context_watch``). The runtime feeds it what each request
used and asks it whether the hand-off line is crossed; succession (``core.succession``) is handed the
same object to decide how to make room, and tells it when the context starts again (a squeeze, a
successor). Nothing else keeps these facts, so the runtime and succession cannot disagree about them.

Guarantees:
    - "near the line" and "made room" are said at most once per watch (per runtime), and never while
      ``announce`` is False (a gate's own sessions: the judge's).
    - While a hand-off is being written (``writing``) the line is never due (that turn is the way
      out) and its first request never counts as a fresh session's start-up size.
Not guaranteed:
    - The sizes are the main thread's as the API reported them; a subagent's context is not watched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from flower_magic.core.handoff import HandoffPolicy


@dataclass
class ContextWatch:
    """The context of the step running now, in tokens, and what was said about it.

    Attributes:
        policy: where the hand-off line is (``HandoffPolicy``).
        watermark: the largest context the step's current session has reached since it last started
            small (a new step, a squeeze, a successor).
        floor: the first request of the step's newest fresh session (0: none yet): what any new
            session of this step starts with.
        announce: notices about the context go to the person (False for a gate's own sessions).
        near_said: "near the hand-off line" was said.
        squeeze_said: "made room" was said.
        writing_handoff: a hand-off is being written (a turn that must not be cut or handed off).
    """

    policy: HandoffPolicy
    watermark: int = 0
    floor: int = 0
    announce: bool = True
    near_said: bool = False
    squeeze_said: bool = False
    writing_handoff: bool = False
    _floor_pending: bool = field(default=False, init=False, repr=False)  # the next size seen starts a session

    def start_step(self, *, announce: bool) -> None:
        """A new step: nothing seen yet; ``announce`` says whether the person hears about it."""
        self.watermark, self.floor, self.announce = 0, 0, announce

    def start_attempt(self, *, fresh: bool) -> None:
        """An attempt begins; ``fresh``: in a new session, whose first request is the step's start-up size."""
        self._floor_pending = fresh and not self.writing_handoff

    def see(self, tokens: int) -> bool:
        """Take one request's context size. Returns True when "near the line" is to be said now (once)."""
        self.watermark = max(self.watermark, tokens)
        if self._floor_pending:
            self.floor, self._floor_pending = tokens, False
        near = self.policy.enabled and self.announce and not self.near_said and self.watermark >= self.policy.warn_at
        if near:
            self.near_said = True
        return near

    def is_due(self) -> bool:
        """The session crossed the hand-off line (and no hand-off is being written)."""
        return self.policy.enabled and not self.writing_handoff and self.watermark >= self.policy.at

    def starts_small(self) -> bool:
        """A fresh session of this step already starts over the line: no successor could do better."""
        return self.floor >= self.policy.at

    def made_room(self) -> bool:
        """The context starts again (its large results spilled). Returns True when "made room" is to be
        said now (once)."""
        self.watermark = 0
        say = self.announce and not self.squeeze_said
        if say:
            self.squeeze_said = True
        return say

    def handed_off(self) -> None:
        """A successor takes over: it starts from nothing, and its own first request is the new floor."""
        self.watermark, self.floor = 0, 0

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Around the turn that writes a hand-off."""
        self.writing_handoff = True
        try:
            yield
        finally:
            self.writing_handoff = False
