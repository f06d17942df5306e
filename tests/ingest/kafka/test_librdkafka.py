"""What real producers write: topics produced with librdkafka (confluent-kafka), a client independent of
the kafka-python we read with, land in the store exactly once through `run` and `replay`: every
compression codec, batches of many records, an idempotent and a transactional producer (committed
transactions in, aborted ones and the control records out), null and empty keys and values, values
up to 900 KB, headers with null, empty, binary and repeated values: each record's key, value
(tombstones included) and headers read back from the store as they were produced."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from ingest.config import JobConfig
from ingest.encode.restore import kafka_headers, kafka_key, kafka_value
from ingest.job import run_stream
from ingest.replay.command import ReplayOptions, replay
from tests.helpers.brokers.kafka_records import create_topics, store_by_coordinates, unique_topic

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is a dev dependency")

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=1)]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PARTITIONS = 2


@dataclass(frozen=True)
class Produced:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def record(i: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    key = None if i % 5 == 0 else b"" if i % 5 == 1 else b"key-%d" % i
    if i % 9 == 0:
        value = None                                      # a tombstone
    elif i % 9 == 1:
        value = b""
    elif i == 13:
        value = bytes(range(256)) * 3600                  # 900 KB
    else:
        value = (b"value-%d-" % i) * (i % 40)
    headers = [("trace", b"t-%d" % i), ("nullable", None)] if i % 3 == 0 else []
    if i % 7 == 0:
        headers += [("trace", b"again"), ("empty", b""), ("bin", bytes([0xFF, 0, 2, i % 256])),
                    ("caf\u00e9", "\u00e9t\u00e9".encode())]
    return key, value, headers


def produce(bootstrap: str, topic: str, n: int, config: dict[str, object]) -> list[Produced]:
    """Send n records through librdkafka, batched (linger, large batch.size); return them with the
    offsets the broker gave."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 200,
                                         "batch.size": 4 << 20, "message.max.bytes": 2 << 20, **config})
    delivered: list[Produced] = []
    errors: list[str] = []

    def done(err: object, msg: object, headers: list[tuple[str, bytes | None]]) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append(Produced(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                                      tuple(headers)))

    for i in range(n):
        key, value, headers = record(i)
        producer.produce(topic, key=key, value=value, headers=headers, partition=i % PARTITIONS,
                         on_delivery=lambda err, msg, h=headers: done(err, msg, h))
    assert producer.flush(60) == 0 and not errors, errors
    return delivered


def produce_transactions(bootstrap: str, topic: str) -> list[Produced]:
    """Four transactions of 25 records: the 1st and 3rd committed, the 2nd and 4th aborted. Returns
    the committed records (the aborted ones must never reach the store)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_topic("tx"),
                                         "compression.type": "zstd", "linger.ms": 50})
    producer.init_transactions(30)
    kept: list[Produced] = []
    for t in range(4):
        sent: list[Produced] = []
        producer.begin_transaction()
        for i in range(25):
            key, value, headers = record(t * 25 + i)
            producer.produce(topic, key=key, value=value, headers=headers, partition=i % PARTITIONS,
                             on_delivery=lambda err, msg, sent=sent, h=headers: sent.append(
                                 Produced(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                                          tuple(h))))
        if t % 2 == 0:
            producer.commit_transaction(30)
            kept += sent
        else:
            producer.abort_transaction(30)
    producer.flush(30)
    return kept


@pytest.fixture(scope="module")
def produced(bootstrap_servers: str) -> dict[str, list[Produced]]:
    out: dict[str, list[Produced]] = {}
    for codec in CODECS:
        topic = unique_topic(f"rdk-{codec}")
        create_topics(bootstrap_servers, [topic], PARTITIONS)
        out[topic] = produce(bootstrap_servers, topic, 400, {"compression.type": codec})
    topic = unique_topic("rdk-idempotent")
    create_topics(bootstrap_servers, [topic], PARTITIONS)
    out[topic] = produce(bootstrap_servers, topic, 300, {"compression.type": "lz4", "enable.idempotence": True,
                                                         "acks": "all"})
    topic = unique_topic("rdk-tx")
    create_topics(bootstrap_servers, [topic], PARTITIONS)
    out[topic] = produce_transactions(bootstrap_servers, topic)
    return out


def assert_exactly_once(store: Path, produced: dict[str, list[Produced]]) -> None:
    found = store_by_coordinates(str(store))
    sent = {(p.topic, p.partition, p.offset): p for records in produced.values() for p in records}
    dupes = [k for k, v in found.items() if len(v) > 1]
    assert not dupes, f"written twice: {dupes[:5]}"
    assert set(found) == set(sent), (f"missing {sorted(set(sent) - set(found))[:5]}, "
                                     f"not produced (control or aborted records?) {sorted(set(found) - set(sent))[:5]}")
    for coords, [(_, msg)] in found.items():
        produced_record = sent[coords]
        assert kafka_value(msg.body, msg.properties) == produced_record.value, f"value differs at {coords}"
        assert kafka_key(msg.properties) == (produced_record.key or None), f"key differs at {coords}"
        assert kafka_headers(msg.properties) == list(produced_record.headers), f"headers differ at {coords}"
    by_queue: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for (topic, partition, offset), [(_, msg)] in found.items():
        by_queue.setdefault((msg.topic, msg.queue_id), []).append((offset, msg.queue_offset))
    for queue, pairs in by_queue.items():
        assert [q for _, q in sorted(pairs)] == list(range(len(pairs))), f"queue {queue} not contiguous"


def config(bootstrap: str, topics: list[str], tmp: Path, source: str) -> JobConfig:
    # the job reads read_committed by default: the transactional topic's aborted records stay out
    cfg = JobConfig(bootstrap_servers=bootstrap, subscribe=",".join(topics), store=str(tmp / "store"),
                    checkpoint=str(tmp / "checkpoint"), segment_size=4 << 20, consume_queue_units=1000,
                    max_offsets_per_trigger=1000, master=None, flush="sync", source=source)
    cfg.validate()
    return cfg


def test_run_stores_what_librdkafka_produced_exactly_once(bootstrap_servers: str, spark: object,
                                                           produced: dict[str, list[Produced]],
                                                           tmp_path: Path, source: str) -> None:
    cfg = config(bootstrap_servers, sorted(produced), tmp_path, source)
    run_stream(cfg, stop=threading.Event(), spark=spark, available_now=True)
    assert_exactly_once(tmp_path / "store", produced)


def test_replay_stores_what_librdkafka_produced_exactly_once(bootstrap_servers: str, spark: object,
                                                              produced: dict[str, list[Produced]],
                                                              tmp_path: Path, source: str) -> None:
    cfg = config(bootstrap_servers, sorted(produced), tmp_path, source)
    summary = replay(cfg, ReplayOptions(topics=tuple(sorted(produced)), progress="log"), spark=spark)
    assert summary.complete
    assert_exactly_once(tmp_path / "store", produced)
