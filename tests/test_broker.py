"""The broker behind every integration test is a real Kafka-protocol broker."""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

pytestmark = pytest.mark.integration


def test_broker_round_trips_keys_headers_partitions_and_offsets(bootstrap_servers: str) -> None:
    topic = f"roundtrip-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)])
    admin.close()

    producer = KafkaProducer(bootstrap_servers=bootstrap_servers)
    sent = []
    for i in range(40):
        partition = i % 4
        key, value = f"key-{i}".encode(), f"value-{i}".encode()
        headers = [("TAGS", f"tag{i % 3}".encode()), ("seq", str(i).encode())]
        meta = producer.send(topic, key=key, value=value, headers=headers, partition=partition).get(10)
        sent.append((partition, meta.offset, key, value, headers))
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(4)]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    got = []
    for _ in range(50):
        for tp, records in consumer.poll(timeout_ms=500).items():
            got += [(tp.partition, r.offset, r.key, r.value, list(r.headers)) for r in records]
        if len(got) >= len(sent):
            break
    consumer.close()

    assert sorted(got) == sorted(sent)
    for p in range(4):
        offsets = [o for (part, o, *_rest) in sorted(got) if part == p]
        assert offsets == list(range(10)), f"partition {p} offsets {offsets}"
