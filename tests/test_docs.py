"""Guards: the README documents every flag of %flower and of the flower command, and every setting."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings if s not in ("-h", "--help")}


def test_every_magic_flag_is_in_the_readme() -> None:
    from flower_magic.magics import PARSER

    flags = _options(PARSER)  # the parser behind %flower? as well
    assert len(flags) > 15
    missing = sorted(f for f in flags if f"`{f}" not in README)
    assert missing == []


def test_every_cli_flag_is_in_the_readme() -> None:
    from flower_magic.cli import build_parser

    missing = sorted(f for f in _options(build_parser()) if f"`{f}" not in README)
    assert missing == []


def test_the_two_front_ends_take_the_same_flags_from_one_table() -> None:
    """The command and the magic differ only where a front end has no use for a flag (the command has
    no kernel: no panel to open, no notebook context to leave out) or spells it its own way (a
    background run: ``--bg`` in a cell, ``--detach`` in a terminal; a cell on a live run follows it
    without ``--attach``)."""
    from flower_magic.cli import build_parser
    from flower_magic.front.flags import FLAGS
    from flower_magic.magics import PARSER

    cli, magic = _options(build_parser()), _options(PARSER)
    assert cli - magic == {"-w", "--workspace", "--detach", "--attach"}
    assert magic - cli == {"--panel", "--no-context", "--bg"}
    assert cli | magic == {name for flag in FLAGS for name in flag.names}


def test_every_setting_is_in_the_readme() -> None:
    from flower_magic.magics import FlowerMagics

    traits = FlowerMagics.class_own_traits(config=True)
    assert traits
    missing = sorted(name for name in traits if f"FlowerMagics.{name}" not in README)
    assert missing == []


def test_magic_help_is_the_docstring_and_the_flags() -> None:
    from flower_magic.magics import FlowerMagics

    doc = FlowerMagics.flower.__doc__ or ""
    assert "%flower --status" in doc and "--rounds" in doc and "--new" in doc


def test_the_size_limits_in_the_readme_are_the_codes() -> None:
    """The README's numbers for a message and a task are the ones the code uses."""
    from flower_magic.core.agent import MAX_MESSAGE_BYTES
    from flower_magic.core.handoff import WINDOW_HAIKU_TOKENS
    from flower_magic.front.options import CLI_CHARS_PER_TOKEN, MAX_TASK_CHARS, PROMPT_OVERHEAD_TOKENS, task_limit_chars

    assert f"over {MAX_MESSAGE_BYTES // 2**20} MiB" in README
    assert f"at most {MAX_TASK_CHARS:,} characters with a 1M-token window" in README
    assert f"{task_limit_chars(WINDOW_HAIKU_TOKENS):,} with a 200K one" in README
    assert f"`(window − {PROMPT_OVERHEAD_TOKENS:,}) × {CLI_CHARS_PER_TOKEN}`" in README


def test_the_run_lock_is_documented() -> None:
    """What lands on disk names the run lock's file; what goes wrong says what its refusal means."""
    from flower_magic.core.runlock import LOCK_NAME

    assert f"| `R/{LOCK_NAME}` |" in README
    assert "RunLocked" in README and "kill <pid>" in README and "Ctrl-C in that terminal" in README
    assert "SessionBusy" in README


def test_the_portability_settings_are_documented() -> None:
    """FLOWER_WATCHDOG's every value is in the configuration table; what goes wrong names the network
    filesystems flower detects and what to do (issue 16)."""
    from flower_magic.core.launcher import WATCHDOG_ENV, WATCHDOG_MODES
    from flower_magic.core.mount import NETWORK_FS_TYPES

    row = next(line for line in README.splitlines() if line.startswith(f"| `{WATCHDOG_ENV}` |"))
    assert all(f"`{mode}`" in row for mode in WATCHDOG_MODES)
    notice = README[README.index("is on a network filesystem") :]
    notice = notice[: notice.index("\n- **")]
    named = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afpfs", "webdav", "sshfs", "ceph", "glusterfs", "lustre")
    assert set(named) <= NETWORK_FS_TYPES | {"sshfs"}
    assert [t for t in named if f" {t}," not in notice] == []
    assert "-r /local/path/runs" in notice and "rollback journal" in notice


def test_the_notebooks_are_stored_without_outputs() -> None:
    """Issue 12: a notebook kept with its outputs differs from the repository after every run."""
    import json

    notebooks = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
    assert len(notebooks) == 2
    for path in notebooks:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        run = [c for c in cells if c["cell_type"] == "code" and (c["outputs"] or c["execution_count"] is not None)]
        assert run == [], path.name


def test_the_notebook_context_bounds_in_the_readme_are_the_codes() -> None:
    """Issue 14: the README says exactly what the agent is sent of the notebook; its numbers are these."""
    from flower_magic.core import notebook as nb

    assert f"at most {nb.BLOCK_BUDGET_CHARS:,} characters" in README
    assert (
        f"at most\n{nb.VARIABLES_BUDGET_CHARS:,} of them" in README
        or f"{nb.VARIABLES_BUDGET_CHARS:,} of them" in README
    )
    assert f"one variable's line at most {nb.LINE_CHARS}" in README
    assert f"**The last {nb.RECENT_CELLS} cells**" in README and f"over {nb.CELL_SOURCE_CHARS}" in README
    assert f"at most {nb.PREVIEW_CHARS:,} characters" in README and f"at most {nb.CELL_CHARS:,} characters" in README
    assert f"{nb.PREVIEW_ROWS} rows" in README and f"{nb.PREVIEW_ITEMS} items" in README
    assert f"longer than {nb.PREVIEW_TIMEOUT_S:g} s" in README and f"first {nb.KEYS_SHOWN} keys" in README
    assert all(f"`{name}`" in README for name in nb.TOOL_NAMES)


@pytest.mark.slow
def test_the_testing_example_runs_as_pasted(tmp_path: Path) -> None:
    """The README's ``FakeAnthropic`` example used ``os`` and ``tmp_dir`` without defining them and ran
    no workflow (``...``): pasted, it stopped at a NameError. It runs here as it is written, in a process
    of its own (it sets the environment), with the real Claude Code CLI against the fake."""
    section = README.split("## Testing your own workflows offline", 1)[1]
    code = section.split("```python\n", 1)[1].split("\n```", 1)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}
    env["TMPDIR"] = str(tmp_path)  # its mkdtemp() folder goes with the test's
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == "向日葵"
