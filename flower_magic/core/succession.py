"""The hand-off itself: the full session writes what its successor needs, then a new session takes over.

Called by ``Runtime.run`` when the context crossed the hand-off line (``context-full-handoff``) or the
API said the prompt is too long. It is not compaction: the document is a file the person can read
and edit (``<workspace>/.flower/notes/交接-<step>.md``), and what was lost is visible.

Guarantees:
    - The old session id goes to ``StepResult.retired``; the step continues in a NEW session whose
      first message is the hand-off, and lineage follows the successor (the runtime's ``on_session``
      hook sees the new id).
    - A session that overflowed is not asked to write anything (it cannot): a degraded hand-off is
      used, and the overflow size calibrates the window for next time.
    - Runaways stop: after ``max_generations`` successors, or two degraded hand-offs in a row, the
      step fails with an error that says which setting to change.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from typing import TYPE_CHECKING

from flower_magic.core.durable import write_atomic
from flower_magic.core.events import Event, Sink
from flower_magic.core.handoff import (
    OVERFLOW_WHY,
    Handoff,
    degraded,
    degraded_streak_error,
    generation_cap_error,
    handoff_path,
    handoff_prompt,
    model_mismatch,
    remember_overflow,
)
from flower_magic.core.result import HANDOFF_DUE, Plan, StepResult
from flower_magic.core.rundir import notes_dir
from flower_magic.core.words import human_tokens

if TYPE_CHECKING:
    from flower_magic.core.agent import AgentSpec
    from flower_magic.core.runtime import Runtime

DEGRADED_IN_ROW_LIMIT = 2  # the "novel" run burned $3,000 on 7 empty hand-offs in a row


def base_step(label: str) -> str:
    """``干活#round2`` → ``干活``: hand-off files are per step, not per attempt."""
    return label.split("#", 1)[0]


async def _write_turn(rt: Runtime, spec: AgentSpec, result: StepResult) -> tuple[Handoff, str]:
    """Resume the full session for one more turn that writes the hand-off. Returns it and why it is
    degraded ("" if it is not)."""
    step = base_step(result.step)
    turn = StepResult(step=result.step, session_id=result.session_id)
    rt._writing_handoff = True
    try:
        # Not streamed, and without the step's budget cap: an unfinished hand-off is worth the spend.
        await rt._attempt(
            replace(spec, max_budget_usd=None),
            Plan(handoff_prompt(rt._watermark, rt.handoff.window), resume=result.session_id),
            turn,
            None,
        )
    except Exception as exc:
        return Handoff(step=step), type(exc).__name__
    finally:
        rt._writing_handoff = False
    result.cost_usd = round(result.cost_usd + turn.cost_usd, 6)
    result.num_turns += turn.num_turns
    if not turn.ok:
        return Handoff(step=step), (turn.error or rt.say("handoff_turn_failed"))[:80]
    doc = Handoff.parse(turn.text, step=step)
    return doc, ("" if doc.complete() else rt.say("handoff_missing", sections="/".join(doc.missing())))


async def hand_off(
    rt: Runtime,
    spec: AgentSpec,
    prompt: str,
    result: StepResult,
    fresh: int,
    degraded_in_row: int,
    on_event: Sink | None,
) -> tuple[str, int] | None:
    """Write the hand-off and retire the session. Returns the successor's first prompt and the count
    of degraded hand-offs in a row, or None when the step must stop (``result.error`` says why)."""
    policy = rt.handoff
    step = base_step(result.step)
    overflowed = result.error != HANDOFF_DUE
    if overflowed and rt._watermark > 0:
        remember_overflow(rt._watermark)
    if len(result.retired) >= policy.max_generations:
        result.error = generation_cap_error(len(result.retired), policy)
        return None
    context = rt._watermark
    if overflowed:
        doc, why = degraded(step, prompt, OVERFLOW_WHY), OVERFLOW_WHY
    else:
        rt._emit(
            on_event,
            Event(
                "handoff",
                rt.say("handoff_writing", ctx=f"{context / 1000:.1f}", window=policy.window // 1000),
                payload={"phase": "writing", "step": result.step, "context": context, "window": policy.window},
            ),
        )
        doc, why = await _write_turn(rt, spec, result)
        if why:
            doc = degraded(step, prompt, why)
    if why:
        result.errors.append(rt.say("handoff_degraded_error", why=why))
    path = ""
    with contextlib.suppress(OSError):
        target = handoff_path(notes_dir(rt.workspace), step)
        write_atomic(target, doc.to_markdown().encode("utf-8"))
        path = str(target)
    rt._emit(
        on_event,
        Event(
            "handoff",
            rt.say("handoff_done", step=step),
            payload={
                "phase": "done",
                "step": result.step,
                "context": context,
                "window": policy.window,
                "degraded": doc.degraded,
                "path": path,
                "sections": {"doing": doc.doing, "decided": doc.decided, "deadends": doc.deadends, "next": doc.next},
            },
        ),
    )
    assert result.session_id is not None
    result.retired.append(result.session_id)
    streak = degraded_in_row + 1 if doc.degraded else 0
    if streak >= DEGRADED_IN_ROW_LIMIT:
        result.error = degraded_streak_error(streak, policy)
        return None
    result.session_id = None
    rt._watermark, rt._warned = 0, False
    return doc.prompt_block(), streak


def watch_context(rt: Runtime, context: int, result: StepResult, on_event: Sink | None) -> None:
    """Track the main thread's context: the step's watermark, and one warning per generation when it
    comes within ``WARN_BEFORE_TOKENS`` of the hand-off line."""
    result.context = context
    rt._watermark = max(rt._watermark, context)
    policy = rt.handoff
    if policy.enabled and not rt._warned and rt._watermark >= policy.warn_at:
        rt._warned = True
        text = rt.say("handoff_near", ctx=human_tokens(context), at=f"{policy.at / 1000:.0f}")
        payload = {"phase": "near", "step": result.step, "context": context, "window": policy.window, "at": policy.at}
        rt._emit(on_event, Event("handoff", text, payload=payload))


def check_model(rt: Runtime, served: str, on_event: Sink | None) -> None:
    """Warn once when the gateway serves another model than configured: the window guess is then off."""
    want = (
        rt.env.get("ANTHROPIC_MODEL")
        or os.environ.get("ANTHROPIC_MODEL")
        or os.environ.get("ANTHROPIC_DEFAULT_OPUS_MODEL")
        or ""
    )
    warning = model_mismatch(want, served) if want else None
    if warning:
        payload = {"model_mismatch": True, "want": want, "served": served}
        rt._emit(on_event, Event("error", warning, payload=payload))
