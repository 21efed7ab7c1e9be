"""What a ``%flower`` cell shows: the wake banner, ``--status``, and the live view of a run.

Importing this package is cheap: ipywidgets and ``IPython.display`` load only when a view is
shown, so ``%load_ext flower_magic`` stays fast. A guard test keeps it so.

- ``banner_bundle(facts, lang)``: the wake banner as a ``text/plain`` + ``text/html`` bundle.
- ``status_bundle(facts, goal_checks, last_verdict_checks, rows, lang)``: ``%flower --status``.
- ``RunView``: the live view of one run (widgets, or static HTML, or terminal lines).
"""

from __future__ import annotations

from flower_magic.display.bundles import banner_bundle, status_bundle
from flower_magic.display.run import RunView

__all__ = ["RunView", "banner_bundle", "status_bundle"]
