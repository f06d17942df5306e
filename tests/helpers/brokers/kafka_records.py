"""Producing known records to the test broker, and reading a store back as a map of Kafka coordinates."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from store.format import EMPTY_VALUE_BODY


@dataclass(frozen=True)
class Sent:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topics(bootstrap: str, topics: Iterable[str], partitions: int = 4) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics])
    finally:
        admin.close()


def produce(bootstrap: str, records: Iterable[tuple[str, int, bytes | None, bytes, list[tuple[str, bytes]]]]) -> list[Sent]:
    """Send (topic, partition, key, value, headers) records; return them with their offsets."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=10, batch_size=256 * 1024,
                             max_request_size=8 * 1024 * 1024)
    pending = []
    for topic, partition, key, value, headers in records:
        fut = producer.send(topic, key=key, value=value, headers=headers, partition=partition)
        pending.append((fut, topic, partition, key, value, tuple(headers)))
    producer.flush()
    out = []
    for fut, topic, partition, key, value, headers in pending:
        meta = fut.get(timeout=30)
        out.append(Sent(topic, partition, meta.offset, key, value, headers, meta.timestamp))
    producer.close()
    return out


def store_by_coordinates(root: str) -> dict[tuple[str, int, int], list]:
    """Every message of a committed store keyed by its Kafka coordinates (a list, to see duplicates)."""
    from store import StoreReader

    found: dict[tuple[str, int, int], list] = {}
    reader = StoreReader.open(root)
    try:
        for offset, msg in reader.iter_messages():
            props = msg.properties
            key = (props["KAFKA_TOPIC"], int(props["KAFKA_PARTITION"]), int(props["KAFKA_OFFSET"]))
            found.setdefault(key, []).append((offset, msg))
    finally:
        reader.close()
    return found


def mixed_records(topics: list[str], n: int) -> list[tuple[str, int, bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    """``n`` records over ``topics`` and 4 partitions: text and binary keys or none, tombstones, 0-byte
    values, a single 0x00, bodies past RocketMQ's 4 KiB compression threshold, tags, headers a property
    keeps and headers only KAFKA_HEADERS keeps (the stores RocketMQ's clients read in the tests)."""
    out = []
    for i in range(n):
        key = [f"order-{i % 700}".encode(), None, b"\xff\xfe" + bytes([i % 256]), "ключ-ü".encode()][i % 4]
        value = [f"value-{i}".encode() * (1 + i % 5), None, b"", bytes(range(256)) * 20, EMPTY_VALUE_BODY][i % 5]
        if value is None and key is None:
            key = f"tomb-{i}".encode()         # a tombstone has a key
        headers = [("TAGS", f"tag{i % 3}".encode()), ("seq", str(i).encode())]
        if i % 11 == 0:
            headers.append(("trace", b""))     # an empty header value: all headers go to KAFKA_HEADERS
        out.append((topics[i % len(topics)], (i // len(topics)) % 4, key, value, headers))
    return out
