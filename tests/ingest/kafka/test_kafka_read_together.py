"""A read task's small ranges of distinct partitions are fetched together (ingest.kafka.read
.read_ranges): one consumer assigned all of them, one fetch request a round, each partition paused
once its range is read; the records still come out range after range, exactly the planned ones."""

from __future__ import annotations

from typing import Any

import pytest
from kafka import KafkaAdminClient, TopicPartition

from ingest.kafka import read as kafka_read
from ingest.kafka.offsets import KafkaOffsetRange
from ingest.kafka.options import DataLossError
from ingest.kafka.pool import POOL
from ingest.kafka.read import KafkaColumns, read_ranges
from ingest.kafka.source import arrow_schema, kafka_schema
from tests.helpers.brokers.kafka_records import create_topics, produce, unique_topic

pytestmark = pytest.mark.integration

PER_PARTITION = 300


def columns() -> KafkaColumns:
    return KafkaColumns(arrow_schema(kafka_schema(False)))


@pytest.fixture
def topic(bootstrap_servers: str) -> str:
    name = unique_topic("together")
    create_topics(bootstrap_servers, [name], partitions=4)
    for first in range(0, PER_PARTITION, 50):       # six record batches a partition
        produce(bootstrap_servers, [(name, p, None, b"%d-%d" % (p, i), [])
                                    for i in range(first, first + 50) for p in range(4)])
    return name


class PollWatch:
    """The partitions each poll() of the task's consumer returned records for."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rounds: list[set[int]] = []
        self.consumers: list[Any] = []
        real_take = POOL.take

        def take(key: str, make: Any) -> Any:
            consumer = real_take(key, make)
            real_poll = consumer.poll

            def poll(*args: Any, **kwargs: Any) -> Any:
                got = real_poll(*args, **kwargs)
                self.rounds.append({tp.partition for tp, items in got.items() if items})
                return got

            monkeypatch.setattr(consumer, "poll", poll)
            self.consumers.append(consumer)
            return consumer

        monkeypatch.setattr(POOL, "take", take)


def read(ranges: list[KafkaOffsetRange], bootstrap_servers: str, fail_on_data_loss: bool = True,
         **params: Any) -> list[tuple[int, int, bytes]]:
    client = {"bootstrap_servers": bootstrap_servers, "client_id": "together-test", **params}
    return [(p, o, v) for b in read_ranges(ranges, client, columns(), fail_on_data_loss, 30_000)
            for p, o, v in zip(b.column("partition").to_pylist(), b.column("offset").to_pylist(),
                               b.column("value").to_pylist())]


def planned(ranges: list[KafkaOffsetRange]) -> list[tuple[int, int, bytes]]:
    return [(r.partition, o, b"%d-%d" % (r.partition, o)) for r in ranges for o in range(r.from_offset, r.until_offset)]


def test_small_ranges_are_fetched_together_and_come_out_range_after_range(
        topic: str, bootstrap_servers: str, monkeypatch: pytest.MonkeyPatch) -> None:
    watch = PollWatch(monkeypatch)
    ranges = [KafkaOffsetRange(topic, 2, 10, 250), KafkaOffsetRange(topic, 0, 0, 300),
              KafkaOffsetRange(topic, 3, 299, 300), KafkaOffsetRange(topic, 1, 100, 101)]
    assert read(ranges, bootstrap_servers) == planned(ranges)
    assert any(len(partitions) > 1 for partitions in watch.rounds), watch.rounds
    consumer = watch.consumers[-1]
    assert consumer.paused() == set(), "the pooled consumer was handed on with partitions paused"


def test_a_fetch_sized_to_few_records_reads_every_range_to_its_end(
        topic: str, bootstrap_servers: str, monkeypatch: pytest.MonkeyPatch) -> None:
    watch = PollWatch(monkeypatch)
    ranges = [KafkaOffsetRange(topic, p, 0, PER_PARTITION) for p in (3, 1, 2, 0)]
    # many small fetches: the later ranges' records wait for the earlier ranges to be read
    assert read(ranges, bootstrap_servers, max_partition_fetch_bytes=512) == planned(ranges)
    assert len(watch.rounds) >= 6, watch.rounds


def test_ranges_of_one_partition_or_too_many_records_are_read_one_at_a_time(
        topic: str, bootstrap_servers: str, monkeypatch: pytest.MonkeyPatch) -> None:
    watch = PollWatch(monkeypatch)
    same = [KafkaOffsetRange(topic, 1, 0, 100), KafkaOffsetRange(topic, 1, 100, 300)]
    assert read(same, bootstrap_servers) == planned(same)
    monkeypatch.setattr(kafka_read, "TOGETHER_MAX_RECORDS", 100)
    many = [KafkaOffsetRange(topic, 0, 0, 200), KafkaOffsetRange(topic, 2, 0, 200)]
    assert read(many, bootstrap_servers) == planned(many)
    assert all(len(partitions) <= 1 for partitions in watch.rounds), watch.rounds


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_records_deleted_inside_one_range_fail_or_are_skipped_and_the_others_are_read(
        topic: str, bootstrap_servers: str, fail_on_data_loss: bool) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, client_id="together-delete")
    try:
        admin.delete_records({TopicPartition(topic, 1): 150})
    finally:
        admin.close()
    ranges = [KafkaOffsetRange(topic, 0, 0, 100), KafkaOffsetRange(topic, 1, 100, 200),
              KafkaOffsetRange(topic, 2, 0, 100)]
    if fail_on_data_loss:
        with pytest.raises(DataLossError, match=rf"{topic}-1: offsets 100..149 were deleted"):
            read(ranges, bootstrap_servers)
        return
    kept = [KafkaOffsetRange(topic, 0, 0, 100), KafkaOffsetRange(topic, 1, 150, 200),
            KafkaOffsetRange(topic, 2, 0, 100)]
    assert read(ranges, bootstrap_servers, fail_on_data_loss=False) == planned(kept)
