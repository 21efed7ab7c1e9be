"""Goals and the goal guard: the goal step (设定目标) and ``with_goal``, which puts an independent
judge after every work round.

Guarantees:
    - The judge is a NEW session every round and every wake: it is run from the gate with no
      ``resume``, after the lineage hook was detached, so it never enters lineage and never learns
      how hard the worker tried. Letting it continue would turn the guard into self-audit.
    - A rejected round resumes the SAME work session with the judge's feedback (``干活#round2`` …).
    - A person's words said while the judge rules are not cut into the judge's session: they are
      for the worker, who hears them in its next turn (``Workflow``: one more attempt if the judge
      passed the round).
    - The goal setter's session is not sent a prompt it already holds (a run killed after sending it):
      the brief, and every word a person said in it, is in its context once (``GOAL_RESUME``).
    - The judge reads the frozen ``目标.md``; a goal re-derived after a wake phrase is what it judges.
    - No fake passes: without a runtime the gate aborts; an unclear verdict counts as "not yet".
    - What a person wrote into 目标.md by hand is never lost (``workflow.edits``): a version that reads
      as a goal with checks is used as it is (``ctx["_goal_edited"]`` holds it, word for word, for the
      worker); when the goal is derived again, the goal setter gets it verbatim ("keep what they
      said") and it is kept aside as ``目标.md.edited-<ts>`` before the new goal replaces it.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flower_magic.core import goal as goal_note
from flower_magic.core.errors import logged
from flower_magic.core.events import Event
from flower_magic.core.goal import Goal
from flower_magic.core.words import say
from flower_magic.workflow.base import Ctx, Step, StepAbort
from flower_magic.workflow.edits import hand_over, said_path, tell, tell_kept
from flower_magic.workflow.roles import SET_PROMPT, VERIFY_PROMPT, goal_setter, judge
from flower_magic.workflow.verdict import ACHIEVED, NOT_YET, UNREACHABLE, Verdict

log = logging.getLogger(__name__)

GOAL_STEP = "设定目标"
GOAL_KEY = "_goal"
VERDICT_KEY = "_verdict"
ROUND_KEY = "_goal_rounds"
VERDICTS_KEY = "_verdicts"  # every verdict of this process, in order (for front ends)
GOAL_EDITED_KEY = "_goal_edited"  # a person's version of 目标.md this run takes in, verbatim
GOAL_REDONE_KEY = "_goal_redone"  # a person's version of 目标.md was replaced by a goal derived again
_EDITED_TEXT_KEY = "_goal_edited_text"  # a person's version of 目标.md, for the goal setter's prompt

# Appended to the goal setter's prompt when 目标.md holds a person's version that is about to be replaced.
SET_EDITED = (
    "\n人亲手改过目标文件(.flower/notes/目标.md)。下面是他改后的原文,一字未动:\n\n"
    "----- 他改后的 目标.md -----\n{text}\n----- 原文到此 -----\n\n"
    "**保留他写的**:他加的判定项、改过的措辞都要留下(跟确认书冲突的,以确认书里更新的说法为准,"
    "并在那一条后面注明)。照「目标 / 判定清单」的格式输出完整的目标。\n"
)

STATE_KEYS = {ACHIEVED: "state_achieved", NOT_YET: "state_not_yet", UNREACHABLE: "state_unreachable"}
# The options of the "unreachable" question, as a person reads them in Chinese (tests answer with these).
ACCEPT = say("opt_accept", "zh")
AMEND = say("opt_amend", "zh")
MISJUDGED = say("opt_misjudged", "zh")
# Reasons flower gives a verdict itself, as the worker reads them (the original runtime's words); a
# person reads the ``judge_*`` phrase of each (``Verdict.set_reason``).
UNCLEAR = "判定者没给出明确结论,按未达成处理"
AMENDED_REASON = "目标已被人修改。新目标:\n{block}"
HUMAN_SAYS_REACHABLE = "人认为这个目标是能达成的,判定者判断有误。人的说法:{answer}"
# Sent instead of the goal setter's prompt to a session that already holds that very prompt (a run
# killed after sending it): the brief, and every word a person said in it, is in its context once.
GOAL_RESUME = "接着刚才的活:照上文那份需求确认书,交出完整的目标,照「判定清单」的格式输出。"


def _hydrate(ctx: Ctx, goal: Goal, name: str) -> None:
    ctx[GOAL_KEY] = goal
    ctx[name] = goal.prompt_block()


def goal_step(
    channel: Any,
    *,
    goal_path: Path,
    brief_key: str = "确认需求",
    name: str = GOAL_STEP,
    instructions: str = "",
    always_set: bool = False,
    redo: Callable[[Ctx], bool] | None = None,
    on_fail: str = "stop",
    retries: int = 0,
    lang: str = "zh",
) -> Step:
    """Derive 目标.md from the brief; skipped when it is complete, unless ``always_set`` or ``redo(ctx)``.

    Continuing its session, the goal setter gets the full brief again (re-deriving needs it), unless the
    session already holds that very prompt: then ``GOAL_RESUME``, so nothing in it is there twice.

    Args:
        redo: decides at run time that the goal must follow the brief (the person edited 需求.md).
        lang: the language of the lines the person reads.
    """

    def when(ctx: Ctx) -> bool:
        ctx.pop(GOAL_EDITED_KEY, None)
        ctx.pop(GOAL_REDONE_KEY, None)
        now = goal_note.read(goal_path)
        text = now.text or ""
        ctx[_EDITED_TEXT_KEY] = text.strip() if now.is_edited else ""
        goal = Goal.parse(text) if now.text is not None else None
        if always_set or (redo is not None and redo(ctx)) or goal is None or not goal.complete():
            return True
        _hydrate(ctx, goal, name)
        if now.is_news:
            ctx[GOAL_EDITED_KEY] = text.strip()
            hand_over(ctx, now)
            tell(ctx, lang, "note_edited", path=goal_path)
        return False

    def prompt(ctx: Ctx) -> str:
        text = SET_PROMPT.format(brief=ctx.get(brief_key) or "(没有确认书)")
        edited = str(ctx.get(_EDITED_TEXT_KEY) or "")
        return text + SET_EDITED.format(text=edited) if edited else text

    def resume(ctx: Ctx) -> str:
        text = prompt(ctx)
        rt = ctx.get("_runtime")
        sid = (ctx.get("_sessions") or {}).get(name)
        held = rt is not None and sid and hasattr(rt, "holds_text") and rt.holds_text(sid, text)
        return GOAL_RESUME if held else text

    def gate(result: Any, ctx: Ctx) -> bool:
        goal = Goal.parse(result.text or "")
        if not goal.complete():
            return False
        aside = goal.write(goal_path)
        if aside is not None:
            ctx[GOAL_REDONE_KEY] = True
            tell_kept(ctx, lang, goal_path, aside)
        _hydrate(ctx, goal, name)
        doubtful = goal.unverifiable
        sink = ctx.get("_on_event")
        if doubtful and sink is not None:
            lines = "\n".join(f"  · {c}" for c in doubtful)
            where = said_path(ctx, goal_path)
            text = say("unverifiable", lang, n=len(doubtful), total=len(goal.checks), path=where, lines=lines)
            payload = {"unverifiable": doubtful, "total": len(goal.checks), "path": str(goal_path)}
            with logged(log, "gate"):
                sink(Event("task", text, payload=payload))
        return True

    def reduce(result: Any, ctx: Ctx) -> str:
        return str(ctx[name])

    def why(result: Any, ctx: Ctx) -> str:
        return say("goal_incomplete", lang)

    return Step(
        name,
        goal_setter(channel, instructions=instructions),
        prompt,
        when=when,
        gate=gate,
        reduce=reduce,
        resume_prompt=resume,
        on_fail=on_fail,
        retries=retries,
        why=why,
    )


def with_goal(
    step: Step,
    channel: Any,
    *,
    goal_path: Path,
    rounds: int = 3,
    can_run: bool = False,
    instructions: str = "",
    name: str | None = None,
    lang: str = "zh",
) -> Step:
    """``step`` with a judge after every round: at most ``rounds`` rounds in this wake."""
    label = name or f"{step.name}·判定"
    judge_spec = judge(can_run=can_run, instructions=instructions)

    async def gate(result: Any, ctx: Ctx) -> bool:
        rt = ctx.get("_runtime")
        if rt is None:
            raise StepAbort(say("judge_no_runtime", lang))
        ctx[ROUND_KEY] = ctx.get(ROUND_KEY, 0) + 1
        stored = ctx.get(GOAL_KEY)
        goal = stored if isinstance(stored, Goal) and stored.complete() else Goal.load(goal_path) or Goal()
        report = result.text or "(这一轮没有回话)"
        sink = ctx.get("_on_event")
        if sink is not None:
            with logged(log, "gate"):
                sink(Event("step", f"{label}#{ctx[ROUND_KEY]}", payload={"judge": True, "round": ctx[ROUND_KEY]}))
        verdict_run = await rt.run(
            judge_spec,
            VERIFY_PROMPT.format(goal=goal.prompt_block(), report=report),
            step_name=f"{label}#{ctx[ROUND_KEY]}",
            on_event=ctx.get("_on_event"),
            announce_context=False,  # the person steers the work, not the judge: no context notices
            takes_words=False,  # words said now are for the worker: they wait for its next turn
        )
        verdict = Verdict.parse(verdict_run.text if verdict_run.ok else "")
        ctx[VERDICT_KEY] = verdict
        ctx.setdefault(VERDICTS_KEY, []).append(verdict)
        _emit(ctx, verdict, goal, lang)
        if verdict.state == ACHIEVED:
            return True
        if verdict.state != UNREACHABLE:
            if not verdict.state and not verdict.reason:
                verdict.set_reason(UNCLEAR, "judge_unclear")
            return False
        return await _unreachable(channel, verdict, goal, goal_path, ctx, lang)

    def on_reject(result: Any, ctx: Ctx) -> str:
        verdict = ctx.get(VERDICT_KEY)
        return verdict.feedback() if isinstance(verdict, Verdict) else ""

    def why(result: Any, ctx: Ctx) -> str:
        verdict = ctx.get(VERDICT_KEY)
        state = verdict.state if isinstance(verdict, Verdict) else ""
        reason = (verdict.reason_for(lang) if isinstance(verdict, Verdict) else "") or say("no_reason", lang)
        shown = say(STATE_KEYS.get(state, "state_unclear"), lang)
        return say("rounds_used", lang, n=max(1, rounds), state=shown, reason=reason)

    return dataclasses.replace(step, retries=max(0, rounds - 1), gate=gate, on_reject=on_reject, why=why)


async def _unreachable(channel: Any, verdict: Verdict, goal: Goal, goal_path: Path, ctx: Ctx, lang: str = "zh") -> bool:
    """Ask the human what to do about a goal the judge calls unreachable."""
    reason = verdict.reason_for(lang) or say("no_reason", lang)
    accept, amend = say("opt_accept", lang), say("opt_amend", lang)
    ask = await channel.ask(say("unreachable_q", lang, reason=reason), [accept, amend, say("opt_misjudged", lang)])
    answer = (ask.answer or "").strip() if ask.state == "answered" else ""
    if not answer:
        raise StepAbort(say("unreachable_no_one", lang, reason=reason, path=said_path(ctx, goal_path)))
    if answer in (accept, ACCEPT) or answer.startswith((accept[:4], ACCEPT[:4])):
        return True
    if answer in (amend, AMEND) or answer.startswith(("修改", amend[:6])):
        extra = await channel.ask(say("new_goal_q", lang))
        text = (extra.answer or "").strip() if extra.state == "answered" else ""
        if text:
            amended = goal.amend(text)
            tell_kept(ctx, lang, goal_path, amended.write(goal_path))
            _hydrate(ctx, amended, GOAL_STEP)
            block = amended.prompt_block()
            verdict.set_reason(AMENDED_REASON.format(block=block), "judge_amended", block=block)
        return False
    verdict.set_reason(HUMAN_SAYS_REACHABLE.format(answer=answer), "judge_overruled", answer=answer)
    return False


def _emit(ctx: Ctx, verdict: Verdict, goal: Goal, lang: str = "zh") -> None:
    """Tell front ends the verdict, check by check (for the goal list)."""
    sink = ctx.get("_on_event")
    if sink is None:
        return
    checks = check_marks(goal.checks, verdict)
    payload = {
        "verdict": verdict.state or "unclear",
        "reason": verdict.reason_for(lang),
        "failed": list(verdict.failed),
        "round": ctx.get(ROUND_KEY, 0),
        "checks": checks,
    }
    with logged(log, "emit"):
        sink(
            Event(
                "task",
                say("verdict_line", lang, state=say(STATE_KEYS.get(verdict.state, "state_unclear"), lang)),
                payload={"kind": "verdict", **payload},
            )
        )


def check_marks(checks: list[str], verdict: Verdict) -> list[dict[str, Any]]:
    """Each check with the verdict's mark: passed unless the judge listed it as failed (or ruled
    "not yet" without listing anything, when no check can be called passed)."""
    failed = set(verdict.failed)
    if verdict.state != ACHIEVED and not failed:
        return [{"check": c, "passed": False} for c in checks]
    return [{"check": c, "passed": verdict.state == ACHIEVED or not _mentioned(c, failed)} for c in checks]


def last_verdict(rows: list[dict[str, Any]]) -> Verdict | None:
    """The newest judge verdict recorded in manifest rows (their ``text`` is the verdict)."""
    for row in reversed(rows):
        if "·判定#" in str(row.get("step", "")) and row.get("ok"):
            return Verdict.parse(str(row.get("text") or ""))
    return None


def unheard_verdict(rows: list[dict[str, Any]], work_step: str) -> Verdict | None:
    """The failing verdict a wake ended on, when the work session has not run since to receive it.

    A rejected round sends the verdict to the worker as the next round's prompt; the last round of a
    wake has no next round, so its verdict would be lost (issue 13: 5 of 29 failing verdicts).

    Args:
        rows: manifest rows, oldest first.
        work_step: the judged step's name (its judge's rows are ``<work_step>·判定#N``).

    Returns:
        The verdict, when the newest row of the step or its judge is a judge's clear "not yet" or an
        unclear one (never "achieved" or "unreachable": the person decided those); else None.
    """
    judged = f"{work_step}·判定#"
    for row in reversed(rows):
        step = str(row.get("step", ""))
        if step.startswith(judged):
            if not row.get("ok"):
                return None
            verdict = Verdict.parse(str(row.get("text") or ""))
            if verdict.state in (ACHIEVED, UNREACHABLE):
                return None
            if not verdict.state and not verdict.reason:
                verdict.set_reason(UNCLEAR, "judge_unclear")
            return verdict
        if step == work_step or step.startswith(f"{work_step}#"):
            return None  # the worker ran after it: the verdict went out as that round's prompt
    return None


def _mentioned(check: str, failed: set[str]) -> bool:
    """Whether a check is among the judge's failed items (judges quote them loosely)."""

    def key(text: str) -> str:
        return re.sub(r"[。.;;\s]+$", "", text.strip())[:40]

    core = key(check)
    return any(core and (core in f or key(f) in check) for f in failed)
