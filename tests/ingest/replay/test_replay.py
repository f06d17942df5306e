"""``commitlog replay`` against the real broker and the shared SparkSession: a topic replayed from Kafka
and from its exports gives the same store; a range replayed twice is written once; timestamp bounds
are exact at their edges."""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path

import pytest

from ingest.config import JobConfig
from ingest.replay.command import ReplayOptions, replay
from ingest.replay.files import export_records, read_kafka_files
from ingest.replay.plan import Bound
from tests.helpers.replays import (
    kafka_coordinates,
    new_topic,
    produce,
    produce_timed,
    store_messages,
    value_of,
    without_store_timestamp,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=1.1)]

BIG = 100_000
BIG_PARTITIONS = 4


def job_config(bootstrap: str, topic: str, store: Path, **overrides: object) -> JobConfig:
    cfg = JobConfig(bootstrap_servers=bootstrap, subscribe=topic, store=str(store), segment_size=1024 * 1024,
                    consume_queue_units=10_000, max_offsets_per_trigger=50_000, master=None, flush="sync")
    for k, v in overrides.items():
        setattr(cfg, k, v)
    cfg.validate()
    return cfg


def by_coordinates(df: object) -> dict:
    return {(r["topic"], r["partition"], r["offset"]): r.asDict(recursive=True) for r in df.collect()}


@pytest.fixture(scope="module")
def big_topic(bootstrap_servers: str) -> str:
    topic = new_topic(bootstrap_servers, BIG_PARTITIONS, "replay-big")
    t0 = time.perf_counter()
    produce(bootstrap_servers, topic, BIG, BIG_PARTITIONS)
    logging.getLogger(__name__).info("produced %d records in %.1f s", BIG, time.perf_counter() - t0)
    return topic


def test_kafka_jsonl_and_parquet_replays_write_the_same_store(bootstrap_servers: str, spark: object,
                                                              big_topic: str, tmp_path: Path) -> None:
    opts = ReplayOptions(topics=(big_topic,), progress="log")
    t0 = time.perf_counter()
    from_kafka = replay(job_config(bootstrap_servers, big_topic, tmp_path / "kafka"), opts, spark=spark)
    kafka_s = time.perf_counter() - t0
    assert from_kafka.complete and from_kafka.verified is True
    assert from_kafka.records == BIG and from_kafka.batches == 2   # 50,000 offsets per batch
    print(f"\nreplay from Kafka: {BIG} records in {kafka_s:.1f} s, {BIG / kafka_s:,.0f} rec/s")

    kafka_store = store_messages(tmp_path / "kafka")
    coords = kafka_coordinates(kafka_store)
    assert sorted(coords) == sorted((big_topic, i % BIG_PARTITIONS, i // BIG_PARTITIONS) for i in range(BIG))
    sample = {c: m for c, m in zip(coords, kafka_store) if c[2] in (0, 7, 24_999)}
    for (topic, partition, offset), m in sample.items():
        i = offset * BIG_PARTITIONS + partition
        assert (m["topic"], m["queue_id"], m["queue_offset"], m["body"]) == (topic, partition, offset, value_of(i))
        assert m["born_timestamp"] == 1_700_000_000_000 + i
        assert m["properties"].get("trace") == (f"t{i}" if i % 5 == 0 else None)
        assert m["properties"].get("KEYS") == (f"k{i}" if i % 3 else None)

    for fmt in ("jsonl", "parquet"):
        export = tmp_path / f"export-{fmt}"
        assert export_records(bootstrap_servers, export, fmt, big_topic) == BIG
        store = tmp_path / f"files-{fmt}"
        t0 = time.perf_counter()
        summary = replay(job_config(bootstrap_servers, big_topic, store),
                         ReplayOptions(from_files=str(export), file_format=fmt, progress="log"), spark=spark)
        print(f"replay from {fmt}: {BIG / (time.perf_counter() - t0):,.0f} rec/s")
        assert summary.complete and summary.verified is True and summary.records == BIG
        from_files = store_messages(store)
        assert len(from_files) == len(kafka_store)
        for i, (a, b) in enumerate(zip(without_store_timestamp(kafka_store), without_store_timestamp(from_files))):
            assert a == b, f"{fmt}: record {i} differs from the Kafka replay's"


def test_a_range_replayed_twice_is_written_once(bootstrap_servers: str, spark: object, tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture, source: str) -> None:
    topic = new_topic(bootstrap_servers, 3, "replay-twice")
    produce(bootstrap_servers, topic, 3000, 3)
    cfg = job_config(bootstrap_servers, topic, tmp_path / "store", max_offsets_per_trigger=700, source=source)
    half = Bound("offsets", offsets={(topic, p): 500 for p in range(3)})

    first = replay(cfg, ReplayOptions(topics=(topic,), finish=half, verify=False), spark=spark)
    assert first.records == 1500
    whole = replay(cfg, ReplayOptions(topics=(topic,), verify=False), spark=spark)
    assert whole.records == 1500 and sum(p.held for p in whole.plan.partitions) == 1500

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="commitlog.replay"):
        again = replay(cfg, ReplayOptions(topics=(topic,)), spark=spark)
    assert again.records == 0 and again.batches == 0 and again.complete and again.verified is True
    assert "already in the store" in caplog.text and "nothing to replay" in caplog.text

    coords = kafka_coordinates(store_messages(cfg.store))
    assert len(coords) == 3000 and not [c for c, n in Counter(coords).items() if n > 1]

    # another topic into the same store: appended after what it held, which stays as it was
    before = store_messages(cfg.store)
    other = new_topic(bootstrap_servers, 1, "replay-other")
    produce(bootstrap_servers, other, 300, 1)
    replay(job_config(bootstrap_servers, other, Path(cfg.store), source=source),
           ReplayOptions(topics=(other,), verify=False), spark=spark)
    after = store_messages(cfg.store)
    assert after[:3000] == before and len(after) == 3300
    assert {m["topic"] for m in after[3000:]} == {other} and after[3000]["offset"] > before[-1]["offset"]


def test_timestamp_bounds_are_exact_at_their_edges(bootstrap_servers: str, spark: object, tmp_path: Path) -> None:
    topic = new_topic(bootstrap_servers, 2, "replay-ts")
    stamps = [100, 199, 200, 200, 250, 399, 400, 400, 401, 500]
    rows = [(p, ts, f"{p}:{i}:{ts}".encode()) for p in range(2) for i, ts in enumerate(stamps)]
    produce_timed(bootstrap_servers, topic, rows)
    wanted = sorted((p, i) for p in range(2) for i, ts in enumerate(stamps) if 200 <= ts < 400)
    opts = dict(begin=Bound("timestamp", timestamp=200), finish=Bound("timestamp", timestamp=400), verify=False)

    kafka = replay(job_config(bootstrap_servers, topic, tmp_path / "kafka"),
                   ReplayOptions(topics=(topic,), **opts), spark=spark)
    got = store_messages(tmp_path / "kafka")
    assert sorted((m["queue_id"], int(m["properties"]["KAFKA_OFFSET"])) for m in got) == wanted
    assert sorted(m["born_timestamp"] for m in got) == sorted([200, 200, 250, 399] * 2)
    assert [(p.start, p.end) for p in kafka.plan.partitions] == [(2, 6), (2, 6)]

    export_records(bootstrap_servers, tmp_path / "export", "jsonl", topic)
    replay(job_config(bootstrap_servers, topic, tmp_path / "files"),
           ReplayOptions(from_files=str(tmp_path / "export"), **opts), spark=spark)
    assert without_store_timestamp(store_messages(tmp_path / "files")) == without_store_timestamp(got)


def test_exported_files_read_back_as_the_kafka_source_reads_them(bootstrap_servers: str, spark: object,
                                                                  tmp_path: Path) -> None:
    topic = new_topic(bootstrap_servers, 2, "replay-export")
    produce(bootstrap_servers, topic, 500, 2)
    from_source = (spark.read.format("kafka-python").option("kafka.bootstrap.servers", bootstrap_servers)
                   .option("subscribe", topic).option("includeHeaders", "true").load())
    expected = by_coordinates(from_source)
    assert len(expected) == 500
    for fmt in ("jsonl", "parquet"):
        export_records(bootstrap_servers, tmp_path / fmt, fmt, topic)
        df = read_kafka_files(spark, tmp_path / fmt, fmt)
        assert df.select(*from_source.columns).schema == from_source.schema, fmt
        assert df.where("problem IS NOT NULL").count() == 0, fmt
        assert by_coordinates(df.drop("problem")) == expected, fmt


def test_files_written_by_spark_itself_are_read(bootstrap_servers: str, spark: object, tmp_path: Path) -> None:
    """The export form is Spark's: ``df.write.json`` (binary as base64, ISO timestamps) reads back."""
    topic = new_topic(bootstrap_servers, 1, "replay-sparkjson")
    produce(bootstrap_servers, topic, 50, 1)
    source = (spark.read.format("kafka-python").option("kafka.bootstrap.servers", bootstrap_servers)
              .option("subscribe", topic).option("includeHeaders", "true").load())
    source.write.json(str(tmp_path / "json"))
    source.write.parquet(str(tmp_path / "parquet"))
    expected = by_coordinates(source)
    for fmt, sub in (("jsonl", "json"), ("parquet", "parquet")):
        assert by_coordinates(read_kafka_files(spark, tmp_path / sub, fmt).drop("problem")) == expected, fmt


def test_a_record_no_segment_can_hold_is_a_dead_letter_in_replay_too(bootstrap_servers: str, spark: object,
                                                                      tmp_path: Path) -> None:
    topic = new_topic(bootstrap_servers, 1, "replay-pill")
    produce_timed(bootstrap_servers, topic, [(0, 1_700_000_000_000 + i, b"v" * (200_000 if i == 5 else 10))
                                             for i in range(20)])
    cfg = job_config(bootstrap_servers, topic, tmp_path / "store", segment_size=64 * 1024)
    done = replay(cfg, ReplayOptions(topics=(topic,)), spark=spark)
    assert done.complete and done.records == 19 and done.dead_letters == 1 and done.verified is True
    from sink import read_dead_letters

    [letter] = read_dead_letters(cfg.store)
    assert letter["offset"] == 5 and "body is 200000 bytes" in letter["reason"]
