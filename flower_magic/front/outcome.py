"""How a run ended, as one typed value that every view reads: the cell, the terminal, ``--status``, the panel.

The launch (``front.launch``) decides the ``Outcome`` once, from what the workflow returned and from
what it was told while the run went (an interrupt, a stop, a shutdown, a signal); the event log's
``end`` record carries it (``to_record`` / ``from_record``), so a view that follows the run from its
log, ``--status`` and the panel tell the same ending in the same words as the front end that ran it.

Guarantees:
    - Every ending has one headline and one way to continue, from the phrase tables (``end_<ending>``,
      ``next_<ending>``), in zh and en. The way to continue is a command that works as typed in the
      front end that shows it (a magic line in a notebook, the ``--demo`` form after a demo run).
    - ``from_record`` never raises: a record it cannot read is an ``unknown`` ending, said as such.
Not guaranteed:
    - ``killed`` is never written by the run it describes (a ``kill -9`` leaves no word): it is what
      ``found_ending`` concludes from a log without an end record whose run no longer holds its lock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flower_magic.core.words import say


class Ending(str, enum.Enum):
    """The ways a run ends. The value is what the event log and the panel carry."""

    DONE = "done"  # every step passed (the judge says the goals are met)
    NOT_REACHED = "not_reached"  # the judge: goals not met after the rounds, or unreachable
    INTERRUPTED = "interrupted"  # the kernel's ■, Ctrl-C, an API caller's interrupt
    STOPPED = "stopped"  # --stop, the panel's stop (a message in the inbox)
    CLOSED = "closed"  # the kernel shut down or restarted under the run
    SIGNALLED = "signalled"  # SIGTERM / SIGHUP (a closed terminal, kill)
    KILLED = "killed"  # found afterwards: no end record, the lock free (kill -9, a crash, a reboot)
    STORE_UNREACHABLE = "store_unreachable"  # the session store failed under the run
    MODEL_UNREACHABLE = "model_unreachable"  # the model's API stayed away past the outage budget
    FAILED = "failed"  # a step stopped for another reason (``why`` says which)
    UNKNOWN = "unknown"  # an end record this version cannot read


# How each ending looks: the status pill and the colour of its headline.
ENDING_STYLE = {Ending.DONE: "ok", Ending.NOT_REACHED: "warn", Ending.INTERRUPTED: "warn", Ending.STOPPED: "warn"}
# Endings a person chose: the process exits 130 after a second Ctrl-C only; these exit 1 like any stop.
BY_PERSON = frozenset({Ending.INTERRUPTED, Ending.STOPPED, Ending.CLOSED, Ending.SIGNALLED})


@dataclass(frozen=True)
class Outcome:
    """How a run ended.

    Attributes:
        ending: which way (``Ending``).
        step: the step it ended in ("" when every step passed).
        why: the reason in the person's language (a gate's, an error explained), "" when the ending says it.
        cost_usd: what this run cost (every step, judge, hand-off of it): after a wake, that wake only.
        rows: manifest rows this run wrote.
        run_cost_usd: what the manifest totals once this run's rows are in (earlier wakes included;
            0 when unknown): the total line says both, so it agrees with ``--status`` and the panel.
        manifest: the manifest's path.
        demo: the run was on the offline demo model (the way to continue says ``--demo``).
        asked: a question was open when it ended.
    """

    ending: Ending
    step: str = ""
    why: str = ""
    cost_usd: float = 0.0
    rows: int = 0
    manifest: str = ""
    demo: bool = False
    asked: bool = False
    run_cost_usd: float = 0.0

    @property
    def ok(self) -> bool:
        return self.ending is Ending.DONE

    @property
    def exit_code(self) -> int:
        """The command's exit code: 0 done, 1 any other ending."""
        return 0 if self.ok else 1

    @property
    def style(self) -> str:
        return ENDING_STYLE.get(self.ending, "bad")

    def headline(self, lang: str) -> str:
        """One line: how it ended, and where."""
        return say(f"end_{self.ending.value}", lang, step=self.step or say("step_none", lang))

    def typed(self, cmd: str) -> str:
        """``cmd`` as the way to continue types it: with ``--demo`` after a demo run."""
        return typed(cmd, demo=self.demo)

    def next_step(self, lang: str, cmd: str) -> str:
        """How to continue, as ``cmd`` (``%flower``, ``flower``) is typed in the front end that says it."""
        return say(f"next_{self.ending.value}", lang, cmd=self.typed(cmd))

    def to_record(self) -> dict[str, Any]:
        """The fields of the event log's ``end`` record."""
        return {
            "ending": self.ending.value,
            "step": self.step,
            "why": self.why,
            "total_cost": self.cost_usd,
            "rows": self.rows,
            "manifest": self.manifest,
            "demo": self.demo,
            "asked": self.asked,
            "run_cost": self.run_cost_usd,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Outcome:
        """The outcome an ``end`` record carries (an older record's ``failed_at`` / ``aborted`` included)."""
        try:
            ending = Ending(str(record.get("ending") or ""))
        except ValueError:
            failed = str(record.get("failed_at") or "")
            if "ending" in record:
                ending = Ending.UNKNOWN
            elif record.get("stopped"):
                ending = Ending.STOPPED
            else:
                ending = Ending.FAILED if failed else Ending.DONE
            record = {**record, "step": failed, "why": record.get("aborted") or ""}
        try:
            cost, rows = float(record.get("total_cost") or 0.0), int(record.get("rows") or 0)
            run_cost = float(record.get("run_cost") or 0.0)
        except (TypeError, ValueError):
            cost, rows, run_cost = 0.0, 0, 0.0
        return cls(
            ending=ending,
            step=str(record.get("step") or "")[:200],
            why=str(record.get("why") or "")[:2000],
            cost_usd=cost,
            rows=rows,
            manifest=str(record.get("manifest") or ""),
            demo=bool(record.get("demo")),
            asked=bool(record.get("asked")),
            run_cost_usd=run_cost,
        )


def typed(cmd: str, *, demo: bool) -> str:
    """``cmd`` (``%flower``, ``flower``) as a person types it to go on with a run: with ``--demo`` when
    that run is on the offline demo model (without a key, a plain ``cmd`` is refused there)."""
    return f"{cmd} --demo" if demo else cmd


def was_demo(run_dir: Path) -> bool:
    """The last run of ``run_dir`` was on the offline demo model, as its event log's start record says
    (False when there is none)."""
    from flower_magic.core.live import start_of

    return bool((start_of(run_dir) or {}).get("demo"))


def typed_in(run_dir: Path, cmd: str) -> str:
    """``cmd`` as going on with ``run_dir``'s last run is typed (``typed``, its demo-ness from its log)."""
    return typed(cmd, demo=was_demo(run_dir))
