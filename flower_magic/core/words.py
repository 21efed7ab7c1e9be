"""Every word flower itself says, in ``zh`` and ``en``: the phrase tables, and the few helpers that
turn facts into words (token counts, waits, paths, who holds a run dir).

A run speaks the language chosen (``--lang``, ``FLOWER_LANG``, ``%config FlowerMagics.lang``), else
its task's (``words_lang``: Chinese characters say zh, other words en), else its run dir's last run's
(``front.options``); Chinese when nothing says. File names are data and stay as they are. Step
names stay the original's on disk (lineage.json, manifest.json); a person reads them in their
language (``step_name``; ``say`` renders a ``step`` field so).

The engine (``core``) and every front end read their words here; nothing that a person reads is
spelled anywhere else (a test holds it). Both tables have the same keys (a test holds that too).
"""

from __future__ import annotations

import functools
import os
import re
import string
import unicodedata
from collections.abc import Mapping
from pathlib import Path, PurePath, PureWindowsPath
from typing import Any

LANGS = ("zh", "en")

_TEXTS: dict[str, dict[str, str]] = {
    "zh": {
        "wake_head": "<- 在 {where} 接上上次",
        "brief_ok": "需求已确认",
        "goals": "目标 {n} 条",
        "goals_1": "目标 {n} 条",
        "result_1": "{n} 轮 · ${cost:.4f} · 用时 {elapsed}",
        "earlier_1": "… 前面还有 {n} 条(完整记录在会话和 manifest.json 里)",
        "hdr_step": "第 {n}/{total} 步 · {name}",
        "hdr_elapsed": "用时 {elapsed}",
        "hdr_cost": "累计 ${cost:.2f}",
        "hdr_context": "{step}上下文 {ctx} / {window}",
        "hdr_context_only": "{step}上下文 {ctx}",
        "hdr_context_tip": "这一步会话的上下文占模型上下文窗口的比例;到交接线会交给新会话接着做",
        "hdr_wait_agent": "正在启动智能体…",
        "run_running": "运行中",
        "run_asking": "等你回答",
        "run_done": "完成",
        "run_failed": "停下了",
        "run_let_go": "不再跟随",
        "view_gone": "内核重启过,这里不再更新:运行 %flower(还在跑就跟上它,停了就接着做)。",
        "badge_pass": "通过",
        "badge_fail": "未通过",
        "badge_pending": "待判定",
        "badge_unverifiable": "这里无法验证",
        "ask_send": "回答",
        "ask_decide": "让它自己拿主意",
        "ask_placeholder": "写一个回答(留空 = 让它自己拿主意)",
        "ask_gone": "内核重启过,这些按钮已经失效:运行 %flower(跟上还在跑的运行并回答,或从停下的地方接着做)。",
        "answer_prompt": "回答(数字选一项;留空 = 让它自己拿主意)> ",
        "step_tools": "工具调用 {n} 次",
        "step_tools_1": "工具调用 {n} 次",
        "work_ctx": "干活上下文 {ctx}",
        "wake_n": "第 {n} 次唤醒",
        "carried": "<- 接上次",
        "ask_fresh": "要做什么?",
        "ask_fresh_hint": " 一句话就够,回车开始(Ctrl-C 退出)",
        "ask_wake": "接着上次?",
        "ask_wake_hint": " 直接回车 = 接着做;也可以说点新的;/new = 重开一件事(Ctrl-C 退出)",
        "empty_ask": '诉求是空的。直接 `{cmd}` 然后按提示输入,或者 {cmd} "帮我做一个 X"。',
        "need_ask": '要给一句诉求,例如 {cmd} "帮我做一个 X"',
        "cancelled": "已取消",
        "done": "完成",
        "failed": "失败",
        "result": "{n} 轮 · ${cost:.4f} · 用时 {elapsed}",
        "status": "上下文 {ctx} · 累计 ${cost:.2f} · {elapsed}",
        "round": "第 {n}/{total} 轮",
        "total": "总花费 ${cost:.4f} · 清单 {manifest}",
        "aborted": "在步骤 '{step}' 中止",
        "too_big": "! 智能体的一条消息超过 {limit},flower 读不下,这一步停在这里(会话还在)。{cmd} 接着做;"
        '要写大数据就让它分成小文件:{cmd} "数据分成几个小于 10 MB 的文件写"',
        "handoff_head": "上下文 {ctx}/{window}K —— 写交接准备换代",
        "handoff_degraded": "交接没写成,用了降级版本 —— 接手的人会自己去现场看",
        "handoff_doing": "现在在做",
        "handoff_decided": "已定的事",
        "handoff_deadends": "走不通的",
        "handoff_next": "下一步",
        "handoff_path": "<- 交接写在 {path}",
        "handoff_new": "<- 新会话接手,上下文从 {ctx} 重新开始",
        "handoff_squeezed": "上下文 {ctx} 到了交接线 {at}:{n} 个大的工具结果原样存进了 .flower/spill/,"
        "原会话接着做(不换会话)",
        "stop_result_too_big": "一个工具结果({tool})约 {result} tokens,加上会话起步的 {floor},越过了交接线 {line}"
        "(窗口 {window}):换新会话也还得带着它,所以停下了。让它分段读(Read 的 offset/limit,或 Grep 只找需要的),"
        "或者把窗口设成模型真实的大小:{cmd} --window <真实窗口>",
        "stop_window_too_small": "一个新会话光起步(系统提示、工具说明和交接)就要 {floor},已经越过交接线 {line}"
        "(窗口 {window}):换多少代会话都一样,所以停下了。把窗口设成模型真实的大小:{cmd} --window <真实窗口>,"
        "或者 {cmd} --no-handoff",
        "interrupted": "! 已打断这一轮。正在跑的 subagent 会丢掉半成品。",
        "interrupt_say": "  要说什么?(直接回车 = 什么都不说,接着跑;再按一次 Ctrl+C = 退出)",
        "pending_asks": "  (有 {n} 个提问还等着,打断不影响它们)",
        "no_tty": "! 标准输入不是终端,没人能回答提问。想让它自己判断就加 --timeout 0",
        "received": "+ 收到 (它下次查收件箱时会看到,最晚在这一步结束前;已追加进确认书)",
        "received_no_brief": "+ 收到 (它下次查收件箱时会看到,最晚在这一步结束前;没有确认书可落盘 —— 它可能活不过下一个步骤)",
        "continue_hint": '用 {cmd} 接着做,{cmd} "一句话" 带上新要求,{cmd} --new "另一件事" 重开。',
        "question": "? {question}",
        "archived": "<- 旧的需求、目标和会话谱系已归档到 {path}",
        "unverifiable": "目标里有 {n}/{total} 条在这个环境里验不了 —— 判定时它们必然过不去,会停下来问你。现在改 {path} 还来得及:\n{lines}",
        "note_edited": "{name} 你改过了 —— 这次照你改的来,原文已交给 agent",
        "note_kept": "你改过的 {name} 已原样另存为 {aside};agent 拿到了你的原文,新的 {name} 照你说的写",
        "note_kept_unreadable": "{name} 读不了(不是 UTF-8 / UTF-16 / GB18030 文本),已原样另存为 {aside}",
        "run_locked": "{path} 正被另一个 flower 使用:进程 {pid}({front},{host}),{since} 起,当前步骤「{step}」。"
        "等它跑完,或者停掉它:{stop},或 kill {pid}。",
        "run_locked_unknown": "{path} 正被另一个进程使用(读不到是谁)。等它跑完再运行。",
        "run_locked_no_step": "还没开始",
        "front_notebook": "笔记本",
        "front_terminal": "终端",
        "front_api": "Python 脚本",
        "stop_notebook": "在那个笔记本里中断内核(■)",
        "stop_terminal": "在那个终端按 Ctrl-C",
        "stop_api": "停掉那个脚本",
        "writer_pids": "claude 进程 {pids}",
        "writer_file": "{name} 还在变",
        "writer_kill": "kill {pids}",
        "writer_stop": "停掉在写它的程序",
        "foreign_wait": "会话 {sid} 还有别人在写({who}),等它停下(最多 {wait})",
        "session_busy": "会话 {sid} 还在被别人写({who}),等了 {wait} 也没停;为了不让两个 agent 写同一个会话,"
        "这一步停下了。等它结束(或 {stop})再运行。",
        "seconds": "{n} 秒",
        "minutes": "{n} 分钟",
        # the notebook's own lines (goal list, --status, the live view)
        "earlier": "… 前面还有 {n} 条(完整记录在会话和 manifest.json 里)",
        "waiting": "  > 等待回答…",
        "goal_summary": "通过 {passed} · 未通过 {failed} · 未判定 {pending}",
        "no_goal": "还没有目标(目标.md 在设定目标这一步写出)",
        "verdict": "判定 #{round}: {state}",
        "state_achieved": "达成",
        "state_not_yet": "未达成",
        "state_unreachable": "无法达成",
        "state_unclear": "没有明确结论",
        "judging": "判定中…",
        "verdict_counts": "通过 {passed}/{total}",
        "judge_said": "判定者的完整回答",
        "fresh": '- {where}: 还没有确认过的需求,{cmd} "一句话" 开始',
        "no_rows": "- manifest.json 里还没有记录",
        "rows_head": "最近 {n}/{total} 步",
        "rows_total": "共 {steps} 步 · {turns} 轮 · ${cost:.4f} · 用时 {elapsed} · 重试 {retries} · 交接 {handoffs}",
        "col_step": "步骤",
        "col_ok": "结果",
        "col_cost": "花费",
        "col_turns": "轮",
        "col_time": "用时",
        "col_attempts": "尝试",
        "col_resumed": "续接",
        "col_handoffs": "交接",
        "col_context": "上下文",
        "col_error": "原因",
        "yes": "是",
        "no_credentials": '没有 Anthropic 凭据。先离线试试演示:{cmd} --demo "任务"。要真跑:{how}(网关用 ANTHROPIC_AUTH_TOKEN 加 ANTHROPIC_BASE_URL),或者先运行一次 `claude login`。',
        "set_key_terminal": "设置 ANTHROPIC_API_KEY,输入不回显:`read -rs ANTHROPIC_API_KEY && export ANTHROPIC_API_KEY`",
        "set_key_notebook": '在单元格里设置 key 而不显示它:`import os, getpass; os.environ["ANTHROPIC_API_KEY"] = getpass.getpass()`,或者启动 Jupyter 之前先 export',
        "demo_on": "演示模式:离线运行,一个脚本化的小模型扮演每个角色;它说的话都不是真模型说的,也不花钱。",
        "demo_auto": "演示模式:没找到 Anthropic 凭据,flower 离线运行在一个脚本化的小模型上(flower_magic.testing.demo)。要真跑,设置 ANTHROPIC_API_KEY 后重启内核。",
        "step_rejected": "步骤 '{step}' 的结果没有通过检查",
        "brief_incomplete": "模型交回的不是完整的四段需求确认书(缺 {n} 段),需求没有写下。再运行一次就在同一个会话里接着确认",
        "goal_incomplete": "模型交回的目标不完整(要有一句目标和一份判定清单),目标没有写下。再运行一次就重新设定",
        "rounds_used": "{n} 轮用完了,判定者最后的结论是「{state}」:{reason}。再运行一次就在同一个会话里再干 {n} 轮",
        "path_unusable": "{path} 不能用作{role}:{reason}。换一个目录({flag})。",
        "role_workspace": "工作区",
        "role_run_dir": "运行目录",
        "reason_file": "它是一个文件,不是目录",
        "reason_under_file": "{parent} 是一个文件",
        "reason_not_writable": "没有写权限",
        "reason_read_only": "它所在的文件系统是只读的",
        "not_a_file": "{path} 不是普通文件(是{kind}),flower 用不了;把它挪走再运行",
        "kind_dir": "目录",
        "kind_fifo": "命名管道",
        "kind_other": "特殊文件",
        "opt_rounds": "--rounds 要一个 ≥ 0 的整数,不是 {value}",
        "opt_asks": "--asks 要一个整数(负数 = 不限),不是 {value}",
        "opt_timeout": "--timeout 要一个秒数(≤0 = 不等,直接让它自己判断),不是 {value}",
        "opt_window": "--window 要一个正的 token 数(比如 200000),不是 {value}",
        "opt_lang": "--lang 只能是 {langs},不是 {value}",
        "task_too_big": "这个诉求有 {size} 个字符,超过了 {window} token 上下文的模型一次能收下的上限({limit});什么都没写。把它存成工作区里的一个文件,然后说「照 spec.md 做」之类的话。",
        "both_task_and_body": "%%flower:诉求写在 %%flower 那一行或者单元格里,二选一",
        "bad_quotes": "%flower:引号没有配对,读不懂这一行的参数(把要做的事放进一对引号里)",
        "unreadable_next": "! {what} 用不了({why}):这次运行会把它另存一份,再从头开始",
        "network_fs": "! {run_dir} 在网络文件系统上({fstype})。flower 在这里用回滚日志(rollback journal)而不是 WAL 写 "
        "sessions.db:写得慢一些,别的电脑上读它的人要等写完;这里的文件锁也可能管不到别的电脑,两台电脑同时在这个运行"
        "目录里跑 flower 不会被拦住。想避开这些:用 -r 把运行目录放到本机自己的磁盘上(不在 {point} 下面)。",
        "bad_watchdog": "FLOWER_WATCHDOG={value} 不认识,可选:{choices}。"
        "不设它(auto)就好,或者设 FLOWER_WATCHDOG=portable",
        "verdict_line": "判定:{state}",
        "unreachable_q": "目标被判为**无法达成**:{reason}\n怎么办?",
        "opt_accept": "接受这个结果,就这样往下走",
        "opt_amend": "修改目标",
        "opt_misjudged": "你判断错了,继续做",
        "new_goal_q": "新的目标是什么?(一句话,会追加到原目标后面)",
        "unreachable_no_one": "目标被判为无法达成,而且无人应答 —— 已停下。理由:{reason}\n看 {path} 和 runs/manifest.json,人来决定下一步。",
        "no_reason": "(没给理由)",
        "interrupted_words": "已打断,带着你的话续跑",
        "interrupted_plain": "已打断,继续跑",
        "retry_note": "第 {attempt} 次失败({kind}),准备重试",
        "offline_gave_up": "网络在 {wait} 内未恢复",
        "endpoint_down": "{host}:{port} 不可达,等待恢复(最多 {wait})",
        "endpoint_back": "{host}:{port} 恢复,继续",
        "wait_seconds": "{n} 秒",
        "wait_minutes": "{n} 分钟",
        "handoff_writing": "上下文 {ctx}/{window}K —— 正在写交接…",
        "handoff_done": "上下文满了,写交接换新会话({step})",
        "handoff_near": "上下文 {ctx},接近交接线 {at}K",
        "handoff_turn_failed": "交接那一轮失败了",
        "handoff_missing": "缺 {sections}",
        "handoff_degraded_error": "交接降级({why})",
        "resume_from_missing": "步骤 '{step}' 要求 resume_from='{source}',但那一步没有产生会话(未运行或已失败)",
        "ask_timeout": "(没人回答,它自己拿主意)",
        "ask_declined": "(留空:让它自己拿主意)",
        "ask_over_budget": "(提问次数用完了)",
        "ask_invalid": "(问题是空的)",
        "ask_cancelled": "(提问被中断)",
        "ask_other": "({state})",
        "flag_task": "要做的事,或唤醒时要补充的话(不写 = 接着做)",
        "flag_workspace": "智能体工作的目录",
        "flag_run_dir": "会话、清单和谱系放在哪(默认 runs;相对路径 = 在工作区下面)",
        "flag_new": "把之前的需求、目标和谱系归档,重新开始",
        "flag_rounds": "这次唤醒最多判定几轮",
        "flag_no_goal": "不设目标,也不判定",
        "flag_judge_can_run": "判定者可以运行命令",
        "flag_asks": "最多提几个问题(负数 = 不限,0 = 不问)",
        "flag_timeout": "等回答的秒数;≤0 = 不等",
        "flag_window": "模型的上下文窗口(token 数)",
        "flag_no_handoff": "不交接换代,用 CLI 自己的压缩",
        "flag_clarify_only": "只确认需求",
        "flag_no_trim": "续跑时保留旧的大段工具输出",
        "flag_lang": "zh 或 en;也可以设 FLOWER_LANG;都没有时跟着任务的文字(有汉字 = zh,否则 en),没有文字就用这个目录上次的语言",
        "flag_verbose": "也显示子智能体、思考和工具输出",
        "flag_status": "只看这个目录记得什么,不运行",
        "flag_demo": "离线演示:一个脚本化的小模型扮演每个角色,不需要 key",
        "flag_panel": "在 JupyterLab 里打开这个笔记本的 Flower 面板,不运行",
        "flag_no_context": "不把笔记本的变量和最近的单元格给 agent,也不给它看变量、交回单元格的工具",
        "flag_default": "默认 {value}",
        "panel_alone": "%flower --panel 不带别的东西(这里有 {extra}):单独运行 `%flower --panel`,其余的放到另一个单元格",
        "a_cell_body": "单元格内容",
        "facts_head": "{folder} 里的运行醒来时会看到的(运行目录 {run_dir};只读,什么都没写):",
        "facts_woke_none": "这里还没跑过:下一次从头开始",
        "facts_woke": "到现在的唤醒次数(lineage.json 记的):下一次运行是第 {next} 次唤醒",
        "facts_steps_none": "还没有哪个步骤有会话",
        "facts_steps": "每个步骤下次接着用的会话(步骤 → 会话 id)",
        "facts_waking_yes": "有确认过的需求(需求.md):%flower 会接着做,不会从头问",
        "facts_waking_no": "没有确认过的需求(需求.md):%flower 会先确认需求;自己写的工作流照样按 steps 接着原来的会话",
        "facts_checks_none": "还没有目标清单(目标.md)",
        "facts_checks": "目标.md 判定清单的条数",
        "facts_context_unknown": "干活会话的上下文:这里不读(要打开会话库)",
        "facts_context": "干活会话上次的上下文大小",
        "facts_task_none": "没有记下的诉求(诉求.md)",
        "facts_task": "最后一次说的诉求(诉求.md)",
        "facts_problem_none": "lineage.json 没问题(或者还没有)",
        "facts_problem": "lineage.json 用不了;下一次运行把它原样另存一边,重新开始",
        "bound_to_start": "flower 在 {folder} 里运行:这是内核启动时的文件夹,因为这个前端(papermill、nbclient 或普通内核)"
        "没说笔记本在哪。要换:papermill 加 --cwd <笔记本所在文件夹>(或 --inject-input-path),"
        "%flower -r <运行目录>,或 %config FlowerMagics.workspace = '<文件夹>'",
        "cli_about": 'flower:在终端里跑默认流程,和 %flower 用同一批文件。\n\n    flower "要做的事"       开始(目录里已有运行时:唤醒时补一句话)\n    flower                   接着做(在终端上会先问一句;/new 换一件事)\n    flower --new "要做的事"  归档旧的需求、目标和谱系,重新开始\n    flower --status          看看这个目录记得什么,不运行\n    flower --demo "要做的事" 离线演示:脚本化的小模型,不需要 key\n\n退出码:0 完成,1 停下(消息说明原因),2 用法错误,130 连按两次 Ctrl-C。\n别的运行(笔记本、另一个终端)正在用的目录会被拒绝(退出码 1,一行说明是谁占着),里面什么都不动。\nCtrl-C 按一次打断智能体、让你说句话;按两次退出。SIGHUP / SIGTERM 会先把进行中的步骤记进清单再退出。',
        "lineage_bad_sid": "! lineage.json 里步骤 {step} 的会话 id {sid} 不是有效的会话 id(可能被手改过):这一步开一个新会话",
        "disk_error": "! 写不进 {path}:{why}。腾出空间(或者用 -r 换一个运行目录)再运行一次 flower:它会从停下的地方接着做",
        "reason_full": "磁盘快满了(只剩 {free})",
        "manifest_unwritten": "! 步骤 {step} 的记录写不进 {path}:{why}。会话还在,下次运行会接着做,但这一步不会出现在清单里,直到清单又能写进去",
        "lab_caption": "Flower:当前文件夹的运行",
        "lab_command": "Flower:打开运行面板",
        "lab_command_tip": "显示当前文件夹里 flower 运行的清单和会话记录",
        "lab_no_folder": "还没有文件夹",
        "lab_folder": "文件夹:/{path}",
        "lab_run_dir": "运行目录",
        "lab_run_dir_tip": "运行目录,相对于文件夹(默认:runs)",
        "lab_refresh": "立即刷新",
        "lab_stale": "已过时:{at} 最近一次读取失败({why})。显示的是 {good} 读到的内容。",
        "lab_not_shown": "这个文件夹无法显示(它是隐藏的、在服务器根目录之外,或已不存在)。",
        "lab_unreadable": "读不了这个文件夹的运行:{why}",
        "lab_unreachable": "连不上 Jupyter 服务器({why})",
        "lab_step_1": "{n} 步",
        "lab_steps": "{n} 步",
        "lab_turn_1": "{n} 轮对话",
        "lab_turns": "{n} 轮对话",
        "lab_retry_1": "重试 {n} 次",
        "lab_retries": "重试 {n} 次",
        "lab_handoff_1": "交接 {n} 次",
        "lab_handoffs": "交接 {n} 次",
        "lab_woke": "第 {n} 次唤醒",
        "lab_no_run": '{dir} 里还没有运行:在这里的笔记本中用 %flower "要做的事",或在终端里用 flower "要做的事",就会开始。',
        "lab_brief_done": "需求 ✓",
        "lab_brief_partial": "需求未完成",
        "lab_brief_none": "没有需求",
        "lab_check_1": "目标检查 {n} 项",
        "lab_checks": "目标检查 {n} 项",
        "lab_goal_none": "没有目标",
        "lab_legend_context": "每步的上下文",
        "lab_legend_cost": "累计花费",
        "lab_chart": "每步的上下文和累计花费",
        "lab_chart_empty": "还没有步骤",
        "lab_chart_bar": "{step}:上下文 {context},花费 {cost}",
        "lab_chart_step": "第 {n} 步",
        "lab_details_title": "第 {n} 步:{step}",
        "lab_session": "会话",
        "lab_started": "开始",
        "lab_ended": "结束",
        "lab_run": "运行",
        "lab_error": "错误",
        "lab_errors": "错误记录",
        "lab_retired": "已退役",
        "lab_final_text": "最后的回答",
        "lab_show_transcript": "显示这个会话的记录",
        "lab_open_transcript": "打开会话记录",
        "lab_sort": "{what}(点击排序)",
        "lab_col_index": "在 manifest.json 中的位置",
        "lab_col_step": "步骤",
        "lab_col_step_tip": "步骤名(后续尝试带 #retryN / #roundN / ·判定#N)",
        "lab_col_session_tip": "会话 id(前 8 个字符)",
        "lab_col_ok": "成功",
        "lab_col_ok_tip": "这一步成功了吗?",
        "lab_col_cost": "花费",
        "lab_col_cost_tip": "花费(美元),含重试和交接",
        "lab_col_turns": "轮次",
        "lab_col_turns_tip": "模型轮次",
        "lab_col_time": "用时",
        "lab_col_time_tip": "实际耗时",
        "lab_col_attempts": "尝试",
        "lab_col_attempts_tip": "这一步尝试的次数(失败后的重试 + 1);合计一栏数的是重试",
        "lab_col_continued": "续接",
        "lab_col_continued_tip": "接着之前的会话做(后续步骤或轮次、唤醒,或断线后的重试),而不是开新会话",
        "lab_col_retired": "交接",
        "lab_col_retired_tip": "这一步因上下文占满而交接出去的会话(每个都已退役,由接班的会话继续)",
        "lab_col_context": "上下文",
        "lab_col_context_tip": "模型最后看到的上下文大小(词元数)",
        "lab_max": "最大 {n}",
        "lab_seconds": "{n} 秒",
        "lab_minutes": "{m} 分 {s} 秒",
        "lab_hours": "{h} 小时 {m} 分",
        "lab_raw": "原样",
        "lab_as_resumed": "续接时的样子",
        "lab_prev": "上一页",
        "lab_next": "下一页",
        "lab_transcript_title": "会话 {session} 的记录",
        "lab_loading": "读取中…",
        "lab_page": "第 {first}–{last} 条,共 {total} 条",
        "lab_changed": " · 本页有 {n} 条被改动",
        "lab_api_error": "接口错误",
        "lab_mark_dropped": "已去掉",
        "lab_mark_dropped_tip": "续接时去掉:不会发给模型",
        "lab_mark_rewritten": "已改写",
        "lab_mark_rewritten_tip": "续接时改写:模型拿到的是这里显示的缩短版",
        "lab_mark_added": "已补上",
        "lab_mark_added_tip": "续接时补上(例如给没有结果的工具调用补一个中性的结果)",
        "lab_part_text": "文字",
        "lab_part_thinking": "思考",
        "lab_part_tool_use": "工具调用 {name}",
        "lab_part_tool_result": "工具结果",
        "lab_part_tool_error": "工具结果(出错)",
        "lab_part_summary": "摘要",
        "lab_part_value": "值",
        "lab_part_other": "其他({type})",
        "lab_role_user": "用户",
        "lab_role_assistant": "助手",
        "lab_role_system": "系统",
        "lab_opened": "已为 {where} 打开 Flower 面板",
        "lab_opened_nowhere": "Flower 面板:这个输出没有带文件夹",
        "lab_opened_tip": "命令面板:{command}",
        "lab_proposed": "agent 提议的单元格已插在下面(标着「提议」),看过再运行",
        "lab_proposed_tip": "它不会自己运行;运行了才会执行",
        "proposed_comment": "# flower 提议的代码:看过再运行(你运行了才会执行)",
        "proposed_plain": "agent 提议了一个单元格(没有运行):\n{code}",
        "lab_open_plain": "从命令面板打开 Flower 面板:「{command}」(文件夹 {where})",
        "lab_lineage_moved": "lineage.json 属于另一个工作区(文件夹被复制或移动过);下次运行会把它另存一份",
        "lab_lineage_bad": "lineage.json 用不了({why});下次运行会把它另存一份",
        "lab_note_outside": ".flower/notes/{name} 指向工作区笔记之外,没有读取",
        "lab_note_link": ".flower/notes/{name} 是一个链接,没有读取",
        "lab_file_outside": "{name} 指向服务器根目录之外,没有读取",
        "lab_rows_skipped": "manifest.json:跳过了 {n} 行不是对象的内容",
        "lab_http_403": "没有权限:请登录 Jupyter,或使用可以读取文件的令牌",
        "lab_http_404": "找不到",
        "lab_http_405": "不允许的方法:Flower 面板的接口只读(GET);唯一的写入是对正在运行的 flower 回答、插话或让它停下(POST live)",
        "lab_http_500": "Flower 面板的接口出错了;详情见 Jupyter 服务器日志",
        "lab_bad_number": "{name} 必须是 {low} 到 {high} 之间的整数,收到的是 {got}",
        "lab_bad_view": "view 只能是 raw 或 resumed,收到的是 {got}",
        "lab_manifest_too_large": "manifest.json 有 {size} 字节,超过面板的上限 {limit};请在终端里用 `flower --status` 查看",
        "lab_manifest_not_list": "manifest.json 里是一个 JSON {kind},不是步骤行的列表,不是 flower 写的。把它移到一边,就会开始一份新的清单",
        "lab_manifest_unparseable": "manifest.json 现在解析不了({why});可能有运行正在写它,面板会再试。如果一直这样,说明文件坏了:把它移到一边,下一步会写一份新的",
        "lab_store_unreadable": "sessions.db 现在读不了({why});面板会再试。如果一直这样,说明文件坏了或不是会话存储",
        "lab_store_read_failed": "sessions.db 读取失败({why});面板会再试",
        "lab_no_session": "这个运行的 sessions.db 里没有这个会话",
        "lab_manifest_not_file": "manifest.json 是一个{kind},不是文件;把它移到一边,下一步会写一份新的",
        "lab_plumbing": "命令行工具的记录({n} 条)",
        "lab_plumbing_tip": "也显示 Claude Code 命令行工具自己的记录:排队的提示、附件、元消息",
        "lab_placeholder": "停止标记",
        "lab_placeholder_tip": "flower 在上一轮停下处放的占位;从不发给模型",
        "lab_started_over": "从这里重新开始(--new,{at})",
        "panel_elsewhere": "Flower 面板属于 JupyterLab 和 Notebook 7,这个前端两者都不是:在这里用 `%flower --status` 看 {where} 的运行,或者在终端里用 `flower --status`",
        "front_background": "后台运行",
        "front_panel": "面板",
        "stop_background": "%flower --stop 或 flower --stop",
        "flag_bg": "在后台运行:单元格马上返回,内核重启也不停;再运行 %flower 跟上它",
        "flag_detach": "在后台运行并马上返回;flower --attach 跟上它,flower --stop 停下它",
        "flag_attach": "跟上这个目录里正在运行的 flower(Ctrl-C 只是不看了,它接着跑)",
        "flag_stop": "让这个目录里正在运行的 flower 停下:这一步记为人中断,会话保留",
        "runner_failed": "后台运行没能启动:{why}",
        "runner_silent": "后台运行没说一句话就退出了;看看 runs/runner.log",
        "runner_started": "已在后台运行(进程 {pid})。{follow}",
        "runner_follow_magic": "它运行期间,再运行 %flower 跟上它,%flower --stop 停下它。",
        "runner_follow_cli": "flower --attach 跟上它,flower --stop 停下它。",
        "runner_ended": "后台运行(进程 {pid})已经结束。",
        "follow_let_go": "内核关掉了,这里不再更新;运行还在继续(进程 {pid})。%flower 跟上它、回答它的问题,%flower --stop 停下它。",
        "load_live": "这个目录里有一个正在运行的 flower(进程 {pid},{front})。%flower 跟上它,%flower --stop 停下它。",
        "load_live_asking": "这个目录里有一个正在运行的 flower(进程 {pid},{front}),它在等你回答({n} 个问题):「{question}」。%flower 跟上它并在那里回答,%flower --stop 停下它。",
        "live_bad_op": "不认识的操作 {op};只能是 {ops}",
        "live_too_long": "这段话太长(超过 {n} 个字符);长的内容写进文件,再告诉 agent 去读",
        "live_none": "{path} 里没有正在运行的 flower",
        "live_inbox_not_dir": "{path} 应该是文件夹,现在不是;挪开它再试",
        "live_attached": "跟上了正在运行的 flower(进程 {pid},{front})—— 先重放它已经说过的,再实时跟随",
        "live_detached": "不看了;它接着在后台跑。flower --attach 再跟上",
        "live_heard_answer": "← 回答(来自{source}):{text}",
        "live_heard_remark": "← 插话(来自{source}):{text}",
        "live_heard_stop": "← 停下(来自{source})",
        "live_heard_missed": "(没有在等的提问,这个回答没用上)",
        "live_stop_sent": "已请它停下;这一步会记为人中断,会话保留。{cmd} 接着做",
        "live_remark_sent": "已把这段话交给正在运行的 flower:它停在下一个消息边界,带着这段话接着同一个会话",
        "live_busy_new": "{path} 里正有 flower 在运行;先停下它({stop}),再用 --new 重新开始",
        "live_no_run": "这里没有正在运行的 flower,没有可跟的",
        "live_status_story": "上一次运行的经过(events.jsonl,{n} 条)",
        "lab_live_not_live": "这个运行目录里现在没有正在运行的 flower;没有可回答或可停下的",
        "lab_live_bad_json": "请求体必须是一个 JSON 对象:op(answer、remark 或 stop),以及字符串 text 和 id",
        "lab_live_bad_op": "op 只能是 answer、remark 或 stop,收到的是 {got}",
        "lab_live_bad_field": "{name} 必须是不超过 {n} 个字符的字符串",
        "lab_live_no_words": "回答和插话都需要写点什么",
        "lab_live_too_large": "请求体有 {size} 字节,超过上限 {limit}",
        "lab_live_inbox_bad": "这个运行的 inbox 不是文件夹;把它挪开再试",
        "lab_live_title": "正在运行",
        "lab_live_running": "运行中",
        "lab_live_waiting": "等你回答",
        "lab_live_idle": "暂停中(等待重试)",
        "lab_live_step": "步骤:{step}",
        "lab_live_round": "第 {n} 轮",
        "lab_live_pid": "进程 {pid}",
        "lab_live_since": "{at} 起",
        "lab_live_asks": "智能体在问",
        "lab_live_option_tip": "用这个选项回答",
        "lab_live_answer": "你的回答",
        "lab_live_send": "发送",
        "lab_live_remark": "对智能体说句话",
        "lab_live_remark_tip": "它会停在下一个消息边界,带着你的话接着同一个会话",
        "lab_live_say": "说",
        "lab_live_stop": "停下",
        "lab_live_stop_tip": "让这次运行停下:这一步记为人中断,会话保留",
        "lab_live_stop_confirm": "要让这次运行停下吗?这一步会记为人中断,会话保留;之后 %flower 或 flower 可以接着做。",
        "lab_live_cancel": "取消",
        "lab_live_sent_answer": "回答已送出:{text}",
        "lab_live_sent_remark": "话已送出:{text}",
        "lab_live_sent_stop": "已请它停下",
        "lab_live_failed": "没有送出:{why}",
        "lab_end_title": "上次运行怎么结束的",
        "lab_end_copy": "点一下复制这一行,粘到笔记本的单元格里运行",
        "lab_end_copied": "已复制:{cmd}",
        "lab_end_copy_failed": "浏览器不让复制;这一行已经选中,按 Ctrl+C 复制",
        "lab_end_found": "这次运行没留下结束记录:这是事后从它的日志和运行锁查出来的",
        "live_stop_alone": "--stop 只让正在运行的 flower 停下,不带别的:去掉 {extra}",
        "live_answer_elsewhere": "这里只能看:它问的问题在 Flower 面板里回答,或在终端里 flower --attach 后输入回答",
        "live_status_cut": "…… 前面还有 {n} 行没有列出",
        "live_status_now": "它现在正在运行(进程 {pid},{front})。{follow}",
        "live_status_over": "它已经不在运行了",
        "flag_sessions": "会话存在哪:postgresql://用户:密码@主机:端口/库(团队共用,换机器接着做);不给 = 运行目录里的 sessions.db。也可设 FLOWER_SESSIONS",
        "opt_sessions": "--sessions / FLOWER_SESSIONS 要一个 postgresql:// 地址(或 sqlite),不是 {value}",
        "sessions_mismatch": "{path} 的会话存在 {recorded},这次却指定了 {chosen}:换了存储就接不上之前的会话。用 --sessions 指回 {recorded}(密码给在 URL、PGPASSWORD 或 ~/.pgpass 里),或用 -r 换一个运行目录",
        "sessions_unreachable": "连不上会话存储 {where}:{why}。检查地址、密码和网络,或用 --sessions 换一个",
        "opt_not_text": "{what}的第 {at} 个字符不是文字(无效的 UTF-8 字节,或半个 UTF-16 代理对);什么都没写。请用 UTF-8 文字重新给出",
        "opt_path_not_text": "{what}的第 {at} 个字符不是 UTF-8:Claude Code 没法在那里工作,记录里也写不下这个路径;什么都没写。换一个(或改名成)UTF-8 名字的文件夹",
        "opt_nul": "{what}里有一个空字符(NUL),路径里不能有;什么都没写。去掉它再试",
        "what_task": "诉求",
        "what_workspace": "工作区(-w / FlowerMagics.workspace)",
        "what_run_dir": "运行目录(-r / FlowerMagics.run_dir)",
        "live_not_text": "这段话的第 {at} 个字符不是文字(无效的 UTF-8 字节,或半个 UTF-16 代理对);没有送出。请用 UTF-8 文字重写",
        "lab_live_not_text": "{name} 的第 {at} 个字符不是文字(半个 UTF-16 代理对);用 UTF-8 文字重发",
        "link_refused": "{path} 是一个符号链接(指向 {target});flower 从不透过链接写自己的文件,这次什么都没写。删掉这个链接再试",
        "run_dir_link": "{path} 是一个符号链接(指向 {target});flower 不跟着自己找到的运行目录链接走,这次什么都没写。要把运行放在那里就明说:-r {real};否则删掉这个链接再试",
        "live_heard_as_remark": "(提问已经不在等了,这段话当插话交给了它)",
        "end_done": "完成:每一步都过了",
        "end_not_reached": "目标没达成:在「{step}」用完了这次的轮次,判定者还不满意",
        "end_interrupted": "已打断:停在「{step}」,会话和做到的都留着",
        "end_stopped": "按请求停下了:停在「{step}」,会话和做到的都留着",
        "end_closed": "内核关掉了:停在「{step}」,这一步已经记下",
        "end_signalled": "进程被终止了(SIGTERM / SIGHUP):停在「{step}」,这一步已经记下",
        "end_killed": "上一个进程没留下一句话就没了(被 kill -9、崩溃或关机):停在「{step}」",
        "end_store_unreachable": "会话存储连不上了:停在「{step}」",
        "end_model_unreachable": "模型的 API 一直连不上,等到上限也没恢复:停在「{step}」",
        "end_failed": "在步骤「{step}」中止",
        "end_unknown": "结束了(结束记录读不懂,可能来自更新的版本)",
        "next_done": '要改点什么:{cmd} "一句话";换一件事:{cmd} --new "任务"',
        "next_not_reached": '再给几轮:{cmd} --rounds 3;或者 {cmd} "一句话" 调整要求',
        "next_interrupted": '{cmd} 从停下的地方接着做;{cmd} "一句话" 带上新要求',
        "next_stopped": '{cmd} 从停下的地方接着做;{cmd} "一句话" 带上新要求',
        "next_closed": "{cmd} 从停下的地方接着做(同一个会话)",
        "next_signalled": "{cmd} 从停下的地方接着做(同一个会话)",
        "next_killed": "{cmd} 从停下的地方接着做(同一个会话)",
        "next_store_unreachable": "存储恢复以后 {cmd} 接着做;之前的会话都在",
        "next_model_unreachable": "网络恢复以后 {cmd} 接着做;之前的会话都在",
        "next_failed": '看上面的原因;然后 {cmd} 接着做,或者 {cmd} "一句话" 调整',
        "next_unknown": "{cmd} --status 看看这个目录记得什么",
        "pill_done": "完成",
        "pill_not_reached": "目标没达成",
        "pill_interrupted": "已打断",
        "pill_stopped": "已停下",
        "pill_closed": "内核关了",
        "pill_signalled": "被终止",
        "pill_killed": "进程没了",
        "pill_store_unreachable": "存储断了",
        "pill_model_unreachable": "连不上模型",
        "pill_failed": "中止",
        "pill_unknown": "结束了",
        "previous_found": "上一次运行没留下结束记录,这次开始时查到:{how}",
        "step_none": "第一步之前",
        "see_help": "flower -h 列出所有参数",
        "words_kept_offline": "你的话记下了:正在等 API 恢复,恢复后随续跑的第一句话一起发给它",
        "no_credentials_demo": '没有 Anthropic 凭据。这个目录上次是离线演示:{cmd} --demo 接着演示,{cmd} --demo "一句话" 带上新要求。要真跑:{how}(网关用 ANTHROPIC_AUTH_TOKEN 加 ANTHROPIC_BASE_URL),或者先运行一次 `claude login`。',
        "no_credentials_real": '没有 Anthropic 凭据。这个目录里的运行用的是真模型:{how}(网关用 ANTHROPIC_AUTH_TOKEN 加 ANTHROPIC_BASE_URL),或者先运行一次 `claude login`,然后 {cmd} 接着做。离线演示请换一个空目录:{cmd} --demo "任务"。',
        "live_no_stop": "这里没有正在运行的 flower,没有可停的",
        "cut_short": "- {where}: 需求还没确认完(上次问到一半停下了),{cmd} 接着确认",
        "tool_stopped": "这次调用被停下了(可能已经做了一部分)",
        "judge_no_runtime": "拿不到 Runtime,无法判定目标(ctx['_runtime'] 缺失)",
        "judge_unclear": "判定者没给出明确结论,按未达成处理",
        "judge_amended": "目标已被人修改。新目标:\n{block}",
        "judge_overruled": "人认为这个目标是能达成的,判定者判断有误。人的说法:{answer}",
        "config_lang": "zh 或 en;空 = 看 FLOWER_LANG,没有就跟着任务的文字(有汉字 = zh,否则 en),没有文字就用这个目录上次的语言",
        "config_rounds": "每次唤醒最多判定几轮干活",
        "config_timeout": "等人回答智能体提问的秒数;<=0 一直等",
        "config_verbose": "也显示子代理、思考过程和工具输出",
        "config_run_dir": "运行目录(相对路径 = 在笔记本所在目录下);空 = runs",
        "config_workspace": "运行绑定的文件夹(相对路径 = 在内核启动的目录下);空 = 笔记本所在的文件夹",
        "config_context": "把笔记本的变量、最近的单元格和查看它们的工具给智能体(False = --no-context)",
        "config_sessions": "会话存在哪:postgresql://用户@主机:端口/库(密码另外收着,从不显示);空 = 看 FLOWER_SESSIONS,没有就用运行目录里的 sessions.db",
        # step names as a person reads them (step_name); on disk they stay the original's
        "stepname_clarify": "确认需求",
        "stepname_goal": "设定目标",
        "stepname_work": "干活",
        "stepname_judge": "{step}·判定#{n}",
        "stepname_round": "{step}#round{n}",
        "stepname_retry": "{step}#retry{n}",
        "total_wake": "总花费:这次唤醒 ${cost:.4f} · 清单合计 ${run:.4f}({manifest})",
    },
    "en": {
        "wake_head": "<- picking up in {where}",
        "brief_ok": "brief confirmed",
        "goals": "{n} goals",
        "goals_1": "{n} goal",
        "result_1": "{n} turn · ${cost:.4f} · {elapsed}",
        "earlier_1": "… {n} earlier entry (the full record is in the session and manifest.json)",
        "hdr_step": "step {n}/{total} · {name}",
        "hdr_elapsed": "{elapsed} elapsed",
        "hdr_cost": "total ${cost:.2f}",
        "hdr_context": "{step} context {ctx} of {window}",
        "hdr_context_only": "{step} context {ctx}",
        "hdr_context_tip": "How much of the model's context window this step's session holds; at the hand-off line a new session takes over",
        "hdr_wait_agent": "starting the agent…",
        "run_running": "running",
        "run_asking": "waiting for you",
        "run_done": "done",
        "run_failed": "stopped",
        "run_let_go": "not followed",
        "view_gone": "The kernel restarted, so this view no longer changes: run %flower (it follows the run if it still goes, or continues it).",
        "badge_pass": "passed",
        "badge_fail": "failed",
        "badge_pending": "not judged yet",
        "badge_unverifiable": "can't verify here",
        "ask_send": "Answer",
        "ask_decide": "Let the agent decide",
        "ask_placeholder": "Type an answer (empty = let the agent decide)",
        "ask_gone": "The kernel restarted: these buttons no longer reach the run. Run %flower (it follows a run still going and lets you answer, or continues one that stopped).",
        "answer_prompt": "Answer (a number picks an option; empty = let the agent decide)> ",
        "step_tools": "{n} tool calls",
        "step_tools_1": "{n} tool call",
        "work_ctx": "work context {ctx}",
        "wake_n": "wake #{n}",
        "carried": "<- continuing",
        "ask_fresh": "What should it do?",
        "ask_fresh_hint": " one sentence is enough; Enter to start (Ctrl-C to quit)",
        "ask_wake": "Continue from last time?",
        "ask_wake_hint": " Enter = keep going; or say something new; /new = start something else (Ctrl-C to quit)",
        "empty_ask": 'Nothing to do: the request is empty. Run `{cmd}` and type it, or {cmd} "build me an X".',
        "need_ask": 'Say what to do, e.g. {cmd} "build me an X"',
        "cancelled": "cancelled",
        "done": "done",
        "failed": "failed",
        "result": "{n} turns · ${cost:.4f} · {elapsed}",
        "status": "context {ctx} · total ${cost:.2f} · {elapsed}",
        "round": "round {n}/{total}",
        "total": "total ${cost:.4f} · manifest {manifest}",
        "aborted": "stopped in step '{step}'",
        "too_big": "! One message from the agent was over {limit}, more than flower reads; the step stopped here "
        '(its session is kept). {cmd} continues; for large data ask for small files: {cmd} "write the data in '
        'files under 10 MB"',
        "handoff_head": "context {ctx}/{window}K — writing a hand-off before a new session takes over",
        "handoff_degraded": "no hand-off could be written; a stand-in was used — the successor will inspect the scene",
        "handoff_doing": "doing",
        "handoff_decided": "decided",
        "handoff_deadends": "dead ends",
        "handoff_next": "next",
        "handoff_path": "<- hand-off written to {path}",
        "handoff_new": "<- a new session takes over; context starts again from {ctx}",
        "handoff_squeezed": "context {ctx} reached the hand-off line {at}: {n} large tool results were saved, as they "
        "were, in .flower/spill/; the same session carries on (no new session)",
        "stop_result_too_big": "one tool result ({tool}) of about {result} tokens, with the session's start-up of "
        "{floor}, is over the hand-off line {line} (window {window}): a new session would have to carry it too, so "
        "the step stopped. Have it read in parts (Read with offset/limit, or Grep for what it needs), or set the "
        "model's real window: {cmd} --window <real window>",
        "stop_window_too_small": "a fresh session already needs {floor} to start (system prompt, tools, the "
        "hand-off), over the hand-off line {line} (window {window}): every new session would stop the same way, "
        "so the step stopped. Set the model's real window: {cmd} --window <real window>, or {cmd} --no-handoff",
        "interrupted": "! Interrupted this round. Subagents that were running lose their unfinished work.",
        "interrupt_say": "  Anything to say? (Enter = nothing, keep going; Ctrl+C again = quit)",
        "pending_asks": "  ({n} questions are still waiting; the interrupt does not affect them)",
        "no_tty": "! stdin is not a terminal: nobody can answer questions. Add --timeout 0 to let it decide.",
        "received": "+ received (it sees this the next time it checks its inbox, at the latest before the step ends; appended to the brief)",
        "received_no_brief": "+ received (it sees this at its next inbox check, at the latest before the step ends; no brief to keep it in)",
        "continue_hint": '{cmd} continues, {cmd} "a sentence" adds a request, {cmd} --new "other" starts over.',
        "question": "? {question}",
        "archived": "<- the old brief, goals and lineage were archived to {path}",
        "unverifiable": "{n} of the {total} goal checks cannot be verified here — the judge will fail them and stop to ask you. You can still edit {path} now:\n{lines}",
        "note_edited": "{name} was edited by hand — this run goes by your version; the agent got it as you wrote it",
        "note_kept": "your edited {name} is kept, as it was, in {aside}; the agent got your text to keep",
        "note_kept_unreadable": "{name} could not be read (not UTF-8, UTF-16 or GB18030); kept as it was in {aside}",
        "run_locked": "{path} is in use by another flower: pid {pid} ({front}, {host}) since {since}, step {step}. "
        "Wait for it to finish, or stop it: {stop}, or kill {pid}.",
        "run_locked_unknown": "{path} is in use by another process (who holds it could not be read). "
        "Wait for it to finish, then run again.",
        "run_locked_no_step": "(starting)",
        "front_notebook": "notebook",
        "front_terminal": "terminal",
        "front_api": "Python API",
        "stop_notebook": "interrupt that notebook's kernel (■)",
        "stop_terminal": "press Ctrl-C in that terminal",
        "stop_api": "stop that script",
        "writer_pids": "claude pid {pids}",
        "writer_file": "{name} keeps changing",
        "writer_kill": "kill {pids}",
        "writer_stop": "stop whatever writes it",
        "foreign_wait": "someone else is still writing session {sid} ({who}); "
        "waiting for it to go quiet (up to {wait})",
        "session_busy": "someone else is still writing session {sid} ({who}) after {wait}; the step stopped so that "
        "two agents never write one session. Wait for it to end (or {stop}), then run again.",
        "seconds": "{n} s",
        "minutes": "{n} min",
        # the notebook's own lines (goal list, --status, the live view)
        "earlier": "… {n} earlier entries (the full record is in the session and manifest.json)",
        "waiting": "  > waiting for an answer…",
        "goal_summary": "passed {passed} · failed {failed} · not judged yet {pending}",
        "no_goal": "no goal yet (目标.md is written by the goal step)",
        "verdict": "verdict #{round}: {state}",
        "state_achieved": "achieved",
        "state_not_yet": "not yet",
        "state_unreachable": "unreachable",
        "state_unclear": "unclear",
        "judging": "judging…",
        "verdict_counts": "{passed}/{total} passed",
        "judge_said": "the judge's full answer",
        "fresh": '- {where}: no confirmed brief yet; {cmd} "a sentence" starts one',
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
        "col_resumed": "continued",
        "col_handoffs": "hand-offs",
        "col_context": "context",
        "col_error": "why",
        "yes": "yes",
        "no_credentials": 'No Anthropic credentials found. Try the offline demo first: {cmd} --demo "task". To run for real: {how} (or ANTHROPIC_AUTH_TOKEN with ANTHROPIC_BASE_URL for a gateway), or log in once with `claude login`.',
        "set_key_terminal": "set ANTHROPIC_API_KEY without echoing it: `read -rs ANTHROPIC_API_KEY && export ANTHROPIC_API_KEY`",
        "set_key_notebook": 'set the key in a cell without printing it: `import os, getpass; os.environ["ANTHROPIC_API_KEY"] = getpass.getpass()`, or export it before starting Jupyter',
        "demo_on": "DEMO MODE: offline, on a small scripted model that plays every role; nothing it says comes from a real model, and nothing is spent.",
        "demo_auto": "DEMO MODE: no Anthropic credentials were found, so flower runs offline on a small scripted model (flower_magic.testing.demo). Set ANTHROPIC_API_KEY and restart the kernel to run for real.",
        "step_rejected": "the result of step '{step}' did not pass its check",
        "brief_incomplete": "the model's answer is not a whole four-section brief ({n} missing), so no brief was saved. Run again to continue the clarification in the same session",
        "goal_incomplete": "the model's goal is incomplete (it needs a statement and a checklist), so no goal was saved. Run again to set it again",
        "rounds_used": "{n} rounds used up, and the judge's last verdict is '{state}': {reason}. Run again for {n} more rounds in the same session",
        "path_unusable": "Cannot use {path} as the {role}: {reason}. Choose another directory ({flag}).",
        "role_workspace": "workspace",
        "role_run_dir": "run dir",
        "reason_file": "it is a file, not a directory",
        "reason_under_file": "{parent} is a file",
        "reason_not_writable": "it is not writable",
        "reason_read_only": "its filesystem is read-only",
        "not_a_file": "{path} is not a regular file (it is a {kind}), so flower cannot use it; move it away and run again",
        "kind_dir": "directory",
        "kind_fifo": "named pipe",
        "kind_other": "special file",
        "opt_rounds": "--rounds must be a whole number ≥ 0, not {value}",
        "opt_asks": "--asks must be a whole number (negative = unlimited), not {value}",
        "opt_timeout": "--timeout must be a number of seconds (≤0 = never wait: the agent decides), not {value}",
        "opt_window": "--window must be a positive number of tokens (e.g. 200000), not {value}",
        "opt_lang": "--lang must be one of {langs}, not {value}",
        "task_too_big": 'the task is {size} characters, more than a model with a {window}-token context can be sent in one prompt (at most {limit}); nothing was written. Save it as a file in the workspace and name the file instead, e.g. "do what spec.md says".',
        "both_task_and_body": "%%flower: put the task either on the %%flower line or in the cell body, not both",
        "bad_quotes": "%flower: the quotes do not pair up, so the arguments cannot be read (put the task in one pair of quotes)",
        "unreadable_next": "! {what} cannot be used ({why}): this run keeps it aside and starts fresh",
        "network_fs": "! {run_dir} is on a network filesystem ({fstype}). flower keeps sessions.db there with a "
        "rollback journal instead of WAL: writes are slower, and a reader on another computer waits while one is "
        "written. File locks there may not reach other computers either, so two computers running flower in this "
        "run dir at once are not kept apart. To avoid both, keep the run dir on this computer's own disk: -r with a "
        "folder that is not under {point}.",
        "bad_watchdog": "FLOWER_WATCHDOG={value} is not one of {choices}; unset it (auto) or set e.g. "
        "FLOWER_WATCHDOG=portable",
        "verdict_line": "verdict: {state}",
        "unreachable_q": "The judge calls the goal **unreachable**: {reason}\nWhat now?",
        "opt_accept": "Accept this result and go on",
        "opt_amend": "Change the goal",
        "opt_misjudged": "You misjudged it, keep working",
        "new_goal_q": "What is the new goal? (one sentence, added after the current goal)",
        "unreachable_no_one": "The judge calls the goal unreachable and nobody answered — stopped. Reason: {reason}\nRead {path} and runs/manifest.json; a person decides what comes next.",
        "no_reason": "(no reason given)",
        "interrupted_words": "interrupted; carrying on with your words",
        "interrupted_plain": "interrupted; carrying on",
        "retry_note": "attempt {attempt} failed ({kind}); retrying",
        "offline_gave_up": "the network did not come back within {wait}",
        "endpoint_down": "{host}:{port} is unreachable; waiting for it (at most {wait})",
        "endpoint_back": "{host}:{port} is back; carrying on",
        "wait_seconds": "{n} s",
        "wait_minutes": "{n} min",
        "handoff_writing": "context {ctx}/{window}K — writing the hand-off…",
        "handoff_done": "context full: hand-off written, a new session takes over ({step})",
        "handoff_near": "context {ctx}, near the hand-off line at {at}K",
        "handoff_turn_failed": "the hand-off turn failed",
        "handoff_missing": "missing {sections}",
        "handoff_degraded_error": "hand-off degraded ({why})",
        "resume_from_missing": "step '{step}' has resume_from='{source}', but that step produced no session (not run, or failed)",
        "ask_timeout": "(nobody answered; it decides itself)",
        "ask_declined": "(left empty: let the agent decide)",
        "ask_over_budget": "(out of questions)",
        "ask_invalid": "(the question was empty)",
        "ask_cancelled": "(question interrupted)",
        "ask_other": "({state})",
        "flag_task": "what to do, or what to add at wake (omit to continue)",
        "flag_workspace": "the agent's directory",
        "flag_run_dir": "where sessions, manifest and lineage live (default runs; relative = under the workspace)",
        "flag_new": "archive the previous brief, goals and lineage; start fresh",
        "flag_rounds": "judged work rounds in this wake",
        "flag_no_goal": "no goal step and no judge",
        "flag_judge_can_run": "the judge may run shell commands",
        "flag_asks": "question quota (negative = unlimited, 0 = none)",
        "flag_timeout": "seconds to wait for an answer; <=0 never waits",
        "flag_window": "the model's context window in tokens",
        "flag_no_handoff": "no hand-off; the CLI's auto-compaction instead",
        "flag_clarify_only": "only clarify the requirement",
        "flag_no_trim": "keep large old tool results in resumed context",
        "flag_lang": "zh or en; also FLOWER_LANG; without either, the task's words decide (Chinese characters: zh, else en), and with no words this folder's last run",
        "flag_verbose": "also show subagents, thinking and tool output",
        "flag_status": "show what this directory remembers; run nothing",
        "flag_demo": "offline demo: a small scripted model plays every role; no key needed",
        "flag_panel": "open the Flower panel on this notebook's run; run nothing",
        "flag_no_context": "do not give the agent the notebook's variables and recent cells, nor its tools to look at them and hand cells back",
        "flag_default": "default {value}",
        "panel_alone": "%flower --panel takes nothing else (got {extra}): run `%flower --panel` alone and the rest in another cell",
        "a_cell_body": "a cell body",
        "facts_head": "What a run in {folder} would wake up to (run dir {run_dir}; read only, nothing written):",
        "facts_woke_none": "nothing has run here yet: the next run starts fresh",
        "facts_woke": "wakes so far (lineage.json counts them): the next run is wake {next}",
        "facts_steps_none": "no step has a session yet",
        "facts_steps": "the session each step continues next time (step -> session id)",
        "facts_waking_yes": "a confirmed brief (需求.md) exists: %flower continues instead of asking again",
        "facts_waking_no": "no confirmed brief (需求.md): %flower would start by clarifying; a workflow of your own "
        "still continues the sessions in steps",
        "facts_checks_none": "no goal checklist (目标.md) yet",
        "facts_checks": "checks in 目标.md's checklist",
        "facts_context_unknown": "the work session's context: not read here (that needs the session store)",
        "facts_context": "the work session's last context size",
        "facts_task_none": "no request recorded (诉求.md)",
        "facts_task": "the request as last said (诉求.md)",
        "facts_problem_none": "lineage.json is usable (or not there yet)",
        "facts_problem": "lineage.json cannot be used; the next run keeps it aside and starts fresh",
        "bound_to_start": "flower runs in {folder}: the kernel's starting folder, because this front end (papermill, "
        "nbclient or a plain kernel) does not say where the notebook is. To choose: papermill --cwd <the notebook's "
        "folder> (or --inject-input-path), %flower -r <run dir>, or %config FlowerMagics.workspace = '<folder>'",
        "cli_about": 'flower: the default workflow from a terminal, on the same files as %flower.\n\n    flower "task"            start (or, in a directory with a run, say something at wake)\n    flower                   continue (on a terminal: asks first; /new starts something else)\n    flower --new "task"      archive the old brief, goals and lineage; start fresh\n    flower --status          what this directory remembers; runs nothing\n    flower --demo "task"     the offline demo: a small scripted model, no key needed\n\nExit codes: 0 done, 1 stopped (the message says why), 2 a usage mistake, 130 a second Ctrl-C.\nA directory another run is using (a notebook, another terminal) is refused with exit 1 and one line\nsaying who holds it; nothing in it is touched.\nCtrl-C once interrupts the agent and lets you say something; twice quits. SIGHUP / SIGTERM record\nthe step in flight in the manifest before the process goes.',
        "lineage_bad_sid": "! lineage.json names {sid} as the session of step {step}, which is not a session id (edited by hand?): this step starts a new session",
        "disk_error": "! could not write {path}: {why}. Free some space (or choose another run dir with -r) and run flower again: it continues where it stopped",
        "reason_full": "its disk is nearly full (only {free} free)",
        "manifest_unwritten": "! the row of step {step} could not be written to {path}: {why}. Its session is kept and the next run continues, but the manifest misses this step until it can be written again",
        "lab_caption": "Flower: the run of the current folder",
        "lab_command": "Flower: Open run panel",
        "lab_command_tip": "Show the manifest and transcripts of the current folder's flower run",
        "lab_no_folder": "no folder yet",
        "lab_folder": "Folder: /{path}",
        "lab_run_dir": "run dir",
        "lab_run_dir_tip": "The run dir, relative to the folder (default: runs)",
        "lab_refresh": "Refresh now",
        "lab_stale": "Stale: the last read failed at {at} ({why}). Showing what was read at {good}.",
        "lab_not_shown": "This folder cannot be shown (it is hidden, outside the server root, or gone).",
        "lab_unreadable": "Cannot read this folder's run: {why}",
        "lab_unreachable": "cannot reach the Jupyter server ({why})",
        "lab_step_1": "{n} step",
        "lab_steps": "{n} steps",
        "lab_turn_1": "{n} turn",
        "lab_turns": "{n} turns",
        "lab_retry_1": "{n} retry",
        "lab_retries": "{n} retries",
        "lab_handoff_1": "{n} hand-off",
        "lab_handoffs": "{n} hand-offs",
        "lab_woke": "wake #{n}",
        "lab_no_run": 'No run in {dir} yet: %flower "a task" in a notebook here, or flower "a task" in a terminal, starts one.',
        "lab_brief_done": "brief ✓",
        "lab_brief_partial": "brief incomplete",
        "lab_brief_none": "no brief",
        "lab_check_1": "{n} goal check",
        "lab_checks": "{n} goal checks",
        "lab_goal_none": "no goal",
        "lab_legend_context": "context per step",
        "lab_legend_cost": "cumulative cost",
        "lab_chart": "Context per step and cumulative cost",
        "lab_chart_empty": "no steps yet",
        "lab_chart_bar": "{step}: context {context}, cost {cost}",
        "lab_chart_step": "step {n}",
        "lab_details_title": "Step {n}: {step}",
        "lab_session": "Session",
        "lab_started": "Started",
        "lab_ended": "Ended",
        "lab_run": "Run",
        "lab_error": "Error",
        "lab_errors": "Errors",
        "lab_retired": "Retired",
        "lab_final_text": "Final text",
        "lab_show_transcript": "Show this session's transcript",
        "lab_open_transcript": "Open transcript",
        "lab_sort": "{what} (click to sort)",
        "lab_col_index": "Position in manifest.json",
        "lab_col_step": "Step",
        "lab_col_step_tip": "Step name (later attempts say which: · retry N, · round N, · judge #N)",
        "lab_col_session_tip": "Session id (first 8 characters)",
        "lab_col_ok": "OK",
        "lab_col_ok_tip": "Did the step succeed?",
        "lab_col_cost": "Cost",
        "lab_col_cost_tip": "Cost in USD, across retries and hand-offs",
        "lab_col_turns": "Turns",
        "lab_col_turns_tip": "Model turns",
        "lab_col_time": "Time",
        "lab_col_time_tip": "Wall-clock duration",
        "lab_col_attempts": "Tries",
        "lab_col_attempts_tip": "Tries of this step (retries after a failed try + 1); the total counts the retries",
        "lab_col_continued": "Continued",
        "lab_col_continued_tip": "Continued an earlier session (a later step or round, a wake, or a retry after an outage) rather than starting a new one",
        "lab_col_retired": "Hand-offs",
        "lab_col_retired_tip": "Sessions this step handed off from when their context filled (each is retired, its successor continues)",
        "lab_col_context": "Context",
        "lab_col_context_tip": "Context size (tokens) the model last saw",
        "lab_max": "max {n}",
        "lab_seconds": "{n} s",
        "lab_minutes": "{m} min {s} s",
        "lab_hours": "{h} h {m} min",
        "lab_raw": "Raw",
        "lab_as_resumed": "As resumed",
        "lab_prev": "Previous page",
        "lab_next": "Next page",
        "lab_transcript_title": "Transcript of session {session}",
        "lab_loading": "loading…",
        "lab_page": "{first}–{last} of {total}",
        "lab_changed": " · {n} changed on this page",
        "lab_api_error": "API error",
        "lab_mark_dropped": "dropped",
        "lab_mark_dropped_tip": "Removed on resume: the model is not sent this entry",
        "lab_mark_rewritten": "rewritten",
        "lab_mark_rewritten_tip": "Rewritten on resume: the model gets the shortened form shown here",
        "lab_mark_added": "added",
        "lab_mark_added_tip": "Added on resume (e.g. a neutral result for an orphaned tool call)",
        "lab_part_text": "text",
        "lab_part_thinking": "thinking",
        "lab_part_tool_use": "tool call {name}",
        "lab_part_tool_result": "tool result",
        "lab_part_tool_error": "tool result (error)",
        "lab_part_summary": "summary",
        "lab_part_value": "value",
        "lab_part_other": "other ({type})",
        "lab_role_user": "user",
        "lab_role_assistant": "assistant",
        "lab_role_system": "system",
        "lab_opened": "Flower panel opened for {where}",
        "lab_opened_nowhere": "Flower panel: this output carries no folder",
        "lab_opened_tip": "Command palette: {command}",
        "lab_proposed": "The agent's proposed cell is inserted below (marked as proposed): read it, then run it",
        "lab_proposed_tip": "It never runs by itself; it runs when you run it",
        "proposed_comment": "# proposed by flower: read it, then run it (nothing runs until you do)",
        "proposed_plain": "The agent proposed a cell (not run):\n{code}",
        "lab_open_plain": "Open the Flower panel from the command palette: '{command}' (folder {where})",
        "lab_lineage_moved": "lineage.json belongs to another workspace (the folder was copied or moved); the next run keeps it aside",
        "lab_lineage_bad": "lineage.json cannot be used ({why}); the next run keeps it aside",
        "lab_note_outside": ".flower/notes/{name} points outside the workspace's notes; it was not read",
        "lab_note_link": ".flower/notes/{name} is a link; it was not read",
        "lab_file_outside": "{name} points outside the server root; it was not read",
        "lab_rows_skipped": "manifest.json: {n} rows that are not objects were skipped",
        "lab_http_403": "Forbidden: log in to Jupyter, or use a token that may read contents",
        "lab_http_404": "Not found",
        "lab_http_405": "Method not allowed: the Flower panel API only reads (GET); its one write is answering, remarking to or stopping a live run (POST live)",
        "lab_http_500": "The Flower panel API failed; the Jupyter server log has the details",
        "lab_bad_number": "{name} must be a whole number from {low} to {high}, got {got}",
        "lab_bad_view": "view must be raw or resumed, got {got}",
        "lab_manifest_too_large": "manifest.json is {size} bytes, over the panel's limit of {limit}; read it with `flower --status` in a terminal instead",
        "lab_manifest_not_list": "manifest.json holds a JSON {kind}, not a list of step rows; it was not written by flower. Move it aside to start a fresh manifest",
        "lab_manifest_unparseable": "manifest.json cannot be parsed right now ({why}); a run may be writing it, so the panel will try again. If this persists the file is damaged: move it aside and the next step writes a fresh one",
        "lab_store_unreadable": "sessions.db cannot be read right now ({why}); the panel will try again. If this persists, the file is damaged or not a session store",
        "lab_store_read_failed": "sessions.db read failed ({why}); the panel will try again",
        "lab_no_session": "this run's sessions.db holds no such session",
        "lab_manifest_not_file": "manifest.json is a {kind}, not a file; move it aside and the next step writes a fresh one",
        "lab_plumbing": "CLI records ({n})",
        "lab_plumbing_tip": "Also show the Claude Code CLI's own bookkeeping: queued prompts, attachments, meta messages",
        "lab_placeholder": "stop mark",
        "lab_placeholder_tip": "flower's placeholder where the last round stopped; the model is never sent it",
        "lab_started_over": "started over here (--new, {at})",
        "panel_elsewhere": "The Flower panel is part of JupyterLab and Notebook 7, and this front end is neither: `%flower --status` shows the run of {where} here, and `flower --status` in a terminal",
        "front_background": "background run",
        "front_panel": "panel",
        "stop_background": "%flower --stop or flower --stop",
        "flag_bg": "run in the background: the cell returns at once and a kernel restart does not stop it; run %flower again to follow it",
        "flag_detach": "run in the background and return at once; flower --attach follows it, flower --stop stops it",
        "flag_attach": "follow the flower running in this directory (Ctrl-C only stops watching; it goes on)",
        "flag_stop": "stop the flower running in this directory: the step is recorded as interrupted by a person, its session kept",
        "runner_failed": "the background run could not start: {why}",
        "runner_silent": "the background run ended without a word; see runs/runner.log",
        "runner_started": "running in the background (pid {pid}). {follow}",
        "runner_follow_magic": "While it runs, %flower again follows it and %flower --stop stops it.",
        "runner_follow_cli": "flower --attach follows it, flower --stop stops it.",
        "runner_ended": "the background run (pid {pid}) has ended.",
        "follow_let_go": "The kernel went, so this view no longer changes; the run goes on (pid {pid}). %flower follows it and answers its questions; %flower --stop stops it.",
        "load_live": "A flower run is live in this directory (pid {pid}, {front}). %flower follows it; %flower --stop stops it.",
        "load_live_asking": 'A flower run is live in this directory (pid {pid}, {front}) and waits for your answer ({n} open): "{question}". %flower follows it and lets you answer there; %flower --stop stops it.',
        "live_bad_op": "unknown operation {op}; it is one of {ops}",
        "live_too_long": "these words are too long (over {n} characters); put long text in a file and tell the agent to read it",
        "live_none": "no flower is running in {path}",
        "live_inbox_not_dir": "{path} should be a folder and is not; move it away and try again",
        "live_attached": "following the running flower (pid {pid}, {front}): what it said so far, then live",
        "live_detached": "stopped watching; it goes on in the background. flower --attach follows it again",
        "live_heard_answer": "← answer (from the {source}): {text}",
        "live_heard_remark": "← remark (from the {source}): {text}",
        "live_heard_stop": "← stop (from the {source})",
        "live_heard_missed": "(no question was waiting; this answer was not used)",
        "live_stop_sent": "asked it to stop; the step is recorded as interrupted by a person and its session kept. {cmd} continues it",
        "live_remark_sent": "gave these words to the running flower: it stops at the next message boundary and goes on in the same session with them",
        "live_busy_new": "a flower is running in {path}; stop it first ({stop}), then start over with --new",
        "live_no_run": "no flower is running here; there is nothing to follow",
        "live_status_story": "the last run's story (events.jsonl, {n} records)",
        "lab_live_not_live": "no flower is running in this run dir now; there is nothing to answer or stop",
        "lab_live_bad_json": "the request body must be a JSON object: op (answer, remark or stop), and text and id as strings",
        "lab_live_bad_op": "op must be answer, remark or stop, got {got}",
        "lab_live_bad_field": "{name} must be a string of at most {n} characters",
        "lab_live_no_words": "an answer or a remark needs some words",
        "lab_live_too_large": "the request body is {size} bytes, over the limit of {limit}",
        "lab_live_inbox_bad": "the run's inbox is not a folder; move it away and try again",
        "lab_live_title": "Live run",
        "lab_live_running": "running",
        "lab_live_waiting": "waiting for an answer",
        "lab_live_idle": "idle (waiting to retry)",
        "lab_live_step": "step: {step}",
        "lab_live_round": "round {n}",
        "lab_live_pid": "process {pid}",
        "lab_live_since": "since {at}",
        "lab_live_asks": "The agent asks",
        "lab_live_option_tip": "Answer with this option",
        "lab_live_answer": "Your answer",
        "lab_live_send": "Send",
        "lab_live_remark": "Say something to the agent",
        "lab_live_remark_tip": "It stops at the next message boundary and goes on in the same session with your words",
        "lab_live_say": "Say it",
        "lab_live_stop": "Stop",
        "lab_live_stop_tip": "Stop this run: the step is recorded as interrupted by a person, its session kept",
        "lab_live_stop_confirm": "Stop this run? The step is recorded as interrupted by a person and its session is kept; %flower or flower continues it later.",
        "lab_live_cancel": "Cancel",
        "lab_live_sent_answer": "Answer sent: {text}",
        "lab_live_sent_remark": "Sent: {text}",
        "lab_live_sent_stop": "Asked it to stop",
        "lab_live_failed": "Not sent: {why}",
        "lab_end_title": "How the last run ended",
        "lab_end_copy": "Click to copy this line, then run it in a notebook cell",
        "lab_end_copied": "Copied: {cmd}",
        "lab_end_copy_failed": "The browser did not let the panel copy; the line is selected: press Ctrl+C",
        "lab_end_found": "This run left no end record: this is what its log and its run lock say afterwards",
        "live_stop_alone": "--stop only stops the running flower and takes nothing else: leave out {extra}",
        "live_answer_elsewhere": "this view only watches: answer its questions in the Flower panel, or type the answer after flower --attach in a terminal",
        "live_status_cut": "… {n} earlier lines not shown",
        "live_status_now": "it is running now (pid {pid}, {front}). {follow}",
        "live_status_over": "it is not running now",
        "flag_sessions": "where sessions live: postgresql://user:password@host:port/db (shared by a team, continues on any machine); not given = sessions.db in the run dir. Or set FLOWER_SESSIONS",
        "opt_sessions": "--sessions / FLOWER_SESSIONS must be a postgresql:// URL (or sqlite), not {value}",
        "sessions_mismatch": "{path} keeps its sessions in {recorded}, but {chosen} was chosen: another store cannot continue them. Point --sessions back at {recorded} (password in the URL, PGPASSWORD or ~/.pgpass), or use another run dir with -r",
        "sessions_unreachable": "cannot reach the session store {where}: {why}. Check the address, password and network, or choose another with --sessions",
        "opt_not_text": "{what} is not text at character {at} (invalid UTF-8 bytes, or half of a UTF-16 surrogate pair); nothing was written. Give it again as UTF-8 text",
        "opt_path_not_text": "{what} is not UTF-8 at character {at}: Claude Code cannot work there and no record can name it; nothing was written. Choose (or rename to) a folder whose name is UTF-8",
        "opt_nul": "{what} holds a NUL character, which no path can; nothing was written. Take it out and try again",
        "what_task": "the task",
        "what_workspace": "the workspace (-w / FlowerMagics.workspace)",
        "what_run_dir": "the run dir (-r / FlowerMagics.run_dir)",
        "live_not_text": "these words are not text at character {at} (invalid UTF-8 bytes, or half of a UTF-16 surrogate pair); nothing was sent. Write them again as UTF-8 text",
        "lab_live_not_text": "{name} is not text at character {at} (half of a UTF-16 surrogate pair); send it again as UTF-8 text",
        "link_refused": "{path} is a symbolic link (to {target}); flower never writes its files through a link, and wrote nothing. Remove the link and try again",
        "run_dir_link": "{path} is a symbolic link (to {target}); flower does not follow a run dir link it finds, and wrote nothing. To keep the runs there, name it: -r {real}; otherwise remove the link and try again",
        "live_heard_as_remark": "(the question was no longer waiting; these words went to it as a remark)",
        "end_done": "done: every step passed",
        "end_not_reached": "goals not reached: '{step}' used this wake's rounds and the judge is not satisfied",
        "end_interrupted": "interrupted in '{step}'; its session and everything done so far are kept",
        "end_stopped": "stopped on request in '{step}'; its session and everything done so far are kept",
        "end_closed": "the kernel shut down during '{step}'; the step is recorded",
        "end_signalled": "the process was terminated (SIGTERM / SIGHUP) during '{step}'; the step is recorded",
        "end_killed": "the process went without a word (kill -9, a crash or a shutdown) during '{step}'",
        "end_store_unreachable": "the session store could not be reached during '{step}'",
        "end_model_unreachable": "the model's API stayed unreachable past the outage budget during '{step}'",
        "end_failed": "stopped in step '{step}'",
        "end_unknown": "ended (its end record is of a newer version)",
        "next_done": '{cmd} "a sentence" to change something; {cmd} --new "task" for something else',
        "next_not_reached": '{cmd} --rounds 3 for more rounds, or {cmd} "a sentence" to adjust the request',
        "next_interrupted": '{cmd} continues where it stopped; {cmd} "a sentence" adds a request',
        "next_stopped": '{cmd} continues where it stopped; {cmd} "a sentence" adds a request',
        "next_closed": "{cmd} continues where it stopped (the same session)",
        "next_signalled": "{cmd} continues where it stopped (the same session)",
        "next_killed": "{cmd} continues where it stopped (the same session)",
        "next_store_unreachable": "{cmd} continues once the store is back; every session is kept",
        "next_model_unreachable": "{cmd} continues once the network is back; every session is kept",
        "next_failed": 'see the reason above; then {cmd} continues, or {cmd} "a sentence" adjusts',
        "next_unknown": "{cmd} --status shows what this directory remembers",
        "pill_done": "done",
        "pill_not_reached": "goals not reached",
        "pill_interrupted": "interrupted",
        "pill_stopped": "stopped",
        "pill_closed": "kernel closed",
        "pill_signalled": "terminated",
        "pill_killed": "process gone",
        "pill_store_unreachable": "store lost",
        "pill_model_unreachable": "model unreachable",
        "pill_failed": "stopped",
        "pill_unknown": "ended",
        "previous_found": "the previous run left no end record; found at this start: {how}",
        "step_none": "before the first step",
        "see_help": "flower -h lists the flags",
        "words_kept_offline": "your words are kept: flower is waiting for the API; they go to the agent with the first message once it answers again",
        "no_credentials_demo": 'No Anthropic credentials found. This folder\'s last run was the offline demo: {cmd} --demo continues it, {cmd} --demo "a sentence" adds a request. To run for real: {how} (or ANTHROPIC_AUTH_TOKEN with ANTHROPIC_BASE_URL for a gateway), or log in once with `claude login`.',
        "no_credentials_real": 'No Anthropic credentials found. This folder\'s run is on a real model: {how} (or ANTHROPIC_AUTH_TOKEN with ANTHROPIC_BASE_URL for a gateway), or log in once with `claude login`; then {cmd} continues it. For the offline demo use an empty folder: {cmd} --demo "task".',
        "live_no_stop": "no flower is running here; there is nothing to stop",
        "cut_short": "- {where}: the brief is not confirmed yet (the clarification stopped half-way); {cmd} continues it",
        "tool_stopped": "this call was stopped while it ran (it may have done part of its work)",
        "judge_no_runtime": "no Runtime to judge the goal with (ctx['_runtime'] is missing)",
        "judge_unclear": "the judge gave no clear verdict; counted as not reached",
        "judge_amended": "a person changed the goal. The new goal:\n{block}",
        "judge_overruled": "a person holds the goal reachable and the judge mistaken. They said: {answer}",
        "config_lang": "zh or en; empty = FLOWER_LANG, else the task's words (Chinese characters: zh, else en), else this folder's last run",
        "config_rounds": "judged work rounds per wake",
        "config_timeout": "seconds to wait for an answer to the agent's question; <=0 never",
        "config_verbose": "also show subagents, thinking and tool output",
        "config_run_dir": "run dir (relative = under the notebook's directory); empty = runs",
        "config_workspace": "the folder runs are bound to (relative = under the kernel's starting folder); empty = the notebook's",
        "config_context": "give the agent the notebook's variables, recent cells and tools (False = --no-context)",
        "config_sessions": "where sessions live: postgresql://user@host:port/db (its password is kept aside, never shown); empty = FLOWER_SESSIONS, else the run dir's sessions.db",
        # step names as a person reads them (step_name); on disk they stay the original's
        "stepname_clarify": "Clarify",
        "stepname_goal": "Set goals",
        "stepname_work": "Work",
        "stepname_judge": "{step} · judge #{n}",
        "stepname_round": "{step} · round {n}",
        "stepname_retry": "{step} · retry {n}",
        "total_wake": "total: this wake ${cost:.4f} · the manifest's total ${run:.4f} ({manifest})",
    },
}


def pick_lang(value: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """``value`` if given, else ``FLOWER_LANG``, else ``zh``. Raises ValueError for other languages."""
    env = os.environ if environ is None else environ
    lang = (value or env.get("FLOWER_LANG") or "zh").strip().lower()
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r}; choose one of: {', '.join(LANGS)}")
    return lang


def pick_lang_or_default(value: str | None = None) -> str:
    """``pick_lang`` that never raises: an unknown language (already reported elsewhere) reads as zh."""
    try:
        return pick_lang(value)
    except ValueError:
        return "zh"


def say(key: str, lang: str = "zh", **fields: Any) -> str:
    """One phrase in ``lang``, with its fields filled in.

    A phrase that counts something has a singular form under ``<key>_1`` (``1 turn``, not ``1 turns``);
    it is said when the field ``n`` is 1.

    A ``step`` field is a step's name as the run wrote it (``干活·判定#1``): it is said in ``lang``
    (``step_name``).
    """
    table = _TEXTS.get(lang, _TEXTS["zh"])
    if fields.get("n") == 1 and f"{key}_1" in table:
        key = f"{key}_1"
    if isinstance(fields.get("step"), str):
        fields["step"] = step_name(fields["step"], lang)
    return table[key].format(**fields)


# The original's step names (workflow.starter, workflow.judge; lineage.json and manifest.json keep
# them) and the phrase each is read as; a step of another workflow is read by its own name.
STEP_PHRASES = {"确认需求": "stepname_clarify", "设定目标": "stepname_goal", "干活": "stepname_work"}
# How the workflow names a step's later attempts (workflow.base.attempt_name, workflow.judge): its
# judge's round, a judged round, a retry.
STEP_ATTEMPT = re.compile(r"(?P<base>.+?)(?:·判定#(?P<judge>\d+)|#round(?P<round>\d+)|#retry(?P<retry>\d+))?")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff]")


def step_name(name: str, lang: str = "zh") -> str:
    """A step's name as a person reads it in ``lang``: ``干活·判定#1`` is ``Work · judge #1`` in English,
    ``确认需求`` is ``Clarify``; in Chinese every name is the original's. A name the workflow did not
    make (a custom step) is said as it is."""
    found = STEP_ATTEMPT.fullmatch(name)
    if found is None:
        return name
    base = found["base"]
    table = _TEXTS.get(lang, _TEXTS["zh"])
    shown = table[STEP_PHRASES[base]] if base in STEP_PHRASES else base
    for part in ("judge", "round", "retry"):
        if found[part] is not None:  # the table's own format: ``say`` would read ``shown`` as a name again
            return table[f"stepname_{part}"].format(step=shown, n=int(found[part]))
    return shown


def words_lang(text: str) -> str | None:
    """The language a task's words are in: ``zh`` when they hold a Chinese character, ``en`` when
    they hold a letter, None when they hold neither (no words, only digits or signs)."""
    if _CJK.search(text):
        return "zh"
    if any(ch.isalpha() for ch in text):
        return "en"
    return None


def phrases(lang: str, prefix: str) -> dict[str, str]:
    """Every phrase whose key starts with ``prefix``, in ``lang``, unfilled: what another program (the
    JupyterLab panel) fills in itself, with the same ``{name}`` fields."""
    return {k: v for k, v in _TEXTS.get(lang, _TEXTS["zh"]).items() if k.startswith(prefix)}


def phrase_pattern(key: str, lang: str, fields: Mapping[str, str]) -> re.Pattern[str]:
    """A regex matching ``say(key, lang, ...)`` whole, each field captured by its pattern in ``fields``
    (a field said twice must be the same both times): how an error text a phrase made is read back.

    Raises:
        KeyError: the phrase has a field ``fields`` does not give a pattern for.
    """
    parts: list[str] = []
    seen: set[str] = set()
    for literal, name, _, _ in string.Formatter().parse(_TEXTS.get(lang, _TEXTS["zh"])[key]):
        parts.append(re.escape(literal))
        if name:
            parts.append(f"(?P={name})" if name in seen else f"(?P<{name}>{fields[name]})")
            seen.add(name)
    return re.compile("".join(parts), re.DOTALL)


def human_tokens(n: int) -> str:
    """``80.2K`` for 80,200 tokens; plain digits under a thousand."""
    return f"{n / 1000:.1f}K" if n >= 1000 else str(n)


def human_elapsed(seconds: float) -> str:
    """``m:ss`` under an hour, ``h:mm:ss`` after."""
    s = int(max(0, seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def short_path(path: str | Path, base: str | Path | None = None, home: str | None = None) -> str:
    """How a path is shown to a person, the one way every view says a path (a saved notebook is shared:
    it must not carry its author's absolute paths). ``runs/manifest.json`` under ``base``; ``~/x/y``
    elsewhere under the home directory; ``base`` itself as ``~/x`` (or, outside the home directory,
    its name); the absolute path only for what lies outside both.

    Args:
        path: the path (a relative one is taken from the process's folder).
        base: the folder the person works in: the workspace (a notebook's folder, the folder a
            terminal runs flower in). Default: the process's working folder.
        home: the home directory (default ``~``).
    """
    home = home if home is not None else os.path.expanduser("~")
    # abspath, not resolve: a path that is a symbolic link is named as itself, not as its target.
    text = os.path.abspath(os.path.expanduser(path))
    try:
        roots = [os.path.abspath(os.path.expanduser(base))] if base is not None else [os.getcwd()]
    except OSError:  # a working folder that was removed: no base to be relative to
        return tilde(text, home, PurePath)
    roots.append(os.path.realpath(roots[0]))  # a base reached through a link, as its path's owner resolved it
    for root in dict.fromkeys(roots):
        shown = shown_path(text, root, home, PurePath)
        if not PurePath(shown).is_absolute():
            return shown
    return shown


def shown_path(text: str, base: str, home: str, kind: type[PurePath] = PurePath) -> str:
    """``short_path`` on absolute, resolved paths, in the path flavour ``kind`` (testable for Windows)."""
    path, root = kind(text), kind(base)
    if root == kind(root.anchor):
        return tilde(text, home, kind)  # a base at the root of a drive: every path would be "under" it
    if path == root:
        shown = tilde(text, home, kind)
        return shown if shown != text else (path.name or text)
    try:
        return str(path.relative_to(root))
    except ValueError:
        return tilde(text, home, kind)


def short_paths_in(text: str, base: str | Path | None = None, home: str | None = None) -> str:
    """``text`` (the agent's words, a tool's input or result, an error) with every absolute path under
    ``base`` or the home directory said as ``short_path`` says it: ``/w/runs/x`` -> ``runs/x``,
    ``/w`` -> ``.``, ``/home/me/y`` -> ``~/y``. A longer name that only starts the same (``/w2``),
    or one inside another path or an address, is left as it is.

    Args:
        text: any text.
        base: as ``short_path``'s (default: the process's working folder).
        home: the home directory (default ``~``).
    """
    home = home if home is not None else os.path.expanduser("~")
    try:
        root = os.path.abspath(os.path.expanduser(base)) if base is not None else os.getcwd()
    except OSError:  # a working folder that was removed
        root = ""
    roots = (root, os.path.realpath(root)) if root else ()
    for folder, pattern, alone in _path_patterns(roots, home):
        if folder in text:
            text = pattern.sub(functools.partial(_shorter, alone), text)
    return text


def _shorter(alone: str, match: re.Match[str]) -> str:
    # The base and its separator go ("runs/x"); the home is said as "~" before its separator.
    if not match["sep"]:
        return alone
    return alone + match["sep"] if alone == "~" else ""


@functools.lru_cache(maxsize=32)
def _path_patterns(roots: tuple[str, ...], home: str) -> tuple[tuple[str, re.Pattern[str], str], ...]:
    """(spelling, pattern, shown alone) for the base (as given and resolved), then the home: the base
    first, as it is usually under the home. A folder at the root of a drive is never rewritten (every
    path would be under it)."""
    found: list[tuple[str, re.Pattern[str], str]] = []
    for folder, alone in [*((r, ".") for r in roots), (home, "~")]:
        if not folder or PurePath(folder) == PurePath(PurePath(folder).anchor):
            continue
        for spelled in (folder.rstrip("/\\"), PurePath(folder).as_posix().rstrip("/")):
            if any(spelled == seen for seen, _, _ in found):
                continue
            # Not inside another path or an address; ``sep``: the separator and the rest of a path
            # under it follow ("/x" -> "x" for the base, "~/x" for the home); else the folder alone.
            pattern = re.compile(
                rf"(?<![\w.~/\\-]){re.escape(spelled)}(?:(?P<sep>[/\\](?=[^\s\"'`,;:)\]}}]))|(?![\w\-]|\.\w))"
            )
            found.append((spelled, pattern, alone))
    return tuple(found)


def tilde(text: str, home: str, kind: type[PurePath] = PurePath) -> str:
    """``text`` with the home directory shown as ``~`` (``~\\x`` on Windows); as it is elsewhere.

    ``kind`` is the path flavour (``PureWindowsPath``: drive letters and backslashes, any case).
    """
    path, root = kind(text), kind(home) if home else None
    if root is None or root == kind(root.anchor):
        return text  # no home, or a home at the root of a drive: every path would be "under" it
    if path == root:
        return "~"
    try:
        rest = path.relative_to(root)
    except ValueError:
        return text
    return "~" + ("\\" if isinstance(path, PureWindowsPath) else "/") + str(rest)


def cols(text: str) -> int:
    """Display columns: East Asian wide and full-width characters take two. Ambiguous ones (``·``,
    ``—``, ``…``) take one, as terminals and the notebook's monospace font show them (a table row of
    ``干活·判定#1`` was one column short when ``·`` counted two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def wait_words(seconds: float, lang: str = "zh") -> str:
    """``45 秒`` / ``3 分钟`` (``45 s`` / ``3 min``): a wait, for people."""
    if seconds < 60:
        return say("seconds", lang, n=f"{seconds:.0f}")
    return say("minutes", lang, n=f"{seconds / 60:.0f}")


def run_locked_line(
    path: Path, *, pid: int | None, host: str, since: str, step: str, front_end: str, lang: str = "zh"
) -> str:
    """The one line a refused ``%flower`` / ``flower`` prints: who holds the run dir and what to do.

    Args:
        path: the lock file (``<run_dir>/run.lock``); the line names its run dir.
    """
    where = short_path(Path(path).parent)
    if pid is None:
        return say("run_locked_unknown", lang, path=where)
    known = front_end if front_end in ("notebook", "terminal", "api", "background") else "api"
    return say(
        "run_locked",
        lang,
        path=where,
        pid=pid,
        host=host,
        since=since.replace("T", " "),
        step=step or say("run_locked_no_step", lang),
        front=say(f"front_{known}", lang),
        stop=say(f"stop_{known}", lang),
    )


def _writer_words(path: Path, pids: tuple[int, ...], lang: str) -> tuple[str, str]:
    listed = " ".join(str(p) for p in pids)
    if pids:
        return say("writer_pids", lang, pids=listed), say("writer_kill", lang, pids=listed)
    return say("writer_file", lang, name=Path(path).name), say("writer_stop", lang)


def foreign_wait_line(session_id: str, path: Path, *, pids: tuple[int, ...], wait_s: float, lang: str = "zh") -> str:
    """The notice while a step waits for someone else to stop writing its session."""
    who, _ = _writer_words(path, pids, lang)
    return say("foreign_wait", lang, sid=session_id, who=who, wait=wait_words(wait_s, lang))


def session_busy_line(session_id: str, path: Path, *, pids: tuple[int, ...], waited_s: float, lang: str = "zh") -> str:
    """The error when someone else kept writing the session: the step stopped instead of resuming."""
    who, stop = _writer_words(path, pids, lang)
    return say("session_busy", lang, sid=session_id, who=who, wait=wait_words(waited_s, lang), stop=stop)


def network_fs_line(run_dir: str | Path, fstype: str, point: str, lang: str = "zh") -> str:
    """The one notice a run in a run dir on a network filesystem gives: what flower does there and why,
    and how to avoid it."""
    return say("network_fs", lang, run_dir=short_path(run_dir), fstype=fstype, point=short_path(point or run_dir))
