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


@pytest.mark.unit
def test_a_cluster_id_is_a_kafka_uuid_no_command_line_reads_as_an_option() -> None:
    import base64

    from ingest.devtools.broker.apache_kafka import cluster_id

    for _ in range(2000):
        text = cluster_id()
        assert len(text) == 22 and not text.startswith("-")
        assert len(base64.urlsafe_b64decode(text + "==")) == 16


@pytest.mark.unit
def test_apache_kafka_keeps_records_of_any_age_unless_a_topic_says_otherwise(tmp_path) -> None:
    from ingest.devtools.broker.apache_kafka import server_properties

    props = dict(line.split("=", 1) for line in server_properties(9092, 9093, tmp_path).splitlines())
    assert props["log.retention.ms"] == "-1"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["offsets.topic.replication.factor"] == "1"
