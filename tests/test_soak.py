"""Two web replicas on one PostgreSQL and one Redis, builds and live log viewers, and one replica killed -9 and
started again mid-run: bench/soak.py's run at a size that fits the suite, asserting behaviour only."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.postgres import PostgresCluster
from tests.support.soak import SoakPlan, figures, soak_deployment

# Two viewers a build, one starting on each replica: whichever builds run when the kill comes, streams break.
SMALL = SoakPlan(seconds=60, replicas=2, daemons=3, builds=20, viewers=40, lines_per_build=60, line_pause=0.05)


@pytest.mark.timeout(900)  # about two minutes of load, on a machine that other runs share
def test_a_replica_killed_mid_run_loses_no_build_and_no_viewer_misses_or_repeats_a_line(
    tmp_path: Path, postgres: PostgresCluster
) -> None:
    with soak_deployment(SMALL, tmp_path, postgres) as soak:
        report = soak.run()
    summary = "\n".join(figures(report))
    # The kill must have hit something: builds under way, and streams that it broke.
    assert report.running_at_kill > 0, summary
    assert sum(viewer.dropped for viewer in report.viewers) > 0, summary
    # Every build succeeded, each was applied once, and every viewer saw each line of its build exactly once.
    assert report.problems() == [], summary
    assert len(report.runs) == SMALL.builds, summary
