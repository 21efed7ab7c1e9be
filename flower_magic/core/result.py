"""How a step ended (``StepResult``), the reasons a step stops, and what one attempt asks for.

Kept apart from the runtime so the manifest, the front ends and the panel can read results without
the machinery that produces them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

INTERRUPTED = "interrupted-by-human"
HANDOFF_DUE = "context-full-handoff"
KILLED = "killed-by-signal"
CANCELLED = "cancelled"

# What the model is told after a human interrupt. Without it, models read the tool calls that were
# cut off as environment faults and start debugging them or adding defensive rules for themselves.
INTERRUPT_NOTE = (
    "【关于这次打断】打断发生在消息之间,所以当时还没跑完的工具调用(包括提问、收件箱、subagent 正在执行的命令)"
    "会显示为 interrupted 或被拒绝。这是打断本身的副作用,不是环境故障,也不是谁否决了那个操作。"
    "不要为此排查,不要因此换策略,也不要给自己加防御性的规矩;需要那个结果就直接重试。"
    "已经做完的工作和上下文都还在,接着做就行。"
)
INTERRUPT_WITH_WORDS = "人在这里打断了你,说:\n\n{said}\n\n照这句话调整,然后接着做。"
INTERRUPT_SILENT = "人打断了一下,现在继续。"
# Words that came after the session's turn had ended (while its work was being judged): nothing was cut.
AFTER_TURN_WORDS = "你这一轮做完之后,人又说:\n\n{said}\n\n照这句话调整,接着做。"
# Words the session heard in the turn a hand-off cut: its successor hears them too (the hand-off, written
# by the session that had just been told, may not carry them).
HANDED_ON_WORDS = "交接前,人刚对上一个会话说了这句话,它还没来得及照做:\n\n{said}\n\n照这句话调整,接着做。"


@dataclass
class StepResult:
    """How one step ended. Written to the manifest as one row.

    Attributes:
        step: step name as run (``干活``, ``干活#round2``, ``干活·判定#1`` ...).
        session_id: the live session (after a hand-off, the successor).
        ok: the step's last attempt ended without error.
        cost_usd, num_turns: summed over every attempt and hand-off.
        text: the main thread's final text.
        error: why it failed (or ``interrupted-by-human``, ``killed-by-signal`` ...).
        attempts: attempts used, counting only failures that were retried.
        errors: every error seen, in order (never shown to the model).
        resumed: some attempt continued an existing session.
        retired: sessions that handed off to a successor, in order.
        context: the main thread's last context size (tokens).
    """

    step: str
    session_id: str | None = None
    ok: bool = False
    cost_usd: float = 0.0
    num_turns: int = 0
    text: str = ""
    error: str | None = None
    started_at: float = 0.0
    ended_at: float = 0.0
    attempts: int = 1
    errors: list[str] = field(default_factory=list)
    resumed: bool = False
    retired: list[str] = field(default_factory=list)
    context: int = 0

    @property
    def duration_s(self) -> float:
        return round(max(0.0, self.ended_at - self.started_at), 2)


@dataclass
class Plan:
    """What one attempt asks the CLI to do."""

    prompt: str
    resume: str | None = None
    fork: bool = False
    session_id: str | None = None  # start a new session under this id (lineage kept it)
    words: str = ""  # a person's words this prompt carries, not yet answered (a hand-off hands them on)


def after_words_prompt(words: str) -> str:
    """The prompt that resumes a session with words a person said after its turn ended."""
    return AFTER_TURN_WORDS.format(said=words)


def handed_on_prompt(words: str) -> str:
    """What a hand-off's successor is told of words its predecessor heard in the turn the hand-off cut."""
    return HANDED_ON_WORDS.format(said=words)


def more_words(before: str, words: str | None) -> str:
    """Words not yet answered: those a prompt carried and those said since, in order."""
    return "\n\n".join(w for w in (before, words or "") if w)


def interrupt_prompt(words: str | None) -> str:
    """The prompt that resumes a session after a human interrupt."""
    head = INTERRUPT_WITH_WORDS.format(said=words) if words else INTERRUPT_SILENT
    return f"{head}\n\n{INTERRUPT_NOTE}"


def with_words(prompt: str, words: str, join: str) -> str:
    """``prompt`` followed by words a person said before it was sent (while its CLI started, or while
    the step waited out an outage): they go with it instead of cutting a turn that has not begun. The
    note about cut tool calls is said once."""
    if INTERRUPT_NOTE in prompt:
        return f"{prompt}{join}{INTERRUPT_WITH_WORDS.format(said=words)}"
    return f"{prompt}{join}{interrupt_prompt(words)}" if prompt else interrupt_prompt(words)
