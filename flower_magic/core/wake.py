"""What a directory remembers, read without writing a byte: the facts behind the wake banner.

Guarantees:
    - ``wake_state`` and ``wake_facts`` create, move and modify nothing (no run dir, no sessions.db,
      no workbench), and never raise for unreadable files: they report what could be read.
    - Neither imports the SDK.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flower_magic.core.lineage import Lineage
from flower_magic.core.project import project_key

WORKBENCH_DIRNAME = ".flower"
BRIEF_NAME = "需求.md"
GOAL_NAME = "目标.md"
# The request exactly as the person said it, written before anything else runs: a process killed in
# its first seconds (before the clarifier's session holds the prompt) must not lose what was asked.
TASK_NAME = "诉求.md"
TASK_MAX_READ_BYTES = 16 * 1024 * 1024  # far past the largest task a model can take (workflow/go.py)
WORK_STEP = "干活"


def notes_dir(workspace: str | Path) -> Path:
    """``<workspace>/.flower/notes``: the frozen brief and goal, hand-offs, the Q&A log, archives."""
    return Path(workspace).expanduser().resolve() / WORKBENCH_DIRNAME / "notes"


def saved_task(workspace: str | Path) -> str:
    """The request last said in ``workspace`` (``.flower/notes/诉求.md``), or "" if none can be read."""
    path = notes_dir(workspace) / TASK_NAME
    try:
        if not path.is_file():
            return ""
        with path.open("rb") as fh:
            return fh.read(TASK_MAX_READ_BYTES).decode("utf-8", errors="replace").strip()
    except OSError:
        return ""


def wake_state(
    workspace: str | Path = ".",
    *,
    run_dir: str | Path = "runs",
    brief_name: str = BRIEF_NAME,
    goal_name: str = GOAL_NAME,
) -> dict[str, Any]:
    """What a run in ``workspace`` would wake up to.

    Args:
        workspace: the agent's directory.
        run_dir: the run dir; a relative path is taken from the current directory (as ``flower`` does).

    Returns:
        ``waking`` (a complete brief exists), ``brief`` and ``goal`` (paths), ``checks`` (number of
        goal checks), ``woke`` (wakes so far, not incremented), ``steps`` (step → session id), and
        ``problem`` (why lineage.json was not usable, or None).
    """
    from flower_magic.workflow.brief import Brief
    from flower_magic.workflow.goal import Goal

    ws = Path(workspace).expanduser().resolve()
    notes = notes_dir(ws)
    brief_path, goal_path = notes / brief_name, notes / goal_name
    brief = Brief.load(brief_path)
    goal = Goal.load(goal_path)
    lineage = Lineage.open(Path(run_dir).expanduser().resolve(), ws)
    return {
        "workspace": ws,
        "waking": bool(brief is not None and brief.complete()),
        "brief": brief_path,
        "goal": goal_path,
        "checks": len(goal.checks) if goal is not None else 0,
        "woke": lineage.woke,
        "steps": dict(lineage.steps),
        "problem": lineage.problem,
    }


def session_context(workspace: str | Path, run_dir: str | Path, session_id: str) -> int:
    """The last context size (tokens) sessions.db recorded for a session; 0 if unknown. Read-only."""
    db = Path(run_dir).expanduser().resolve() / "sessions.db"
    if not db.is_file():
        return 0
    from flower_magic.stores.sqlite import SqliteSessionStore

    try:
        store = SqliteSessionStore(db, readonly=True)
    except Exception:
        return 0
    try:
        return int(store.last_context(project_key(Path(workspace).expanduser().resolve()), session_id))
    except Exception:
        return 0
    finally:
        store.close()


def wake_facts(workspace: str | Path = ".", *, run_dir: str | Path = "runs") -> dict[str, Any]:
    """``wake_state`` plus the work step's context size (``work_context``, tokens; 0 if unknown)."""
    state = wake_state(workspace, run_dir=run_dir)
    sid = state["steps"].get(WORK_STEP)
    state["work_context"] = session_context(workspace, run_dir, sid) if sid else 0
    return state
