"""The fault sweep end to end through ``run`` from Kafka (issue 56), a smaller sample: the calls
on the Spark checkpoint's and the spool's files failed, one per case (tests/helpers/faults/e2e_sweep.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.faults.e2e_sweep import FIRST, MORE, RUN_KINDS, plain, run_cmd, sweep
from tests.helpers.programs import require_program

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=2)]   # 1.6 quiet, 2.9 on 2 shared cores


@pytest.mark.timeout(1200)
def test_run_with_a_call_on_the_spark_checkpoint_failed_ends_in_one_line_and_the_next_run_stores_once(
        bootstrap_servers: str, tmp_path: Path) -> None:
    """The store's files are swept through replay; here the calls on Spark's checkpoint (its
    metadata, offsets/N, commits/N and their directories) and the spool's are failed."""
    from tests.helpers.brokers.kafka_records import create_topics, produce, unique_topic

    require_program("strace", "to fail the calls")
    topic = unique_topic("faults")
    create_topics(bootstrap_servers, [topic], partitions=2)
    record = lambda p, o: (topic, p, b"k%d-%d" % (p, o), b"v%d-%d" % (p, o) * 20, [])  # noqa: E731
    produce(bootstrap_servers, [record(0, o) for o in range(FIRST)])
    base = tmp_path / "base"
    cmd_in = lambda where: run_cmd(bootstrap_servers, topic, where / "store", where / "checkpoint")  # noqa: E731
    first = plain(cmd_in(base))
    assert first.returncode == 0, first.stderr[-3000:]
    produce(bootstrap_servers, [record(p, o) for p, r in MORE.items() for o in r])
    expected = [(topic, p, o) for p, r in MORE.items() for o in range(r.stop)]
    sweep("run", cmd_in, base, ("checkpoint", "store/spool"), expected, tmp_path, RUN_KINDS)
