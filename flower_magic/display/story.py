"""The last run's story for ``--status``: its event log replayed through the same phrases a live view
shows (``front.view.shown``, ``core.live.heard_line``, the step and total lines), as lines.

Reads only (``core.live.read_log``, ``live_state``); never raises on a log it cannot read (what
cannot be read is not there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flower_magic.core.events import Event
from flower_magic.core.words import say, short_paths_in
from flower_magic.display.state import clip
from flower_magic.front.phrases import Line, ending_lines, explain_error, result_line, total_line
from flower_magic.front.view import shown

MAX_LINES = 200  # the newest lines of a long run; --status is a look, the panel has the whole transcript
WIDTH_COLS = 80


class _Story:
    """A view (``core.live.show``'s) that keeps lines instead of showing them, its paths relative to
    ``base`` (the workspace) as a live view's are."""

    def __init__(self, lang: str, *, verbose: bool, base: Path | None = None) -> None:
        self.lang, self.verbose, self.base = lang, verbose, base
        self.lines: list[Line] = []
        self._asked: set[object] = set()

    def clip(self, text: str, limit: int) -> str:
        return clip(short_paths_in(str(text), self.base), limit)

    def __call__(self, ev: Event) -> None:
        what = shown(ev, lang=self.lang, verbose=self.verbose, width=WIDTH_COLS, clip=self.clip, base=self.base)
        if what is None:
            return
        lines = what.lines
        if what.kind == "ask":  # the question once, then each new state of it
            if what.key in self._asked:
                lines = lines[what.head :]
            self._asked.add(what.key)
        pad = "    " if what.sub else ""
        self.lines += [[(s, pad + t if i == 0 else t) for i, (s, t) in enumerate(line)] for line in lines]

    def on_step(self, step: Any, result: Any) -> None:
        ok = bool(result.ok)
        self.lines.append(result_line(ok, result.num_turns, result.cost_usd, result.duration_s, self.lang))
        if not ok and result.error:
            self.lines.append(
                explain_error(str(result.error), self.lang) or [("dim", "  " + self.clip(result.error, 300))]
            )

    def line(self, segments: Line) -> None:
        self.lines.append([(style, short_paths_in(str(text), self.base)) for style, text in segments])


def story(
    run_dir: Path, lang: str, *, cmd: str = "%flower", max_lines: int = MAX_LINES, base: Path | None = None
) -> list[Line]:
    """The last run's story, newest ``max_lines`` lines (a line says how many were left out), headed
    by how many records the log holds and whether the run is live now; [] when there is no log.
    ``base``: the workspace, which the paths are said relative to (default: the working folder)."""
    from flower_magic.core.live import live_state, read_log, show
    from flower_magic.front.launch import found_outcome
    from flower_magic.front.outcome import Outcome

    records = read_log(run_dir)
    if not records:
        return []
    start = next((r for r in records if r["type"] == "start"), {})
    told = _Story(lang, verbose=bool(start.get("verbose")), base=base)
    if isinstance(start.get("previous"), dict):  # the run before this one left no word: found at this start
        told.line([("dim", say("previous_found", lang, how=Outcome.from_record(start["previous"]).headline(lang)))])
    ended = False
    for record in records:
        if record["type"] == "end" and not ended:
            ended = True
            outcome = Outcome.from_record(record)
            told.line(total_line(outcome.cost_usd, outcome.manifest, lang, base=base, run_cost=outcome.run_cost_usd))
            told.lines.extend(ending_lines(outcome, lang, cmd))
        elif record["type"] not in ("start", "end"):
            show(told, record, lang)
    if not ended:
        found = found_outcome(run_dir)
        if found is not None:
            told.lines.extend(ending_lines(found, lang, cmd))
    head: list[Line] = [[("bold", say("live_status_story", lang, n=len(records)))]]
    state = live_state(run_dir)
    if state is not None and state.live:
        front = say(f"front_{state.front_end}", lang) if state.front_end else "?"
        follow = say("runner_follow_magic" if cmd.startswith("%") else "runner_follow_cli", lang)
        head.append([("note", say("live_status_now", lang, pid=state.pid, front=front, follow=follow))])
    else:
        head.append([("dim", say("live_status_over", lang))])
    lines = told.lines
    if len(lines) > max_lines:
        head.append([("dim", say("live_status_cut", lang, n=len(lines) - max_lines))])
        lines = lines[-max_lines:]
    return head + lines
