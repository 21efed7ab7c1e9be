"""flower_magic: a long-horizon Claude agent in a notebook that never loses the conversation.

``import flower_magic`` is cheap: the public names below are loaded on first use, so neither
``claude_agent_sdk`` (about a second to import) nor ``ipywidgets`` nor ``jupyter_server`` is imported
until something needs it. A guard test keeps it so.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

# A library's logs go where the application sends them: nothing is printed unless logging is set up
# (``logging.basicConfig(level=logging.DEBUG)`` shows what flower skipped and why). What a person must
# know is said through the run's events (notices in the cell and the terminal), never only in a log.
logging.getLogger(__name__).addHandler(logging.NullHandler())

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "AgentSpec": "flower_magic.core.agent",
    "Runtime": "flower_magic.core.runtime",
    "StepResult": "flower_magic.core.runtime",
    "Step": "flower_magic.workflow.base",
    "Workflow": "flower_magic.workflow.base",
    "Lineage": "flower_magic.core.lineage",
    "wake_state": "flower_magic.core.rundir",
}

__all__ = [
    "AgentSpec",
    "Lineage",
    "Runtime",
    "Step",
    "StepResult",
    "Workflow",
    "__version__",
    "load_ipython_extension",
    "unload_ipython_extension",
    "wake_state",
]

if TYPE_CHECKING:
    from flower_magic.core.agent import AgentSpec
    from flower_magic.core.lineage import Lineage
    from flower_magic.core.rundir import wake_state
    from flower_magic.core.runtime import Runtime, StepResult
    from flower_magic.workflow.base import Step, Workflow


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'flower_magic' has no attribute {name!r}")
    if name == "Runtime":
        _wire_default_store()
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def _wire_default_store() -> None:
    """Give ``Runtime(...)`` without ``store=`` its default: the store FLOWER_SESSIONS or the run dir's
    store.json names (sessions.db when neither does), pruned and trimmed on load. Done here, where the
    public name is composed, because core may not import stores (see ``core.storage``)."""
    from flower_magic.core.storage import register_default
    from flower_magic.stores.backend import open_store

    register_default(open_store)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext flower_magic``: register ``%flower`` / ``%%flower``."""
    from flower_magic.magics import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext flower_magic``: remove what ``load_ipython_extension`` registered."""
    from flower_magic.magics import unload

    unload(ipython)


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "flower_magic.server"}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "flower-magic"}]
