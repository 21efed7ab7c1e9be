"""Fixtures for the end-to-end tests (a test module's own fixture of the same name wins)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.kernel import Kernel


@pytest.fixture
def kernel(child_env: dict[str, str], workspace: Path) -> Iterator[Kernel]:
    """A real kernel started in the test's workspace, talking to the test's fake API."""
    k = Kernel(workspace, child_env)
    try:
        yield k
    finally:
        k.close()
