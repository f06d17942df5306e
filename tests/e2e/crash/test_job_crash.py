"""The streaming job killed with SIGKILL at random moments while a producer keeps writing: after every
restart, and at the end, each produced record is in the store exactly once and verify is clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.job_processes import crash_and_check

pytestmark = [pytest.mark.crash, pytest.mark.integration, pytest.mark.slow(minutes=2.2)]

# Every other run dies at a crash point of the protocol, the others by SIGKILL at random moments. The
# points are in the sink, the same code whichever source feeds it: the two sources share the five
# points between them (kafka-python from the first, spark-kafka from the fourth), so that each point
# runs once a suite, and each source meets a flush, an append and a commit point.
KILLS = 6
FIRST_POINT = {"kafka-python": 0, "spark-kafka": 3}


@pytest.mark.timeout(1800)
def test_job_survives_sigkill_at_random_moments(bootstrap_servers: str, tmp_path: Path, source: str) -> None:
    crash_and_check(bootstrap_servers, tmp_path, KILLS, source, first_point=FIRST_POINT[source])
