"""A store and Spark checkpoint that v0.3.0's ``commitlog run`` wrote (tests/fixtures/compat/v0.3.0-run,
built by build_run_fixture.py against Apache Kafka) resumed by today's ``run``: the same records
produced again at the same offsets, and new ones after them, are stored exactly once (issue 56, part 3)."""

from __future__ import annotations

import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.devtools.broker import Broker
from sink import read_dead_letters
from tests.helpers.brokers.apache_kafka import module_kafka
from tests.helpers.cli import run
from tests.fixtures.compat.build_fixture import DEAD, TOPIC
from tests.fixtures.compat.build_run_fixture import produce, run_command
from tests.helpers.brokers.kafka_records import store_by_coordinates

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=1.5)]

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "compat" / "v0.3.0-run" / "run.tar.gz"
ROOT = Path(__file__).resolve().parents[3]
GROWN = {0: 35, 1: 25}


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from module_kafka(tmp_path_factory, __name__)


def test_run_resumes_a_store_and_spark_checkpoint_of_v030_exactly_once(kafka: Broker, tmp_path: Path) -> None:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    store, checkpoint = tmp_path / "store", tmp_path / "checkpoint"
    produce(kafka.bootstrap_servers, GROWN)         # the fixture's records at their offsets, then new ones

    done = subprocess.run(run_command(kafka.bootstrap_servers, store, checkpoint), cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)

    assert done.returncode == 0, done.stderr[-3000:]
    found = store_by_coordinates(str(store))
    assert sorted(found) == sorted((TOPIC, p, o) for p, n in GROWN.items() for o in range(n) if (p, o) != DEAD)
    assert all(len(msgs) == 1 for msgs in found.values()), "stored twice"
    assert [(d["partition"], d["offset"]) for d in read_dead_letters(store)] == [DEAD]
    rc, out, err = run("verify", str(store))
    assert rc == 0 and "OK" in out, out + err
