"""Demo mode: the whole flower experience offline, on a small scripted model.

The demo model plays every role of the default workflow plausibly for any task — the clarifier asks
one question, the goal setter writes two checks, the worker writes ``flower_demo.md`` with the Write
tool, the judge checks it — in the language asked for (else the task's). It is the one model behind
every way in: ``flower --demo``, ``%flower --demo`` (``demo_session``: for one run, the environment
put back after) and the notebooks' automatic demo mode (``demo_if_no_credentials`` / ``start_demo``:
for the rest of the process). Nothing it says comes from a real model.

Guarantees:
    - One demo server per process, started on first use and reused: a second ``%flower --demo`` in a
      kernel continues on the same model and the same private ``CLAUDE_CONFIG_DIR``, which is removed
      when the process exits (the transcripts that matter are in the run dir's sessions.db).
    - The Claude Code CLI is pointed at it with a dummy key and a private ``CLAUDE_CONFIG_DIR``; any
      token or cloud-provider setting of the person's is blanked for the run, so a real credential
      never reaches the demo server and the real ``~/.claude`` is never read or written.
    - ``demo_session`` puts every environment variable it changed back as it was, set or unset.
Not guaranteed:
    - Isolation between threads: the environment is the process's.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

from flower_magic.core.errors import CLOUD_VARS, has_credentials
from flower_magic.core.words import pick_lang_or_default, say
from flower_magic.testing.replies import Reply, text, tool_use
from flower_magic.testing.request import Request
from flower_magic.testing.roles import role_of
from flower_magic.testing.server import FakeAnthropic

DEMO_FILE = "flower_demo.md"
# Blanked while the demo runs: a token would be sent to the demo server, a cloud provider would take
# the CLI away from it.
_BLANKED = ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", *CLOUD_VARS)


def _answered(req: Request) -> bool:
    """The newest user message carries a tool result (the model's last tool call came back)."""
    last = req.messages[-1] if req.messages else {}
    content = last.get("content")
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


# Where a notebook's block starts in a prompt (workflow.clarify.with_notebook, core.notebook.BLOCK_HEAD):
# the task is said before it.
_NOTEBOOK_BLOCK = "\n\n---\n\n# 笔记本现场"


def _task(req: Request) -> str:
    said = req.first_user_text.split(_NOTEBOOK_BLOCK, 1)[0]
    lines = [ln.strip() for ln in said.splitlines() if ln.strip() and not ln.startswith("<")]
    return (lines[-1] if lines else "the task")[:200]


def _asked_for(req: Request) -> str:
    """What the worker is asked to do: the goal of the brief its first prompt carries (the first
    ``## 目标`` section; the goal setter's own, further down, names the demo's file), else ``_task``."""
    said = req.first_user_text.split(_NOTEBOOK_BLOCK, 1)[0]
    match = re.search(r"^## 目标[ \t]*\n(.*?)(?=^## |\Z)", said, re.M | re.S)
    found = " ".join(ln.strip() for ln in match.group(1).splitlines() if ln.strip()) if match else ""
    return found[:200] or _task(req)


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


def demo_says(lang: str, key: str) -> str:
    """What the demo model says for ``key`` in ``lang`` (``question``, ``check``...): for tests and docs."""
    return _SAYS[lang][key]


def _lang(req: Request) -> str:
    """The demo answers in the person's language: English once its own English checks are in the
    conversation (the goal setter, the worker and the judge read them), else by the task's script."""
    if _SAYS["en"]["check"] in req.all_text:
        return "en"
    return "zh" if re.search(r"[\u4e00-\u9fff]", _task(req)) else "en"


def demo_model(req: Request, lang: str = "") -> Reply:
    """One reply for any request of the default workflow, in ``lang`` (``zh``/``en``; "" = the task's)."""
    role = role_of(req)
    lang = lang if lang in _SAYS else _lang(req)
    says = _SAYS[lang]
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
        return _generic(req, lang)
    if not _answered(req):
        path = os.path.join(_workspace(req), DEMO_FILE)
        body = says["body"].format(task=_asked_for(req))
        return tool_use("Write", {"file_path": path, "content": body}, say=says["writing"])
    return text(says["wrote"].format(file=DEMO_FILE))


def _generic(req: Request, lang: str) -> Reply:
    """Any other agent: read the file the prompt names, then answer with its first line."""
    named = re.search(r"([\w./-]+\.(?:txt|md|csv|json|py))", _task(req))
    if named and not _answered(req):
        return tool_use("Read", {"file_path": os.path.join(_workspace(req), named.group(1))})
    if named:
        result: dict[str, Any] = next((r for r in reversed(req.tool_results())), {})
        content = str(result.get("content") or "")
        first = next((ln.split("\t", 1)[-1].strip() for ln in content.splitlines() if ln.strip()), "")
        return text(first or _SAYS[lang]["empty"])
    return text(_SAYS[lang]["got"].format(task=_task(req)))


_lock = threading.Lock()
_served: FakeAnthropic | None = None
_config_dir = ""


def running() -> FakeAnthropic | None:
    """This process's demo server, if one was started (and not stopped)."""
    return _served if _served is not None and _served.running else None


def _serve(lang: str) -> FakeAnthropic:
    """This process's demo server (started on first use), speaking ``lang`` ("" = the task's)."""
    global _served, _config_dir
    with _lock:
        if _served is None or not _served.running:
            _served = FakeAnthropic(default=demo_model).start()
            home = tempfile.mkdtemp(prefix="flower-demo-")
            _config_dir = os.path.join(home, ".claude")
            atexit.register(_served.stop)
            # The CLI's private config is only ever the demo's: nothing in it outlives the process.
            atexit.register(shutil.rmtree, home, ignore_errors=True)
        api = _served
    speak(lang)
    return api


def pointed_here() -> bool:
    """This process's environment points at its running demo server (the notebooks' demo mode, or a
    ``--demo`` run under way)."""
    api = running()
    return api is not None and os.environ.get("ANTHROPIC_BASE_URL") == api.url


def speak(lang: str) -> None:
    """The running demo model answers in ``lang`` from now on ("" = the task's); nothing when none runs."""
    with _lock:
        if _served is not None:
            _served.default = functools.partial(demo_model, lang=lang) if lang else demo_model


def _env(api: FakeAnthropic) -> dict[str, str]:
    env = api.env()
    env["CLAUDE_CONFIG_DIR"] = _config_dir
    env.update(dict.fromkeys(_BLANKED, ""))
    return env


def start_demo(*, quiet: bool = False, lang: str = "") -> FakeAnthropic:
    """Start the demo model and point this process at it for good (the notebooks' demo mode).

    Args:
        quiet: say nothing (else one line says this is the demo, in FLOWER_LANG's language).
        lang: the model's language; "" = the task's.

    Returns:
        The running server.
    """
    api = _serve(lang)
    os.environ.update(_env(api))
    if not quiet:
        print(say("demo_auto", pick_lang_or_default(lang)))
    return api


@contextlib.contextmanager
def demo_session(lang: str = "") -> Iterator[FakeAnthropic]:
    """Point this process at the demo model for one run (``--demo``); the environment is put back after.

    Args:
        lang: the model's language (the run's); "" = the task's.
    """
    api = _serve(lang)
    before = {k: os.environ.get(k) for k in _env(api)}
    os.environ.update(_env(api))
    try:
        yield api
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def demo_if_no_credentials() -> Any:
    """Demo mode when no key is configured (and say so); otherwise nothing. Returns the server or None."""
    if has_credentials():
        return None
    return start_demo()
