"""Apache Kafka restarted under the running job, and the job SIGKILLed under live production (the
module's own broker: one test restarts it)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.devtools.broker import Broker
from tests.helpers.brokers.apache_kafka import job_command, module_kafka, new_topic, readable, stored
from tests.helpers.brokers.kafka_records import store_by_coordinates
from tests.helpers.job_processes import Producer, crash_and_check
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=1.8)]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from module_kafka(tmp_path_factory, __name__)


def test_the_job_waits_for_a_restarted_broker_and_resumes_exactly_once(kafka: Broker, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = new_topic(bootstrap, "restart", 4)
    producer = Producer(bootstrap, topic, outages=True)
    producer.start()
    log = tmp_path / "run.log"
    with open(log, "wb") as out:
        job = subprocess.Popen(job_command(bootstrap, tmp_path, "--subscribe", topic, "--trigger", "300ms"),
                               stdout=out, stderr=out, start_new_session=True)
    try:
        wait_until(lambda: len(stored(tmp_path / "store")) > 200, 900, "batches to flow", interval_s=0.5)
        kafka.restart()
        before = len(producer.sent)
        wait_until(lambda: len(producer.sent) > before + 300, 120, "the producer to go on after the restart", interval_s=0.5)
        producer.stop_event.set()
        producer.join(timeout=120)
        assert producer.error is None, producer.error
        # what Kafka holds (a batch sent again after the restart may be there twice, as two records)
        expected = readable(bootstrap, topic, 4)
        wait_until(lambda: stored(tmp_path / "store") >= expected, 240, "every record after the restart", interval_s=0.5)
        assert job.poll() is None, f"the job exited: {log.read_text()[-3000:]}"
    finally:
        producer.stop_event.set()
        job.send_signal(signal.SIGTERM)
        code = job.wait(timeout=120)
    text = log.read_text()
    assert code == 0, text[-3000:]
    assert "Traceback" not in text and "Exception" not in text, text[-3000:]
    found = store_by_coordinates(str(tmp_path / "store"))
    assert set(found) == expected and all(len(v) == 1 for v in found.values())


@pytest.mark.crash
@pytest.mark.timeout(1200)
def test_sigkill_under_live_production_three_times_loses_and_duplicates_nothing(kafka: Broker, tmp_path: Path) -> None:
    crash_and_check(kafka.bootstrap_servers, tmp_path, kills=3, source="kafka-python")
