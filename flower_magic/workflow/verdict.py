"""The judge's verdict on one work round: achieved, not yet, or unreachable, with the reason.

The judge answers in three sections: ``## 结论`` (达成 / 未达成 / 无法达成), ``## 理由`` and
``## 未通过`` (the failing checks, one per line, or ``(无)``).

Guarantees:
    - Anything that is not a clear "achieved" is not achieved: an unparseable verdict has
      ``state == ""`` and ``ok`` False, so a vague judge never passes a round.
    - State words are searched longest first, so 未达成 is never read as 达成 and 无法达成 never as
      either.
    - A reason flower gives itself (an unclear verdict, a person's amendment or objection) is two
      texts: the worker reads ``reason`` (the original runtime's Chinese), a person reads
      ``reason_for(lang)``, from the phrase tables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from flower_magic.core.goal import list_items
from flower_magic.core.sections import read_sections
from flower_magic.core.words import say

ACHIEVED = "achieved"
NOT_YET = "not_yet"
UNREACHABLE = "unreachable"

ALIASES: dict[str, str] = {
    "结论": "state",
    "判定": "state",
    "理由": "reason",
    "依据": "reason",
    "未通过": "failed",
    # English, as a judge asked in English may write them (matched in any case)
    "Verdict": "state",
    "Conclusion": "state",
    "Reasons": "reason",
    "Reason": "reason",
    "Failed checks": "failed",
    "Failed": "failed",
}

# word -> state; searched longest first
STATE_WORDS: dict[str, str] = {
    "无法验证": UNREACHABLE,
    "没法验证": UNREACHABLE,
    "验证不了": UNREACHABLE,
    "无法判定": UNREACHABLE,
    "unverifiable": UNREACHABLE,
    "无法达成": UNREACHABLE,
    "不可达成": UNREACHABLE,
    "做不到": UNREACHABLE,
    "unreachable": UNREACHABLE,
    "impossible": UNREACHABLE,
    "未达成": NOT_YET,
    "没达成": NOT_YET,
    "尚未达成": NOT_YET,
    "not_yet": NOT_YET,
    "not yet": NOT_YET,
    "no": NOT_YET,
    "已达成": ACHIEVED,
    "达成": ACHIEVED,
    "achieved": ACHIEVED,
    "yes": ACHIEVED,
}


def _word_re(word: str) -> str:
    # English words stand alone ("no" must not fire inside "unknown"); Chinese has no word breaks.
    return rf"(?<![a-z_]){re.escape(word)}(?![a-z_])" if word.isascii() else re.escape(word)


_STATE_RES = [
    (re.compile(_word_re(w), re.IGNORECASE), s) for w, s in sorted(STATE_WORDS.items(), key=lambda kv: -len(kv[0]))
]
_BARE = {"1": ACHIEVED, "true": ACHIEVED, "0": NOT_YET, "false": NOT_YET}
_LONE_ONE_RE = re.compile(r"(?<![\w.])1(?![\w.])")
_LONE_ZERO_RE = re.compile(r"(?<![\w.])0(?![\w.])")


def _state_of(raw: str) -> str:
    for pattern, state in _STATE_RES:
        if pattern.search(raw):
            return state
    if _LONE_ONE_RE.search(raw):
        return ACHIEVED
    if _LONE_ZERO_RE.search(raw):
        return NOT_YET
    return ""


@dataclass
class Verdict:
    """One judge's verdict.

    Attributes:
        state: ``ACHIEVED``, ``NOT_YET``, ``UNREACHABLE``, or ``""`` when the judge said nothing clear.
        reason: why, in a sentence or two, as the worker reads it.
        failed: the checks that did not pass.
        said: when flower gave the reason (``set_reason``), the phrase (``core.words``) a person reads
            for it, and its fields; "" when the reason is the judge's own words.
    """

    state: str = ""
    reason: str = ""
    failed: list[str] = field(default_factory=list)
    said: str = ""
    said_fields: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether the goal was achieved."""
        return self.state == ACHIEVED

    @classmethod
    def parse(cls, text: str) -> Verdict:
        """Read the judge's reply.

        The conclusion is the ``结论``/``判定`` section; without one, a bare ``1``/``true`` or
        ``0``/``false`` reply, else the whole reply. In it, state words are searched longest first,
        then a standalone ``1`` (achieved) or ``0`` (not yet). Nothing found → ``state == ""``.
        """
        text = text or ""
        found = read_sections(text, ALIASES)
        raw = found.get("state")
        if raw is None:
            bare = _BARE.get(text.strip().lower())
            if bare is not None:
                return cls(state=bare)
            raw = text
        return cls(
            state=_state_of(raw),
            reason=found.get("reason", ""),
            failed=list_items(found.get("failed", "")),
        )

    def set_reason(self, for_worker: str, phrase: str, **fields: Any) -> None:
        """Give the verdict flower's own reason: ``for_worker`` is what the work session reads (the
        original runtime's words), ``phrase`` the key of what a person reads, with ``fields``."""
        self.reason, self.said, self.said_fields = for_worker, phrase, fields

    def reason_for(self, lang: str) -> str:
        """The reason as a person reads it in ``lang``: flower's own from the phrase tables, else the
        judge's words ("" when there are none)."""
        return say(self.said, lang, **self.said_fields) if self.said else self.reason

    def feedback(self) -> str:
        """The prompt that sends the work session back for another round."""
        parts = ["上一轮做完的东西**还没有达成目标**。判定者的理由是:", self.reason.strip() or "(没给理由)"]
        if self.failed:
            parts.append("没通过的判定项:\n" + "\n".join(f"- {item}" for item in self.failed))
        parts.append("接着做 —— 只补上面这些差距,不要推倒重来,也不要把范围做大。")
        return "\n\n".join(parts)
