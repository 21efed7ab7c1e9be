"""The run directory's owner: where a workspace's run lives, every file name in it, and what it holds.

A workspace ``W`` (the agent's folder: the notebook's, or ``flower -w``) and its run dir ``R``
(``W/runs`` by default). A relative run dir is under the workspace for every front end alike — the
magic, the ``flower`` command, the panel and the Python API — so ``flower -r rel`` and
``%flower -r rel`` name the same folder for the same workspace.

Symbolic links: a cloned repository can carry ``runs/run.lock -> ../../notes.md`` or
``runs/inbox -> ..`` (git keeps links), and a file flower opened through such a link would be
written, truncated or emptied of its ``*.json`` wherever the link points. So flower's own files and
folders are never links: ``own_files`` and ``own_folders`` list every one flower writes, truncates,
renames or deletes, and ``front.options.GoOptions.preflight`` refuses a link among them (to a file, to
a folder or to nowhere) with one line, before a byte is written; the writers themselves open what they
append to or lock with ``O_NOFOLLOW`` (``core.durable.open_own``) and replace a name rather than write
into it (``durable.write_atomic``), so a link planted after that check is not written through either.
The run dir itself may be a link only when the person named it (``-r``, ``%config
FlowerMagics.run_dir``): that is their choice of where runs go. The default ``runs`` found as a link
is refused (``GoOptions.check`` raises ``RunDirLink``, whose line says to name the target with ``-r``
if that is where runs should go), and so are ``.flower`` and the folders in it (preflight).

Guarantees:
    - ``RunDir.at`` only computes paths (absolute, ``~`` expanded); it reads and writes nothing.
    - ``RunDir.snapshot`` reads, never writes, never raises for a missing or unreadable file, and
      never imports the SDK: it is what the wake banner, ``--status``, the ``flower`` command, the
      panel and the default workflow all read.
    - Every file name of a run is spelled here, or in the module that owns the file (``core.lineage``,
      ``core.manifest``, ``core.live``, ``core.runlock``, ``core.storage`` for sessions.db and
      store.json, ``core.handoff`` for the hand-offs) and named here from there. Every other module
      asks ``RunDir`` (or that owner's constant); the names are the original runtime's, so a
      directory it left is read as it is.
    - ``own_files`` and ``own_folders`` read at most the notes folder's names; they never follow a link.
Not guaranteed:
    - Reads through a link planted after preflight (``snapshot`` and the readers may follow one; no
      writer does).
    - Links among the folders above a run dir or workspace the person named: those are their choice.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flower_magic.core import lineage as lineage_file
from flower_magic.core import live as live_file
from flower_magic.core import manifest as manifest_file
from flower_magic.core import note as note_file
from flower_magic.core import runlock as runlock_file
from flower_magic.core import storage as store_file
from flower_magic.core.handoff import HANDOFF_ARCHIVE, HANDOFF_PREFIX
from flower_magic.core.printable import printable

DEFAULT_RUN_DIR = "runs"
WORKBENCH_DIRNAME = ".flower"
NOTES_DIRNAME = "notes"
ARCHIVE_DIRNAME = "archive"
SPILL_DIRNAME = "spill"
BRIEF_NAME = "需求.md"
GOAL_NAME = "目标.md"
# The request exactly as the person said it, written before anything else runs: a process killed in
# its first seconds (before the clarifier's session holds the prompt) must not lose what was asked.
TASK_NAME = "诉求.md"
QA_LOG_NAME = "问答记录.md"  # the questions and answers of a run (core.human writes it)
# SQLite's files beside sessions.db: it opens them by name, following a link like any other program.
SQLITE_SIDE_SUFFIXES = ("-wal", "-shm", "-journal")
TASK_MAX_READ_BYTES = 16 * 1024 * 1024  # far past the largest task a model can take (front/options.py)
WORK_STEP = "干活"
CLARIFY_STEP = "确认需求"  # the clarifier's step (workflow.clarify): lineage names its session under it
# Snapshot.describe: values wider than this (a session id) do not push every meaning to the right.
DESCRIBE_ALIGN_COLS = 24


def notes_dir(workspace: str | Path) -> Path:
    """``<workspace>/.flower/notes``: the frozen brief and goal, hand-offs, the Q&A log, archives."""
    return Path(workspace).expanduser().resolve() / WORKBENCH_DIRNAME / NOTES_DIRNAME


@dataclass(frozen=True)
class RunDir:
    """A workspace and its run dir, both absolute.

    Attributes:
        workspace: the agent's folder.
        path: the run dir (sessions.db, manifest.json, lineage.json, the locks).
    """

    workspace: Path
    path: Path

    @classmethod
    def at(cls, workspace: str | Path = ".", run_dir: str | Path | None = None) -> RunDir:
        """The run of ``workspace``; ``run_dir`` relative to it (None or "" = ``runs``)."""
        ws = Path(workspace).expanduser().resolve()
        chosen = Path(run_dir or DEFAULT_RUN_DIR).expanduser()
        return cls(ws, (chosen if chosen.is_absolute() else ws / chosen).resolve())

    # -- the run dir's files ------------------------------------------------------------------------

    @property
    def sessions_db(self) -> Path:
        return self.path / store_file.SESSIONS_DB

    @property
    def store_record(self) -> Path:
        return self.path / store_file.STORE_RECORD

    @property
    def lineage(self) -> Path:
        return self.path / lineage_file.FILENAME

    @property
    def manifest(self) -> Path:
        return self.path / manifest_file.MANIFEST

    @property
    def manifest_lock(self) -> Path:
        return self.path / manifest_file.LOCK

    @property
    def run_lock(self) -> Path:
        return self.path / runlock_file.LOCK_NAME

    @property
    def events(self) -> Path:
        """``events.jsonl``: the last run's event log (``core.live``)."""
        return self.path / live_file.LOG_NAME

    @property
    def old_events(self) -> Path:
        """``events.1.jsonl``: the event log's older part (``core.live``)."""
        return self.path / live_file.OLD_LOG_NAME

    @property
    def live(self) -> Path:
        """``live.json``: the running process's state (``core.live``)."""
        return self.path / live_file.LIVE_NAME

    @property
    def inbox(self) -> Path:
        """``inbox/``: answers, remarks and stops for the running process (``core.live``)."""
        return self.path / live_file.INBOX_NAME

    @property
    def runner_log(self) -> Path:
        """``runner.log``: a background run's output (``flower_magic.runner``)."""
        return self.path / live_file.RUNNER_LOG_NAME

    # -- the workspace's notes ----------------------------------------------------------------------

    @property
    def notes(self) -> Path:
        return self.workspace / WORKBENCH_DIRNAME / NOTES_DIRNAME

    @property
    def brief(self) -> Path:
        return self.notes / BRIEF_NAME

    @property
    def goal(self) -> Path:
        return self.notes / GOAL_NAME

    @property
    def task(self) -> Path:
        return self.notes / TASK_NAME

    @property
    def qa_log(self) -> Path:
        return self.notes / QA_LOG_NAME

    @property
    def archive(self) -> Path:
        return self.notes / ARCHIVE_DIRNAME

    @property
    def handoffs_archive(self) -> Path:
        """``archive/交接/``: earlier hand-offs of a step, kept when a new one is written (``core.handoff``)."""
        return self.archive / HANDOFF_ARCHIVE

    @property
    def spill(self) -> Path:
        return self.workspace / WORKBENCH_DIRNAME / SPILL_DIRNAME

    # -- what flower writes -------------------------------------------------------------------------

    def own_folders(self) -> list[Path]:
        """The folders flower makes and writes in, besides the run dir itself: ``.flower`` and its notes,
        spill and archive folders, and the run dir's ``inbox``. None of them may be a link."""
        workbench = self.workspace / WORKBENCH_DIRNAME
        return [workbench, self.notes, self.spill, self.archive, self.handoffs_archive, self.inbox]

    def own_files(self) -> list[Path]:
        """Every file flower writes, truncates, renames or deletes in the run dir and in the notes (the
        hand-offs there now included). None of them may be a link. Reads the notes folder's names only
        when it is a real folder."""
        db = self.sessions_db
        run = [db, *(db.with_name(db.name + suffix) for suffix in SQLITE_SIDE_SUFFIXES)]
        run += [self.store_record, self.lineage, self.manifest, self.manifest_lock, self.run_lock]
        run += [self.events, self.old_events, self.live, self.runner_log]
        notes = [self.brief, self.goal, self.task, self.qa_log]
        notes += [note_file.record_path(self.brief), note_file.record_path(self.goal)]
        try:
            is_folder = not os.path.islink(self.notes) and self.notes.is_dir()
            handoffs = sorted(self.notes.glob(f"{HANDOFF_PREFIX}*.md")) if is_folder else []
        except OSError:
            handoffs = []
        return run + notes + handoffs

    # -- what it holds ------------------------------------------------------------------------------

    def saved_task(self) -> str:
        """The request last said here (``诉求.md``), or "" if none can be read."""
        try:
            if not self.task.is_file():
                return ""
            with self.task.open("rb") as fh:
                return fh.read(TASK_MAX_READ_BYTES).decode("utf-8", errors="replace").strip()
        except OSError:
            return ""

    def snapshot(
        self,
        *,
        context_of: Callable[[RunDir, str], int] | None = None,
        holds: Callable[[RunDir, str], bool] | None = None,
    ) -> Snapshot:
        """What this run would wake up to, read without writing a byte (需求.md and lineage.json once).

        Args:
            context_of: the last context size (tokens) of a session, from wherever its transcript is
                stored (a front end passes the store's reader; core cannot import stores).
            holds: whether the run's store holds a session (the same reader), asked only when the
                clarifier's session is all that tells whether a clarification was cut short; without
                it, that session does not count.
        """
        from flower_magic.core.brief import Brief
        from flower_magic.core.brief import read as read_brief
        from flower_magic.core.goal import Goal

        note = read_brief(self.brief)
        brief = Brief.parse(note.text) if note.text is not None else None
        waking = brief is not None and brief.complete()
        goal = Goal.load(self.goal)
        lin = lineage_file.Lineage.open(self.path, self.workspace)
        work = lin.steps.get(WORK_STEP)
        context = 0
        if work and context_of is not None:
            try:
                context = int(context_of(self, work))
            except Exception:
                context = 0
        task = self.saved_task()
        clarifier = lin.steps.get(CLARIFY_STEP)
        cut_short = not waking and (
            bool(note.is_edited and (note.text or "").strip())  # a person's own 需求.md: the clarifier takes it up
            or bool(task)  # the request is on disk: a run killed before its session held it starts again
            or bool(clarifier and holds is not None and _asked(holds, self, clarifier))
        )
        return Snapshot(
            rundir=self,
            waking=waking,
            checks=len(goal.checks) if goal is not None else 0,
            woke=lin.woke,
            steps=dict(lin.steps),
            problem=lin.problem,
            work_context=context,
            task=task,
            cut_short=cut_short,
        )


def wake_state(workspace: str | Path = ".", *, run_dir: str | Path | None = None) -> Snapshot:
    """What a run in ``workspace`` would wake up to (``run_dir`` relative to it), read without writing.

    The Python API's name for ``RunDir.at(workspace, run_dir).snapshot()`` (the work session's context
    is not read here: that needs the store).
    """
    return RunDir.at(workspace, run_dir).snapshot()


def _asked(holds: Callable[[RunDir, str], bool], rundir: RunDir, session_id: str) -> bool:
    try:
        return bool(holds(rundir, session_id))
    except Exception:
        return False  # a store that cannot answer holds nothing we can continue


@dataclass(frozen=True)
class Snapshot:
    """What a run dir holds, read once: the facts behind the wake banner, ``--status`` and the panel.

    Attributes:
        rundir: where it was read.
        waking: a confirmed (complete) brief exists: the next run continues, it does not start.
        checks: goal checks in 目标.md (0 when there is none).
        woke: wakes so far (lineage's count; the next run is ``woke + 1``).
        steps: step name -> session id (lineage).
        problem: why lineage.json cannot be used (the next run keeps it aside), else None.
        work_context: the work session's last context size in tokens (0 when unknown).
        task: the request as last said (``诉求.md``), "" when none.
        cut_short: a clarification was cut short here, so a run with nothing said continues it: no
            complete brief, but a person wrote 需求.md by hand, the request is on disk (``task``), or
            lineage names the clarifier's session and the run's store holds it.
    """

    rundir: RunDir
    waking: bool = False
    checks: int = 0
    woke: int = 0
    steps: dict[str, str] = field(default_factory=dict)
    problem: str | None = None
    work_context: int = 0
    task: str = ""
    cut_short: bool = False

    def describe(self, lang: str | None = None) -> str:
        """Each field with its value and what it means, in ``lang`` (default: ``FLOWER_LANG``, else zh).

        What ``print(wake_state(...))`` and a notebook cell ending in ``wake_state(...)`` show: a field
        such as ``waking`` means something narrower than its name (a confirmed brief exists), so the
        value never stands without its meaning.
        """
        from flower_magic.core.words import cols, human_tokens, pick_lang_or_default, say, short_path

        lang = pick_lang_or_default(lang)
        ws = self.rundir.workspace
        run = self.rundir.path
        where = short_path(run, ws)
        rows = [
            ("woke", say("facts_woke", lang, next=self.woke + 1) if self.woke else say("facts_woke_none", lang)),
            ("steps", say("facts_steps", lang) if self.steps else say("facts_steps_none", lang)),
            ("waking", say("facts_waking_yes", lang) if self.waking else say("facts_waking_no", lang)),
            ("checks", say("facts_checks", lang) if self.checks else say("facts_checks_none", lang)),
            ("task", say("facts_task", lang) if self.task else say("facts_task_none", lang)),
            ("problem", say("facts_problem", lang) if self.problem else say("facts_problem_none", lang)),
        ]
        values = {name: repr(getattr(self, name)) for name, _ in rows}
        if self.work_context:
            rows.append(("work_context", say("facts_context", lang)))
            values["work_context"] = human_tokens(self.work_context)
        else:
            rows.append(("work_context", say("facts_context_unknown", lang)))
            values["work_context"] = "0"
        shown = {name: f"{name} = {values[name]}" for name, _ in rows}
        # One column for the meanings (cols: Chinese step names take two each), past the short values only.
        width = max(cols(text) for text in shown.values() if cols(text) <= DESCRIBE_ALIGN_COLS)
        lines = [say("facts_head", lang, folder=short_path(ws, ws), run_dir=where)]
        lines += [f"  {shown[name]}{' ' * max(0, width - cols(shown[name]))}  # {meaning}" for name, meaning in rows]
        return printable("\n".join(lines))  # printed as it is: the folder's name may hold anything

    def __str__(self) -> str:
        return self.describe()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython shows a Snapshot (a cell ending in ``wake_state(...)``) as its fields in words."""
        printer.text(self.describe())

    @property
    def workspace(self) -> Path:
        return self.rundir.workspace

    @property
    def brief(self) -> Path:
        return self.rundir.brief

    @property
    def goal(self) -> Path:
        return self.rundir.goal
