"""The runtime: one step = one or more attempts, each one SDK session turn, never losing the session.

Guarantees:
    - The session id is handed to ``on_session`` the moment the first message carrying it arrives
      (the CLI's ``init`` message, before the first API request), so lineage can persist it at once.
    - ``run()`` never raises for SDK or API failures: they end the attempt and land in
      ``StepResult.error`` / ``errors``. Cancellation and KeyboardInterrupt still propagate, after the
      step's row is written.
    - A manifest row is written at the end of every ``run()`` and by ``rescue()``.
    - Retries, interrupts, squeezes and hand-offs continue the SAME conversation (resume) whenever a
      session id exists; only a hand-off starts a new session, on purpose, and records the old one in
      ``retired``. Before any hand-off the session is squeezed (core.succession), and a session that
      cannot get under the hand-off line stops with a ``ContextStop`` naming why.
    - Error texts never go into the prompt the model sees; resumes use neutral prompts.
    - A remark (``interrupt`` with words) cuts the session running now and resumes it with them,
      except a gate's own session (``takes_words=False``, the judge): the words then wait
      (``words_waiting`` / ``take_words``) for the step it judges; a stop still ends it. Words said
      while no attempt runs go with the next attempt's prompt, after what it already says (words
      said while its CLI starts are added to it, never put in its place).
    - A stop (``interrupt(resume=False)``, from any thread) is heard in every state of a step: an
      attempt is cut, and a wait between attempts — the probes of an outage (up to an hour), the
      back-off, another writer settling — ends at once (an ``asyncio.Event`` set through
      ``call_soon_threadsafe``): the step ends ``interrupted-by-human`` with one manifest row and
      the outage among its ``errors``. A stop stays a stop: words said after it do not resume the step.
    - Words said during such a wait are kept (the person is told, ``words_kept_offline``), do not
      shorten it, and go with the first prompt once the API answers again: once.
    - A step recorded by ``rescue`` (the process going) is one manifest row, also when the step then
      ends after all; rescued during a wait it reads ``killed-by-signal``, not the outage's error.
Not guaranteed:
    - In-flight subagent work survives an interrupt or an outage (it is replayed by the agent).
    - Words said during an outage reach the model if the attempt that carries them fails again
      before the CLI stored its prompt (they are in 需求.md; the next run finds what a session never
      received).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from flower_magic.core import manifest
from flower_magic.core.agent import AgentSpec, build_options
from flower_magic.core.compact import CompactPolicy
from flower_magic.core.context_watch import ContextWatch
from flower_magic.core.errors import CredentialsError, ensure_dir, has_credentials, logged
from flower_magic.core.events import Event, Sink, emit, normalize, session_id_of
from flower_magic.core.foreign_writer import OtherWriters
from flower_magic.core.handoff import HandoffPolicy
from flower_magic.core.launcher import cli_launcher, disconnect, launcher_env, tie, watchdog_mode
from flower_magic.core.project import config_dir, project_key
from flower_magic.core.resilience import Resilience, classify, cli_retry_env, fatal_hint, quiet_sdk_reader
from flower_magic.core.result import (
    CANCELLED,
    HANDOFF_DUE,
    INTERRUPT_NOTE,
    INTERRUPTED,
    KILLED,
    Plan,
    StepResult,
    handed_on_prompt,
    interrupt_prompt,
    more_words,
    with_words,
)
from flower_magic.core.rundir import RunDir
from flower_magic.core.storage import SESSIONS_ENV, RunStore, default_store
from flower_magic.core.succession import Succession, Turn, check_model
from flower_magic.core.words import pick_lang_or_default, short_path

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["HANDOFF_DUE", "INTERRUPTED", "INTERRUPT_NOTE", "KILLED", "Runtime", "StepResult"]

# A session's first prompt is among its first lines (the CLI writes two queue records first).
PROMPT_SCAN_ENTRIES = 200
OPENING_JOIN = "\n\n---\n\n"
INTERRUPT_DRAIN_S = 15.0  # how long to let the CLI close the interrupted turn cleanly before cutting it
DISCONNECT_TIMEOUT_S = 10.0  # a CLI that will not exit must not hang the step


def _policy(value: Any, cls: type[Any]) -> Any:
    if isinstance(value, cls):
        return value
    return cls(enabled=bool(value))


class Runtime:
    """Runs agent steps in one workspace, with every transcript in ``<run_dir>/sessions.db``.

    Args:
        workspace: the agent's working directory (created if missing).
        run_dir: where sessions.db, manifest.json and lineage.json live; relative = under the
            workspace, as for every front end (default ``runs``).
        portable: ignore the user's ``~/.claude`` settings.
        trim: spill large old tool results out of resumed context (off here; on in ``flower``): a
            ``TrimPolicy``, or True for the budget rule sized from ``handoff``'s line.
        ephemeral: mark stale results of old read-only shell commands on resume.
        keep_denials: how many denied tool calls stay in resumed context.
        resilience: outage policy (``True`` = defaults, ``False`` = one attempt only).
        handoff: context-full policy (``True`` = defaults, ``False`` = the CLI's auto-compaction).
        env: extra environment for the CLI.
        store: where transcripts go (``core.storage.RunStore``); default, through the public
            ``flower_magic.Runtime``: the store ``FLOWER_SESSIONS`` or the run dir's store.json names
            (``<run_dir>/sessions.db`` when neither does), pruned and trimmed on load
            (``flower_magic.stores.PruningSessionStore``).
        lang: the language of what the runtime itself says ("" = ``FLOWER_LANG``, else zh).

    Raises:
        CredentialsError: no API key, token or Claude login is configured.
        LookupError: no ``store`` and no default registered (this class used without ``flower_magic``).
        PathError: the workspace or run dir cannot be created.
        ValueError: ``FLOWER_WATCHDOG`` is set to something other than auto, portable or off.
    """

    INTERRUPTED = INTERRUPTED
    HANDOFF_DUE = HANDOFF_DUE
    INTERRUPT_NOTE = INTERRUPT_NOTE
    other_writers = OtherWriters()  # never resume a session someone else is still writing (core.foreign_writer)

    def __init__(
        self,
        *,
        workspace: str | Path,
        run_dir: str | Path | None = None,
        portable: bool = True,
        trim: Any = False,
        ephemeral: Any = True,
        keep_denials: int = 1,
        resilience: Resilience | bool = True,
        handoff: HandoffPolicy | bool = True,
        env: dict[str, str] | None = None,
        store: RunStore | None = None,
        lang: str = "",
    ) -> None:
        if not has_credentials({**os.environ, **(env or {})}):
            raise CredentialsError(lang)
        watchdog_mode()  # a FLOWER_WATCHDOG nobody can honour is said before anything is written
        rd = RunDir.at(workspace, run_dir)
        self.workspace = ensure_dir("workspace", rd.workspace)
        self.run_dir = ensure_dir("run dir", rd.path)
        self.portable = portable
        self.resilience: Resilience = _policy(resilience, Resilience)
        quiet_sdk_reader()
        # The context of the step running now, and what was said about it: one object, lent to succession.
        self.context_watch = ContextWatch(_policy(handoff, HandoffPolicy))
        self.env: dict[str, str] = {"CLAUDE_CONFIG_DIR": str(config_dir()), **cli_retry_env(os.environ)}
        # The store's URL may carry a password: the agent (and whatever its shell runs) is not given it.
        if os.environ.get(SESSIONS_ENV):
            self.env[SESSIONS_ENV] = ""
        self.env.update(env or {})
        self.store: RunStore = store or default_store(
            rd.sessions_db,
            workspace=self.workspace,
            trim=trim,
            ephemeral=ephemeral,
            keep_denials=keep_denials,
            line=self.handoff.at,
        )
        self.lang = lang
        self.results: list[StepResult] = []
        self.run_id = manifest.new_run_id()
        self._fs_noted = False
        self.persist_error: OSError | None = None  # the last manifest write that failed, until one succeeds
        self.on_session: Callable[[str], None] | None = None
        self._current: StepResult | None = None
        self._interrupt: str | None = None
        self._interrupt_lock = threading.Lock()
        self._resume_after_interrupt = True
        self._takes_words = True  # False while a gate's session runs (the judge): a remark waits for the step
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_asked: asyncio.Event | None = None  # set (in the loop) when a stop comes: ends any wait
        self._between = False  # the step waits between attempts (an outage, a back-off): words are kept
        self._sink: Sink | None = None  # the running step's on_event, for what the runtime says from a thread
        self._client: Any = None
        self._cli_interrupt_sent = False
        self._interrupt_task: asyncio.Future[None] | None = None
        self._succession = Succession(
            self.context_watch,
            self.store,
            project_key=self.project_key,
            notes=rd.notes,
            archive=rd.handoffs_archive,
            attempt=self._attempt,
            carry_on=self._continue,
            wait_out=self._retry_wait,
            lang=pick_lang_or_default(lang),
        )
        self._model_checked = False
        self._closed = False
        self._opening: str | Callable[[], str] | None = None
        self._persisting = False

    # -- facts -----------------------------------------------------------------------------------

    @property
    def handoff(self) -> HandoffPolicy:
        """When a session hands off (the context watch's policy)."""
        return self.context_watch.policy

    @property
    def manifest_path(self) -> Path:
        return self.run_dir / manifest.MANIFEST

    @property
    def project_key(self) -> str:
        return project_key(self.workspace)

    def has_session(self, session_id: str) -> bool:
        """The store holds a transcript for ``session_id`` in this workspace."""
        try:
            return bool(self.store.has_session(self.project_key, session_id))
        except Exception:
            log.warning("could not ask the store about session %s", session_id, exc_info=True)
            return False

    def context_of(self, session_id: str) -> int:
        """The last context size (tokens) recorded for a session, or 0."""
        try:
            return int(self.store.last_context(self.project_key, session_id))
        except Exception:
            return 0

    def total_cost(self) -> float:
        return round(sum(r.cost_usd for r in self.results), 4)

    # -- control ---------------------------------------------------------------------------------

    def interrupt(self, message: str = "", *, resume: bool = True) -> None:
        """Stop the running attempt at the next message boundary and resume with ``message``.

        Safe from any thread. The CLI is also asked to end its turn at once, so a long tool call does
        not have to finish first.

        A stop also ends a wait between attempts at once (an outage, a back-off, another writer
        settling): the step ends ``interrupted-by-human`` without waiting for the API. Words said then
        wait for it: they go with the first prompt sent once it answers again.

        Args:
            message: what the person said (may be empty); added to words said before that no
                attempt took yet.
            resume: False ends the step instead (``error == "interrupted-by-human"``), keeping its
                session for the next run — a notebook's Interrupt button means "stop here". A stop
                stays a stop: words said after it do not start the step again (the front ends have
                written them to 需求.md, where the next run finds them).
        """
        with self._interrupt_lock:
            if self._stopping():
                resume, message = False, ""
            new_words = resume and bool(message)
            waiting = self._interrupt if self._resume_after_interrupt else None
            if resume and waiting:
                # Words said again before the session took the first ones: all of them go, in order.
                message = f"{waiting}\n\n{message}" if message else waiting
            self._interrupt = message or ""
            self._resume_after_interrupt = resume
            loop, stop_asked, between = self._loop, self._stop_asked, self._between
        client = self._client
        if loop is None or loop.is_closed():
            return
        # The loop may be another thread's (the kernel's Interrupt, the inbox, a Ctrl-C): everything that
        # touches it is handed over with call_soon_threadsafe, which also wakes a loop asleep in a wait.
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: its run is over
            if not resume and stop_asked is not None:
                loop.call_soon_threadsafe(stop_asked.set)
            if client is not None:
                loop.call_soon_threadsafe(self._send_cli_interrupt)
            elif new_words and between:
                loop.call_soon_threadsafe(self._say_words_kept)

    def _send_cli_interrupt(self, *, winding_down: bool = False) -> None:
        client = self._client
        if client is None or self._cli_interrupt_sent or self.context_watch.writing_handoff:
            # A hand-off being written is not cut: the words go to the successor instead.
            return
        if not winding_down and not self._cuts():
            return  # a gate's session (the judge) is not cut for a remark: the words wait for its step
        self._cli_interrupt_sent = True

        async def send() -> None:
            with logged(log, "sending the interrupt to the CLI"):
                await asyncio.wait_for(client.interrupt(), timeout=5)

        self._interrupt_task = asyncio.ensure_future(send())

    def _take_interrupt(self) -> str | None:
        with self._interrupt_lock:
            words, self._interrupt = self._interrupt, None
            return words

    def _stopping(self) -> bool:
        """A stop waits to be taken (``interrupt(resume=False)``)."""
        return self._interrupt is not None and not self._resume_after_interrupt

    def _say_words_kept(self) -> None:
        """In the loop: words came while the step waits between attempts (an outage): say they are kept."""
        if self._between and self._takes_words and self.words_waiting():
            payload = {"step": self._current.step if self._current else "", "words_kept": True}
            emit(self._sink, Event("retry", self.say("words_kept_offline"), payload=payload))

    async def _unless_stopped(self, waiting: Awaitable[T]) -> tuple[bool, T | None]:
        """Await ``waiting`` unless a stop comes first, which cancels it.

        Returns:
            ``(True, None)`` when a stop came (before or during the wait), else ``(False, its value)``.
        """
        stop_asked = self._stop_asked
        if (stop_asked is not None and stop_asked.is_set()) or self._stopping():
            if asyncio.iscoroutine(waiting):
                waiting.close()  # never started: no "was never awaited" warning
            return True, None
        if stop_asked is None:  # not inside ``run`` (nothing can wake it): a plain wait
            return False, await waiting
        task = asyncio.ensure_future(waiting)
        stop = asyncio.ensure_future(stop_asked.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pending in (task, stop):
                if not pending.done():
                    pending.cancel()
            # Let the cancelled one finish (a probe closes its socket) before the step goes on or ends.
            await asyncio.wait({task, stop})
        if stop_asked.is_set():  # the stop wins, even over a wait that ended at the same moment
            if not task.cancelled():
                task.exception()  # retrieved: an error of a wait nobody waits for any more is not logged as lost
            return True, None
        return False, task.result()

    def _stopped_between(self, result: StepResult) -> bool:
        """A stop ended a wait between attempts: the step ends as a stop mid-attempt would, and the stop
        is taken (it is this step's, not the next one's)."""
        self._take_interrupt()
        result.ok, result.error = False, INTERRUPTED
        return False

    def _cuts(self) -> bool:
        """An interrupt is waiting and the attempt running now is to be cut for it: not while a
        hand-off is written, and not a gate's session for a remark (a stop still ends it)."""
        return (
            self._interrupt is not None
            and not self.context_watch.writing_handoff
            and (self._takes_words or not self._resume_after_interrupt)
        )

    def words_waiting(self) -> bool:
        """A person's words wait for the step's session: said while no attempt of it could take them
        (while its gate's session ran, or between its attempts)."""
        with self._interrupt_lock:
            return self._interrupt is not None and self._resume_after_interrupt

    def take_words(self) -> str | None:
        """The waiting words (``words_waiting``), taken: they are the caller's to send now."""
        with self._interrupt_lock:
            if self._interrupt is None or not self._resume_after_interrupt:
                return None
            words, self._interrupt = self._interrupt, None
            return words

    def rescue(self) -> None:
        """Record the in-flight step (``killed-by-signal``) before the process goes. Never raises.

        Safe from a signal handler: when the signal lands while this runtime is writing its rows,
        that write already holds every row (a step's result is added before it is written), so
        rescue returns instead of waiting for the manifest lock its own interrupted frame holds.
        """
        if self._persisting:
            return
        try:
            cur = self._current
            if cur is not None and cur not in self.results:
                cur.ended_at = time.time()
                # Between attempts the error is the last attempt's (an outage): not why the step ended.
                cur.error = KILLED if self._between or not cur.error else cur.error
                self.results.append(cur)
            self._persist()
        except Exception:
            log.warning("could not record the step in flight in %s", self.manifest_path, exc_info=True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with logged(log, "closing the session store", logging.WARNING):
            self.store.close()

    # -- one step --------------------------------------------------------------------------------

    async def run(
        self,
        spec: AgentSpec,
        prompt: str,
        *,
        step_name: str | None = None,
        resume: str | None = None,
        fork: bool = False,
        session_id: str | None = None,
        on_event: Sink | None = None,
        opening: str | Callable[[], str] | None = None,
        announce_context: bool = True,
        takes_words: bool = True,
    ) -> StepResult:
        """Run one step to its end: retrying outages, resuming after interrupts, handing off when full.

        Args:
            spec: the agent.
            prompt: the message for this step.
            step_name: the name in the manifest (default: the spec's name).
            resume: continue this session instead of starting one.
            fork: with ``resume``, continue under a new id.
            session_id: start the new session under this id (kept from lineage).
            on_event: a sink for live events.
            opening: the step's own instructions (or a function giving them), for when ``resume``
                names a session that never received a prompt (its first process died before the
                prompt was stored): they are sent then, ahead of ``prompt``. Without ``resume`` the
                opening is ``prompt`` itself.
            announce_context: tell the person when the context nears the line or room is made
                (False for a gate's own sessions, e.g. the judge's: the person does not steer them).
            takes_words: a remark (``interrupt`` with words) cuts this session and resumes it with
                them. False for a gate's own sessions: the words wait for the step it judges
                (``words_waiting``); a stop still ends it.
        """
        self._note_network_fs(on_event)
        result = StepResult(step=step_name or spec.name, started_at=time.time())
        self._current = result
        with self._interrupt_lock:
            self._loop = asyncio.get_running_loop()
            self._stop_asked = asyncio.Event()
            if self._stopping():  # a stop said between steps: this step ends before its CLI starts
                self._stop_asked.set()
        self._sink = on_event
        self.context_watch.start_step(announce=announce_context)
        self._takes_words = takes_words
        self._opening = opening if resume else prompt
        if resume and not fork and not self.holds_prompt(resume):
            prompt = self._with_opening(prompt)
        plan = Plan(prompt, resume=resume, fork=fork, session_id=session_id)
        turn = Turn()
        attempt = 0
        try:
            while True:
                attempt += 1
                result.attempts = attempt
                fresh = len(result.errors)
                await self._attempt(spec, plan, result, on_event)
                if result.ok:
                    break
                if result.error == INTERRUPTED:
                    resume_now = self._resume_after_interrupt
                    words = self._take_interrupt()
                    if not resume_now:
                        break
                    if not result.session_id:
                        # Nothing to resume yet (a hand-off's successor before its first line): the
                        # words go with the session's first prompt instead of being dropped.
                        plan = replace(
                            plan,
                            prompt=f"{plan.prompt}{OPENING_JOIN}{interrupt_prompt(words)}",
                            words=more_words(plan.words, words),
                        )
                        attempt -= 1
                        continue
                    emit(
                        on_event,
                        Event(
                            "retry",
                            self.say("interrupted_words" if words else "interrupted_plain"),
                            payload={"step": result.step, "attempt": attempt, "interrupt": True},
                        ),
                    )
                    plan = await self._continue(result, interrupt_prompt(words))
                    plan.words = words or ""
                    turn.squeezed = False  # a new prompt opens a new turn, which may be squeezed again
                    attempt -= 1
                    continue
                if self._should_hand_off(result, fresh):
                    room = await self._succession.make_room(spec, plan.prompt, result, turn, on_event)
                    if room is None:
                        break
                    if room.resume is None:
                        if plan.words:
                            # The cut turn had not answered them: the successor hears them, once.
                            prompt_on = f"{room.prompt}{OPENING_JOIN}{handed_on_prompt(plan.words)}"
                            room = replace(room, prompt=prompt_on, words=plan.words)
                        self._opening = room.prompt  # a successor: its own instructions from here on
                    plan = room
                    attempt -= 1
                    continue
                if not await self._retry_wait(result, attempt, on_event):
                    break
                unanswered = plan.words  # the failed try did not answer them
                plan = (
                    await self._continue(result, self.resilience.resume_prompt)
                    if result.session_id
                    else replace(plan, resume=None, fork=False)
                )
                plan.words = unanswered
        except BaseException as exc:
            result.ok = False
            result.error = result.error or (
                CANCELLED
                if isinstance(exc, asyncio.CancelledError)
                else f"{type(exc).__name__}: {exc}"
                if isinstance(exc, Exception)
                else INTERRUPTED
            )
            raise
        finally:
            result.ended_at = time.time()
            self._current = None
            with self._interrupt_lock:
                self._loop, self._stop_asked = None, None
            self._sink = None
            self._takes_words = True
            if not any(r is result for r in self.results):  # a rescue (a shutdown) already recorded it
                self.results.append(result)
            self._persist()
            if self.persist_error is not None:
                why = self.persist_error.strerror or type(self.persist_error).__name__
                where = short_path(self.manifest_path, self.workspace)
                text = self.say("manifest_unwritten", path=where, step=result.step, why=why)
                emit(on_event, Event("notice", text, payload={"manifest_error": why}))
        return result

    async def recover(self, session_id: str) -> bool:
        """Whether ``session_id`` can be resumed: the store holds it, after taking in what the CLI's own
        local copies hold and the store missed (a process killed before the mirror caught up)."""
        from flower_magic.core.local_copy import backfill

        await backfill(self.store, self.workspace, session_id, self.env)
        return self.has_session(session_id)

    def _note_network_fs(self, on_event: Sink | None) -> None:
        """Say once per runtime that the run dir is on a network filesystem, what that means, what to do."""
        mount = getattr(self.store, "mount", None)
        if self._fs_noted or mount is None or not mount.is_network:
            return
        self._fs_noted = True
        from flower_magic.core.words import network_fs_line, pick_lang

        try:
            lang = pick_lang(self.lang)
        except ValueError:
            lang = "zh"
        text = network_fs_line(self.run_dir, mount.fstype, mount.point, lang)
        journal = getattr(self.store, "journal_mode", None)
        payload = {"network_fs": mount.fstype, "mount_point": mount.point, "journal_mode": journal}
        emit(on_event, Event("notice", text, payload=payload))

    def holds_prompt(self, session_id: str) -> bool:
        """The stored session already holds a prompt (its first entries are read, not the whole of it:
        a session's first prompt is among its first lines)."""
        from flower_magic.core.local_copy import has_prompt

        key = {"project_key": self.project_key, "session_id": session_id}
        try:
            return has_prompt(self.store.load_range(key, 0, PROMPT_SCAN_ENTRIES))
        except Exception:
            log.warning("could not read the start of session %s", session_id, exc_info=True)
            return False

    def holds_text(self, session_id: str, text: str) -> bool:
        """The stored session contains ``text`` somewhere (a prompt it was given, a reply it wrote)."""
        key = {"project_key": self.project_key, "session_id": session_id}
        try:
            return bool(self.store.holds_text(key, text))
        except Exception:
            return False

    def _with_opening(self, prompt: str) -> str:
        """``prompt`` preceded by the step's own instructions (when they are known and differ)."""
        opening = self._opening
        if callable(opening):
            try:
                opening = opening()
            except Exception:
                log.warning("the step's opening instructions could not be rendered", exc_info=True)
                opening = None
        if not opening or opening == prompt:
            return prompt
        return f"{opening}{OPENING_JOIN}{prompt}" if prompt else opening

    async def _continue(self, result: StepResult, prompt: str) -> Plan:
        """The next attempt on the same session: resume it, or restart it under its id if no
        transcript exists anywhere (a kill or outage before the CLI wrote a line). A session that
        holds no prompt yet gets the step's own instructions first: "carry on" alone would leave the
        model with nothing to carry on (a judge without its checklist, a worker without its brief)."""
        sid = result.session_id
        assert sid is not None
        result.resumed = True
        if await self.recover(sid):
            return Plan(prompt if self.holds_prompt(sid) else self._with_opening(prompt), resume=sid)
        return Plan(self._with_opening(prompt), session_id=sid)

    async def _retry_wait(self, result: StepResult, attempt: int, on_event: Sink | None) -> bool:
        """Decide whether a failed attempt is retried; wait for the network and back off if so."""
        policy = self.resilience
        if not policy.enabled or attempt >= policy.max_attempts:
            return False
        kind = classify(result.error or "")
        if not policy.should_retry(kind):
            hint = fatal_hint(result.error) if kind == "fatal" else ""
            if hint and result.error and hint not in result.error:
                result.error = f"{result.error} — {hint}"
            return False

        def note(text: str) -> None:
            emit(on_event, Event("retry", text, payload={"step": result.step, "attempt": attempt}))

        note(self.say("retry_note", attempt=attempt, kind=kind))
        self._between = True
        try:
            # Up to an hour of probes, then the back-off: a stop ends either at once (``interrupt``).
            stopped, online = await self._unless_stopped(policy.wait_online(note, lang=self.lang))
            if stopped:
                return self._stopped_between(result)
            if not online:
                from flower_magic.core.resilience import human_wait

                wait = human_wait(policy.max_offline_wait, self.lang)
                result.error = f"{result.error} | {self.say('offline_gave_up', wait=wait)}"
                return False
            stopped, _ = await self._unless_stopped(asyncio.sleep(policy.delay_for(attempt)))
            if stopped:
                return self._stopped_between(result)
        finally:
            self._between = False
        return True

    def _should_hand_off(self, result: StepResult, fresh: int) -> bool:
        if not self.handoff.enabled or not result.session_id:
            return False
        if result.error == HANDOFF_DUE:
            return True
        from flower_magic.core.handoff import is_overflow

        return is_overflow(result.error or "", *result.errors[fresh:])

    def _handoff_due(self, result: StepResult) -> bool:
        return result.session_id is not None and self.context_watch.is_due()

    # -- one attempt -----------------------------------------------------------------------------

    def _options(self, spec: AgentSpec, plan: Plan) -> Any:
        if self.handoff.enabled and spec.compact is None:
            # Hand-off replaces compaction: a summary the person cannot read or edit loses what the
            # written hand-off keeps.
            spec = replace(spec, compact=CompactPolicy(mode="no_summary"))
        return build_options(
            spec,
            cwd=self.workspace,
            session_store=self.store,
            resume=plan.resume,
            fork=plan.fork,
            session_id=plan.session_id,
            env={**self.env, **launcher_env()},
            portable=self.portable,
            cli_path=cli_launcher(),
        )

    async def _attempt(self, spec: AgentSpec, plan: Plan, result: StepResult, on_event: Sink | None) -> None:
        """One CLI session turn. Never raises for SDK failures (they become ``result.error``)."""
        from claude_agent_sdk import ClaudeSDKClient

        from flower_magic.core.local_copy import backfill, set_aside_local_copy

        if self.context_watch.writing_handoff:  # a hand-off is written even on a stop (the successor's attempt ends)
            await self.other_writers.before_attempt(self, plan, result, on_event)
        else:
            stopped, _ = await self._unless_stopped(self.other_writers.before_attempt(self, plan, result, on_event))
            if stopped:
                result.ok, result.error = False, INTERRUPTED
                return
        if plan.session_id and not plan.resume:
            set_aside_local_copy(self.workspace, plan.session_id, self.env)
        elif plan.resume:
            await backfill(self.store, self.workspace, plan.resume, self.env)
        result.ok, result.error = False, None
        texts: list[str] = []
        self._cli_interrupt_sent = False
        # A fresh session's first request is the step's start-up size (system prompt, tools, prompt).
        self.context_watch.start_attempt(fresh=not plan.resume)
        client = ClaudeSDKClient(self._options(spec, plan))
        try:
            await client.connect()
            tie(client)  # Windows: the CLI joins this process's kill-on-close job
            self._client = client
            prompt = plan.prompt
            if self._cuts():
                # An interrupt that arrived while the CLI was starting (or while the step waited out an
                # outage): nothing to cut yet. A stop ends the step; words go with this prompt, so words
                # already in it (said before) are not dropped for the new ones.
                if self._stopping():
                    result.error = INTERRUPTED
                    return
                words = self.take_words()
                if words:
                    # The plan carries them from here: an attempt that starts the session again says them again.
                    plan.prompt = prompt = with_words(prompt, words, OPENING_JOIN)
                    plan.words = more_words(plan.words, words)
            await client.query(prompt)
            async for message in client.receive_response():
                self._see_session(message, result)
                if self._cuts() and not self._cli_interrupt_sent:
                    self._send_cli_interrupt()
                for event in normalize(message):
                    self._take_event(event, result, texts, on_event)
                stop = INTERRUPTED if self._cuts() else HANDOFF_DUE if self._handoff_due(result) else None
                if stop is not None:
                    await self._wind_down(client, result, texts, on_event)
                    result.ok, result.error = False, stop
                    break
        except Exception as exc:
            result.ok = False
            result.error = f"{type(exc).__name__}: {exc}"
            result.errors.append(result.error)
        finally:
            self._client = None
            with logged(log, "disconnecting from the CLI"):
                await asyncio.wait_for(disconnect(client), DISCONNECT_TIMEOUT_S)
        if self._cuts() and result.error != HANDOFF_DUE:
            result.ok, result.error = False, INTERRUPTED
        if not result.ok and not result.error and result.errors:
            result.error = result.errors[-1]
        if texts:
            result.text = "\n".join(texts).strip()

    async def _wind_down(self, client: Any, result: StepResult, texts: list[str], on_event: Sink | None) -> None:
        """Ask the CLI to end its turn now and read until it has (at most ``INTERRUPT_DRAIN_S``), so the
        transcript records the cut cleanly instead of leaving a tool call without its result."""
        if not self._cli_interrupt_sent:
            self._send_cli_interrupt(winding_down=True)

        async def drain() -> None:
            async for message in client.receive_response():
                self._see_session(message, result)
                for event in normalize(message):
                    if event.kind != "result":
                        self._take_event(event, result, texts, on_event)

        with logged(log, "draining the CLI after an interrupt"):
            await asyncio.wait_for(drain(), INTERRUPT_DRAIN_S)

    def _see_session(self, message: Any, result: StepResult) -> None:
        sid = session_id_of(message)
        if sid and sid != result.session_id:
            result.session_id = sid
            hook = self.on_session
            if hook is not None:
                with logged(log, "the on_session hook", logging.WARNING):
                    hook(sid)

    def _take_event(self, event: Event, result: StepResult, texts: list[str], on_event: Sink | None) -> None:
        main = not event.payload.get("subagent")
        if event.kind == "result":
            p = event.payload
            result.session_id = p.get("session_id") or result.session_id
            result.cost_usd = round(result.cost_usd + float(p.get("cost_usd") or 0.0), 6)
            result.num_turns += int(p.get("num_turns") or 0)
            result.ok = not p.get("is_error")
            if p.get("is_error"):
                why = "; ".join(p.get("errors") or []) or p.get("result") or event.text
                if why and why not in result.errors:
                    result.errors.append(str(why))
                result.error = str(why) or event.text
        elif event.kind == "error":
            result.errors.append(event.text)
        elif event.kind == "text" and main:
            texts.append(event.text)
        if main and isinstance(event.payload.get("context"), int):
            self._succession.see(int(event.payload["context"]), result, on_event)
        if main and not self._model_checked and isinstance(event.payload.get("model"), str):
            self._model_checked = True
            check_model(self.env, event.payload["model"], on_event)
        emit(on_event, event)

    def say(self, key: str, **fields: Any) -> str:
        """A phrase from ``core.words`` in this runtime's language (``lang``, else ``FLOWER_LANG``, else zh)."""
        from flower_magic.core.words import pick_lang_or_default, say

        return say(key, pick_lang_or_default(self.lang), **fields)

    def _persist(self) -> None:
        self._persisting = True
        try:
            rows = [manifest.row_of(r, self.run_id) for r in self.results]
            try:
                manifest.persist(self.run_dir, self.run_id, rows)
            except OSError as exc:
                # Said to the person by the step that ran (see ``manifest_unwritten``), logged here.
                log.warning("could not write the manifest %s", self.manifest_path, exc_info=True)
                self.persist_error = exc
            else:
                self.persist_error = None
        finally:
            self._persisting = False
