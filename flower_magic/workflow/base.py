"""Steps and workflows, continuous by default: each step continues its own session across processes.

Guarantees:
    - With ``continuous=True`` (the default) a step with no ``resume_from`` continues the session
      lineage recorded for its name, if that lineage belongs to this workspace and the store still
      holds the transcript; if the store never received it (the process died in the first second),
      the step starts over under the SAME session id, so the id on disk stays the step's id.
    - The lineage hook is attached only around the step's own ``runtime.run`` call: a gate (the
      judge) running on the same runtime never enters lineage.
    - ``woke`` is bumped once at the start of every ``run()``, even when every step is skipped.
    - A step stopped by a message past the read limit (``resilience.is_too_big``) gets no further
      round or retry: it fails, and the session that holds its work stays in lineage.
    - A step stopped because its context cannot get under the hand-off line (``handoff.ContextStop``)
      is still judged by its gate (the judge rules on what is on disk), then gets no further round:
      it passes if the judge says the goal is met, and otherwise fails with the stop's message.
    - Words a person said for a step after its last turn ended (while its gate, the judge, ruled:
      ``Runtime.words_waiting``), and mail it never read from its inbox, are heard by the same session
      before the step ends: one more attempt that does not count as a round or retry, then the gate
      rules again.
    - A continuous workflow holds its run dir's lock (``core.runlock``) while it runs, taken before
      lineage is read or bumped: a second process running one in the same run dir gets
      ``RunLocked`` and writes nothing. In one process the hold is shared (a front end that took
      the lock first, a workflow nested in another), so it never deadlocks on itself.
Not guaranteed:
    - Exclusion for ``continuous=False`` workflows and for a ``Runtime`` used directly (they take no
      lock), or between two threads of one process (they share the process's hold).
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flower_magic.core.agent import AgentSpec
from flower_magic.core.entries import is_session_id
from flower_magic.core.errors import FlowerError
from flower_magic.core.events import Event, Sink, emit
from flower_magic.core.handoff import is_context_stop
from flower_magic.core.lineage import Lineage
from flower_magic.core.resilience import is_too_big
from flower_magic.core.result import INTERRUPTED, after_words_prompt
from flower_magic.core.runlock import acquire, died_before, note_step
from flower_magic.core.words import say

Ctx = dict[str, Any]
Prompt = str | Callable[[Ctx], str]


log = logging.getLogger(__name__)


class StepAbort(FlowerError):
    """Raised by a gate: stop this step now, do not retry."""


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


@dataclass
class Step:
    """One step of a workflow.

    Attributes:
        name: the step's name (the lineage key and the manifest's ``step``).
        spec: the agent that does it.
        prompt: the message, or a callable of ctx.
        resume_from: continue the session another step produced in THIS run (never lineage).
        fork: with ``resume_from``, branch the conversation under a new id.
        retries: extra attempts when the gate rejects the result.
        gate: ``(result, ctx) -> bool`` (sync or async); may raise ``StepAbort``.
        on_fail: ``stop`` | ``skip`` | ``continue`` once the attempts are used up.
        when: ``(ctx) -> bool``; False skips the step entirely.
        on_reject: ``(result, ctx) -> str``; a non-empty answer resumes the same session with it.
        resume_prompt: what to send instead of ``prompt`` when continuing a lineage session.
        reduce: ``(result, ctx) -> str``: what the step puts into ``ctx[name]``.
        why: ``(result, ctx) -> str``: why a result the gate rejected stops the workflow, in the
            person's language (``ctx["_aborted"]``); without it a general line says the step did not
            pass its check.
    """

    name: str
    spec: AgentSpec
    prompt: Prompt
    resume_from: str | None = None
    fork: bool = False
    retries: int = 0
    gate: Callable[[Any, Ctx], Any] | None = None
    on_fail: str = "stop"
    when: Callable[[Ctx], Any] | None = None
    on_reject: Callable[[Any, Ctx], Any] | None = None
    resume_prompt: Prompt | None = None
    reduce: Callable[[Any, Ctx], str] | None = None
    why: Callable[[Any, Ctx], str] | None = None

    def render(self, ctx: Ctx, *, resuming: bool = False) -> str:
        chosen = self.resume_prompt if resuming and self.resume_prompt is not None else self.prompt
        return chosen(ctx) if callable(chosen) else chosen


def attempt_label(step: Step, attempt: int) -> str:
    """The manifest name of attempt ``attempt`` (0-based): ``X``, ``X#retryN`` or ``X#roundN``."""
    if attempt == 0:
        return step.name
    return f"{step.name}#round{attempt + 1}" if step.on_reject else f"{step.name}#retry{attempt}"


@dataclass
class Workflow:
    """An ordered list of steps sharing one ctx dict.

    Attributes:
        steps: the steps, in order.
        name: the workflow's name.
        context: the ctx dict (kept across runs of this object).
        channel: a human channel (ask / inbox tools), wired to the same event sink.
        continuous: continue each step's lineage session across processes (default True).
    """

    steps: list[Step]
    name: str = "workflow"
    context: Ctx = field(default_factory=dict)
    channel: Any = None
    continuous: bool = True

    async def run(
        self, runtime: Any, *, on_event: Sink | None = None, on_step: Callable[[Step, Any], Any] | None = None
    ) -> Ctx:
        """Run every step; returns ctx (``_woke``, ``_sessions``, ``_results``, and one key per step).

        A step that stops the workflow leaves ``_failed_at`` (its name) and says why: its result's
        ``error``, or ``_aborted`` (a gate's ``StepAbort``, or ``Step.why`` for a result the gate
        rejected). ``_died_before`` is the run lock's record of a previous process that ended without
        releasing it (``core.runlock.died_before``), else None: only then was the last run cut short.

        A continuous workflow holds its run dir's lock (``core.runlock``) from before lineage is touched
        to its end, joining the hold of a front end (or an outer workflow) in this process.

        Raises:
            RunLocked: another process runs a workflow in this run dir; nothing was written.
        """
        with _hold_run_dir(self, runtime):
            return await self._run(runtime, on_event=on_event, on_step=on_step)

    async def _run(self, runtime: Any, *, on_event: Sink | None, on_step: Callable[[Step, Any], Any] | None) -> Ctx:
        ctx = self.context
        ctx["_runtime"] = runtime
        ctx["_on_event"] = on_event
        if self.channel is not None and on_event is not None and getattr(self.channel, "on_event", 0) is None:
            self.channel.on_event = on_event
        sessions: dict[str, str] = ctx.setdefault("_sessions", {})
        ctx.setdefault("_results", {})
        for key in ("_failed_at", "_aborted", "_interrupted"):
            ctx.pop(key, None)
        run_dir = getattr(runtime, "run_dir", None)
        ctx["_died_before"] = died_before(run_dir) if self.continuous and run_dir else None
        lineage: Lineage | None = None
        # Sessions lineage recorded but the store never received: restart them under the same id.
        unstored: dict[str, str] = {}
        if self.continuous and getattr(runtime, "run_dir", None) and getattr(runtime, "workspace", None):
            lineage = Lineage.open(runtime.run_dir, runtime.workspace)
            ctx["_lineage"] = lineage
            ctx["_woke"] = lineage.bump()
            recover = getattr(runtime, "recover", None)
            has = getattr(runtime, "has_session", None)
            for name, sid in lineage.steps.items():
                if recover is not None:
                    known = await recover(sid)
                else:
                    known = has is None or has(sid)
                if known:
                    sessions.setdefault(name, sid)
                elif is_session_id(sid):
                    unstored[name] = sid
                else:
                    # Not an id the CLI takes (a hand edit, another tool): the step starts a new session.
                    text = say("lineage_bad_sid", _env_lang(), step=name, sid=repr(sid[:60]))
                    emit(on_event, Event("notice", text, payload={"step": name, "bad_session_id": sid[:200]}))
        else:
            ctx["_woke"] = ctx.get("_woke", 0) + 1
        total = len(self.steps)
        for index, step in enumerate(self.steps, start=1):
            if step.when is not None and not await _maybe_await(step.when(ctx)):
                continue
            if step.resume_from:
                if step.resume_from not in sessions:
                    raise ValueError(say("resume_from_missing", _env_lang(), step=step.name, source=step.resume_from))
                resume: str | None = sessions[step.resume_from]
                carried = False
            else:
                resume = sessions.get(step.name)
                carried = resume is not None
            keep_id = unstored.get(step.name) if resume is None else None
            emit(
                on_event,
                Event(
                    "step",
                    step.name,
                    payload={"index": index, "total": total, "resumed": carried, "woke": ctx.get("_woke", 1)},
                ),
            )
            result, passed = await self._attempts(step, ctx, runtime, resume, carried, keep_id, lineage, on_event)
            ctx["_results"][step.name] = result
            if on_step is not None:
                await _maybe_await(on_step(step, result))
            if result.session_id:
                sessions[step.name] = result.session_id
                if lineage is not None:
                    lineage.remember(step.name, result.session_id)
            if passed:
                ctx[step.name] = step.reduce(result, ctx) if step.reduce else result.text
                continue
            if step.on_fail == "skip":
                continue
            if step.on_fail == "continue":
                ctx[step.name] = result.text
                continue
            ctx["_failed_at"] = step.name
            if result is not None and result.ok and not ctx.get("_aborted"):
                # The model answered, the gate said no: without this line the stop would say nothing.
                lang = getattr(runtime, "lang", None) or _env_lang()
                why = step.why(result, ctx) if step.why is not None else ""
                ctx["_aborted"] = why or say("step_rejected", lang, step=step.name)
            break
        return ctx

    async def _attempts(
        self,
        step: Step,
        ctx: Ctx,
        runtime: Any,
        resume: str | None,
        carried: bool,
        keep_id: str | None,
        lineage: Lineage | None,
        on_event: Sink | None,
    ) -> tuple[Any, bool]:
        prompt = step.render(ctx, resuming=carried)
        fork = step.fork
        result: Any = None
        passed = False
        attempts = step.retries + 1  # and one more each time words wait after a passed attempt
        for attempt in itertools.count():
            if attempt >= attempts:
                break
            label = attempt_label(step, attempt)
            if attempt:
                # A sub-header for the next round or retry (not a new step: no index, same session).
                emit(on_event, Event("step", label, payload={"attempt": attempt + 1, "resumed": resume is not None}))
            if lineage is not None:
                runtime.on_session = _remember(lineage, step.name)
                note_step(runtime.run_dir, label)  # what a refused front end is told is running
            try:
                result = await runtime.run(
                    step.spec,
                    prompt,
                    step_name=label,
                    resume=resume,
                    fork=fork,
                    session_id=keep_id,
                    on_event=on_event,
                    # A lineage session whose first process died before its prompt was stored gets
                    # the step's own prompt, not only the resume prompt.
                    opening=(lambda: step.render(ctx, resuming=False)) if carried and attempt == 0 else None,
                )
            finally:
                runtime.on_session = None
            keep_id = None
            if not result.ok and result.error == INTERRUPTED:
                # A person stopped it: no judging, no more rounds; the session stays for the next run.
                ctx["_interrupted"] = step.name
                break
            if not result.ok and is_too_big(result.error):
                # The CLI went on with the turn unseen past that message, so its session holds work: a new
                # round would start over in a new session, and lineage would forget this one.
                break
            if not result.ok and is_context_stop(result.error):
                # The work cannot go on in this window (core.succession): the judge still rules on what
                # is on disk, then the step stops, because another round would hit the same wall.
                try:
                    passed = bool(step.gate is not None and await _maybe_await(step.gate(result, ctx)))
                except StepAbort as exc:
                    ctx["_aborted"] = str(exc)
                    passed = False
                break
            try:
                passed = bool(result.ok and (step.gate is None or await _maybe_await(step.gate(result, ctx))))
            except StepAbort as exc:
                ctx["_aborted"] = str(exc)
                passed = False
                break
            unheard = _waiting_words(runtime, self.channel) if passed and result.session_id else ""
            if unheard:
                # Said after the step's last turn (while its gate, the judge, ruled), or mail it never
                # looked at: the same session hears them now, in one more attempt of its own, and the
                # gate rules again.
                prompt, resume, fork = unheard, result.session_id, False
                attempts += 1
                continue
            if passed:
                break
            nxt = ""
            if step.on_reject is not None and result.session_id:
                nxt = str(await _maybe_await(step.on_reject(result, ctx)) or "")
            if nxt:
                prompt, resume, fork = nxt, result.session_id, False
            else:
                prompt = step.render(ctx, resuming=False)
                resume = ctx["_sessions"].get(step.resume_from) if step.resume_from else None
                fork = step.fork
        return result, passed


def _waiting_words(runtime: Any, channel: Any) -> str:
    """What a person said to this step that its session has not had, taken, as the prompt that gives it:
    words no attempt took (``Runtime.take_words``) and mail still in the inbox (``HumanChannel``).
    "" when there is none."""
    take = getattr(runtime, "take_words", None)
    words = take() if take is not None and runtime.words_waiting() else None
    mail = channel.check_inbox() if channel is not None and getattr(channel, "pending_mail", list)() else ""
    return "\n\n---\n\n".join(p for p in (after_words_prompt(words) if words else "", mail) if p)


def _hold_run_dir(wf: Workflow, runtime: Any) -> contextlib.AbstractContextManager[Any]:
    """The run lock for a continuous workflow's run dir (joined if this process holds it), else nothing."""
    run_dir = getattr(runtime, "run_dir", None)
    if not (wf.continuous and run_dir and getattr(runtime, "workspace", None)):
        return contextlib.nullcontext()
    return acquire(run_dir, front_end="api", join=True, lang=_env_lang())


def _env_lang() -> str:
    from flower_magic.core.words import pick_lang

    try:
        return pick_lang()
    except ValueError:
        return "zh"


def _remember(lineage: Lineage, step: str) -> Callable[[str], None]:
    def hook(session_id: str) -> None:
        lineage.remember(step, session_id)

    return hook
