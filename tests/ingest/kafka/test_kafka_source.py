"""The kafka-python data source against the real broker and the shared SparkSession."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from pyspark.sql.streaming.datasource import ReadAllAvailable

from ingest.kafka.admin import OffsetReader, latest_offsets, offsets_for_timestamp
from ingest.kafka.offsets import KafkaOffsetRange, offsets_from_json
from ingest.kafka.options import DataLossError, kafka_client_params
from ingest.kafka.source import KafkaDataSource, kafka_schema, source_format, spark_kafka_available

pytestmark = pytest.mark.integration

PARTITIONS = 4
BASE_TS = 1_700_000_000_000


def new_topic(bootstrap: str, prefix: str, partitions: int = PARTITIONS) -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    finally:
        admin.close()
    return topic


def produce(bootstrap: str, topic: str, n: int, first: int = 0, partitions: int = PARTITIONS) -> list[dict]:
    """n records round-robin over the partitions, sent in producer batches (linger) so the broker
    stores multi-record batches. Returns what was sent, with the offsets the broker assigned."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, batch_size=1 << 20)
    sent, futures = [], []
    for i in range(first, first + n):
        rec = {
            "key": None if i % 7 == 3 else f"key-{i}".encode(),
            "value": f"value-{i}".encode() * (1 + i % 3),
            "partition": i % partitions,
            "timestamp_ms": BASE_TS + i * 1000,
            "headers": [] if i % 5 == 4 else [("TAGS", f"tag{i % 3}".encode()), ("seq", str(i).encode())],
        }
        futures.append(producer.send(topic, key=rec["key"], value=rec["value"], partition=rec["partition"],
                                     timestamp_ms=rec["timestamp_ms"], headers=rec["headers"]))
        sent.append(rec)
    producer.flush()
    for rec, fut in zip(sent, futures):
        rec["offset"] = fut.get(10).offset
    producer.close()
    return sent


def batch_df(spark, bootstrap: str, **options: str):
    reader = spark.read.format("kafka-python").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def as_tuples(rows: Iterable) -> list[tuple]:
    return sorted((r["partition"], r["offset"], r["value"]) for r in rows)


def test_batch_read_returns_every_column_in_partition_order(spark, bootstrap_servers: str) -> None:
    topic = new_topic(bootstrap_servers, "batch")
    sent = produce(bootstrap_servers, topic, 60)

    df = batch_df(spark, bootstrap_servers, subscribe=topic, includeHeaders="true")
    assert df.schema == kafka_schema()
    rows = df.collect()

    assert len(rows) == len(sent)
    by_pos = {(r["partition"], r["offset"]): r for r in rows}
    for rec in sent:
        row = by_pos[(rec["partition"], rec["offset"])]
        assert row["key"] == rec["key"] and row["value"] == rec["value"] and row["topic"] == topic
        assert int(row["timestamp"].timestamp() * 1000) == rec["timestamp_ms"]
        assert row["timestampType"] == 0  # CreateTime
        assert [(h["key"], h["value"]) for h in row["headers"]] == rec["headers"]
    for p in range(PARTITIONS):
        offsets = [r["offset"] for r in rows if r["partition"] == p]
        assert offsets == list(range(15)), f"partition {p} not in offset order: {offsets}"


def test_a_task_reading_several_small_ranges_returns_the_same_rows_in_the_same_order(spark, bootstrap_servers: str) -> None:
    topic = new_topic(bootstrap_servers, "grouped")
    produce(bootstrap_servers, topic, 60)

    def read(min_records: str):
        df = batch_df(spark, bootstrap_servers, subscribe=topic, minRecordsPerTask=min_records)
        return df.rdd.getNumPartitions(), [(r["partition"], r["offset"], r["value"]) for r in df.collect()]

    tasks_one_each, rows_one_each = read("0")
    tasks_together, rows_together = read("10000")
    assert (tasks_one_each, tasks_together) == (PARTITIONS, 1)
    assert rows_together == rows_one_each and len(rows_together) == 60


def test_latest_offsets_are_the_true_log_end_despite_batched_produce(kafka_broker, bootstrap_servers: str) -> None:
    # Tansu answers ListOffsets "latest" with (base offset of the last batch + 1): 50 records sent as one
    # batch report latest = 1. Fetching from there shows the rest, so the source must not trust it.
    topic = new_topic(bootstrap_servers, "quirk", partitions=2)
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, linger_ms=200, batch_size=1 << 20)
    for i in range(50):
        producer.send(topic, value=b"v%d" % i, partition=0)
    producer.flush()
    producer.close()

    with OffsetReader(kafka_client_params({"kafka.bootstrap.servers": bootstrap_servers})) as reader:
        reported = reader.reported_latest([(topic, 0), (topic, 1)])
        earliest = reader.earliest([(topic, 0), (topic, 1)])
    if kafka_broker.kind == "tansu":
        assert reported[(topic, 0)] == 1, "Tansu's latest-offset quirk changed; revisit kafka_admin.latest"
    assert earliest == {(topic, 0): 0, (topic, 1): 0}
    assert latest_offsets(bootstrap_servers, topic) == {(topic, 0): 50, (topic, 1): 0}
    assert latest_offsets(bootstrap_servers, pattern=f"{topic}|nothing-.*") == {(topic, 0): 50, (topic, 1): 0}


def test_a_streams_batches_skip_the_end_probe_only_while_the_broker_has_answered_true_ends(
        kafka_broker, bootstrap_servers: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Apache Kafka's ListOffsets answer is the log end: a batch need not fetch to check it. Tansu's
    # falls short once a producer batches records: one short answer found and every batch probes.
    monkeypatch.setattr("ingest.kafka.admin.RECHECK_S", 0.3)
    topic = new_topic(bootstrap_servers, "recheck", partitions=1)
    tp = (topic, 0)

    def send(n: int) -> None:
        producer = KafkaProducer(bootstrap_servers=bootstrap_servers, linger_ms=200, batch_size=1 << 20)
        for i in range(n):
            producer.send(topic, value=b"v%d" % i, partition=0)
        producer.flush()
        producer.close()

    with OffsetReader(kafka_client_params({"kafka.bootstrap.servers": bootstrap_servers})) as reader:
        send(1)
        assert reader.latest([tp], each_batch=True) == {tp: 1}        # probed: the answer was the end
        send(50)
        within_recheck = reader.latest([tp], each_batch=True)[tp]
        assert within_recheck == 51 if kafka_broker.kind == "apache-kafka" else 1 <= within_recheck <= 51
        time.sleep(0.4)
        assert reader.latest([tp], each_batch=True) == {tp: 51}       # rechecked against a probe
        send(50)
        assert reader.latest([tp], each_batch=True) == {tp: 101}      # Tansu: probing for good
        assert reader.latest([tp]) == {tp: 101}


def test_offsets_for_timestamp_finds_the_first_record_at_or_after_it(spark, bootstrap_servers: str) -> None:
    # Tansu answers every timestamp lookup with offset 0 / timestamp -1; the helper then scans.
    topic = new_topic(bootstrap_servers, "times")
    sent = produce(bootstrap_servers, topic, 40)  # record i: partition i % 4, offset i // 4, ts BASE + i s

    found = offsets_for_timestamp(bootstrap_servers, BASE_TS + 21_000, topic)
    # records 21.. are the first at/after the time: 21 -> p1 o5, 22 -> p2 o5, 23 -> p3 o5, 24 -> p0 o6
    assert found == {(topic, 0): 6, (topic, 1): 5, (topic, 2): 5, (topic, 3): 5}
    assert offsets_for_timestamp(bootstrap_servers, BASE_TS + 10**9, topic) == {
        (topic, p): 10 for p in range(PARTITIONS)}

    rows = batch_df(spark, bootstrap_servers, subscribe=topic, startingTimestamp=str(BASE_TS + 21_000)).collect()
    assert as_tuples(rows) == sorted((r["partition"], r["offset"], r["value"]) for r in sent[21:])


def test_starting_and_ending_offsets_json_bound_each_partition(spark, bootstrap_servers: str) -> None:
    topic = new_topic(bootstrap_servers, "range")
    produce(bootstrap_servers, topic, 40)  # 10 per partition
    starting = json.dumps({topic: {"0": 2, "1": -2, "2": -1, "3": 5}})
    ending = json.dumps({topic: {"0": 5, "1": -1, "2": -1, "3": 7}})

    rows = batch_df(spark, bootstrap_servers, subscribe=topic, startingOffsets=starting,
                    endingOffsets=ending).collect()

    got = {p: [r["offset"] for r in sorted(rows, key=lambda r: r["offset"]) if r["partition"] == p]
           for p in range(PARTITIONS)}
    assert got == {0: [2, 3, 4], 1: list(range(10)), 2: [], 3: [5, 6]}

    assigned = batch_df(spark, bootstrap_servers, assign=json.dumps({topic: [1, 3]}),
                        endingOffsets=json.dumps({topic: {"1": 4, "3": 2}})).collect()
    assert sorted((r["partition"], r["offset"]) for r in assigned) == [(1, 0), (1, 1), (1, 2), (1, 3),
                                                                        (3, 0), (3, 1)]


def stream_reader(bootstrap: str, **options: str):
    opts = {"kafka.bootstrap.servers": bootstrap, "startingOffsets": "earliest", **options}
    return KafkaDataSource(opts).streamReader(kafka_schema())


def read_all(reader, partitions) -> list[tuple]:
    return sorted((b["partition"][i].as_py(), b["offset"][i].as_py(), b["value"][i].as_py())
                  for p in partitions for b in reader.read(p) for i in range(b.num_rows))


def test_a_planned_batch_reads_the_same_records_when_planned_again(bootstrap_servers: str) -> None:
    topic = new_topic(bootstrap_servers, "replan")
    produce(bootstrap_servers, topic, 40)
    reader = stream_reader(bootstrap_servers, subscribe=topic, maxOffsetsPerTrigger="20")
    try:
        start = reader.initialOffset()
        assert offsets_from_json(start) == {(topic, p): 0 for p in range(PARTITIONS)}
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert sum(offsets_from_json(end).values()) == 20  # 5 per partition: proportional split
        first = read_all(reader, reader.partitions(start, end))

        produce(bootstrap_servers, topic, 40, first=40)   # more data must not change the planned batch
        again = stream_reader(bootstrap_servers, subscribe=topic, maxOffsetsPerTrigger="20")
        replanned = again.partitions(json.loads(json.dumps(start)), json.loads(json.dumps(end)))
        assert replanned == reader.partitions(start, end)
        assert read_all(again, replanned) == first and len(first) == 20

        everything = reader.latestOffset(end, ReadAllAvailable())
        assert offsets_from_json(everything) == {(topic, p): 20 for p in range(PARTITIONS)}
    finally:
        reader.stop()


def test_subscribe_pattern_picks_up_a_topic_created_after_start(bootstrap_servers: str) -> None:
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    first = new_topic(bootstrap_servers, prefix, partitions=2)
    produce(bootstrap_servers, first, 6, partitions=2)
    reader = stream_reader(bootstrap_servers, subscribePattern=f"{prefix}-.*")
    try:
        start = reader.initialOffset()
        end1 = reader.latestOffset(start, ReadAllAvailable())
        assert offsets_from_json(end1) == {(first, 0): 3, (first, 1): 3}

        later = new_topic(bootstrap_servers, prefix, partitions=2)
        produce(bootstrap_servers, later, 4, partitions=2)
        end2 = reader.latestOffset(end1, ReadAllAvailable())
        # discovered: recorded at its earliest offset, read from the next batch
        assert offsets_from_json(end2) == {(first, 0): 3, (first, 1): 3, (later, 0): 0, (later, 1): 0}
        assert reader.partitions(end1, end2) == []
        end3 = reader.latestOffset(end2, ReadAllAvailable())
        assert offsets_from_json(end3)[(later, 0)] == 2
        assert [(t[0], t[1]) for t in read_all(reader, reader.partitions(end2, end3))] == [
            (0, 0), (0, 1), (1, 0), (1, 1)]
    finally:
        reader.stop()


def run_available_now(spark, bootstrap: str, out: Path, **options: str) -> list[int]:
    """One availableNow run into a parquet sink (which, unlike memory, resumes from its checkpoint);
    returns the rows of each micro-batch."""
    stream = spark.readStream.format("kafka-python").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        stream = stream.option(k, v)
    query = (stream.load().writeStream.format("parquet").option("path", str(out / "data"))
             .option("checkpointLocation", str(out / "checkpoint")).trigger(availableNow=True).start())
    assert query.awaitTermination(60), "availableNow query did not finish in 60 s"
    if query.exception():
        raise query.exception()
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_stream_bounds_batches_and_resumes_from_its_checkpoint(spark, bootstrap_servers: str,
                                                               tmp_path: Path) -> None:
    prefix = f"strm{uuid.uuid4().hex[:6]}"
    topic = new_topic(bootstrap_servers, prefix)
    sent = produce(bootstrap_servers, topic, 80)
    opts = {"subscribePattern": f"{prefix}-.*", "startingOffsets": "earliest", "maxOffsetsPerTrigger": "30",
            "includeHeaders": "true"}

    sizes = run_available_now(spark, bootstrap_servers, tmp_path, **opts)
    assert sizes and max(sizes) <= 30 and sum(sizes) == 80, sizes
    rows = spark.read.parquet(str(tmp_path / "data")).collect()
    assert as_tuples(rows) == sorted((r["partition"], r["offset"], r["value"]) for r in sent)
    assert all(r["headers"] is not None for r in rows)

    more = produce(bootstrap_servers, topic, 20, first=80)
    later = new_topic(bootstrap_servers, prefix, partitions=1)
    produce(bootstrap_servers, later, 5, partitions=1)
    sizes = run_available_now(spark, bootstrap_servers, tmp_path, **opts)
    assert sum(sizes) == 25, sizes   # only what arrived since: nothing read twice, nothing missed
    got = [(r["topic"], r["partition"], r["offset"]) for r in spark.read.parquet(str(tmp_path / "data")).collect()]
    expected = [(topic, r["partition"], r["offset"]) for r in sent + more] + [(later, 0, o) for o in range(5)]
    assert sorted(got) == sorted(expected)


def test_unknown_client_option_fails_the_read_with_its_name(spark, bootstrap_servers: str) -> None:
    with pytest.raises(Exception, match="kafka.no.such.setting"):
        batch_df(spark, bootstrap_servers, subscribe="x", **{"kafka.no.such.setting": "1"}).collect()


def test_a_batch_read_of_an_empty_topic_returns_no_rows(spark, bootstrap_servers: str) -> None:
    # no range to plan: PySpark then runs one task with a placeholder partition
    topic = new_topic(bootstrap_servers, "empty")
    assert batch_df(spark, bootstrap_servers, subscribe=topic).collect() == []


def test_source_format_and_spark_kafka_detection(spark) -> None:
    from ingest.jvm import has_jar_set

    assert source_format("kafka-python") == "kafka-python"
    assert source_format("spark-kafka") == "kafka"
    # the session puts Spark's own connector on its classpath whenever `make jvm` resolved it
    assert spark_kafka_available(spark) is has_jar_set("spark-kafka")


def test_a_deleted_topic_is_data_loss_unless_fail_on_data_loss_is_false(bootstrap_servers: str) -> None:
    prefix = f"gone{uuid.uuid4().hex[:6]}"
    keep, doomed = new_topic(bootstrap_servers, prefix, 1), new_topic(bootstrap_servers, prefix, 1)
    produce(bootstrap_servers, keep, 3, partitions=1)
    strict = stream_reader(bootstrap_servers, subscribePattern=f"{prefix}-.*")
    lenient = stream_reader(bootstrap_servers, subscribePattern=f"{prefix}-.*", failOnDataLoss="false")
    try:
        start = strict.initialOffset()
        assert set(offsets_from_json(start)) == {(keep, 0), (doomed, 0)}
        admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
        admin.delete_topics([doomed])
        admin.close()

        with pytest.raises(DataLossError, match=f"{doomed}-0 no longer exist.*failOnDataLoss=false"):
            strict.latestOffset(start, ReadAllAvailable())
        assert offsets_from_json(lenient.latestOffset(start, ReadAllAvailable())) == {(keep, 0): 3}
    finally:
        strict.stop()
        lenient.stop()


def test_a_broker_silent_past_the_grace_after_the_plan_is_waited_for_not_taken_for_data_loss(
        bootstrap_servers: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A pooled consumer's high watermark is its last fetch's, older than the plan made since; a
    # broker that then answers no fetch for a while (restarting) has not lost the planned records.
    from kafka import KafkaConsumer

    from ingest.kafka.read import SHORT_LOG_GRACE_S

    topic = new_topic(bootstrap_servers, "silent", partitions=1)
    produce(bootstrap_servers, topic, 10, partitions=1)
    reader = stream_reader(bootstrap_servers, subscribe=topic)
    assert len(read_all(reader, [KafkaOffsetRange(topic, 0, 0, 10)])) == 10   # its last high watermark: 10
    produce(bootstrap_servers, topic, 5, first=10, partitions=1)

    answering_poll = KafkaConsumer.poll
    silent_until = time.monotonic() + SHORT_LOG_GRACE_S + 2

    def silent_poll(self: KafkaConsumer, *args: object, **kwargs: object) -> dict:
        if time.monotonic() < silent_until:
            time.sleep(0.5)
            return {}
        return answering_poll(self, *args, **kwargs)

    monkeypatch.setattr(KafkaConsumer, "poll", silent_poll)
    read = read_all(reader, [KafkaOffsetRange(topic, 0, 10, 15)])
    assert [offset for _, offset, _ in read] == list(range(10, 15))


def test_a_task_whose_planned_range_is_past_the_log_end_reports_data_loss(bootstrap_servers: str) -> None:
    # e.g. the topic was re-created after the batch was planned: Kafka answers OffsetOutOfRange,
    # Tansu answers nothing; either way the task must not wait for records that will never come
    topic = new_topic(bootstrap_servers, "short", partitions=1)
    produce(bootstrap_servers, topic, 10, partitions=1)
    planned = KafkaOffsetRange(topic, 0, 8, 20)

    strict = stream_reader(bootstrap_servers, subscribe=topic)
    with pytest.raises(DataLossError, match=f"{topic}-0: offset 10 is past the partition's end"):
        read_all(strict, [planned])
    lenient = stream_reader(bootstrap_servers, subscribe=topic, failOnDataLoss="false")
    assert read_all(lenient, [planned]) == [(0, 8, b"value-8value-8value-8"), (0, 9, b"value-9")]


def test_records_deleted_below_a_given_start_are_found_by_the_read_task(kafka_broker, bootstrap_servers: str) -> None:
    # a replay's batches give both ends of every range, planned without asking the brokers: what
    # retention deleted since is the task's to report (or skip, with failOnDataLoss=false)
    from kafka.structs import TopicPartition

    if kafka_broker.kind == "tansu":
        pytest.skip("Tansu answers no DeleteRecords; Apache Kafka (in a container or from `make jvm`) does")
    topic = new_topic(bootstrap_servers, "trimmed", partitions=1)
    produce(bootstrap_servers, topic, 10, partitions=1)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        admin.delete_records({TopicPartition(topic, 0): 4})
    finally:
        admin.close()
    given = {"kafka.bootstrap.servers": bootstrap_servers, "assign": json.dumps({topic: [0]}),
             "startingOffsets": json.dumps({topic: {"0": 2}}), "endingOffsets": json.dumps({topic: {"0": 6}})}

    strict = KafkaDataSource(given).reader(kafka_schema())
    with pytest.raises(DataLossError, match=f"{topic}-0: offsets 2..3 were deleted"):
        read_all(strict, strict.partitions())
    lenient = KafkaDataSource({**given, "failOnDataLoss": "false"}).reader(kafka_schema())
    assert [offset for _, offset, _ in read_all(lenient, lenient.partitions())] == [4, 5]
