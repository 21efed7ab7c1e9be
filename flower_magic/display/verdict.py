"""The judge's ruling on one work round as its own element of the notebook's view: the round's name
and the ruling, the reason (Markdown), the checks it failed with the goal list's badges, and what the
judge said and did folded under it.

The text views say the same as lines (the round's header, the judge's words, ``判定:未达成``): the
terminal and ``text/plain`` keep them; only the page gathers them into one element.

Guarantees:
    - Every text is data: the name and the checks are escaped (``html.esc``), the reason is rendered by
      ``markdown.to_html`` (raw HTML in it stays text).
    - The ruling is said in words (``state_*``, ``badge_*``), colour only repeats it: the element reads
      the same where a page's styles are stripped (GitHub).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flower_magic.core.words import say
from flower_magic.display import html, markdown
from flower_magic.display.goals import FAIL
from flower_magic.display.header import badge_html
from flower_magic.front.phrases import Line

STATES = ("achieved", "not_yet", "unreachable", "unclear")
# The header's pill classes (``header.STATUS_KEYS``): a ruling looks like the status it leads to.
CHIP = {"achieved": "done", "not_yet": "failed", "unreachable": "failed", "unclear": "stopped"}
CHECK_CHARS = 300  # one check as the goal list shows it


def failed_checks(verdict: Mapping[str, Any]) -> list[str]:
    """The checks the ruling failed: from its marks (``checks``), else the judge's own list (``failed``)."""
    checks = [c for c in verdict.get("checks") or [] if isinstance(c, Mapping) and isinstance(c.get("check"), str)]
    if checks:
        return [str(c["check"]) for c in checks if not c.get("passed")]
    return [str(f) for f in verdict.get("failed") or [] if isinstance(f, str)]


def _counts(verdict: Mapping[str, Any], lang: str) -> str:
    checks = [c for c in verdict.get("checks") or [] if isinstance(c, Mapping)]
    if not checks:
        return ""
    passed = sum(1 for c in checks if c.get("passed"))
    return say("verdict_counts", lang, passed=passed, total=len(checks))


def card_html(header: Line, said: str, verdict: Mapping[str, Any] | None, lang: str) -> str:
    """One judge round as an element.

    Args:
        header: the round's header line (``phrases.round_header``: ``-- 干活·判定#1 ----``).
        said: what the judge said and did, as HTML built by ``display.log`` (folded under the ruling).
        verdict: the verdict event's payload (``verdict``, ``reason``, ``checks``, ``failed``), or None
            while the judge is still at it.
        lang: ``zh`` or ``en``.
    """
    name = html.esc(html.rule_name("".join(text for _, text in header)))
    if verdict is None:
        state, chip, ruling = "judging", "running", say("judging", lang)
    else:
        state = str(verdict.get("verdict") or "unclear")
        state = state if state in STATES else "unclear"
        chip, ruling = CHIP[state], say(f"state_{state}", lang)
    # Spaces between the parts: a flex row drops them, a page without the style block (GitHub) needs them.
    head = f'<span class="fm-verdict-name">{name}</span> <span class="fm-chip fm-st-{chip}">{html.esc(ruling)}</span>'
    body = ""
    if verdict is not None:
        counts = _counts(verdict, lang)
        if counts:
            head += f' <span class="fm-dim">{html.esc(counts)}</span>'
        reason = markdown.to_html(str(verdict.get("reason") or ""))
        if reason:
            body += f'<div class="{markdown.MD_CLASS}">{reason}</div>'
        failed = failed_checks(verdict)
        if failed:
            rows = "".join(
                f'<li class="fm-check" data-state="{FAIL}">{badge_html(FAIL, lang)} '
                f'<span class="fm-check-text">{html.esc(check[:CHECK_CHARS])}</span></li>'
                for check in failed
            )
            body += f'<ul class="fm-checks">{rows}</ul>'
    if said:
        body += f'<details class="fm-said"><summary>{html.esc(say("judge_said", lang))}</summary>{said}</details>'
    return f'<div class="fm-verdict" data-state="{state}"><div class="fm-verdict-head">{head}</div>{body}</div>'
