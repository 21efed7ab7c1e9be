"""Making room when a session's context reaches the hand-off line: squeeze, hand off, or stop.

A runtime holds one ``Succession``, built with what it lends it: its context watch
(``core.context_watch.ContextWatch``: the watermark, the floor, what was said), its store, where hand-offs
are written, and two of its own moves (one more turn of a session; carry a session on). The dependency
points one way: this module never sees the ``Runtime``. ``Runtime.run`` calls ``make_room`` when the
context crossed the hand-off line (``context-full-handoff``) or the API said the prompt is too long. It
decides, in this order:

1. **Squeeze** (trimming on, once per turn): every large tool result the live context still holds in
   full — those of the turn in progress too — is spilled as trimming spills (byte for byte, hashed
   file names), and the SAME session resumes where it stopped. Nothing is lost, so it comes first.
2. **Stop**, naming the real cause, when another session could not get under the line either: a fresh
   session of this step already starts above it (``WINDOW_TOO_SMALL``), or a successor still in its
   first turn crossed it again because of one result that does not fit next to its start-up
   (``RESULT_TOO_BIG``). Handing off again would only repeat: this is what kept the 40K-window run of
   issue 13 handing off 48 times.
3. **Hand off**: the full session writes what its successor needs, then a new session takes over.
   It is not compaction: the document is a file the person can read and edit
   (``<workspace>/.flower/notes/交接-<step>.md``), and what was lost is visible.

Guarantees:
    - The old session id goes to ``StepResult.retired``; the step continues in a NEW session whose
      first message is the hand-off, and lineage follows the successor (the runtime's ``on_session``
      hook sees the new id).
    - A session that overflowed is not asked to write anything (it cannot): a degraded hand-off is
      used, and the overflow size calibrates the window for next time.
    - The hand-off turn waits out an outage as a step's attempt does (it is written once the API is
      back, not degraded because it was away); a stop during that wait ends the step with the full
      session still its own, nothing retired: the next wake hands off from it.
    - Runaways stop: a successor that cannot get under the line stops at its first crossing after
      a squeeze (``ContextStop``); after ``max_generations`` successors, or two degraded hand-offs in a
      row, the step fails too. Each error says which setting to change.
    - A squeeze never loses anything: the spilled text is in ``.flower/spill/`` and sessions.db.
    - The person hears "near the line" and "made room" once per runtime, and never for a gate's own
      sessions (the judge's): those notices are about the work they steer.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flower_magic.core.agent import AgentSpec
from flower_magic.core.context_watch import ContextWatch
from flower_magic.core.durable import write_atomic
from flower_magic.core.events import Event, Sink, emit
from flower_magic.core.handoff import (
    OVERFLOW_WHY,
    RESULT_TOO_BIG,
    SQUEEZE_PROMPT,
    WINDOW_TOO_SMALL,
    ContextStop,
    Handoff,
    degraded,
    degraded_streak_error,
    generation_cap_error,
    handoff_path,
    handoff_prompt,
    model_mismatch,
    remember_overflow,
)
from flower_magic.core.resilience import RESUME_PROMPT
from flower_magic.core.result import HANDOFF_DUE, INTERRUPT_NOTE, INTERRUPTED, Plan, StepResult
from flower_magic.core.storage import RunStore
from flower_magic.core.words import human_tokens, say

DEGRADED_IN_ROW_LIMIT = 2  # the "novel" run burned $3,000 on 7 empty hand-offs in a row
# A result is blamed for not fitting only when it does not fit even counted at 4 characters a token
# (most text runs 3-4): the generous side, so a stop never blames a result that would have fit.
BLAME_CHARS_PER_TOKEN = 4

# One more turn of a session (the runtime's attempt): the spec, the plan, the step's result, a sink.
Attempt = Callable[[AgentSpec, Plan, StepResult, Sink | None], Awaitable[None]]
# The next attempt on the step's session with a prompt (resumed, or restarted under its id).
CarryOn = Callable[[StepResult, str], Awaitable[Plan]]
# The runtime's wait between attempts (``Runtime._retry_wait``): waits out an outage and backs off;
# False when the attempt is not tried again (not retryable, out of attempts, or a stop ended the wait).
WaitOut = Callable[[StepResult, int, Sink | None], Awaitable[bool]]


@dataclass
class Turn:
    """What one ``Runtime.run`` knows about the session it is in, to decide how to make room.

    Attributes:
        successor: the session began with a hand-off in this run and has not finished its first turn.
        squeezed: its large results were already spilled once in this turn.
        degraded_in_row: degraded hand-offs in a row.
    """

    successor: bool = False
    squeezed: bool = False
    degraded_in_row: int = 0


def base_step(label: str) -> str:
    """``干活#round2`` → ``干活``: hand-off files are per step, not per attempt."""
    return label.split("#", 1)[0]


class Succession:
    """Makes room for a runtime's steps when their context is full.

    Args:
        watch: the runtime's context watch (read and told when the context starts again).
        store: the runtime's session store (its large results are squeezed, or blamed).
        project_key: the store's key for the runtime's workspace.
        notes: the folder hand-offs are written to (``RunDir.notes``).
        archive: where an earlier hand-off of the same step is moved first (``RunDir.handoffs_archive``).
        attempt: one more turn of a session (the hand-off is written in one).
        carry_on: the next attempt's plan on the step's session, with a prompt (after a squeeze).
        lang: the language of what the person hears.
    """

    def __init__(
        self,
        watch: ContextWatch,
        store: RunStore,
        *,
        project_key: str,
        notes: Path,
        archive: Path,
        attempt: Attempt,
        carry_on: CarryOn,
        wait_out: WaitOut,
        lang: str,
    ) -> None:
        self.watch = watch
        self.store = store
        self.project_key = project_key
        self.notes = notes
        self.archive = archive
        self.attempt = attempt
        self.carry_on = carry_on
        self.wait_out = wait_out
        self.lang = lang

    def say(self, key: str, **fields: Any) -> str:
        return say(key, self.lang, **fields)

    def see(self, tokens: int, result: StepResult, on_event: Sink | None) -> None:
        """Take the main thread's context size: the step's watermark, the start-up size of a fresh
        session, and one warning per runtime (not for a gate's sessions) when it comes within
        ``WARN_BEFORE_TOKENS`` of the hand-off line."""
        result.context = tokens
        at, window = self.watch.policy.at, self.watch.policy.window
        if self.watch.see(tokens):
            text = self.say("handoff_near", ctx=human_tokens(tokens), at=f"{at / 1000:.0f}")
            payload = {"phase": "near", "step": result.step, "context": tokens, "window": window, "at": at}
            emit(on_event, Event("handoff", text, payload=payload))

    async def make_room(
        self, spec: AgentSpec, prompt: str, result: StepResult, turn: Turn, on_event: Sink | None
    ) -> Plan | None:
        """The session crossed the hand-off line (or overflowed): the next attempt's plan — the same
        session squeezed, or a successor — or None when the step must stop (``result.error`` says why)."""
        watch, policy = self.watch, self.watch.policy
        if watch.starts_small():
            # A fresh session of this step starts above the line: no successor could do better.
            result.error = ContextStop(WINDOW_TOO_SMALL, policy.at, policy.window, watch.floor).error(self.lang)
            return None
        key: Any = {"project_key": self.project_key, "session_id": result.session_id}
        if not turn.squeezed and self.store.trims:
            found = self.store.squeezable(key)
            if found:
                self.store.squeeze(key, {r.tool_use_id for r in found})
                turn.squeezed = True
                context = watch.watermark
                if watch.made_room():
                    self._announce_squeeze(result, context, sum(r.chars for r in found), len(found), on_event)
                return await self.carry_on(result, f"{SQUEEZE_PROMPT}\n\n{INTERRUPT_NOTE}")
        if turn.successor:
            stop = self._too_big(key)
            if stop is not None:
                result.error = stop.error(self.lang)
                return None
        verdict = await self.hand_off(spec, prompt, result, turn.degraded_in_row, on_event)
        if verdict is None:
            return None
        turn.successor, turn.squeezed, turn.degraded_in_row = True, False, verdict[1]
        watch.handed_off()
        return Plan(verdict[0])

    async def hand_off(
        self, spec: AgentSpec, prompt: str, result: StepResult, degraded_in_row: int, on_event: Sink | None
    ) -> tuple[str, int] | None:
        """Write the hand-off and retire the session. Returns the successor's first prompt and the count
        of degraded hand-offs in a row, or None when the step must stop (``result.error`` says why)."""
        policy = self.watch.policy
        step = base_step(result.step)
        overflowed = result.error != HANDOFF_DUE
        context = self.watch.watermark
        if overflowed and context > 0:
            remember_overflow(context)
        if len(result.retired) >= policy.max_generations:
            result.error = generation_cap_error(len(result.retired), policy)
            return None
        if overflowed:
            doc, why = degraded(step, prompt, OVERFLOW_WHY), OVERFLOW_WHY
        else:
            text = self.say("handoff_writing", ctx=f"{context / 1000:.1f}", window=policy.window // 1000)
            payload = {"phase": "writing", "step": result.step, "context": context, "window": policy.window}
            emit(on_event, Event("handoff", text, payload=payload))
            doc, why = await self._write_turn(spec, result, on_event)
            if why == INTERRUPTED:  # stopped while the turn waited for the API: keep the session
                result.error = INTERRUPTED
                return None
            if why:
                doc = degraded(step, prompt, why)
        if why:
            result.errors.append(self.say("handoff_degraded_error", why=why))
        path = ""
        with contextlib.suppress(OSError):  # the successor gets the hand-off in its prompt all the same
            target = handoff_path(self.notes, step, archive=self.archive)
            write_atomic(target, doc.to_markdown().encode("utf-8"))
            path = str(target)
        sections = {"doing": doc.doing, "decided": doc.decided, "deadends": doc.deadends, "next": doc.next}
        payload = {
            "phase": "done",
            "step": result.step,
            "context": context,
            "window": policy.window,
            "degraded": doc.degraded,
            "path": path,
            "sections": sections,
        }
        emit(on_event, Event("handoff", self.say("handoff_done", step=step), payload=payload))
        assert result.session_id is not None
        result.retired.append(result.session_id)
        streak = degraded_in_row + 1 if doc.degraded else 0
        if streak >= DEGRADED_IN_ROW_LIMIT:
            result.error = degraded_streak_error(streak, policy)
            return None
        result.session_id = None
        return doc.prompt_block(), streak

    async def _write_turn(self, spec: AgentSpec, result: StepResult, on_event: Sink | None) -> tuple[Handoff, str]:
        """Resume the full session for one more turn that writes the hand-off. Returns it and why it is
        degraded ("" if it is not; ``INTERRUPTED`` when a stop ended a wait for the API)."""
        step = base_step(result.step)
        turn = StepResult(step=result.step, session_id=result.session_id)
        prompt = handoff_prompt(self.watch.watermark, self.watch.policy.window)
        plan = Plan(prompt, resume=result.session_id)
        # Not streamed, and without the step's budget cap: an unfinished hand-off is worth the spend.
        writer = replace(spec, max_budget_usd=None)
        tries, again = 0, prompt
        try:
            with self.watch.writing():
                while True:
                    tries += 1
                    await self.attempt(writer, plan, turn, None)
                    # An outage is waited out (its notes shown) and the turn tried again, once the API is back.
                    if turn.ok or not await self.wait_out(turn, tries, on_event):
                        break
                    # The failed try may have left the request in the session: then it is told to go on.
                    key = {"project_key": self.project_key, "session_id": turn.session_id}
                    with contextlib.suppress(Exception):
                        again = RESUME_PROMPT if self.store.holds_text(key, prompt) else prompt
                    plan = await self.carry_on(turn, again)
        except Exception as exc:
            return Handoff(step=step), type(exc).__name__
        result.cost_usd = round(result.cost_usd + turn.cost_usd, 6)
        result.num_turns += turn.num_turns
        if turn.error == INTERRUPTED:
            return Handoff(step=step), INTERRUPTED
        if not turn.ok:
            return Handoff(step=step), (turn.error or self.say("handoff_turn_failed"))[:80]
        doc = Handoff.parse(turn.text, step=step)
        return doc, ("" if doc.complete() else self.say("handoff_missing", sections="/".join(doc.missing())))

    def _too_big(self, key: Any) -> ContextStop | None:
        """The stop for a successor holding one result that cannot fit next to its start-up. The
        successor began in this run, so everything it holds is what its first turn needed."""
        found = self.store.large_results(key)
        if not found:
            return None
        biggest = max(found, key=lambda r: r.chars)
        tokens = biggest.chars // BLAME_CHARS_PER_TOKEN
        floor, policy = self.watch.floor, self.watch.policy
        if floor + tokens < policy.at:
            return None  # the turn's own length filled it, not one result: a successor starts small again
        return ContextStop(RESULT_TOO_BIG, policy.at, policy.window, floor, tokens, biggest.tool)

    def _announce_squeeze(
        self, result: StepResult, context: int, chars: int, count: int, on_event: Sink | None
    ) -> None:
        policy = self.watch.policy
        text = self.say("handoff_squeezed", ctx=human_tokens(context), at=human_tokens(policy.at), n=count)
        payload = {
            "phase": "squeezed",
            "step": result.step,
            "context": context,
            "window": policy.window,
            "at": policy.at,
            "spilled": count,
            "chars": chars,
        }
        emit(on_event, Event("handoff", text, payload=payload))


def check_model(env: dict[str, str], served: str, on_event: Sink | None) -> None:
    """Warn once when the gateway serves another model than configured (``env``: the runtime's extra
    environment for the CLI): the window guess is then off."""
    want = (
        env.get("ANTHROPIC_MODEL")
        or os.environ.get("ANTHROPIC_MODEL")
        or os.environ.get("ANTHROPIC_DEFAULT_OPUS_MODEL")
        or ""
    )
    warning = model_mismatch(want, served) if want else None
    if warning:
        payload = {"model_mismatch": True, "want": want, "served": served}
        emit(on_event, Event("error", warning, payload=payload))
