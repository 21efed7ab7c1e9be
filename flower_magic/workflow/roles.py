"""The default workflow's agents: who does what, with which tools, told what.

- **Clarifier** (确认需求): asks the human (``mcp__human__ask``), may read the directory, writes the
  four-section brief. It cannot run commands or edit files.
- **Goal setter** (设定目标): turns the brief into a statement and a checklist a judge can verify.
- **Worker** (干活): one hands-on agent with files, shell and a to-do list, in ``acceptEdits`` mode. It
  may hand a long, self-contained job to its ``coder`` subagent (the ``Agent`` tool) to keep its own
  context lean over a long run, but it is not forced to: a single agent is easier to follow in a
  notebook, and a delegation-only coordinator loses work whenever a subagent is cut off.
- **Judge** (干活·判定): a fresh session every round that reads the scene and rules on the checklist;
  it cannot edit files, and runs commands only with ``--judge-can-run``.

Tools a role must not have are *removed* (``disallowed_tools``), not merely left unapproved: the CLI
auto-approves read-only shell commands, and a judge that was only "not allowed" Bash used it anyway.
"""

from __future__ import annotations

from typing import Any

from flower_magic.core.agent import AgentSpec

HANDS_ON = ("Bash", "Write", "Edit", "NotebookEdit")

CLARIFIER_RULES = """你负责在动手之前把需求问清楚,然后写一份「需求确认书」。

做法:
1. 先看一眼工作目录里已有的东西(Read / Glob / Grep),能自己查到的不要问人。
2. 真正拿不准、又会影响做法的地方,用 mcp__human__ask 问人。一次只问一件事,能给选项就给选项。
   问题要少而准:三五个以内。问不到答案(没人应答)就按你的判断定下来,并写进「未知与假设」。
3. 问清楚了,直接输出完整的确认书,恰好四段,标题一字不改:

## 目标
一两句话:要做成什么,给谁用。

## 验收标准
怎样算做完:可以检查的条目,每条一行。

## 边界
这次不做什么、不能碰什么。

## 未知与假设
还不确定的事,以及你替人做的假设(写清依据)。

不要写代码,不要改文件。"""

GOAL_RULES = """你负责把需求确认书变成可以判定的目标。输出恰好两段,标题一字不改:

## 目标
一句话的完成标志。

## 判定清单
- 每行一条可以检查的判定项:看得见的产物、能跑的命令、能读到的内容。
- 条目数量跟着"可能做错的地方"走,不要凑数;边界不是判定项,过程(用了什么方法)也不是。
- 这个环境里没法验证的条目(要真机、要付费服务、要人眼主观评价……)照样写上,
  但在条目末尾加上 [此环境无法验证:原因],判定时它们会被单独处理。

判的是产物,不是源码里的说法:能运行就要求运行结果,能读文件就要求文件内容。"""

SET_PROMPT = "把下面这份需求确认书变成可判定的目标。照「判定清单」的格式输出。\n\n{brief}\n"

JUDGE_RULES = """你是独立的判定者。你没有参与干活,不知道干活的人试了多少次、有多难 —— 这正是你的价值:
只看现场,不替任何人找理由。

做法:
1. 逐条对照判定清单,自己去现场找证据(Read / Glob / Grep{run})。干活的人的回话只是线索,不是证据。
2. 判的是产物,不是说法:声称"已完成"但现场看不到的,算没通过。找不到证据的条目,算没通过。
3. 标着 [此环境无法验证] 的条目,或者你确实没有办法验证的条目,如实说,不要猜。

输出恰好三段,标题一字不改:

## 结论
达成 / 未达成 / 无法达成(三选一;只有目标在这个环境里根本做不到或验不了时才用"无法达成")

## 理由
一两句话。没达成时说清差在哪里,不要给解决办法。

## 未通过
没通过的判定项,一行一条;全部通过写 (无)"""

VERIFY_PROMPT = """判定这一轮做完了没有。照「结论 / 理由 / 未通过」的格式输出。

# 目标
{goal}

# 干活的人这一轮的回话
{report}

逐条对照判定清单去现场核实;看不到证据的条目按没通过处理。"""

WORKER_RULES = """你负责把活干完,直到判定清单上每一条都能在现场验证通过。

- 需求确认书和目标是冻结件,在 .flower/notes/ 里;拿不准就回去读,不要凭记忆。
- 每改一处就跑一次验证,别攒到最后。结论写进文件,而不是只留在对话里。
- 真正卡住、需要人拍板时才用 mcp__human__ask;人也可能主动给你留言,偶尔用 mcp__human__inbox 看一眼。
- 一段很长、能独立交代清楚的活,可以派给 coder 子代理(Agent 工具),任务里写清目标和验收标准,
  让它把长产出写进文件、回话只给路径和结论。
- 做完时用几句话说明做了什么、怎么验证的、产物在哪里。"""

CODER_PROMPT = "你负责实现交给你的那一段活。每改一处就跑一次验证,别攒到最后。长输出写进文件,回话只给路径和结论。"


def _with_channel(
    tools: list[str], channel: Any, notebook: Any = None
) -> tuple[list[str], dict[str, Any], dict[str, str]]:
    """Tools, MCP servers and CLI environment for a role that talks to the human, and that may look
    at the notebook (``core.notebook``: its variables and cells, and code handed back as a cell)."""
    servers: dict[str, Any] = {}
    env: dict[str, str] = {}
    if channel is not None:
        from flower_magic.core.human import SERVER_NAME, TOOL_NAMES

        tools = [*tools, *TOOL_NAMES]
        servers[SERVER_NAME] = channel.mcp_server()
        # cli_env raises the CLI's own MCP tool timeout above ours, so the model hears our timeout text.
        env.update(channel.cli_env())
    if notebook is not None:
        from flower_magic.core import notebook as nb

        tools = [*tools, *nb.TOOL_NAMES]
        servers[nb.SERVER_NAME] = notebook.mcp_server()
    return tools, servers, env


def clarifier(channel: Any, *, instructions: str = "", max_turns: int | None = None, notebook: Any = None) -> AgentSpec:
    tools, servers, env = _with_channel(["Read", "Glob", "Grep"], channel, notebook)
    return AgentSpec(
        name="clarifier",
        instructions=_join(CLARIFIER_RULES, instructions),
        allowed_tools=tools,
        disallowed_tools=list(HANDS_ON),
        mcp_servers=servers,
        env=env,
        max_turns=max_turns,
    )


def goal_setter(channel: Any, *, instructions: str = "") -> AgentSpec:
    tools, servers, env = _with_channel(["Read", "Glob", "Grep"], channel)
    return AgentSpec(
        name="goal-setter",
        instructions=_join(GOAL_RULES, instructions),
        allowed_tools=tools,
        disallowed_tools=list(HANDS_ON),
        mcp_servers=servers,
        env=env,
    )


def judge(*, can_run: bool = False, instructions: str = "") -> AgentSpec:
    """The judge gets no human channel: a verdict is ruled from the scene, not negotiated."""
    tools = ["Read", "Glob", "Grep", *(["Bash"] if can_run else [])]
    banned = [t for t in HANDS_ON if t not in tools]
    rules = JUDGE_RULES.replace("{run}", " / Bash" if can_run else "")
    return AgentSpec(
        name="judge",
        instructions=_join(rules, instructions),
        allowed_tools=tools,
        disallowed_tools=banned,
    )


def worker(channel: Any, *, instructions: str = "", notebook: Any = None) -> AgentSpec:
    from claude_agent_sdk import AgentDefinition

    tools, servers, env = _with_channel(
        ["Read", "Write", "Edit", "Bash", "Glob", "Grep", "TodoWrite", "Agent"], channel, notebook
    )
    coder = AgentDefinition(
        description="写代码与测试。要动手实现、又能独立交代清楚的一段活派给它。",
        prompt=CODER_PROMPT,
        tools=["Read", "Write", "Edit", "Bash", "Glob", "Grep"],
    )
    return AgentSpec(
        name="worker",
        instructions=_join(WORKER_RULES, instructions),
        allowed_tools=tools,
        mcp_servers=servers,
        env=env,
        agents={"coder": coder},
        permission_mode="acceptEdits",
    )


def _join(rules: str, extra: str) -> str:
    return f"{rules}\n\n{extra.strip()}" if extra.strip() else rules
