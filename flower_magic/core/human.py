"""The human channel: how the agent asks a person a question and reads what the person sent mid-run.

The agent sees two tools on an in-process SDK MCP server named ``human``: ``mcp__human__ask``
(blocks the agent's turn until answered, declined or timed out) and ``mcp__human__inbox`` (never
blocks). Any front end (the terminal, a notebook widget, a test) answers through the same thread-safe
methods, and ``route_input`` holds the one routing rule they all share.

Guarantees:
    - ``answer``, ``decline``, ``send`` and ``cancel_all`` work from any thread, including the event
      loop's own thread (a Jupyter widget callback): the decision is taken under a lock, at once, and
      the waiting ask is woken with ``loop.call_soon_threadsafe`` on the loop it waits on.
    - Exactly one settlement wins; ``answer``/``decline`` return whether theirs did.
    - A question that waits emits two ``ask`` events (``asked``, then the final state); one settled at
      once emits only the final one. Ask events are emitted on the loop the ask runs on.
    - Neither the sink nor the Q&A log nor the brief can raise into the agent: their errors are
      collected in ``ui_errors``.
    - A cancelled ask (the CLI abandoned the tool call, e.g. on an interrupt) is settled as
      ``declined`` before the cancellation propagates, so no front end keeps showing it.
    - The Q&A log and the brief are only ever appended to.
Not guaranteed:
    - Anything on a loop other than asyncio's (trio): the waits use asyncio futures.
    - Mail sent before any tool ran has no loop to go to; its ``queued`` event is emitted on the
      sender's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flower_magic.core.brief import RUNTIME_LABEL, append_section
from flower_magic.core.durable import open_own
from flower_magic.core.events import Event, Sink

if TYPE_CHECKING:
    from claude_agent_sdk import McpSdkServerConfig

SERVER_NAME = "human"
ASK_TOOL = f"mcp__{SERVER_NAME}__ask"
INBOX_TOOL = f"mcp__{SERVER_NAME}__inbox"
TOOL_NAMES = (ASK_TOOL, INBOX_TOOL)

# Half an hour: long enough to come back from a coffee, short enough that an unattended run moves on.
DEFAULT_TIMEOUT_S = 1800.0

# The CLI cuts an MCP tool call after MCP_TOOL_TIMEOUT; ours must fire first so the model reads our
# timeout text, not the CLI's "tool timed out" error.
CLI_TOOL_MARGIN_S = 60.0

ASKED, ANSWERED, TIMEOUT, DECLINED = "asked", "answered", "timeout", "declined"
OVER_BUDGET, INVALID, QUEUED, DELIVERED = "over_budget", "invalid", "queued", "delivered"

TIMEOUT_TEXT = (
    "没有人回答。自己拿主意接着做:把这个问题和你采用的假设记进「未知与假设」一节。别再问同一个问题,也别停下来等。"
)
OVER_BUDGET_TEXT = "提问次数已经用完,别再问了。把剩下拿不准的地方记进「未知与假设」一节,按你自己的判断接着做。"
DECLINED_TEXT = "对方没有回答这个问题。按你自己的判断接着做,并把你的假设记进「未知与假设」一节。"
DECLINED_REASON_TEXT = "(对方说:{reason})"
EMPTY_QUESTION_TEXT = "这个问题是空的。写清楚要问什么,再问一次。"
EMPTY_INBOX_TEXT = "收件箱里没有新消息。接着干活,不用管它。"
INBOX_HEAD = "人在运行中主动发来的话:"
INBOX_AMENDED = "这些话已经追加进需求确认书。照它们调整,接着做。"
INBOX_PLAIN = "照它们调整,接着做。"
CANCELLED_REASON = "提问被中断"  # the CLI abandoned the tool call (an interrupt, a closing session)

LOG_HEADER = "# 需求问答记录\n\n> 自动追加。这一份不进上下文,只作留档。\n\n"

ASK_DESCRIPTION = (
    "向人提一个问题,并等他回答(可能要等一阵)。只在确实需要人来拿主意时才问,一次只问一件事。"
    "可以用 options 列出几个候选答案。没人回答时,返回的文字会告诉你怎么继续。"
)
INBOX_DESCRIPTION = "查看人在运行中主动发来的消息,不会等待。没有消息就接着干活。"
ASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "question": {"type": "string", "description": "要问人的问题,写完整"},
        "options": {"type": "array", "items": {"type": "string"}, "description": "可选:几个候选答案"},
    },
    "required": ["question"],
}


@dataclass
class Ask:
    """One question from the agent.

    Attributes:
        id: ``q1``, ``q2`` … (one counter with mail ids).
        question: the question, stripped.
        options: candidate answers the agent offered (may be empty).
        asked_at: epoch seconds.
        state: ``asked``, then ``answered``, ``timeout``, ``declined``, ``over_budget`` or ``invalid``.
        answer: the answer; for ``declined``, the reason given (may be empty).
        waited_s: how long the question was open.
    """

    id: str
    question: str
    options: list[str] = field(default_factory=list)
    asked_at: float = 0.0
    state: str = ASKED
    answer: str = ""
    waited_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "question", **asdict(self)}


@dataclass
class Mail:
    """Words a person sent without being asked.

    Attributes:
        id: ``m1``, ``m2`` … (one counter with ask ids).
        text: what was said.
        sent_at: epoch seconds.
        state: ``queued`` until the agent reads its inbox, then ``delivered``.
        amended: the brief the text was appended to, or ``""``.
    """

    id: str
    text: str
    sent_at: float = 0.0
    state: str = QUEUED
    amended: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "mail", **asdict(self)}


def resolve_answer(ask: Ask, text: str) -> str:
    """The answer a person meant: a pure number within the option range selects that option."""
    said = text.strip()
    if said.isascii() and said.isdigit() and 1 <= int(said) <= len(ask.options):
        return ask.options[int(said) - 1]
    return said


def _indent(text: str) -> str:
    """Continuation lines stay inside their Markdown list item."""
    return text.replace("\n", "\n    ")


def _call_in(loop: asyncio.AbstractEventLoop, fn: Callable[[], None]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
        loop.call_soon_threadsafe(fn)


def _wake(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[None]) -> None:
    """Wake whoever awaits ``fut`` on ``loop``, from any thread."""
    _call_in(loop, lambda: None if fut.done() else fut.set_result(None))


class HumanChannel:
    """Questions from the agent to a person, and a person's mail to the agent.

    Args:
        on_event: a sink for ``ask`` events (sync, must not block); its errors go to ``ui_errors``.
        max_asks: how many questions the agent may ask; ``None`` = unlimited, ``0`` = none.
        timeout_s: how long a question waits; ``<= 0`` = never wait (settle as ``timeout`` at once),
            ``None`` = wait forever (never unattended).
        log_path: the Q&A log (Markdown, append-only); ``None`` = no log.
        amend_path: the brief (需求.md) that mail is appended to; ``None`` = mail is not kept.
        over_budget_text, timeout_text, declined_text, empty_question_text, empty_inbox_text: what
            the model is told in each case.
    """

    def __init__(
        self,
        *,
        on_event: Sink | None = None,
        max_asks: int | None = None,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        log_path: str | Path | None = None,
        amend_path: str | Path | None = None,
        over_budget_text: str = OVER_BUDGET_TEXT,
        timeout_text: str = TIMEOUT_TEXT,
        declined_text: str = DECLINED_TEXT,
        empty_question_text: str = EMPTY_QUESTION_TEXT,
        empty_inbox_text: str = EMPTY_INBOX_TEXT,
    ) -> None:
        self.on_event = on_event
        self.max_asks = max_asks
        self.last_mail: Mail | None = None  # what send() queued last (front ends say where it went)
        self.timeout_s = timeout_s
        self.log_path = Path(log_path) if log_path is not None else None
        self.amend_path = Path(amend_path) if amend_path is not None else None
        self.over_budget_text = over_budget_text
        self.timeout_text = timeout_text
        self.declined_text = declined_text
        self.empty_question_text = empty_question_text
        self.empty_inbox_text = empty_inbox_text
        self.ui_errors: list[Exception] = []
        self._lock = threading.Lock()
        self._log_lock = threading.Lock()
        self._seq = 0
        self._used = 0
        self._entries: list[Ask | Mail] = []
        self._waits: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = {}
        self._pulled: set[str] = set()
        self._pullers: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def remaining(self) -> int:
        """Questions the agent may still ask; -1 = unlimited."""
        if self.max_asks is None:
            return -1
        return max(0, self.max_asks - self._used)

    def pending(self) -> list[Ask]:
        """Questions waiting for an answer, oldest first."""
        with self._lock:
            return [e for e in self._entries if isinstance(e, Ask) and e.state == ASKED]

    def pending_mail(self) -> list[Mail]:
        """Mail the agent has not read yet, oldest first."""
        with self._lock:
            return [e for e in self._entries if isinstance(e, Mail) and e.state == QUEUED]

    def transcript(self) -> list[Ask | Mail]:
        """Copies of every question and mail so far, in order (``to_dict()`` for a front end)."""
        with self._lock:
            return [replace(e, options=list(e.options)) if isinstance(e, Ask) else replace(e) for e in self._entries]

    async def next_ask(self, timeout: float | None = None) -> Ask | None:
        """The next question no earlier ``next_ask`` returned, waiting up to ``timeout`` seconds.

        Each question is handed out once, to one puller; push-style front ends use ``on_event``.
        Works on any asyncio loop, not only the agent's. ``None`` waits forever, ``<= 0`` only looks.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            with self._lock:
                for entry in self._entries:
                    if isinstance(entry, Ask) and entry.state == ASKED and entry.id not in self._pulled:
                        self._pulled.add(entry.id)
                        return entry
                left = None if deadline is None else deadline - loop.time()
                if left is not None and left <= 0:
                    return None
                woken: asyncio.Future[None] = loop.create_future()
                self._pullers.append((loop, woken))
            try:
                await asyncio.wait({woken}, timeout=left)
            finally:
                with self._lock:
                    self._pullers.remove((loop, woken))

    def answer(self, ask_id: str, text: str) -> bool:
        """Answer a pending question (a number picks an option; blank text declines).

        Returns:
            True if this answer settled the question; False if it was unknown or already settled.
        """
        with self._lock:
            ask = self._find_pending(ask_id)
            said = resolve_answer(ask, text) if ask is not None else ""
        if ask is not None and not said:
            return self.decline(ask_id)
        return self._settle(ask_id, ANSWERED, said)

    def decline(self, ask_id: str, reason: str = "") -> bool:
        """Refuse a pending question; the agent decides itself. Returns whether this settled it."""
        return self._settle(ask_id, DECLINED, reason.strip())

    def cancel_all(self, reason: str = "") -> int:
        """Decline every pending question (shutdown), so no agent turn hangs. Returns how many."""
        return sum(self.decline(ask.id, reason) for ask in self.pending())

    def nobody_answers(self) -> int:
        """No one can answer from now on (stdin closed, a notebook run headless): pending questions time
        out at once and later ones are settled as ``timeout`` without waiting. Returns how many were
        pending."""
        self.timeout_s = 0.0
        return sum(self._settle(ask.id, TIMEOUT, "") for ask in self.pending())

    def send(self, text: str) -> Mail | None:
        """Queue words for the agent's inbox and append them to the brief. None for blank text."""
        said = text.strip()
        if not said:
            return None
        with self._lock:
            mail = Mail(id=self._next_id("m"), text=said, sent_at=time.time())
        # Amended before it is queued, so the inbox never reads it half-made.
        if self.amend(said):
            mail.amended = str(self.amend_path)
        with self._lock:
            self._entries.append(mail)
            self.last_mail = mail
        self._emit_from_any_thread(lambda: self._emit(self._mail_event(mail)) if mail.state == QUEUED else None)
        return mail

    def amend(self, text: str, label: str = RUNTIME_LABEL) -> bool:
        """Append ``text`` to the brief under ``## <label>(HH:MM:SS)``. Returns whether it was written."""
        if self.amend_path is None or not text.strip():
            return False
        try:
            append_section(self.amend_path, label, text.strip())
        except OSError as exc:
            self.ui_errors.append(exc)
            return False
        return True

    def route_input(self, text: str) -> str:
        """Act on a line a person typed, by the rule every front end shares; returns what it became.

        With a question pending the line answers the oldest (a number picks an option, blank declines):
        ``answered`` / ``declined``. Otherwise, or when the question closed meanwhile, it is ``mail``.
        ``ignored``: blank with nothing pending, or a blank line for a question that closed meanwhile.
        """
        waiting = self.pending()
        if waiting:
            ask = waiting[0]
            if not text.strip():
                return DECLINED if self.decline(ask.id) else "ignored"
            if self.answer(ask.id, text):
                return ANSWERED
            # The question closed meanwhile (timed out, answered elsewhere): the words go as mail.
        return "mail" if self.send(text) is not None else "ignored"

    async def ask(self, question: str, options: Sequence[Any] | None = None) -> Ask:
        """Put a question to the person and wait until it is settled. What the ``ask`` tool runs."""
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        self._loop = loop
        offered = [str(o).strip() for o in options or [] if str(o).strip()]
        with self._lock:
            ask = Ask(id=self._next_id("q"), question=(question or "").strip(), options=offered, asked_at=time.time())
            self._entries.append(ask)
            if self.max_asks is not None and self._used >= self.max_asks:
                ask.state = OVER_BUDGET
            elif not ask.question:
                ask.state = INVALID
            else:
                self._used += 1
                if self.timeout_s is not None and self.timeout_s <= 0:
                    ask.state = TIMEOUT
                else:
                    done: asyncio.Future[None] = loop.create_future()
                    self._waits[ask.id] = (loop, done)
            # Built under the lock: a person answering from another thread cannot change it first.
            asked = self._ask_event(ask)
            pullers = list(self._pullers)
        if ask.state != ASKED:
            self._finish(ask)
            return ask
        self._emit(asked)
        for puller_loop, woken in pullers:
            _wake(puller_loop, woken)
        try:
            await asyncio.wait({done}, timeout=self.timeout_s)
        except asyncio.CancelledError:
            self._close_wait(ask, DECLINED, CANCELLED_REASON, started)
            raise
        self._close_wait(ask, TIMEOUT, "", started)
        return ask

    def reply_for(self, ask: Ask) -> str:
        """What the model is told about a settled question."""
        if ask.state == ANSWERED:
            return ask.answer
        if ask.state == DECLINED:
            return self.declined_text + (DECLINED_REASON_TEXT.format(reason=ask.answer) if ask.answer else "")
        if ask.state == OVER_BUDGET:
            return self.over_budget_text
        if ask.state == INVALID:
            return self.empty_question_text
        return self.timeout_text

    def check_inbox(self) -> str:
        """Deliver queued mail (once); what the ``inbox`` tool returns."""
        with self._lock:
            mail = [e for e in self._entries if isinstance(e, Mail) and e.state == QUEUED]
            for m in mail:
                m.state = DELIVERED
        if not mail:
            return self.empty_inbox_text
        self._log("".join(f"- **人主动说**({m.id}) {_indent(m.text)}\n" for m in mail))
        for m in mail:
            self._emit(self._mail_event(m))
        lines = [INBOX_HEAD, *(f"({m.id}) {m.text}" for m in mail)]
        lines.append(INBOX_AMENDED if all(m.amended for m in mail) else INBOX_PLAIN)
        return "\n".join(lines)

    def cli_env(self) -> dict[str, str]:
        """Environment for the CLI (``AgentSpec.env``) so it never cuts a waiting question short."""
        if self.timeout_s is None or self.timeout_s <= 0:
            return {}
        return {"MCP_TOOL_TIMEOUT": str(int((self.timeout_s + CLI_TOOL_MARGIN_S) * 1000))}

    def mcp_server(self) -> McpSdkServerConfig:
        """The SDK MCP server config for ``AgentSpec.mcp_servers["human"]`` (imports the SDK)."""
        from claude_agent_sdk import create_sdk_mcp_server, tool

        @tool("ask", ASK_DESCRIPTION, ASK_SCHEMA)
        async def ask_tool(args: dict[str, Any]) -> dict[str, Any]:
            options = args.get("options")
            settled = await self.ask(str(args.get("question") or ""), options if isinstance(options, list) else None)
            return {"content": [{"type": "text", "text": self.reply_for(settled)}]}

        @tool("inbox", INBOX_DESCRIPTION, {"type": "object", "properties": {}})
        async def inbox_tool(args: dict[str, Any]) -> dict[str, Any]:
            self._loop = asyncio.get_running_loop()
            return {"content": [{"type": "text", "text": self.check_inbox()}]}

        return create_sdk_mcp_server(SERVER_NAME, tools=[ask_tool, inbox_tool])

    def _next_id(self, prefix: str) -> str:
        self._seq += 1
        return f"{prefix}{self._seq}"

    def _find_pending(self, ask_id: str) -> Ask | None:
        for entry in self._entries:
            if isinstance(entry, Ask) and entry.id == ask_id:
                return entry if entry.state == ASKED else None
        return None

    def _settle(self, ask_id: str, state: str, answer: str) -> bool:
        with self._lock:
            ask = self._find_pending(ask_id)
            if ask is None:
                return False
            ask.state, ask.answer = state, answer
            wait = self._waits.get(ask_id)
        if wait is not None:
            _wake(*wait)
        return True

    def _close_wait(self, ask: Ask, state: str, answer: str, started: float) -> None:
        """End an ask's wait: settle it as ``state`` unless a person already did, then log and emit."""
        with self._lock:
            self._waits.pop(ask.id, None)
            if ask.state == ASKED:
                ask.state, ask.answer = state, answer
            ask.waited_s = round(time.monotonic() - started, 3)
        self._finish(ask)

    def _finish(self, ask: Ask) -> None:
        lines = f"- **Q**({ask.id}) {_indent(ask.question)}\n"
        if ask.options:
            lines += f"  - 选项:{' / '.join(ask.options)}\n"
        lines += f"  - **A**[{ask.state}] {_indent(ask.answer)}".rstrip() + "\n"
        self._log(lines)
        self._emit(self._ask_event(ask))

    def _log(self, text: str) -> None:
        if self.log_path is None:
            return
        try:
            with self._log_lock:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                # Never appended through a link (IsALink): the log is one of the notes flower writes.
                fd = open_own(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                with os.fdopen(fd, "a", encoding="utf-8") as f:
                    f.write((LOG_HEADER if f.tell() == 0 else "") + text)
        except OSError as exc:
            self.ui_errors.append(exc)

    def _ask_event(self, ask: Ask) -> Event:
        payload: dict[str, Any] = {"id": ask.id, "options": list(ask.options), "state": ask.state}
        payload.update(answer=ask.answer, remaining=self.remaining, asked_at=ask.asked_at, waited_s=ask.waited_s)
        return Event("ask", ask.question, payload=payload, raw=ask)

    def _mail_event(self, mail: Mail) -> Event:
        payload = {"kind": "mail", "state": mail.state, "id": mail.id, "amended": mail.amended}
        return Event("ask", mail.text, payload=payload, raw=mail)

    def _emit(self, event: Event) -> None:
        sink = self.on_event
        if sink is None:
            return
        try:
            sink(event)
        except Exception as exc:
            self.ui_errors.append(exc)

    def _emit_from_any_thread(self, emit: Callable[[], None]) -> None:
        """Keep the sink on the agent's loop thread (the event contract) when called from elsewhere.

        ``emit`` re-checks its facts when it runs, so a late ``queued`` never follows ``delivered``.
        """
        loop = self._loop
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if loop is None or on_loop or loop.is_closed() or not loop.is_running():
            emit()
        else:
            _call_in(loop, emit)
