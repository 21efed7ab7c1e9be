"""Hand-off: when a session's context nears its window, it writes a hand-off and a fresh one takes over.

This module owns the pure parts: where the line is (``HandoffPolicy``), how big the window is
(``default_window``: ``FLOWER_WINDOW`` > calibration from past overflows > a guess from the model
name), what an overflow error looks like (``is_overflow``), the hand-off document (``Handoff``, five
sections, kept as ``notes/交接-<step>.md``) and the texts around it.

Guarantees:
    - The hand-off line keeps at least ``HEADROOM_FLOOR`` tokens (or a quarter of the window) free,
      so the session still has room to write the hand-off turn itself.
    - ``remember_overflow`` only ever lowers the calibrated window (the minimum of what was seen),
      and never raises: calibration is best effort.
    - ``handoff_path`` never overwrites an earlier hand-off: it is moved to
      ``notes/archive/交接/<step>-<YYYYmmdd-HHMMSS>[-N].md`` first.
Not guaranteed:
    - That the calibrated window is the model's real one: it is the smallest context that overflowed
      here, keyed by gateway and configured model name.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit, urlunsplit

from flower_magic.core.durable import write_atomic
from flower_magic.core.sections import read_sections

# --- thresholds and windows -------------------------------------------------------------------

WINDOW_1M_TOKENS = 1_000_000
WINDOW_HAIKU_TOKENS = 200_000
# The line never drops below this even with a tiny or negative window: a session needs some context
# just to start (system prompt, tools), and a line under it would hand off on the first turn forever.
MIN_AT_TOKENS = 10_000
# The "getting full" warning comes this many tokens before the line.
WARN_BEFORE_TOKENS = 20_000
MIN_WARN_AT_TOKENS = 1_000

_ONE_M_RE = re.compile(r"(?:^|[^a-z0-9])1m(?:[^a-z0-9]|$)")


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def configured_model(environ: Mapping[str, str] | None = None) -> str:
    """The model the user configured: ``ANTHROPIC_MODEL``, else ``ANTHROPIC_DEFAULT_OPUS_MODEL``."""
    env = _env(environ)
    return env.get("ANTHROPIC_MODEL") or env.get("ANTHROPIC_DEFAULT_OPUS_MODEL") or ""


def calibration_path(environ: Mapping[str, str] | None = None) -> Path:
    """``${XDG_CONFIG_HOME:-~/.config}/flower/.windows``."""
    env = _env(environ)
    xdg = env.get("XDG_CONFIG_HOME")
    if xdg:
        base = Path(xdg)
    elif env.get("HOME"):
        base = Path(env["HOME"]) / ".config"
    else:
        base = Path.home() / ".config"
    return base / "flower" / ".windows"


def _without_secrets(url: str) -> str:
    # The key is written to disk: a gateway URL may carry user:password@ or a ?key=… query.
    parts = urlsplit(url)
    if "@" not in parts.netloc and not parts.query and not parts.fragment:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def calibration_key(environ: Mapping[str, str] | None = None) -> str:
    """``<ANTHROPIC_BASE_URL or 'default'>|<configured model>``: one window per gateway and model.

    Credentials in the URL (``user:pass@``, a query string) are left out of the key.
    """
    env = _env(environ)
    return f"{_without_secrets(env.get('ANTHROPIC_BASE_URL') or 'default')}|{configured_model(env)}"


def _read_calibration(path: Path) -> dict[str, int]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}


def calibrated_window(environ: Mapping[str, str] | None = None) -> int | None:
    """The smallest context that overflowed for this gateway and model, or None."""
    return _read_calibration(calibration_path(environ)).get(calibration_key(environ))


def remember_overflow(context: int, environ: Mapping[str, str] | None = None) -> None:
    """Record that ``context`` tokens overflowed; keeps the minimum seen. Best effort, never raises."""
    if context <= 0:
        return
    path = calibration_path(environ)
    data = _read_calibration(path)
    key = calibration_key(environ)
    if key in data and data[key] <= context:
        return
    data[key] = context
    payload = json.dumps(data, ensure_ascii=False, sort_keys=True, indent=1) + "\n"
    with contextlib.suppress(OSError):
        write_atomic(path, payload.encode("utf-8"))


def _flower_window(environ: Mapping[str, str]) -> int | None:
    try:
        value = int((environ.get("FLOWER_WINDOW") or "").strip())
    except ValueError:
        return None
    return value if value > 0 else None


def default_window(environ: Mapping[str, str] | None = None) -> int:
    """The context window in tokens: ``FLOWER_WINDOW`` > calibration > a guess from the model name.

    The guess: a standalone ``1m`` token in the name means 1M, ``haiku`` means 200K, anything else
    (including no model configured) 1M.
    """
    env = _env(environ)
    explicit = _flower_window(env)
    if explicit is not None:
        return explicit
    calibrated = calibrated_window(env)
    if calibrated is not None:
        return calibrated
    model = configured_model(env).lower()
    if _ONE_M_RE.search(model):
        return WINDOW_1M_TOKENS
    if "haiku" in model:
        return WINDOW_HAIKU_TOKENS
    return WINDOW_1M_TOKENS


@dataclass
class HandoffPolicy:
    """When a session hands off.

    Attributes:
        enabled: hand off at all (off: the CLI's own auto-compaction takes over).
        window: the model's context window in tokens.
        headroom: tokens kept free below the window; 0 means automatic (see ``room``).
        max_generations: successors allowed in one step before it is stopped as a runaway.
    """

    HEADROOM_FRACTION: ClassVar[float] = 0.25
    HEADROOM_FLOOR: ClassVar[int] = 50_000

    enabled: bool = True
    window: int = field(default_factory=default_window)
    headroom: int = 0
    max_generations: int = 8

    @property
    def room(self) -> int:
        """Tokens kept free: ``headroom`` if set, else max(50K, a quarter of the window)."""
        if self.headroom > 0:
            return self.headroom
        return max(self.HEADROOM_FLOOR, int(self.window * self.HEADROOM_FRACTION))

    @property
    def at(self) -> int:
        """The main-thread context (tokens) at which the session hands off."""
        return max(MIN_AT_TOKENS, self.window - self.room)

    @property
    def warn_at(self) -> int:
        """The context (tokens) at which the person is told the hand-off is near."""
        return max(MIN_WARN_AT_TOKENS, self.at - WARN_BEFORE_TOKENS)


_OVERFLOW_RE = re.compile(
    r"prompt is too long"
    r"|context[ _-]?length[ _-]?exceeded"
    r"|maximum context length"
    r"|exceeds?\s+(?:the\s+)?context\s+(?:window|limit)"
    r"|too many total text bytes"
    r"|input length and `?max_tokens`? exceed",
    re.IGNORECASE,
)


def is_overflow(*texts: str | None) -> bool:
    """Whether any of ``texts`` says the request no longer fits the model's context."""
    return any(t and _OVERFLOW_RE.search(t) for t in texts)


# --- the hand-off document --------------------------------------------------------------------

DEGRADED = "[降级:交接没写成]"
# How much of the step's original task a degraded hand-off carries (characters).
DEGRADED_TASK_CHARS = 1200
OVERFLOW_WHY = "上下文已经装不下,连交接都跑不了一轮"

# field -> canonical heading, in document order
SECTIONS: dict[str, str] = {
    "doing": "现在在做什么",
    "decided": "已经定下的",
    "deadends": "走不通的路",
    "next": "下一步",
    "scene": "现场",
}
REQUIRED = ("doing", "next")
ALIASES: dict[str, str] = {
    **{heading: name for name, heading in SECTIONS.items()},
    "试过不行的": "deadends",
    "排除的路": "deadends",
    "已定的事": "decided",
    "决策": "decided",
    "当前进度": "doing",
    "现在在做": "doing",
    "进度": "doing",
    "文件": "scene",
}

HANDOFF_PROMPT = """先停一下手上的活。你的上下文快满了(已用 {used},窗口 {window}),接下来会换一个全新的会话接着干。
它没有你的记忆,能看到的只有你现在写的这份交接,加上磁盘上已有的东西。

只输出下面五段,标题一字不改,别的什么都不要写:

## 现在在做什么
一两句话:手上这件事是什么,做到了哪一步。

## 已经定下的
已经拍板的决定,每条都写上**为什么**这么定,免得接手的人又推翻重来。

## 走不通的路
试过、行不通的做法,每条写清为什么不行。这一段最值钱:它能让接手的人少走你走过的弯路。
没有就写 (暂无),不要为了填满而编。

## 下一步
接手后第一件要做的事,具体到拿起来就能动手(哪个文件、哪条命令、改什么)。

## 现场
相关的文件路径、分支、正在跑的进程或临时产物在哪。

写的时候守三条:
1. 自成一体:接手的人只读这一份就能开工,不要写"见上文""如前所述"。
2. 给指针,不搬内容:写文件路径和位置,不要把文件内容、日志大段贴进来。
3. 不要复述需求和目标:它们是冻结件,在工作台的 notes/ 里,接手的人自己会去读。
"""


def handoff_prompt(context: int, window: int) -> str:
    """``HANDOFF_PROMPT`` filled in: ``context`` and ``window`` in tokens, shown as ``150.2K`` / ``200K``."""
    return HANDOFF_PROMPT.format(used=f"{context / 1000:.1f}K", window=f"{window // 1000}K")


@dataclass
class Handoff:
    """A hand-off document: what the next session needs to carry on without the old one's memory.

    Attributes:
        doing: 现在在做什么 (required).
        decided: 已经定下的, each with why.
        deadends: 走不通的路, each with why.
        next: 下一步 (required).
        scene: 现场: paths, branches, processes.
        step: the step the session belonged to.
    """

    doing: str = ""
    decided: str = ""
    deadends: str = ""
    next: str = ""
    scene: str = ""
    step: str = ""

    @classmethod
    def parse(cls, text: str, step: str = "") -> Handoff:
        """Read a hand-off out of a model's reply or a hand-off file (see ``read_sections``)."""
        return cls(**read_sections(text or "", ALIASES), step=step)

    def complete(self) -> bool:
        """Whether doing and next are there; dead ends are optional (requiring them invites fiction)."""
        return not self.missing()

    def missing(self) -> list[str]:
        """The canonical headings of the required sections that are empty."""
        return [SECTIONS[name] for name in REQUIRED if not getattr(self, name).strip()]

    @property
    def degraded(self) -> bool:
        """Whether this is the stand-in written when the real hand-off failed."""
        return DEGRADED in self.doing

    def _sections(self) -> list[tuple[str, str]]:
        return [(heading, getattr(self, name).strip()) for name, heading in SECTIONS.items()]

    def to_markdown(self) -> str:
        """The hand-off file's text."""
        title = f"# 交接书({self.step})" if self.step else "# 交接书"
        lines = [
            title,
            "",
            "> 上一个会话的上下文快满了,留下这份交接,由新会话接着做。",
            "> **这份文件可以直接改** —— 觉得漏了什么就补上,接手的会话读到的就是它。",
            "",
        ]
        for heading, body in self._sections():
            lines += [f"## {heading}", "", body or "(空)", ""]
        return "\n".join(lines)

    def prompt_block(self) -> str:
        """The first prompt of the successor session."""
        parts = [
            "你在接手一段还没干完的活。前一个会话的上下文用满了,走之前留下了下面这份交接。\n"
            "**你没有它的记忆,手里只有这份交接和磁盘上的东西。** 需求和目标是冻结的文件,"
            "在工作台的 notes/ 里,需要就自己去读。"
        ]
        parts += [f"## {heading}\n{body}" for heading, body in self._sections() if body]
        return "\n\n".join(parts) + "\n\n---\n\n从「下一步」接着做。不要从头再来,也不要回头找人要背景。"


def degraded(step: str, prompt: str, why: str = "") -> Handoff:
    """The stand-in hand-off when the session could not write one: go and look at the scene.

    Args:
        step: the step's name.
        prompt: the task the step was first given (kept, trimmed, as the scene).
        why: what went wrong (``缺下一步``, an exception type, ``OVERFLOW_WHY``).
    """
    reason = f"({why})" if why else ""
    return Handoff(
        doing=f"{DEGRADED} 前一个会话在步骤「{step}」里把上下文用满了,交接却没能写出来{reason}。",
        next=(
            "先到现场把做到哪一步弄清楚:读工作台 notes/ 里的文件和已有产出,看 git status 和 git log。"
            "然后再接着做。不要当作前面什么都没做过。"
        ),
        scene="这一步最初拿到的任务是:\n\n" + prompt.strip()[:DEGRADED_TASK_CHARS],
        step=step,
    )


_UNSAFE_RE = re.compile(r'[/\\:*?"<>|]')


HANDOFF_PREFIX = "交接-"  # <notes>/交接-<step>.md (core.rundir counts them among the files flower writes)
HANDOFF_ARCHIVE = "交接"  # earlier hand-offs: <notes>/archive/交接/ (core.rundir: RunDir.handoffs_archive)


def safe_step(step: str) -> str:
    """The step name usable in a file name: ``/ \\ : * ? " < > |`` removed; ``step`` if nothing is left."""
    return _UNSAFE_RE.sub("", step).strip() or "step"


def handoff_path(notes: Path, step: str, *, archive: Path) -> Path:
    """Where the hand-off of ``step`` goes: ``<notes>/交接-<safe step>.md``.

    An existing file there is first moved to ``<archive>/<safe>-<YYYYmmdd-HHMMSS>.md`` (``-1``, ``-2``…
    when that name is taken), so earlier hand-offs are kept.

    Args:
        notes: the notes folder (``RunDir.notes``).
        archive: where earlier hand-offs go (``RunDir.handoffs_archive``: ``<notes>/archive/交接``).

    Raises:
        OSError: the old hand-off exists but cannot be moved aside.
    """
    safe = safe_step(step)
    path = notes / f"{HANDOFF_PREFIX}{safe}.md"
    if path.exists():
        archive.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        n = 0
        while True:
            target = archive / f"{safe}-{stamp}{f'-{n}' if n else ''}.md"
            if not target.exists():
                break
            n += 1
        os.rename(path, target)
    return path


def model_mismatch(want: str, served: str) -> str | None:
    """The one-time warning when the gateway serves another model than the one configured.

    Args:
        want: the configured model (``configured_model()``); empty means nothing to compare.
        served: the model named in the first main-thread reply.

    Returns:
        The warning text, or None when either is empty or they match ignoring case.
    """
    if not want or not served or want.lower() == served.lower():
        return None
    return (
        f"配置的模型是 {want},网关实际回的是 {served} —— 上下文窗口是按模型名推断的,"
        "名字对不上,窗口多半也不是你以为的那个。要是碰上空交接,"
        "设 FLOWER_WINDOW=<真实窗口> 或者用 --window 指定(见 #23)。"
    )


def generation_cap_error(generations: int, policy: HandoffPolicy) -> str:
    """The error when one step used up ``max_generations`` successors. A successor that starts above
    the line, or that one result pushes over it, is stopped earlier with a ``ContextStop`` naming that
    cause; reaching the cap means each successor filled its context with its own work."""
    return (
        f"这一步已经换了 {generations} 代会话,每一代都把上下文用到了交接线 {policy.at}"
        f"(窗口 {policy.window})。把 --window 设成模型真实的窗口,或者把这一步拆小;"
        "也可以加 --no-handoff,改用 Claude Code 自己的压缩。"
    )


def degraded_streak_error(streak: int, policy: HandoffPolicy) -> str:
    """The error after ``streak`` degraded hand-offs in a row."""
    return (
        f"连续 {streak} 次交接都没写出来(都是降级的空交接),再换下去只是在烧钱。"
        f"当前窗口 {policy.window}、交接线 {policy.at}、余量 {policy.room}:"
        "余量不够写交接的那一轮。把 --window 设成模型真实的窗口,或者显式给一个更大的 headroom。"
    )


# --- when a step cannot make room ---------------------------------------------------------------

RESULT_TOO_BIG = "result-too-big"
WINDOW_TOO_SMALL = "window-too-small"

# What a session is told when it resumes after its large results were spilled to make room (a
# squeeze): nothing is gone, only moved, and how to get at a big file without reading all of it.
SQUEEZE_PROMPT = (
    "上下文到了交接线,先腾了地方:这段会话里较大的工具结果已经原样存进文件,原处留着文件路径"
    "(要用时用 Read 读;大文件用 Read 的 offset/limit 分段读,或者用 Grep 只找需要的部分)。"
    "别的都还在。从刚才停下的地方接着做。"
)

# The phrase (core/words.py) that names each cause; the error text is that phrase with the raw numbers
# in the runtime's language, so ``parse`` reads it back in either language.
_STOP_PHRASES = {RESULT_TOO_BIG: "stop_result_too_big", WINDOW_TOO_SMALL: "stop_window_too_small"}
_STOP_FIELDS = {
    "tool": r"[^()()]*",
    "result": r"\d+",
    "floor": r"\d+",
    "line": r"\d+",
    "window": r"\d+",
    "cmd": r"[^\s<]+",
}
# How the error text spells the command (a front end re-says it with its own: ``flower``, ``%flower``).
STOP_CMD = "flower"


def _stop_patterns() -> list[tuple[str, re.Pattern[str]]]:
    from flower_magic.core.words import LANGS, phrase_pattern

    return [(cause, phrase_pattern(key, lang, _STOP_FIELDS)) for cause, key in _STOP_PHRASES.items() for lang in LANGS]


@dataclass(frozen=True)
class ContextStop:
    """Why a step stopped instead of handing off (again): what it must carry cannot get under the line.

    Attributes:
        cause: ``RESULT_TOO_BIG`` (one tool result does not fit next to the session's start-up) or
            ``WINDOW_TOO_SMALL`` (a fresh session already starts above the line).
        line, window: the hand-off line and the window, in tokens.
        floor: the context a fresh session of the step started with (system prompt, tools, its first
            prompt), in tokens.
        result: the result's size in tokens (``RESULT_TOO_BIG``).
        tool: the tool that produced it (``RESULT_TOO_BIG``).
    """

    cause: str
    line: int
    window: int
    floor: int
    result: int = 0
    tool: str = ""

    def error(self, lang: str = "zh") -> str:
        """The step's error text in ``lang`` (the manifest keeps it; ``parse`` reads it back)."""
        from flower_magic.core.words import say

        return say(
            _STOP_PHRASES[self.cause],
            lang,
            tool=self.tool or "?",
            result=self.result,
            floor=self.floor,
            line=self.line,
            window=self.window,
            cmd=STOP_CMD,
        )

    @classmethod
    def parse(cls, text: str | None) -> ContextStop | None:
        """The stop an error text in any language describes, or None for any other error."""
        for cause, pattern in _stop_patterns():
            found = pattern.fullmatch(text or "")
            if found:
                fields = found.groupdict()
                return cls(
                    cause=cause,
                    line=int(fields["line"]),
                    window=int(fields["window"]),
                    floor=int(fields["floor"]),
                    result=int(fields.get("result") or 0),
                    tool="" if fields.get("tool") in (None, "?") else str(fields["tool"]),
                )
        return None


def is_context_stop(text: str | None) -> bool:
    """Whether a step's error is a ``ContextStop``."""
    return ContextStop.parse(text) is not None
