"""A read task that cannot reach its broker (restarting, say) waits for it up to
kafka.default.api.timeout.ms, then fails in one line naming the wait; a broker that comes back
within the wait is read as if it had never gone."""

from __future__ import annotations

import threading
import time

import pytest
from kafka import KafkaProducer

from ingest.devtools.broker import start_embedded
from ingest.devtools.broker.base import free_port
from ingest.kafka.offsets import KafkaOffsetRange
from ingest.kafka.options import KafkaSourceError
from ingest.kafka.read import KafkaColumns, read_range
from ingest.kafka.source import arrow_schema, kafka_schema
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.integration


def columns() -> KafkaColumns:
    return KafkaColumns(arrow_schema(kafka_schema(True)))


def test_a_broker_that_never_answers_fails_the_task_after_the_wait_in_one_line() -> None:
    port = free_port()                          # nothing listens there
    started = time.monotonic()
    with pytest.raises(KafkaSourceError, match=r"cannot connect to 127\.0\.0\.1:\d+ \(waited 3000 ms"):
        list(read_range(KafkaOffsetRange("t", 0, 0, 10), {"bootstrap_servers": f"127.0.0.1:{port}"}, columns(),
                        True, 10_000, wait_for_broker_ms=3000))
    assert time.monotonic() - started >= 3


def test_a_broker_that_comes_back_within_the_wait_is_read() -> None:
    port = free_port()
    brokers: list = []
    # the broker starts a few seconds after the task: the task waits for it rather than failing
    starter = threading.Timer(3.0, lambda: brokers.append(start_embedded("tansu", port=port)))
    starter.start()
    try:
        def produce_when_up() -> None:
            wait_until(lambda: brokers, 60, "the broker to start", interval_s=0.1)
            producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}")
            for i in range(5):
                producer.send("waited", value=b"v%d" % i, partition=0)
            producer.flush()
            producer.close()

        producing = threading.Thread(target=produce_when_up)
        producing.start()
        batches = list(read_range(KafkaOffsetRange("waited", 0, 0, 5), {"bootstrap_servers": f"127.0.0.1:{port}"},
                                  columns(), True, 60_000, wait_for_broker_ms=60_000))
        producing.join()
        assert [v for b in batches for v in b.column("value").to_pylist()] == [b"v%d" % i for i in range(5)]
    finally:
        starter.cancel()
        starter.join()
        for b in brokers:
            b.stop()
