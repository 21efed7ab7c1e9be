"""Demo mode: the whole flower experience offline, on a small scripted model.

``start_demo()`` starts the fake API with a model that plays every role of the default workflow
plausibly for any task — the clarifier asks one question, the goal setter writes two checks, the
worker writes ``flower_demo.md`` with the Write tool, the judge checks it — and points this process's
environment at it (a dummy key, a private ``CLAUDE_CONFIG_DIR``; the real ``~/.claude`` is never
touched). It is for trying the notebooks without a key; nothing it says comes from a real model.
"""

from __future__ import annotations

import atexit
import os
import re
import tempfile
from typing import Any

from flower_magic.testing.replies import Reply, text, tool_use
from flower_magic.testing.request import Request
from flower_magic.testing.roles import role_of
from flower_magic.testing.server import FakeAnthropic

DEMO_FILE = "flower_demo.md"
BANNER = (
    "DEMO MODE — no Anthropic credentials were found, so flower runs on a small scripted model "
    "(flower_magic.testing.demo). Set ANTHROPIC_API_KEY and restart the kernel to run for real."
)
_CREDENTIALS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")


def _answered(req: Request) -> bool:
    """The newest user message carries a tool result (the model's last tool call came back)."""
    last = req.messages[-1] if req.messages else {}
    content = last.get("content")
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


def _task(req: Request) -> str:
    lines = [ln.strip() for ln in req.first_user_text.splitlines() if ln.strip() and not ln.startswith("<")]
    return (lines[-1] if lines else "the task")[:200]


def _workspace(req: Request) -> str:
    # The rest of the line: a workspace may have spaces in its name ("数据 清洗 🌻 with spaces").
    pattern = r"(?:Primary working directory|Working directory|cwd):[ \t]*([^\r\n]+)"
    match = re.search(pattern, req.all_text + "\n" + req.system_text)
    return match.group(1).strip() if match else "."


# What the demo model says, in the language of the task it was given.
_SAYS: dict[str, dict[str, str]] = {
    "zh": {
        "question": "结果写成什么格式?",
        "plain": "纯文本",
        "brief": "## 目标\n{task}\n\n## 验收标准\n- 工作目录里有 {file}\n- 文件里写明了要做的事\n\n"
        "## 边界\n这是演示:不改其它文件。\n\n## 未知与假设\n- 格式按回答来;没人回答就用 Markdown。",
        "goal": "## 目标\n{file} 写好了\n\n## 判定清单\n- {file} 存在\n- 文件里写明了要做的事",
        "verdict": "## 结论\n达成\n\n## 理由\n文件在,内容也对得上。\n\n## 未通过\n(无)",
        "handoff": "## 现在在做什么\n演示任务\n\n## 下一步\n检查 {file}\n\n## 现场\n- {file}",
        "body": "# flower 演示\n\n要做的事:{task}\n\n(由演示模型写下;换成真的 key 就是真模型在干活。)\n",
        "writing": "先把结果写进文件。",
        "check": "文件里写明了要做的事",
        "wrote": "写好了:{file} 记下了这件事。",
        "empty": "(空)",
        "got": "(演示模型)收到:{task}",
    },
    "en": {
        "question": "Which format should the result be in?",
        "plain": "Plain text",
        "brief": "## Goal\n{task}\n\n## Acceptance criteria\n- {file} exists in the working directory\n"
        "- it says what is to be done\n\n## Scope\nThis is a demo: no other file changes.\n\n"
        "## Unknowns and assumptions\n- The format follows the answer; Markdown if nobody answers.",
        "goal": "## Goal\n{file} is written\n\n## Checks\n- {file} exists\n- it says what is to be done",
        "verdict": "## Verdict\nachieved\n\n## Reason\nThe file is there and says the right thing.\n\n"
        "## Failed\n(none)",
        "handoff": "## 现在在做什么\nthe demo task\n\n## 下一步\ncheck {file}\n\n## 现场\n- {file}",
        "body": "# flower demo\n\nTo do: {task}\n\n"
        "(Written by the demo model; with a real key a real model does the work.)\n",
        "writing": "Writing the result to a file first.",
        "check": "it says what is to be done",
        "wrote": "Done: {file} records the task.",
        "empty": "(empty)",
        "got": "(demo model) received: {task}",
    },
}


def _lang(req: Request) -> str:
    """The demo answers in the person's language: English once its own English checks are in the
    conversation (the goal setter, the worker and the judge read them), else by the task's script."""
    if _SAYS["en"]["check"] in req.all_text:
        return "en"
    return "zh" if re.search(r"[\u4e00-\u9fff]", _task(req)) else "en"


def demo_model(req: Request) -> Reply:
    """One reply for any request of the default workflow."""
    role = role_of(req)
    says = _SAYS[_lang(req)]
    task = _task(req)
    if role == "clarifier":
        if not _answered(req):
            return tool_use("mcp__human__ask", {"question": says["question"], "options": ["Markdown", says["plain"]]})
        return text(says["brief"].format(task=task, file=DEMO_FILE))
    if role == "goal":
        return text(says["goal"].format(file=DEMO_FILE))
    if role == "judge":
        return text(says["verdict"])
    if role == "handoff":
        return text(says["handoff"].format(file=DEMO_FILE))
    if "你负责把活干完" not in req.system_text:
        return _generic(req)
    if not _answered(req):
        path = os.path.join(_workspace(req), DEMO_FILE)
        body = says["body"].format(task=task)
        return tool_use("Write", {"file_path": path, "content": body}, say=says["writing"])
    return text(says["wrote"].format(file=DEMO_FILE))


def _generic(req: Request) -> Reply:
    """Any other agent: read the file the prompt names, then answer with its first line."""
    named = re.search(r"([\w./-]+\.(?:txt|md|csv|json|py))", _task(req))
    if named and not _answered(req):
        return tool_use("Read", {"file_path": os.path.join(_workspace(req), named.group(1))})
    if named:
        result: dict[str, Any] = next((r for r in reversed(req.tool_results())), {})
        content = str(result.get("content") or "")
        first = next((ln.split("\t", 1)[-1].strip() for ln in content.splitlines() if ln.strip()), "")
        return text(first or _SAYS[_lang(req)]["empty"])
    return text(_SAYS[_lang(req)]["got"].format(task=_task(req)))


def has_credentials() -> bool:
    return any(os.environ.get(k) for k in _CREDENTIALS)


def start_demo(*, quiet: bool = False) -> FakeAnthropic:
    """Start the demo model and point this process at it. Returns the running server."""
    api = FakeAnthropic(default=demo_model).start()
    home = tempfile.mkdtemp(prefix="flower-demo-")
    env = api.env()
    env["CLAUDE_CONFIG_DIR"] = os.path.join(home, ".claude")
    os.environ.update(env)
    atexit.register(api.stop)
    if not quiet:
        print(BANNER)
    return api


def demo_if_no_credentials() -> Any:
    """Demo mode when no key is configured (and say so); otherwise nothing. Returns the server or None."""
    if has_credentials():
        return None
    return start_demo()
