"""A gate on the Claude Agent SDK's import in the runner process (``python -m flower_magic.runner``), so a
test can tell what happens before the runner has the SDK from what waits for it, without a clock.

``SdkGate(tmp_path).env(base)`` is an environment whose Python processes load a ``sitecustomize`` from
the gate's folder. In a runner, the first ``import claude_agent_sdk`` marks ``reached`` and then waits
until the test calls ``open()`` (the import goes on) or ``fail()`` (it raises ``ImportError``); other
processes (a kernel, the test) are left alone.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SITECUSTOMIZE = """
import os, sys, time

if any("flower_magic.runner" in str(a) for a in getattr(sys, "orig_argv", sys.argv)):
    _GATE = os.environ["FLOWER_TEST_SDK_GATE"]

    class _Gate:
        def find_spec(self, name, path=None, target=None):
            if name == "claude_agent_sdk":
                open(_GATE + ".reached", "w").close()
                while not os.path.exists(_GATE + ".open"):
                    if os.path.exists(_GATE + ".fail"):
                        raise ImportError("the test's gate keeps the SDK out")
                    time.sleep(0.02)
            return None

    sys.meta_path.insert(0, _Gate())
"""


class SdkGate:
    """The gate's files under ``tmp_path / "sdk-gate"``."""

    def __init__(self, tmp_path: Path) -> None:
        self.folder = tmp_path / "sdk-gate"
        self.folder.mkdir()
        (self.folder / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        self.base = self.folder / "gate"

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with the gate on the path (before this checkout, so this checkout's flower_magic runs)."""
        paths = [str(self.folder), str(ROOT), base.get("PYTHONPATH", "")]
        return {**base, "PYTHONPATH": os.pathsep.join(p for p in paths if p), "FLOWER_TEST_SDK_GATE": str(self.base)}

    @property
    def reached(self) -> bool:
        """A runner has begun importing the SDK (and waits at the gate unless it was opened)."""
        return Path(f"{self.base}.reached").exists()

    def open(self) -> None:
        Path(f"{self.base}.open").touch()

    def fail(self) -> None:
        Path(f"{self.base}.fail").touch()
