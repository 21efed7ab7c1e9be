"""Strings only the notebook shows (the goal list, ``--status``, the live view's notes), zh and en.

Every other line comes from ``workflow.phrases``, so the terminal and the notebook say the same
thing. These could move there once the CLI needs them too.
"""

from __future__ import annotations

from typing import Any

_TEXTS: dict[str, dict[str, str]] = {
    "zh": {
        "earlier": "… 前面还有 {n} 条(完整记录在会话和 manifest.json 里)",
        "waiting": "  > 等待回答…",
        "goal_summary": "通过 {passed} · 未通过 {failed} · 未判定 {pending}",
        "no_goal": "还没有目标(目标.md 在设定目标这一步写出)",
        "verdict": "判定 #{round}: {state}",
        "state_achieved": "达成",
        "state_not_yet": "未达成",
        "state_unreachable": "无法达成",
        "state_unclear": "没有明确结论",
        "fresh": '- {where}: 还没有确认过的需求,%flower "一句话" 开始',
        "no_rows": "- manifest.json 里还没有记录",
        "rows_head": "最近 {n}/{total} 步",
        "rows_total": "共 {steps} 步 · {turns} 轮 · ${cost:.4f} · 用时 {elapsed} · 重试 {retries} · 交接 {handoffs}",
        "col_step": "步骤",
        "col_ok": "结果",
        "col_cost": "花费",
        "col_turns": "轮",
        "col_time": "用时",
        "col_attempts": "尝试",
        "col_resumed": "接上次",
        "col_handoffs": "交接",
        "col_context": "上下文",
        "col_error": "原因",
        "yes": "是",
    },
    "en": {
        "earlier": "… {n} earlier entries (the full record is in the session and manifest.json)",
        "waiting": "  > waiting for an answer…",
        "goal_summary": "passed {passed} · failed {failed} · not judged yet {pending}",
        "no_goal": "no goal yet (目标.md is written by the goal step)",
        "verdict": "verdict #{round}: {state}",
        "state_achieved": "achieved",
        "state_not_yet": "not yet",
        "state_unreachable": "unreachable",
        "state_unclear": "unclear",
        "fresh": '- {where}: no confirmed brief yet; %flower "a sentence" starts one',
        "no_rows": "- no steps in manifest.json yet",
        "rows_head": "latest {n}/{total} steps",
        "rows_total": (
            "{steps} steps · {turns} turns · ${cost:.4f} · {elapsed} · retries {retries} · hand-offs {handoffs}"
        ),
        "col_step": "step",
        "col_ok": "ok",
        "col_cost": "cost",
        "col_turns": "turns",
        "col_time": "time",
        "col_attempts": "attempts",
        "col_resumed": "resumed",
        "col_handoffs": "hand-offs",
        "col_context": "context",
        "col_error": "why",
        "yes": "yes",
    },
}


def word(key: str, lang: str = "zh", **fields: Any) -> str:
    """One notebook-only phrase in ``lang`` (``zh`` for anything else), with its fields filled in."""
    table = _TEXTS.get(lang, _TEXTS["zh"])
    return table[key].format(**fields)
