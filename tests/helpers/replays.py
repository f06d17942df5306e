"""Helpers of the replay tests (no tests here): producing topics fast, reading a store back."""

from __future__ import annotations

import uuid
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

pytestmark = pytest.mark.integration


def new_topic(bootstrap: str, partitions: int, prefix: str = "replay") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()
    return name


def value_of(i: int) -> bytes:
    return (f"event {i} " + "x" * (i % 97)).encode()


def produce(bootstrap: str, topic: str, n: int, partitions: int, ts0: int = 1_700_000_000_000) -> None:
    """``n`` records round-robin over the partitions, record i with timestamp ts0 + i, a key on two of
    three, a header on one of five; large batches, no per-record wait."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, batch_size=512 * 1024,
                             max_request_size=8 * 1024 * 1024, acks=1)
    try:
        for i in range(n):
            producer.send(topic, value=value_of(i), key=f"k{i}".encode() if i % 3 else None,
                          partition=i % partitions, timestamp_ms=ts0 + i,
                          headers=[("trace", f"t{i}".encode())] if i % 5 == 0 else [])
        producer.flush(timeout=120)
    finally:
        producer.close()


def produce_timed(bootstrap: str, topic: str, rows: list[tuple[int, int, bytes]]) -> None:
    """Records given as (partition, timestamp ms, value), in order."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1)
    try:
        for partition, ts, value in rows:
            producer.send(topic, value=value, partition=partition, timestamp_ms=ts)
        producer.flush(timeout=60)
    finally:
        producer.close()


def store_messages(root: str | Path) -> list[dict[str, Any]]:
    """Every committed message of a store in commit-log order, as a dict of all its decoded fields
    (the body as bytes, the properties as the exact string)."""
    from store.read.reader import StoreReader

    out = []
    with StoreReader.open(root) as reader:
        for offset, m in reader.iter_messages():
            row = {"offset": offset}
            for f in fields(m):
                v = getattr(m, f.name)
                row[f.name] = bytes(v) if isinstance(v, memoryview) else v
            out.append(row)
    return out


def kafka_coordinates(messages: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    return [(m["properties"]["KAFKA_TOPIC"], int(m["properties"]["KAFKA_PARTITION"]),
             int(m["properties"]["KAFKA_OFFSET"])) for m in messages]


def without_store_timestamp(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in m.items() if k != "store_timestamp"} for m in messages]
