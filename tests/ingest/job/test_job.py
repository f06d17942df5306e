"""The streaming job, Kafka to CommitLog, against the real broker and a real SparkSession."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ingest.encode.mapping import uniq_key
from ingest.encode.restore import kafka_headers, kafka_value
from sink import read_dead_letters
from tests.helpers.jobs import (
    assert_exactly_once,
    assert_queues_contiguous_in_partition_order,
    job_config,
    run_until_caught_up,
    sample,
)
from tests.helpers.brokers.kafka_records import create_topics, produce, store_by_coordinates, unique_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=1.5)]


def test_every_event_lands_once_with_its_fields(bootstrap_servers: str, spark: object, tmp_path: Path, source: str) -> None:
    topics = [unique_topic("job-a"), unique_topic("job-b")]
    create_topics(bootstrap_servers, topics)
    sent = produce(bootstrap_servers, sample(topics, 3000))
    cfg = job_config(bootstrap_servers, topics, tmp_path, source=source)
    run_until_caught_up(cfg, spark)

    found = assert_exactly_once(cfg.store, sent)
    for s in sent:
        [(phys, msg)] = found[(s.topic, s.partition, s.offset)]
        props = msg.properties
        assert (msg.topic, msg.queue_id, kafka_value(msg.body, props)) == (s.topic, s.partition, s.value)
        assert len(msg.body) > 0       # a 0-byte value is stored as a one-byte body (README)
        assert msg.born_timestamp == s.timestamp_ms
        assert props.get("KEYS") == (s.key.decode() if s.key else None)
        assert props["TAGS"] == dict(s.headers)["TAGS"].decode() and props["seq"] == dict(s.headers)["seq"].decode()
        assert props["UNIQ_KEY"] == uniq_key(s.topic, s.partition, s.offset)
        assert msg.physical_offset == phys
    assert_queues_contiguous_in_partition_order(found)
    assert not (Path(cfg.store) / "abort").exists(), "the job left the store open"


def test_a_second_run_continues_and_a_lost_checkpoint_writes_nothing_twice(
        bootstrap_servers: str, spark: object, tmp_path: Path, source: str) -> None:
    topics = [unique_topic("job-restart")]
    create_topics(bootstrap_servers, topics)
    first = produce(bootstrap_servers, sample(topics, 1500))
    cfg = job_config(bootstrap_servers, topics, tmp_path, source=source)
    run_until_caught_up(cfg, spark)

    shutil.rmtree(cfg.checkpoint)                     # the Spark checkpoint is lost
    second = produce(bootstrap_servers, sample(topics, 1000))
    run_until_caught_up(cfg, spark)                   # starts from the store's Kafka offsets
    run_until_caught_up(cfg, spark)                   # and a run with nothing new adds nothing

    found = assert_exactly_once(cfg.store, first + second)
    assert len(found) == len(first) + len(second)
    assert_queues_contiguous_in_partition_order(found)


def test_bad_records_go_to_dead_letters_and_the_stream_goes_on(
        bootstrap_servers: str, spark: object, tmp_path: Path, source: str) -> None:
    topics = [unique_topic("job-dlq")]
    create_topics(bootstrap_servers, topics)
    good = sample(topics, 400)
    bad = [(topics[0], 1, b"big", b"x" * 5000, []),
           (topics[0], 2, b"props", b"v", [("h", b"y" * 33000)])]
    odd = [(topics[0], 3, b"sep", b"v", [("h", b"a\x02b")]),
           (topics[0], 0, b"utf", b"v", [("h", b"\xff")])]
    sent = produce(bootstrap_servers, good[:200] + bad + odd + good[200:])
    cfg = job_config(bootstrap_servers, topics, tmp_path, max_message_size=4096, source=source)
    run_until_caught_up(cfg, spark)

    bad_sent = [s for s in sent if s.key in (b"big", b"props")]
    good_sent = [s for s in sent if s not in bad_sent]
    found = assert_exactly_once(cfg.store, good_sent)
    assert len(found) == len(good_sent)
    assert_queues_contiguous_in_partition_order(found)
    for s in (s for s in sent if s.key in (b"sep", b"utf")):
        [(_, msg)] = found[(s.topic, s.partition, s.offset)]
        assert kafka_headers(msg.properties) == [("h", b"a\x02b" if s.key == b"sep" else b"\xff")]
    letters = {(d["topic"], d["partition"], d["offset"]): d for d in read_dead_letters(cfg.store)}
    assert set(letters) == {(s.topic, s.partition, s.offset) for s in bad_sent}
    reasons = " | ".join(d["reason"] for d in letters.values())
    assert "body is 5000 bytes, over the limit of 4096" in reasons
    assert "over the limit of 32767" in reasons


def test_a_record_no_segment_can_hold_is_a_dead_letter_not_a_poison_pill(
        bootstrap_servers: str, spark: object, tmp_path: Path) -> None:
    """With 64 KiB segments, a 200 KB value (over the default limit such a segment leaves) and a
    record whose key and value fit their limits but not a segment together are dead letters
    with their reasons; the stream goes on, and a second run has nothing left to trip on."""
    topics = [unique_topic("job-pill")]
    create_topics(bootstrap_servers, topics)
    good = sample(topics, 100)
    pills = [(topics[0], 1, b"pill", b"v" * 200_000, []),
             (topics[0], 2, b"k" * 30_000, b"w" * 40_000, [])]
    sent = produce(bootstrap_servers, good[:50] + pills + good[50:])
    cfg = job_config(bootstrap_servers, topics, tmp_path, segment_size=64 * 1024)
    run_until_caught_up(cfg, spark)
    run_until_caught_up(cfg, spark)

    bad_sent = [s for s in sent if s.key in (b"pill", b"k" * 30_000)]
    good_sent = [s for s in sent if s not in bad_sent]
    found = assert_exactly_once(cfg.store, good_sent)
    assert len(found) == len(good_sent)
    letters = {(d["topic"], d["partition"], d["offset"]): d["reason"] for d in read_dead_letters(cfg.store)}
    assert set(letters) == {(s.topic, s.partition, s.offset) for s in bad_sent}
    reasons = sorted(letters.values())
    assert any("body is 200000 bytes, over the limit of" in r for r in reasons), reasons
    assert any("segment of 65536 bytes" in r for r in reasons), reasons


def test_a_spark_checkpoint_ahead_of_the_store_is_rewound_and_the_batch_written_again(
        bootstrap_servers: str, spark: object, tmp_path: Path, source: str) -> None:
    # The sink commits a batch after Spark has recorded it. A job stopped in between leaves Spark's
    # checkpoint one batch ahead of the store: made here by putting back a copy of the store taken
    # one batch earlier. Without the rewind, Spark would go on after that batch and its records
    # would never reach the store.
    topics = [unique_topic("job-rewind")]
    create_topics(bootstrap_servers, topics)
    first = produce(bootstrap_servers, sample(topics, 300))
    cfg = job_config(bootstrap_servers, topics, tmp_path, source=source)
    run_until_caught_up(cfg, spark)
    behind = tmp_path / "store-behind"
    shutil.copytree(cfg.store, behind)
    second = produce(bootstrap_servers, sample(topics, 200))
    run_until_caught_up(cfg, spark)
    assert sorted(p.name for p in (Path(cfg.checkpoint) / "commits").iterdir() if p.name.isdigit()) == ["0", "1"]

    shutil.rmtree(cfg.store)
    shutil.move(behind, cfg.store)                    # the store has batch 0; Spark has batch 1 done
    run_until_caught_up(cfg, spark)

    found = assert_exactly_once(cfg.store, first + second)
    assert len(found) == len(first) + len(second)
    assert_queues_contiguous_in_partition_order(found)


def test_a_store_that_never_committed_the_querys_first_batch_gets_it_from_spark_again(
        bootstrap_servers: str, spark: object, tmp_path: Path) -> None:
    # Stopped while the query's first batch was in the writer: Spark has batch 0 done, the store has
    # nothing (made here by emptying the store after a run).
    topics = [unique_topic("job-first")]
    create_topics(bootstrap_servers, topics)
    sent = produce(bootstrap_servers, sample(topics, 300))
    cfg = job_config(bootstrap_servers, topics, tmp_path)
    run_until_caught_up(cfg, spark)
    shutil.rmtree(cfg.store)
    run_until_caught_up(cfg, spark)

    found = assert_exactly_once(cfg.store, sent)
    assert len(found) == len(sent)


def test_both_sources_write_the_same_records(bootstrap_servers: str, spark: object, tmp_path: Path) -> None:
    """Ours and Spark's own connector, on the same topics: `dump --json` of the two stores agrees on
    every message but where it lies and when it was stored (how a source splits the batches may
    move a record in the log, never change it)."""
    import json
    import subprocess
    import sys

    topics = [unique_topic("job-sources"), unique_topic("job-sources")]
    create_topics(bootstrap_servers, topics)
    produce(bootstrap_servers, sample(topics, 1200))
    where = {"offset", "segment", "segmentPos", "physicalOffset", "storeTimestamp"}
    dumps = []
    for source in ("kafka-python", "spark-kafka"):
        cfg = job_config(bootstrap_servers, topics, tmp_path / source, source=source)
        run_until_caught_up(cfg, spark)
        done = subprocess.run([sys.executable, "-m", "ingest.cli", "dump", cfg.store, "--json"],
                              capture_output=True, text=True, timeout=120, check=True)
        messages = [json.loads(line) for line in done.stdout.splitlines() if '"type":"message"' in line.replace(" ", "")]
        for m in messages:     # the decoder's own check repeats where and when
            m["check"] = {k: v for k, v in m.get("check", {}).items() if k not in {"commitLogOffset", "storeTimestamp"}}
        dumps.append({(m["properties"]["KAFKA_TOPIC"], m["properties"]["KAFKA_PARTITION"], m["properties"]["KAFKA_OFFSET"]):
                      {k: v for k, v in m.items() if k not in where} for m in messages})
    ours, sparks = dumps
    assert len(ours) == 1200 and set(ours) == set(sparks)
    differ = {k: {f: (ours[k].get(f), sparks[k].get(f)) for f in set(ours[k]) | set(sparks[k])
                  if ours[k].get(f) != sparks[k].get(f)} for k in ours if ours[k] != sparks[k]}
    assert not differ, f"{len(differ)} messages differ (ours, Spark's), e.g. {list(differ.items())[:3]}"


def test_in_local_mode_batches_reach_the_driver_through_spool_files_and_none_is_left(
        bootstrap_servers: str, spark: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ingest.lifecycle import spool_directory
    from sink.handover.spool import Spool

    topics = [unique_topic("job-spool")]
    create_topics(bootstrap_servers, topics)
    sent = produce(bootstrap_servers, sample(topics, 2000))
    spooled: list[int] = []
    orphans: list[int] = []
    resolve, sweep = Spool.resolve, Spool.sweep

    modes: set[int] = set()

    def counting(self, table):  # noqa: ANN001, ANN202
        spooled.append(table.num_rows - table.column("spool").null_count)
        modes.add(os.stat(self.directory).st_mode & 0o7777)
        return resolve(self, table)

    monkeypatch.setattr(Spool, "resolve", counting)
    monkeypatch.setattr(Spool, "sweep", lambda self: orphans.append(sweep(self)) or orphans[-1])
    by_spark = job_config(bootstrap_servers, topics, tmp_path / "through-spark", spool_dir="off")
    run_until_caught_up(by_spark, spark)
    assert not spooled, "with --spool-dir off every batch crosses Spark"

    spooled.clear()
    cfg = job_config(bootstrap_servers, topics, tmp_path)
    spool_dir = Path(spool_directory(cfg, spark))
    run_until_caught_up(cfg, spark)
    assert len(spooled) >= 3 and all(n > 0 for n in spooled), spooled
    assert spool_dir.parent == Path(cfg.store) and modes == {0o700}, "private, inside the store its lock guards"
    assert orphans and sum(orphans) == 0, "every file a task wrote was taken by its batch, none left to sweep"
    assert not spool_dir.exists(), "the job removes its spool directory when it ends"

    found = assert_exactly_once(cfg.store, sent)
    assert_queues_contiguous_in_partition_order(found)
    other = store_by_coordinates(by_spark.store)
    for coords, [(phys, msg)] in found.items():
        [(phys2, msg2)] = other[coords]
        assert (phys, bytes(msg.body), msg.properties, msg.queue_offset) == \
               (phys2, bytes(msg2.body), msg2.properties, msg2.queue_offset)


def test_an_idle_query_with_a_short_trigger_does_not_warn_at_every_trigger(spark: object) -> None:
    """The default trigger (100ms) is shorter than an empty trigger's Kafka round trips: Spark's "batch
    is falling behind" warning, ten times a second while idle, is kept out of the job's log."""
    from ingest.spark_session import TRIGGER_LOGGER

    jvm = spark._jvm  # type: ignore[attr-defined]
    level = jvm.org.apache.logging.log4j.LogManager.getLogger(TRIGGER_LOGGER).getLevel()
    assert level.toString() == "ERROR"
