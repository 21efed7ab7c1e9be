"""The clarify step (确认需求): ask, then freeze a four-section brief in ``.flower/notes/需求.md``.

Guarantees:
    - A complete brief on disk skips the step, but its content still goes into ctx, so the next
      steps read the frozen brief, never a stale conversation.
    - A clarification cut short (the process died) continues its own session with
      ``CLARIFY_RESUME``: what was asked and answered is in that session and is not asked again.
    - The brief is written only when all four sections are there; until then the step has not
      passed, and ``ctx["_brief_missing"]`` names what is missing.
    - What a person added to 需求.md (a wake phrase, words sent mid-run) goes downstream with the
      brief in ``ctx["确认需求"]``, and freezing the brief keeps it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from flower_magic.core.durable import write_atomic
from flower_magic.workflow.base import Ctx, Step
from flower_magic.workflow.brief import RUNTIME_LABEL, WAKE_LABEL, Brief
from flower_magic.workflow.roles import clarifier

STEP_NAME = "确认需求"
BRIEF_KEY = "_brief"
MISSING_KEY = "_brief_missing"

# Sent instead of the original request when a clarification that was cut short continues.
CLARIFY_RESUME = (
    "我们接着刚才没问完的需求确认往下做 —— **不是重新开始**。\n\n"
    "你在这个会话里问过的问题、人已经给过的回答,都还在上文里,别再问一遍。先看还差什么:"
    "四段(目标 / 验收标准 / 边界 / 未知与假设)里哪几段还没定下来,就只补那几段。"
    "问清楚了,直接交出完整的四段确认书。\n\n"
    "(上一次是中途断掉的 —— 可能进程被杀了,也可能终端崩了。原因不用管,接着做就行。)\n"
)


# Where the person's later words start in 需求.md: the parser leaves these sections out of the four.
_ADDED_RE = re.compile(rf"^## (?:{WAKE_LABEL}|{RUNTIME_LABEL})(?:\(|$)", re.MULTILINE)


def _additions(path: Path) -> str:
    """The sections appended to the brief (wake phrases, mid-run words), verbatim; "" if none."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
    found = _ADDED_RE.search(text)
    return text[found.start() :].strip() if found else ""


def _hydrate(ctx: Ctx, brief: Brief, name: str, added: str = "") -> None:
    ctx[BRIEF_KEY] = brief
    # The appended words go downstream too: the goal step re-derives from this text after a wake
    # phrase, and would otherwise never see the phrase.
    ctx[name] = brief.prompt_block() + (f"\n\n{added}" if added else "")
    ctx.pop(MISSING_KEY, None)


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
) -> Step:
    """The clarify step.

    Args:
        channel: the human channel the clarifier asks through.
        brief_path: where the frozen brief lives.
        prompt: the person's request, as they said it.
        always_ask: run even when a complete brief exists.
    """

    def when(ctx: Ctx) -> bool:
        if always_ask:
            return True
        brief = Brief.load(brief_path)
        if brief is not None and brief.complete():
            _hydrate(ctx, brief, name, _additions(brief_path))
            return False
        return True

    def gate(result: Any, ctx: Ctx) -> bool:
        brief = Brief.parse(result.text or "")
        if not brief.complete():
            ctx[MISSING_KEY] = brief.missing()
            return False
        # Words the person sent while the clarification ran were appended to the file; freezing
        # the brief must not erase them.
        added = _additions(brief_path)
        write_atomic(brief_path, (brief.to_markdown() + (f"\n{added}\n" if added else "")).encode("utf-8"))
        _hydrate(ctx, brief, name, added)
        return True

    def reduce(result: Any, ctx: Ctx) -> str:
        return str(ctx[name])

    return Step(
        name,
        clarifier(channel, instructions=instructions, max_turns=max_turns),
        prompt,
        when=when,
        gate=gate,
        reduce=reduce,
        resume_prompt=CLARIFY_RESUME,
        on_fail=on_fail,
        retries=retries,
    )
