"""Our side of docs/comparison.md's table "What survives of a record": each kind of Kafka record a
bridge mangles, replayed into a store and read back with the mapping's rule (ingest/encode/restore.py)
and the store's reader: key, value, null and empty values, headers (order, repeated names, binary and
empty values), timestamp, partition -> queue, offsets."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka import KafkaProducer

from ingest.config import JobConfig
from ingest.encode.restore import kafka_headers, kafka_key, kafka_value
from ingest.replay.command import ReplayOptions, replay
from tests.helpers.replays import new_topic, store_messages

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=0.4)]

TS0 = 1_700_000_000_000
PARTITIONS = 3
# (what the table's row calls it, key, value, headers)
RECORDS = [
    ("text key, value", b"order-17", b"payload", []),
    ("binary key", b"\xff\x00\x01", b"v", []),
    ("null value (tombstone)", b"order-17", None, []),
    ("empty value", b"k", b"", []),
    ("value 0x00", None, b"\x00", []),
    ("headers in order", None, b"v", [("z", b"1"), ("a", b"2"), ("m", b"3")]),
    ("repeated header names", None, b"v", [("trace", b"a"), ("trace", b"b"), ("trace", b"c")]),
    ("binary header value", None, b"v", [("bin", b"\x00\xff\xfe\x01"), ("sep", b"x\x01y\x02z")]),
    # kafka-python sends no null header value: the empty one is what a property would drop
    ("empty header values", None, b"v", [("e", b""), ("f", b"")]),
    ("header named as a RocketMQ property", None, b"v", [("KEYS", b"not-the-key"), ("TAGS", b"t1")]),
]


def test_every_part_of_a_record_survives_a_replay(bootstrap_servers: str, spark: object, tmp_path: Path) -> None:
    topic = new_topic(bootstrap_servers, PARTITIONS, "comparison")
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all")
    sent = {}
    try:
        for i, (_, key, value, headers) in enumerate(RECORDS):
            md = producer.send(topic, key=key, value=value, headers=headers, partition=i % PARTITIONS,
                               timestamp_ms=TS0 + i).get(timeout=30)
            sent[(md.partition, md.offset)] = i
    finally:
        producer.close()
    cfg = JobConfig(bootstrap_servers=bootstrap_servers, subscribe=topic, store=str(tmp_path / "store"),
                    segment_size=1024 * 1024, consume_queue_units=1000, master=None, flush="sync")
    cfg.validate()
    summary = replay(cfg, ReplayOptions(topics=(topic,), progress="none"), spark=spark)
    assert summary.complete and summary.records == len(RECORDS) and summary.verified

    messages = store_messages(tmp_path / "store")
    assert len(messages) == len(RECORDS)
    for m in messages:
        props = m["properties"]
        partition, offset = int(props["KAFKA_PARTITION"]), int(props["KAFKA_OFFSET"])
        name, key, value, headers = RECORDS[sent[(partition, offset)]]
        assert m["topic"] == topic and props["KAFKA_TOPIC"] == topic
        assert m["queue_id"] == partition, name                    # partition -> queue, as it is
        assert m["queue_offset"] == offset, name                   # a fresh topic: queue offset = Kafka offset
        assert m["born_timestamp"] == TS0 + sent[(partition, offset)], name
        assert kafka_key(props) == (key or None), name
        assert kafka_value(m["body"], props) == value, name
        assert m["body"], f"{name}: RocketMQ has no empty body"
        assert kafka_headers(props) == headers, name
