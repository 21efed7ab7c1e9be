"""The default workflow: clarify → goals → work with a judge, and what a phrase said at wake does.

``flower "task"`` and ``%flower "task"`` both run ``starter_flow``.

Guarantees:
    - In a directory with a confirmed brief, a phrase is not a new task but one more remark in the
      conversation, and it reaches all three places it must: it is appended to 需求.md (so every
      later session reads it), it is sent to the resumed work session, and the goals are re-derived
      (so the judge checks what was asked now, not the old list). Drop any one and it fails silently.
    - Waking with nothing said appends nothing, re-derives nothing and costs nothing extra.
    - Words said before a brief exists (the clarification was cut short) add to ``诉求.md`` and reach
      the resumed clarifier once (``workflow.clarify``); remarks sent mid-run that a killed run never
      got to the work session reach it at the next wake (``WAKE_UNHEARD``), once.
    - A wake whose previous one ended on a failing verdict (its rounds ran out) resumes the work
      session with that verdict's reasons and failed checks: the judge's last word is never lost.
    - A person's own edit of 需求.md or 目标.md is said to the resumed work session as they wrote it,
      once (``workflow.edits``), and an edited brief has the goals derived again.
    - ``new=True`` archives lineage.json, 需求.md and 目标.md together into
      ``.flower/notes/archive/<ts>/`` (three facets of one history: never half of them) and starts
      fresh; sessions.db is untouched, every transcript stays readable.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flower_magic.core.brief import WAKE_LABEL, Brief, remarks
from flower_magic.core.durable import write_atomic
from flower_magic.core.errors import UserError
from flower_magic.core.human import HumanChannel
from flower_magic.core.lineage import Lineage
from flower_magic.core.note import read_note
from flower_magic.core.rundir import WORK_STEP, RunDir
from flower_magic.core.words import say
from flower_magic.workflow.base import Ctx, Step, Workflow
from flower_magic.workflow.clarify import BRIEF_EDITED_KEY, clarify_step, with_notebook
from flower_magic.workflow.clarify import STEP_NAME as CLARIFY_STEP
from flower_magic.workflow.edits import taken_in
from flower_magic.workflow.judge import (
    GOAL_EDITED_KEY,
    GOAL_KEY,
    GOAL_REDONE_KEY,
    GOAL_STEP,
    goal_step,
    unheard_verdict,
    with_goal,
)
from flower_magic.workflow.roles import worker

NEW_CMD = "/new"

WORK_PROMPT = "照这份需求做:\n\n{brief}"
WORK_GOAL = "\n\n---\n\n做完的判定标准(会有独立的判定者逐条核对):\n\n{goal}"
WAKE_NOTHING_SAID = "接着做。上次做到哪就从哪接着,先用一句话说说你打算先动什么。"
WAKE_UNHEARD = "人之前还说过下面这些话,你当时没来得及收到(已经写进需求确认书了):\n\n{said}"
WAKE_REGOAL = "判定标准已经按这句话重新推导过,**以这份为准**:\n\n{goal}"
WAKE_REBRIEF = "需求确认书(.flower/notes/需求.md)人亲手改过了,**以下面这份为准**,他写的每一句都算数:\n\n{brief}"
WAKE_GOAL_EDITED = "判定标准(.flower/notes/目标.md)人亲手改过了,**以他改的为准**:\n\n{goal}"
WAKE_GOAL_REDONE = "判定标准已经按人改过的内容重新推导过,**以这份为准**:\n\n{goal}"
WAKE_VERDICT = "上次最后一轮做完后,判定者给了结论,你还没看到:\n\n{feedback}"


class NoTaskError(UserError, ValueError):
    """A fresh directory and nothing to do."""


@dataclass
class Starter:
    """What ``starter_flow`` built: the workflow plus the facts a front end shows."""

    workflow: Workflow
    channel: HumanChannel
    waking: bool
    said: str
    amended: bool
    archived: Path | None
    brief_path: Path
    goal_path: Path


def _work_prompt(ctx: Ctx) -> str:
    text = WORK_PROMPT.format(brief=ctx.get(CLARIFY_STEP) or "")
    goal = ctx.get(GOAL_KEY)
    if goal is not None and getattr(goal, "complete", lambda: False)():
        text += WORK_GOAL.format(goal=goal.prompt_block())
    return text


def _unheard(said: str, ctx: Ctx, brief_path: Path) -> list[str]:
    """Earlier remarks in 需求.md that the work session never received (a run killed after writing
    them and before the session was resumed with them), oldest first."""
    rt = ctx.get("_runtime")
    sid = (ctx.get("_sessions") or {}).get(WORK_STEP)
    if rt is None or not sid or not hasattr(rt, "holds_text"):
        return []
    text = read_note(brief_path) or ""
    return [r for r in remarks(text) if r != said and not rt.holds_text(sid, r)]


def _last_verdict(ctx: Ctx) -> str:
    """The feedback of the failing verdict the last wake ended on, if the work session never got it."""
    rt = ctx.get("_runtime")
    run_dir = getattr(rt, "run_dir", None)
    if rt is None or run_dir is None:
        return ""
    from flower_magic.core.manifest import read_rows

    verdict = unheard_verdict(read_rows(run_dir), WORK_STEP)
    if verdict is None:
        return ""
    said = WAKE_VERDICT.format(feedback=verdict.feedback())
    sid = (ctx.get("_sessions") or {}).get(WORK_STEP)
    if sid and hasattr(rt, "holds_text") and rt.holds_text(sid, said):
        return ""  # an earlier wake sent it and was killed before its row was written
    return said


def _holds_no_prompt(ctx: Ctx) -> bool:
    """The work session was stored without its prompt (its first process died that early): the runtime
    sends the work prompt, the brief with everything appended to it, ahead of this wake's."""
    rt = ctx.get("_runtime")
    sid = (ctx.get("_sessions") or {}).get(WORK_STEP)
    return bool(rt is not None and sid and hasattr(rt, "holds_prompt") and not rt.holds_prompt(sid))


def _wake_prompt(said: str, ctx: Ctx, *, regoal: bool, brief_path: Path | None = None) -> str:
    if _holds_no_prompt(ctx):
        # What was said is in the brief the work prompt carries: said here too, it would be there twice.
        brief = str(ctx.get(CLARIFY_STEP) or "")
        unheard: list[str] = []
        said = "" if said in brief else said
    else:
        unheard = _unheard(said, ctx, brief_path) if brief_path is not None else []
    parts = [WAKE_UNHEARD.format(said="\n\n".join(unheard))] if unheard else []
    verdict = _last_verdict(ctx)
    parts.append(said or ("" if unheard or verdict else WAKE_NOTHING_SAID))
    parts.append(verdict)
    parts = [p for p in parts if p]
    # Goals derived again in this wake (a phrase said now, or one an earlier run wrote down and died).
    redone = getattr((ctx.get("_results") or {}).get(GOAL_STEP), "ok", False)
    regoal = regoal or bool(redone)
    # A person's edit of 需求.md / 目标.md reaches the resumed worker as they wrote it (workflow.edits).
    rebrief = bool(ctx.get(BRIEF_EDITED_KEY))
    if rebrief:
        parts.append(WAKE_REBRIEF.format(brief=ctx.get(CLARIFY_STEP) or ""))
    goal = ctx.get(GOAL_KEY)
    if ctx.get(GOAL_EDITED_KEY):
        parts.append(WAKE_GOAL_EDITED.format(goal=ctx[GOAL_EDITED_KEY]))
    elif regoal and goal is not None:
        parts.append(WAKE_REGOAL.format(goal=goal.prompt_block()))
    elif (rebrief or ctx.get(GOAL_REDONE_KEY)) and goal is not None:
        parts.append(WAKE_GOAL_REDONE.format(goal=goal.prompt_block()))
    return "\n\n---\n\n".join(parts)


def _newer(path: Path, than: Path) -> bool:
    """``path`` was modified after ``than`` (False when either cannot be read)."""
    try:
        return path.stat().st_mtime_ns > than.stat().st_mtime_ns
    except OSError:
        return False


def _taking_in(step: Step) -> Step:
    """``step``, marking the person's edits it was handed as seen once an attempt of it succeeded
    (the model had them in its prompt): through its gate when it has one, else through ``reduce``."""
    gate, reduce = step.gate, step.reduce
    if gate is not None:

        async def gated(result: Any, ctx: Ctx) -> bool:
            taken_in(ctx)
            verdict = gate(result, ctx)
            return bool(await verdict if inspect.isawaitable(verdict) else verdict)

        return dataclasses.replace(step, gate=gated)

    def reduced(result: Any, ctx: Ctx) -> str:
        taken_in(ctx)
        return reduce(result, ctx) if reduce is not None else str(result.text or "")

    return dataclasses.replace(step, reduce=reduced)


@dataclass(frozen=True)
class StartPlan:
    """What a start will do, decided before a byte is written (``plan_start``); ``apply_start`` does it.

    Attributes:
        rundir: the run.
        ask: the request the clarifier is given (with what was said at earlier starts cut short).
        waking: a confirmed brief exists: words are a remark to the resumed work, not a new task.
        said: the words said at this wake ("" = just continue, or a start).
        amend: ``said`` is appended to 需求.md (it is not there yet).
        new: archive lineage.json, 需求.md, 目标.md and 诉求.md first.
        save_task: write ``ask`` to 诉求.md (a start, or a clarification cut short that grows).
    """

    rundir: RunDir
    ask: str
    waking: bool
    said: str
    amend: bool
    new: bool
    save_task: bool


def plan_start(
    ask: str, rundir: RunDir, *, cut_short: bool, new: bool = False, lang: str = "zh", cmd: str = "flower"
) -> StartPlan:
    """Decide what a start with ``ask`` does in ``rundir``. Reads only.

    Args:
        ask: the request (fresh directory) or a phrase said at wake (``""`` = just continue).
        cut_short: a clarification was cut short here (``Snapshot.cut_short``, which the caller has
            already read: it asks the run's store).
        new: archive the previous brief, goals and lineage first, then start fresh.
        cmd: how the person starts a run where they are (``flower``, ``%flower --demo`` ...): the
            ``NoTaskError`` says to type it with a request.

    Raises:
        NoTaskError: ``ask`` is empty and there is nothing to continue (no confirmed brief, no
            clarification cut short).
    """
    ask = (ask or "").strip()
    brief = None if new else Brief.load(rundir.brief)
    waking = brief is not None and brief.complete()
    if not waking:
        # A request cut short before its brief: what is said now adds to it, it does not replace it.
        earlier = "" if new else rundir.saved_task()
        ask = f"{earlier}\n\n{ask}" if ask and earlier and ask not in earlier else ask or earlier
    if not waking and not ask and (new or not cut_short):
        raise NoTaskError(say("need_ask", lang, cmd=cmd))
    said = ask if waking else ""
    brief_text = (read_note(rundir.brief) or "") if waking else ""
    return StartPlan(
        rundir=rundir,
        ask=ask,
        waking=waking,
        said=said,
        amend=bool(said) and said not in brief_text,
        new=new,
        save_task=not waking and bool(ask),
    )


def apply_start(
    plan: StartPlan,
    *,
    clarify_only: bool = False,
    goal: bool = True,
    rounds: int = 3,
    judge_can_run: bool = False,
    max_asks: int | None = None,
    timeout_s: float | None = 1800.0,
    instructions: str = "",
    on_event: Any = None,
    lang: str = "zh",
    notebook: Any = None,
) -> Starter:
    """Make the writes ``plan`` names (archive, 诉求.md, the wake phrase in 需求.md) and build the workflow.

    Args:
        clarify_only: only the clarify step.
        goal: derive goals and judge every round (``--no-goal`` turns it off).
        rounds: total work rounds in this wake (each judged).
        max_asks, timeout_s: the human channel's question quota and answer timeout.
        lang: the language of the lines the steps say to the person (``zh`` / ``en``).
        notebook: the notebook's context of this wake (``core.notebook.NotebookContext``), from a front
            end with a kernel: its block ends the clarifier's and the worker's prompts (at start and at
            wake; not the goal setter's or the judge's, who rule on files), its tools are theirs.
    """
    rd, ask, said = plan.rundir, plan.ask, plan.said
    notes, brief_path, goal_path, task_path = rd.notes, rd.brief, rd.goal, rd.task
    archived: Path | None = None
    if plan.new:
        lineage = Lineage.open(rd.path, rd.workspace)
        archived = lineage.archive(rd.archive, extra=[brief_path, goal_path, task_path])
    notes.mkdir(parents=True, exist_ok=True)
    if plan.save_task:
        # On disk before any session exists: a kill in the first seconds keeps what was asked.
        write_atomic(task_path, (ask + "\n").encode("utf-8"))
    channel = HumanChannel(
        on_event=on_event, max_asks=max_asks, timeout_s=timeout_s, log_path=rd.qa_log, amend_path=brief_path
    )
    amended = plan.amend and channel.amend(said, label=WAKE_LABEL)

    steps: list[Step] = [
        clarify_step(
            channel, brief_path=brief_path, prompt=ask, instructions=instructions, lang=lang, notebook=notebook
        )
    ]
    if not clarify_only:
        if goal:
            steps.append(
                goal_step(
                    channel,
                    goal_path=goal_path,
                    brief_key=CLARIFY_STEP,
                    always_set=amended,
                    # Also when 需求.md changed after the goals were derived: a phrase written down by a
                    # run that died before the goals followed it.
                    redo=lambda ctx: bool(ctx.get(BRIEF_EDITED_KEY)) or _newer(brief_path, goal_path),
                    lang=lang,
                )
            )
        work = Step(
            WORK_STEP,
            worker(channel, instructions=instructions, notebook=notebook),
            lambda ctx: with_notebook(_work_prompt(ctx), notebook),
            resume_prompt=lambda ctx: with_notebook(
                _wake_prompt(said, ctx, regoal=amended, brief_path=brief_path), notebook
            ),
        )
        if goal:
            work = with_goal(work, channel, goal_path=goal_path, rounds=rounds, can_run=judge_can_run, lang=lang)
        steps.append(_taking_in(work))
    wf = Workflow(steps, name="starter", channel=channel)
    return Starter(
        workflow=wf,
        channel=channel,
        waking=plan.waking,
        said=said,
        amended=bool(amended),
        archived=archived,
        brief_path=brief_path,
        goal_path=goal_path,
    )


def starter_flow(
    ask: str,
    *,
    workspace: str | Path = ".",
    run_dir: str | Path | None = None,
    new: bool = False,
    sessions: str = "",
    **settings: Any,
) -> Starter:
    """Assemble the default workflow for ``ask`` in ``workspace``: ``plan_start`` then ``apply_start``
    (``settings`` are the latter's). A mistake (``NoTaskError``) is raised before anything is written."""
    lang = str(settings.get("lang", "zh"))
    from flower_magic.stores.backend import has_session

    rundir = RunDir.at(workspace, run_dir)
    facts = rundir.snapshot(holds=lambda rd, sid: has_session(rd, sid, sessions=sessions))
    return apply_start(plan_start(ask, rundir, cut_short=facts.cut_short, new=new, lang=lang), **settings)
