"""Seeking and reading the positions of many partitions of one kafka-python consumer at once
(ingest.kafka.consumer_state), without a broker: a consumer is assigned partitions offline."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, TopicPartition

from ingest.kafka.consumer_state import positions, seek_all

pytestmark = pytest.mark.unit


@pytest.fixture
def consumer() -> KafkaConsumer:
    # nothing listens there: assign, seek and the subscription state need no broker
    c = KafkaConsumer(bootstrap_servers="127.0.0.1:9", api_version=(2, 8), enable_auto_commit=False)
    yield c
    c.close(autocommit=False)


def test_seek_all_sets_each_position_and_refuses_what_seek_refuses(consumer: KafkaConsumer) -> None:
    parts = [TopicPartition(f"t{i}", p) for i in range(50) for p in range(4)]
    consumer.assign(parts)
    seek_all(consumer, {part: 7 * n for n, part in enumerate(parts)})
    state = consumer._subscription.assignment
    assert [state[part].position.offset for part in parts] == [7 * n for n in range(len(parts))]
    with pytest.raises(ValueError, match="not assigned"):
        seek_all(consumer, {TopicPartition("other", 0): 1})
    with pytest.raises(ValueError, match="must be an int >= 0"):
        seek_all(consumer, {parts[0]: -1})


def test_positions_read_what_seek_all_set(consumer: KafkaConsumer, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = [TopicPartition("t", p) for p in range(300)]
    consumer.assign(parts)
    seek_all(consumer, {part: 100 + part.partition for part in parts})
    calls = []
    # position() would ask the broker to validate a fresh seek: one call is made, the rest read
    monkeypatch.setattr(consumer, "position", lambda part: calls.append(part) or 100 + part.partition)
    assert positions(consumer, parts) == {part: 100 + part.partition for part in parts}
    assert calls == [parts[0]]
