"""Read tasks keep their consumer across micro-batches (ingest.kafka.pool), as Spark's connector does:
the next task in the same Python worker reads any partition with it, from the offset it is given; a
task that failed or was cut short closes its consumer instead of handing it on."""

from __future__ import annotations

import pytest

from ingest.kafka.offsets import KafkaOffsetRange
from ingest.kafka.pool import POOL, ConsumerPool
from ingest.kafka.read import KafkaColumns, read_range
from ingest.kafka.source import arrow_schema, kafka_schema
from tests.helpers.brokers.kafka_records import create_topics, produce, unique_topic

pytestmark = pytest.mark.integration


def columns() -> KafkaColumns:
    return KafkaColumns(arrow_schema(kafka_schema(False)))


def values(topic: str, part: int, start: int, end: int, params: dict) -> list[bytes]:
    batches = read_range(KafkaOffsetRange(topic, part, start, end), params, columns(), True, 30_000)
    return [v for b in batches for v in b.column("value").to_pylist()]


def test_a_task_hands_its_consumer_to_the_next_which_reads_its_own_range(bootstrap_servers: str) -> None:
    topic = unique_topic("pool")
    create_topics(bootstrap_servers, [topic], partitions=2)
    produce(bootstrap_servers, [(topic, i % 2, None, b"v%d" % i, []) for i in range(40)])
    params = {"bootstrap_servers": bootstrap_servers, "client_id": f"pool-test-{topic}"}
    made, reused = POOL.made, POOL.reused
    assert values(topic, 0, 0, 10, params) == [b"v%d" % i for i in range(0, 20, 2)]
    assert values(topic, 1, 3, 8, params) == [b"v%d" % i for i in range(7, 17, 2)]      # another partition
    assert values(topic, 0, 10, 20, params) == [b"v%d" % i for i in range(20, 40, 2)]   # where the first ended
    assert (POOL.made - made, POOL.reused - reused) == (1, 2)


def test_a_task_cut_short_does_not_hand_its_consumer_on(bootstrap_servers: str) -> None:
    topic = unique_topic("pool-cut")
    create_topics(bootstrap_servers, [topic], partitions=1)
    produce(bootstrap_servers, [(topic, 0, None, b"x" * 100, []) for _ in range(20)])
    params = {"bootstrap_servers": bootstrap_servers, "client_id": f"pool-cut-{topic}",
              "max_poll_records": 5}
    batches = read_range(KafkaOffsetRange(topic, 0, 0, 20), params, columns(), True, 30_000)
    next(batches)
    batches.close()                     # Spark stopped reading (a limit, a cancelled task)
    made = POOL.made
    assert values(topic, 0, 0, 20, params) == [b"x" * 100] * 20
    assert POOL.made == made + 1, "the consumer of the task cut short was handed on"


class FakeConsumer:
    def __init__(self) -> None:
        self.closed = False

    def close(self, autocommit: bool = False) -> None:
        self.closed = True


def test_an_idle_consumer_is_closed_after_the_idle_time_and_the_pool_keeps_a_few() -> None:
    pool = ConsumerPool(idle_s=0.0, max_idle=1)
    a, b = FakeConsumer(), FakeConsumer()
    pool.give_back("k", a)
    pool.give_back("k", b)              # over max_idle: closed at once
    assert b.closed and not a.closed
    c = pool.take("k", FakeConsumer)    # a has been idle longer than 0 s: closed, a new one made
    assert a.closed and c is not a and pool.made == 1
