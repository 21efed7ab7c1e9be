"""Short seeded walks of failures in sequences, the invariant checked after every operation (issue 10,
build 2; acceptance c). ``scripts/soak`` runs the long version and prints the figures.

Issue 22: the walk also cuts clarifications short (``-9`` while the clarifier's request is in flight,
or while its question waits) and says words at the next wake; every clarifier request must carry them
exactly once, as every worker request must carry each phrase said to its session exactly once.

Issue 23: the walk ends runs each way a person can (a stop, also during an outage; the panel's stop; a
kernel's shutdown with a question open; a start whose store cannot be reached) and checks after each
that the ending was written once and ``live.json`` is not left running."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import is_short_variant
from tests.walk import Walk

pytestmark = pytest.mark.slow

# Seed -> whether its walk runs goals and a judge (the seed decides): one of each.
SEEDS = {3: True, 5: False}
OPS_PER_WALK = 12
# The PostgreSQL walk (issue 17) is shorter: within the suite's budget, still a kill and another strike.
OPS_PER_PG_WALK = 8
# The seed whose walk begins with the ways a person ends a run, whatever the seed would choose: a
# clarification cut short three ways (-9 while its request is in flight, -9 and a kernel's shutdown
# while its question waits), each followed by words for it, and the stops (flower --stop during an
# outage, the panel's stop) and words while the API is away; then the seed's own ops.
CUT_SEED = 3
OPENING = [
    "task+none",
    "cut+kill@clarify",
    "wake+none",
    "cut+closed@question",
    "wake+stopout",
    "cut+kill@question",
    "wake+panel",
    "continue+remarkout",
]


@pytest.mark.timeout(1500)
@pytest.mark.parametrize(
    ("seed", "sessions"),
    # On PostgreSQL (issue 17, acceptance b): the walk without goals only, the shorter one.
    [(seed, "sqlite") for seed in sorted(SEEDS)] + [(5, "postgres")],
    indirect=["sessions"],
)
def test_a_walk_of_failures_keeps_every_word_and_every_file_whole(
    seed: int, sessions: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    lines: list[str] = []
    opening = OPENING if seed == CUT_SEED and not is_short_variant(request) else []
    walk = Walk(seed, tmp_path, log=lines.append, opening=opening)
    assert walk.goals is SEEDS[seed]
    ops = OPS_PER_PG_WALK if is_short_variant(request) else OPS_PER_WALK
    failures = walk.run(ops)
    assert failures == [], "\n".join(lines)
    assert walk.ops_done == ops
    # The walk really struck: kills and at least one other kind of failure happened.
    struck = {str(k).split("+")[1].split("@")[0] for k in walk.counts}
    assert "kill" in struck and len(struck - {"none"}) >= 2, walk.counts
    if seed == CUT_SEED and not is_short_variant(request):
        assert walk.heard_by_clarifier >= 2, walk.counts
