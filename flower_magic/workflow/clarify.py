"""The clarify step (确认需求): ask, then freeze a four-section brief in ``.flower/notes/需求.md``.

Guarantees:
    - A complete brief on disk skips the step, but its content still goes into ctx, so the next
      steps read the frozen brief, never a stale conversation.
    - A clarification not finished (the process died, or the model's answer was not a whole brief)
      continues its own session with ``CLARIFY_RESUME``: what was asked and answered is in that
      session and is not asked again. Only when the previous process ended abnormally (its run lock
      record was left behind) is the model told it was cut off (``CLARIFY_CUT``).
    - What the person said since the session last heard from them (words given at this start, the
      answer to a question that died with its process, or words an earlier start wrote into 诉求.md
      and died before sending) goes with ``CLARIFY_RESUME``, once (``CLARIFY_SAID``); what the session
      already holds is not sent again, whatever ended the process that sent it (``workflow.heard``).
    - A stop at this step says why (``Step.why``): the answer was not a whole four-section brief.
    - The brief is written only when all four sections are there; until then the step has not
      passed, and ``ctx["_brief_missing"]`` names what is missing.
    - What a person added to 需求.md (a wake phrase, words sent mid-run) goes downstream with the
      brief in ``ctx["确认需求"]``, and freezing the brief keeps it.
    - What a person wrote into 需求.md by hand is never lost (``workflow.edits``): a version that
      reads as four sections is used as it is, word for word, in ``ctx["确认需求"]``; one that does not
      is given to the clarifier verbatim ("keep what they said"), and kept aside as
      ``需求.md.edited-<ts>`` when the clarified brief replaces it. Either way the person is told in
      one line, and ``ctx["_brief_edited"]`` tells the later steps (goals follow, the worker is told).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flower_magic.core import brief as brief_note
from flower_magic.core.brief import Brief, additions, remarks
from flower_magic.core.rundir import CLARIFY_STEP
from flower_magic.core.words import say
from flower_magic.workflow.base import Ctx, Step
from flower_magic.workflow.edits import hand_over, tell, tell_kept
from flower_magic.workflow.heard import unheard
from flower_magic.workflow.roles import clarifier

STEP_NAME = CLARIFY_STEP  # the name lineage keeps its session under (core.rundir reads it there)
BRIEF_KEY = "_brief"
MISSING_KEY = "_brief_missing"
BRIEF_EDITED_KEY = "_brief_edited"  # a person changed 需求.md by hand, and this run takes it in
_EDITED_TEXT_KEY = "_brief_edited_text"  # their version, for the clarifier's prompt

# Sent instead of the original request when a clarification that was cut short continues.
CLARIFY_RESUME = (
    "我们接着刚才没问完的需求确认往下做 —— **不是重新开始**。\n\n"
    "你在这个会话里问过的问题、人已经给过的回答,都还在上文里,别再问一遍。先看还差什么:"
    "四段(目标 / 验收标准 / 边界 / 未知与假设)里哪几段还没定下来,就只补那几段。"
    "问清楚了,直接交出完整的四段确认书。\n"
)
# Added to CLARIFY_RESUME only when the process that ran the clarification really ended abnormally
# (``core.runlock.died_before``): after a normal exit it would tell the model something false.
CLARIFY_CUT = "\n(上一次是中途断掉的 —— 进程没有正常结束,可能被杀了,也可能终端或内核崩了。原因不用管,接着做就行。)\n"
# Added after them when the person said something the session has not received yet (words given at
# this start, or at an earlier one whose process ended before they were stored): said once, here.
CLARIFY_SAID = "\n---\n\n人接着又说了下面这些话(已经记进诉求;你上次的提问要是没等到回答,这就是他的回答):\n\n{said}\n"
SAID_HEAD = CLARIFY_SAID.split("{said}")[0]  # how a session's transcript shows it received later words

# Sent (before the request, if there is one) when 需求.md holds a person's version that does not read
# as the four sections: a renamed or removed heading, a file re-saved by an editor.
CLARIFY_EDITED = (
    "人亲手改过需求确认书(.flower/notes/需求.md),但它读不出完整的四段"
    "(目标 / 验收标准 / 边界 / 未知与假设)。下面是他改后的原文,一字未动:\n\n"
    "----- 他改后的 需求.md -----\n{text}\n----- 原文到此 -----\n\n"
    "**以他写的为准**:他写下的每一句都要留在确认书里,改了名字的标题按意思放回对应的段;"
    "他删掉的段,看得出是有意删的就照实写明,看不出就只问这一段(或按你的判断定下来,写进「未知与假设」)。"
    "然后交出完整的四段确认书。"
)


def _hydrate(ctx: Ctx, brief: Brief, name: str, added: str = "", *, verbatim: str = "") -> None:
    ctx[BRIEF_KEY] = brief
    # The appended words go downstream too: the goal step re-derives from this text after a wake
    # phrase, and would otherwise never see the phrase. A person's own version goes as they wrote it.
    ctx[name] = verbatim.strip() or brief.prompt_block() + (f"\n\n{added}" if added else "")
    ctx.pop(MISSING_KEY, None)


def with_notebook(prompt: str, notebook: Any) -> str:
    """``prompt`` followed by the notebook's block of this wake (none without a kernel)."""
    block = getattr(notebook, "block", "") if notebook is not None else ""
    if not block:
        return prompt
    return f"{prompt}\n\n---\n\n{block}" if prompt.strip() else block


def _with_edit(ctx: Ctx, request: str) -> str:
    """``request`` preceded by the person's version of 需求.md, when the clarifier must rebuild it."""
    edited = str(ctx.get(_EDITED_TEXT_KEY) or "")
    if not edited:
        return request
    block = CLARIFY_EDITED.format(text=edited)
    return f"{block}\n\n---\n\n{request}" if request.strip() else block


def _unheard(ctx: Ctx, name: str, request: str, brief_path: Path) -> str:
    """What the clarifier's session never received of ``request`` (the request as saved, with what was
    said at later starts) and of the words sent mid-run that 需求.md holds (remarks, mail), in that
    order. "" when it received it all, or when it holds no prompt at all: the runtime then sends the
    step's own prompt (the whole request) ahead of the resume prompt (``Runtime.run``)."""
    rt = ctx.get("_runtime")
    sid = (ctx.get("_sessions") or {}).get(name)
    if rt is None or not sid or not hasattr(rt, "holds_text"):
        return ""
    if hasattr(rt, "holds_prompt") and not rt.holds_prompt(sid):
        return ""

    def holds(text: str) -> bool:
        return bool(rt.holds_text(sid, text))

    said = [unheard(request, holds, head=SAID_HEAD)] if request.strip() else []
    said += [r for r in remarks(brief_note.read(brief_path).text or "") if not holds(r)]
    return "\n\n".join(p for p in said if p)


def clarify_step(
    channel: Any,
    *,
    brief_path: Path,
    prompt: str,
    name: str = STEP_NAME,
    instructions: str = "",
    always_ask: bool = False,
    on_fail: str = "stop",
    retries: int = 0,
    max_turns: int | None = None,
    lang: str = "zh",
    notebook: Any = None,
) -> Step:
    """The clarify step.

    Args:
        channel: the human channel the clarifier asks through.
        brief_path: where the frozen brief lives.
        prompt: the person's request, as they said it.
        always_ask: run even when a complete brief exists.
        lang: the language of the lines the person reads.
        notebook: the notebook's context of this wake (``core.notebook.NotebookContext``): its block
            ends each prompt, its tools are the clarifier's.
    """

    def when(ctx: Ctx) -> bool:
        ctx.pop(BRIEF_EDITED_KEY, None)
        now = brief_note.read(brief_path)
        text = now.text or ""
        ctx[_EDITED_TEXT_KEY] = text.strip() if now.is_edited else ""
        brief = Brief.parse(text) if now.text is not None else None
        if always_ask or brief is None or not brief.complete():
            return True
        _hydrate(ctx, brief, name, additions(text), verbatim=text if now.is_edited else "")
        if now.is_news:
            ctx[BRIEF_EDITED_KEY] = True
            hand_over(ctx, now)
            tell(ctx, lang, "note_edited", path=brief_path)
        return False

    def gate(result: Any, ctx: Ctx) -> bool:
        brief = Brief.parse(result.text or "")
        if not brief.complete():
            ctx[MISSING_KEY] = brief.missing()
            return False
        # Words the person sent while the clarification ran were appended to the file; freezing
        # the brief must not erase them. A person's own version of the file is kept aside.
        added = additions(brief_note.read(brief_path).text or "")
        aside = brief.write(brief_path, added=added)
        if aside is not None:
            ctx[BRIEF_EDITED_KEY] = True
            tell_kept(ctx, lang, brief_path, aside)
        _hydrate(ctx, brief, name, added)
        return True

    def reduce(result: Any, ctx: Ctx) -> str:
        return str(ctx[name])

    def ask(ctx: Ctx) -> str:
        return with_notebook(_with_edit(ctx, prompt), notebook)

    def resume(ctx: Ctx) -> str:
        # Not a clarification cut short: the person rewrote the brief, and that is what to pick up.
        if ctx.get(_EDITED_TEXT_KEY):
            return with_notebook(_with_edit(ctx, prompt), notebook)
        said = _unheard(ctx, name, prompt, brief_path)
        text = CLARIFY_RESUME + (CLARIFY_CUT if ctx.get("_died_before") else "")
        return with_notebook(text + (CLARIFY_SAID.format(said=said) if said else ""), notebook)

    def why(result: Any, ctx: Ctx) -> str:
        return say("brief_incomplete", lang, n=len(ctx.get(MISSING_KEY) or ()) or 4)

    return Step(
        name,
        clarifier(channel, instructions=instructions, max_turns=max_turns, notebook=notebook),
        ask,
        when=when,
        gate=gate,
        reduce=reduce,
        resume_prompt=resume,
        on_fail=on_fail,
        retries=retries,
        why=why,
    )
