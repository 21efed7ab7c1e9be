"""A notebook cell that follows a run it does not run: replay of its event log, then live.

``follow(run_dir, ...)`` builds a ``RunView`` the way the run's own front end did (language,
verbosity, rounds and context window from the log's ``start`` record; the goal checks the caller
read from the directory's 目标.md), shows it in the current cell and feeds it from ``core.live.Watch`` in a daemon
thread. The cell returns at once; the kernel is free while the view keeps changing.

Guarantees:
    - The view is closed exactly once: on the log's ``end`` record (its total and, if the run
      stopped, why) or when the run's process is gone without one (the killed ending the next start
      will record, ``front.launch.found_outcome``, said as every view says it).
    - Answers given in the view (widget mode) go to the run's inbox (``core.live.post``) with
      ``source="notebook"``; they never raise into the kernel: a run that ended meanwhile is logged.
    - Without widgets (nbclient, papermill, a kernel without ipywidgets) the view says where a
      question can be answered (the panel, ``flower --attach``).
    - Any number of cells, in any number of kernels, may follow one run: following only reads.
    - A lead line that holds only while the run goes ("run %flower again to follow it") is said in
      its ``lead_ended`` words before the final render, so the closed view never tells how to follow
      a run that has ended.
    - When the kernel shuts down or restarts (``let_go_all``), each following cell is left static:
      the view as it stood, no live question card (its buttons would reach nobody), and a line that
      the run goes on and how to follow and answer it again.
Not guaranteed:
    - A kernel restart ends the following thread; the run goes on (``%flower`` follows it again).
    - A kernel killed without a shutdown leaves the live widgets (the question card's look dead by
      its style when the frontend marks them disconnected).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flower_magic.core.errors import FlowerError, logged
from flower_magic.core.words import say
from flower_magic.display.run import RunView
from flower_magic.front.phrases import Line

log = logging.getLogger(__name__)

FOLLOW_RENDER_S = 0.1  # a followed view re-renders at most 10 times a second


# This kernel's following cells, for let_go_all: held here (a cell keeps no reference to its view),
# dropped once their following thread has ended.
_FOLLOWING: set[Attached] = set()


class Attached:
    """One cell following one run: its view and the watch that feeds it."""

    def __init__(self, view: RunView, watch: Any, thread: threading.Thread, run_dir: Path, lang: str) -> None:
        self.view, self.watch, self.thread = view, watch, thread
        self.run_dir, self.lang = run_dir, lang

    @property
    def over(self) -> bool:
        return bool(self.watch.over)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the following thread (tests; a cell never waits)."""
        self.thread.join(timeout)

    def stop(self) -> None:
        self.watch.stop()

    def let_go(self) -> None:
        """The kernel is going: stop following and leave the view static, saying that the run goes on
        and how to follow and answer it again (its question card's buttons would reach nobody)."""
        from flower_magic.core.live import live_state

        self.watch.stop()
        if self.watch.over:
            return  # it ended: the following thread closes the view with the ending
        state = live_state(self.run_dir)
        pid = state.pid if state is not None and state.live else "?"
        self.view.let_go([[("note", say("follow_let_go", self.lang, pid=pid))]])


def let_go_all() -> None:
    """Every cell of this kernel that follows a run lets it go (``Attached.let_go``). Never raises."""
    for attached in list(_FOLLOWING):
        with logged(log, "letting a followed run go"):
            attached.let_go()


def _answer_to(run_dir: Path, lang: str) -> Any:
    from flower_magic.core.live import post

    def answer(ask_id: str, text: str) -> bool:
        try:
            post(run_dir, "answer", text=text, ask_id=ask_id, source="notebook", lang=lang)
        except FlowerError as exc:  # the run ended (or its inbox broke) since the question was shown
            log.warning("the answer could not be delivered: %s", exc)
            return False
        return True

    return answer


def _close(
    view: RunView, run_dir: Path, end: dict[str, Any] | None, lang: str, restated: Sequence[tuple[Any, Line]] = ()
) -> None:
    from flower_magic.front.launch import found_outcome
    from flower_magic.front.outcome import Ending, Outcome

    for entry, line in restated:  # before the final render: what held while it ran, said as it is now
        view.restate(entry, line)
    if end is None:  # its process is gone without a word: what the next start will record (kill -9)
        view.close(found_outcome(run_dir) or Outcome(Ending.KILLED), "%flower")
        return
    view.close(Outcome.from_record(end), "%flower")


def follow(
    run_dir: Path,
    *,
    lang: str,
    lang_asked: bool = False,
    interactive: bool = True,
    mode: str | None = None,
    lead: Sequence[Line] = (),
    lead_ended: Sequence[Line] = (),
    goal_checks: Sequence[str] = (),
    poll_s: float | None = None,
    workspace: Path | None = None,
) -> Attached:
    """Show the run of ``run_dir`` in the current cell and follow it in the background.

    Args:
        run_dir: the run dir (absolute).
        lang: the language when the log does not say (its ``start`` record's wins: the run's words).
        lang_asked: ``lang`` was asked for (``--lang``, ``%config``, ``FLOWER_LANG``): it wins.
        interactive: a person watches a frontend that renders widgets (``RunView``).
        mode: force the view's mode (tests).
        lead: lines shown first (e.g. "following the running flower", "started in the background").
        lead_ended: what the lead's lines say instead once the run has ended, one for one (a line that
            tells how to follow the run would no longer be true); fewer lines leave the rest as they are.
        goal_checks: the checks of the directory's 目标.md (the view marks them as the judge rules).
        poll_s: how often the log is looked at (default ``core.live.POLL_S``).
        workspace: the run's folder: the paths shown are relative to it.

    Returns:
        The view and its watch; the caller need not keep it.
    """
    from flower_magic.core.handoff import default_window
    from flower_magic.core.live import POLL_S, Watch, start_of

    start = start_of(run_dir) or {}
    lang = lang if lang_asked else str(start.get("lang") or lang)
    view = RunView(
        lang,
        verbose=bool(start.get("verbose")),
        rounds=int(start.get("rounds") or 0),
        goal_checks=goal_checks,
        interactive=interactive,
        mode=mode,
        window=int(start.get("window") or 0) or default_window(),
        # Re-rendered more often than a cell's own run: the kernel is idle, and what a follower sees
        # already waited for the log (bench/bench_live.py measures the whole way).
        interval_s=FOLLOW_RENDER_S,
        workspace=workspace,
    )
    led = [view.line(line) for line in lead]
    restated = list(zip(led, lead_ended, strict=False))
    # Until its first event (the runner imports the SDK first): what the run waits for, as a cell says it.
    view.wait_for(say("hdr_wait_agent", lang))
    view.attach(_answer_to(run_dir, lang), in_place=True)  # the cell is over: clicks arrive as usual
    if view.mode != "widget":
        view.say("dim", say("live_answer_elsewhere", lang))
    watch = Watch(
        run_dir, view, lang, on_end=lambda end: _close(view, run_dir, end, lang, restated), poll_s=poll_s or POLL_S
    )
    watch.step()  # what it said so far is in the cell's first display, not only in later updates
    view.show()
    attached = Attached(view, watch, watch.follow(), run_dir, lang)
    _FOLLOWING.difference_update([a for a in _FOLLOWING if not a.thread.is_alive()])
    _FOLLOWING.add(attached)
    return attached
