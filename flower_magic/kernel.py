"""The IPython shell as the agent's notebook (``core.notebook.NotebookSource``): its namespace, its
cells and their errors, and where a proposed cell goes.

Guarantees:
    - Only reads: ``shell.user_ns``, ``user_ns_hidden``, the history manager's inputs and outputs, and
      the errors ``CellErrors`` recorded; all are plain lookups, safe from the run's thread while the
      kernel's thread waits in ``%flower``.
    - A proposed cell is never executed here. In a kernel it becomes a display on the ``%flower`` cell
      (``CELL_MIME`` + ``text/plain``), sent from the cell's own thread (``Proposals.deliver``); the
      JupyterLab extension (``src/cellProposal.ts``) inserts it below that cell as a new, unrun cell
      marked as proposed. Without a kernel (terminal IPython) it pre-fills the next input
      (``set_next_input``) when the run ends; several proposals are joined into one.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import uuid
from collections.abc import Container, Mapping
from typing import Any

from flower_magic.core.notebook import Cell
from flower_magic.core.words import say

# What the JupyterLab extension renders and acts on (src/cellProposal.ts, CELL_MIME).
CELL_MIME = "application/vnd.flower-magic.cell+json"
# The cell metadata that marks a proposed cell (the extension writes it; saved with the notebook).
PROPOSED_KEY = "flower"


def error_text(exc: BaseException) -> str:
    """``ZeroDivisionError: division by zero``."""
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


class CellErrors:
    """The error each cell raised, by execution count (a ``post_run_cell`` callback, from ``%load_ext``).

    A cell that raised before the extension was loaded is found from ``sys.last_value`` (the last
    error IPython showed) and the cell its traceback starts in.
    """

    def __init__(self) -> None:
        self.by_cell: dict[int, str] = {}

    def record(self, result: Any) -> None:
        error = getattr(result, "error_before_exec", None) or getattr(result, "error_in_exec", None)
        number = getattr(result, "execution_count", None)
        if error is not None and isinstance(number, int):
            self.by_cell[number] = error_text(error)

    def of(self, shell: Any, number: int) -> str:
        if number in self.by_cell:
            return self.by_cell[number]
        last = getattr(sys, "last_value", None)
        if last is not None and _cell_of(shell, getattr(sys, "last_traceback", None)) == number:
            return error_text(last)
        return ""


def _cell_of(shell: Any, tb: Any) -> int | None:
    """The execution count of the cell a traceback starts in (IPython names each cell's code)."""
    names = getattr(getattr(shell, "compile", None), "_filename_map", None)
    if tb is None or not isinstance(names, dict):
        return None
    while tb is not None:
        number = names.get(tb.tb_frame.f_code.co_filename)
        if isinstance(number, int):
            return number
        tb = tb.tb_next
    return None


class Proposals:
    """Proposed cells, from the run's thread to the cell's thread, which shows them."""

    def __init__(self, shell: Any, lang: str) -> None:
        self.shell = shell
        self.lang = lang
        self.in_kernel = getattr(shell, "kernel", None) is not None
        self.waiting: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.next_input: list[str] = []

    def add(self, code: str) -> bool:
        """Queue ``code`` (any thread). True: it goes into a notebook; False: into the next input."""
        self.waiting.put(f"{say('proposed_comment', self.lang)}\n{code.strip()}")
        return self.in_kernel

    def deliver(self) -> None:
        """Show what is queued (call on the cell's thread)."""
        while True:
            try:
                source = self.waiting.get_nowait()
            except queue.Empty:
                return
            if not self.in_kernel:
                self.next_input.append(source)
                continue
            from IPython.display import display

            bundle = {CELL_MIME: {"source": source, "nonce": uuid.uuid4().hex}}
            bundle["text/plain"] = say("proposed_plain", self.lang, code=source)  # type: ignore[assignment]
            display(bundle, raw=True)  # type: ignore[no-untyped-call]

    def finish(self) -> None:
        """At the end of the run: everything shown; in a terminal, the next input pre-filled."""
        self.deliver()
        if self.next_input:
            self.shell.set_next_input("\n\n".join(self.next_input) + "\n")


class ShellSource:
    """``core.notebook.NotebookSource`` over an IPython shell, for one ``%flower`` cell.

    Args:
        shell: the IPython shell.
        errors: the errors recorded since ``%load_ext``.
        proposals: where proposed cells go.
    """

    def __init__(self, shell: Any, errors: CellErrors, proposals: Proposals) -> None:
        self.shell = shell
        self.errors = errors
        self.proposals = proposals
        # The %flower cell's own number: the cells before it are the notebook's.
        self.current = int(getattr(shell, "execution_count", 1) or 1)

    def namespace(self) -> Mapping[str, Any]:
        return self.shell.user_ns  # type: ignore[no-any-return]

    def hidden(self) -> Container[str]:
        return getattr(self.shell, "user_ns_hidden", None) or ()

    def last_number(self) -> int:
        return self.current - 1

    def cell(self, number: int) -> Cell | None:
        if not 1 <= number < self.current:
            return None
        history = self.shell.history_manager
        inputs = history.input_hist_raw
        source = inputs[number] if number < len(inputs) else ""
        output = None
        with contextlib.suppress(Exception):
            output = history.output_hist.get(number)
        return Cell(number, source, self.errors.of(self.shell, number), output)

    def cells(self, last: int) -> list[Cell]:
        numbers = range(max(1, self.current - last), self.current)
        return [c for c in (self.cell(n) for n in numbers) if c is not None and c.source.strip()]

    def propose(self, code: str) -> bool:
        return self.proposals.add(code)
