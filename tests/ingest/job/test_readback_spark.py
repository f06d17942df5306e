"""The ``rocketmq-commitlog`` Spark source: every golden store read through it equals RocketMQ's
reference decoding; filters are pushed down and give what Spark's own filtering gives; a store
written by the job from Kafka reads back as exactly what was produced (compared in Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from store.format import EMPTY_VALUE_BODY
from store.scan.record_batch import READBACK_SCHEMA
from tests.helpers.readback_expect import assert_rows_equal, expected_rows, golden_root, golden_stores

pytestmark = pytest.mark.integration


def _rows(df: object) -> list[dict]:
    return [r.asDict() for r in df.orderBy("physicalOffset").collect()]  # type: ignore[attr-defined]


@pytest.mark.parametrize("case", golden_stores())
def test_each_golden_store_read_by_spark_is_its_reference_decoding(spark: object, case: str) -> None:
    expected = expected_rows(case)
    df = spark.read.format("rocketmq-commitlog").option("maxBytesPerPartition", 1000) \
        .load(str(golden_root() / case))  # type: ignore[attr-defined]
    assert df.columns == READBACK_SCHEMA.names
    assert df.rdd.getNumPartitions() > 7          # the 4 KiB segments, each cut in pieces
    assert_rows_equal(_rows(df), expected)


@pytest.mark.parametrize("case", golden_stores())
def test_pushed_filters_give_what_spark_filtering_gives(spark: object, case: str) -> None:
    from pyspark.sql import functions as F

    expected = expected_rows(case)
    path = str(golden_root() / case)
    topic = expected[1]["topic"]
    queue = expected[1]["queueId"]
    ts = sorted(r["storeTimestamp"] for r in expected)
    lo, hi = ts[len(ts) // 4], ts[3 * len(ts) // 4]
    conditions = [
        F.col("topic") == topic,
        F.col("topic").isin(topic, "nope") & (F.col("queueId") == queue),
        (F.col("storeTimestamp") > lo) & (F.col("storeTimestamp") <= hi),
        (F.col("storeTimestamp") >= lo) & (F.col("storeTimestamp") < hi) & F.col("queueId").isin(0, queue),
        (F.col("topic") == topic) & (F.col("topic") == "other"),
        (F.col("topic") == topic) | (F.col("queueId") == queue),        # not pushed: an OR
    ]
    for cond in conditions:
        pushed = spark.read.format("rocketmq-commitlog").load(path).where(cond)  # type: ignore[attr-defined]
        plain = spark.read.format("rocketmq-commitlog").option("pushFilters", "false").load(path)  # type: ignore
        assert _rows(pushed) == _rows(plain.where(cond)), f"filter {cond}"
    one_queue = (F.col("topic") == topic) & (F.col("queueId") == queue)
    only = spark.read.format("rocketmq-commitlog").load(path).where(one_queue)  # type: ignore[attr-defined]
    assert only.rdd.getNumPartitions() == 1, "one queue of four is read through the consume queues"
    assert _rows(only) == [r for r in _rows(plain) if (r["topic"], r["queueId"]) == (topic, queue)]


def test_a_batch_read_stops_at_the_commit_point_while_a_writer_runs(spark: object, tmp_path: Path) -> None:
    """Records appended and flushed but not yet committed are not read, however the filters go."""
    from store import MessageStore
    from store.config import StoreConfig
    from store.format.codec import Message

    root = tmp_path / "store"
    msgs = [Message(topic="T", body=b"m%d" % i, queue_id=i % 2, store_timestamp=1000 + i) for i in range(120)]
    with MessageStore.open(root, StoreConfig(segment_size=64 * 1024)) as store:
        store.append(msgs[:100])
        store.commit()
        store.append(msgs[100:])
        store.flush()
        df = spark.read.format("rocketmq-commitlog").load(str(root))  # type: ignore[attr-defined]
        assert sorted(bytes(r.body) for r in df.select("body").collect()) == sorted(m.body for m in msgs[:100])
        through_queue = df.where("topic = 'T' AND queueId = 1").count()
        assert through_queue == 50


def test_a_path_that_is_no_store_is_refused_with_its_name(spark: object, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="is not a store"):
        spark.read.format("rocketmq-commitlog").load(str(tmp_path)).count()  # type: ignore[attr-defined]


# --- Kafka -> job -> store -> Spark: what was produced comes back --------------------------------

def _produced_records(topics: list[str]) -> list[tuple[str, int, bytes | None, bytes | None, list]]:
    out = []
    for i in range(1600):
        key: bytes | None = [f"key-{i}".encode(), None, b"", b"\xff\xfe-" + bytes([i % 256]), "ключ-ü".encode()][i % 5]
        value: bytes | None = [f"value-{i}-".encode() * (i % 9), None, b"", bytes(range(256)) * (i % 3)][i % 4]
        if key is None and value is None:
            key = b""                       # kafka-python sends no record with neither
        headers = [("TAGS", f"tag{i % 3}".encode()), ("seq", str(i).encode())] if i % 6 else []
        if i % 7 == 0:
            headers.append(("trace", f"t-{i}-ü".encode()))
        out.append((topics[i % len(topics)], i % 4, key, value, headers))
    return out


def _expected_from_kafka(spark: object, bootstrap: str, topics: list[str]) -> object:
    """The store's columns as the job's mapping rules make them, computed in Spark from Spark's read
    of the topics (kafka-python source): RocketMQ fields from the Kafka record, the properties as
    headers + KEYS or KAFKA_KEY_BASE64 + KAFKA_VALUE_NULL for a tombstone or KAFKA_VALUE_EMPTY for a
    0-byte value (both a one-byte body) + the Kafka coordinates + UNIQ_KEY, the queue offsets as each
    partition's order."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    kafka = (spark.read.format("kafka-python")  # type: ignore[attr-defined]
             .option("kafka.bootstrap.servers", bootstrap).option("subscribe", ",".join(topics))
             .option("startingOffsets", "earliest").option("endingOffsets", "latest")
             .option("includeHeaders", "true").load())
    key_text = F.col("key").cast("string")
    text_key = F.col("key").isNotNull() & (F.length("key") > 0) & F.is_valid_utf8(key_text) \
        & ~key_text.contains("\u0001") & ~key_text.contains("\u0002")
    binary_key = F.col("key").isNotNull() & (F.length("key") > 0) & ~text_key
    uniq = F.upper(F.concat(F.lpad(F.hex(F.crc32(F.encode("topic", "UTF-8"))), 8, "0"),
                            F.lpad(F.hex("partition"), 8, "0"), F.lpad(F.hex("offset"), 16, "0")))
    header_map = F.map_from_entries(F.transform(F.coalesce("headers", F.array()),
                                                lambda h: F.struct(h["key"], h["value"].cast("string"))))
    coords = F.create_map(F.lit("KAFKA_TOPIC"), F.col("topic"), F.lit("KAFKA_PARTITION"),
                          F.col("partition").cast("string"), F.lit("KAFKA_OFFSET"), F.col("offset").cast("string"),
                          F.lit("UNIQ_KEY"), uniq)
    key_map = F.when(text_key, F.create_map(F.lit("KEYS"), key_text)) \
        .when(binary_key, F.create_map(F.lit("KAFKA_KEY_BASE64"), F.base64("key"))) \
        .otherwise(F.create_map().cast("map<string,string>"))
    tombstone = F.when(F.col("value").isNull(), F.create_map(F.lit("KAFKA_VALUE_NULL"), F.lit("true"))) \
        .when(F.length("value") == 0, F.create_map(F.lit("KAFKA_VALUE_EMPTY"), F.lit("true"))) \
        .otherwise(F.create_map().cast("map<string,string>"))
    in_partition = Window.partitionBy("topic", "partition").orderBy("offset")
    return kafka.select(
        F.col("topic"), F.col("partition").alias("queueId"),
        (F.row_number().over(in_partition) - 1).cast("long").alias("queueOffset"),
        F.unix_millis("timestamp").alias("bornTimestamp"), F.lit("127.0.0.1:0").alias("bornHost"),
        F.lit("127.0.0.1:10911").alias("storeHost"), F.lit(0).alias("sysFlag"), F.lit(0).alias("flag"),
        F.lit(0).alias("reconsumeTimes"), F.when(text_key, key_text).alias("keys"),
        header_map["TAGS"].alias("tags"), F.map_concat(key_map, header_map, tombstone, coords).alias("properties"),
        F.when(F.length("value") > 0, F.col("value")).otherwise(F.lit(EMPTY_VALUE_BODY)).alias("body"), F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"), F.col("offset").alias("kafka_offset"))


def _comparable(df: object) -> object:
    """Every column but the two the store alone decides (physicalOffset, storeTimestamp); the map
    as a sorted array of entries (Spark cannot compare maps)."""
    from pyspark.sql import functions as F

    cols = [c for c in READBACK_SCHEMA.names if c not in ("physicalOffset", "storeTimestamp")]
    return df.select(*[F.array_sort(F.map_entries(c)).alias(c) if c == "properties" else F.col(c)  # type: ignore
                       for c in cols])


def _anti(left: object, right: object) -> object:
    cond = [left[c].eqNullSafe(right[c]) for c in left.columns]  # type: ignore[attr-defined]
    return left.join(right, cond, "left_anti")  # type: ignore[attr-defined]


def test_what_was_produced_to_kafka_reads_back_from_the_store(bootstrap_servers: str, spark: object,
                                                              tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    from tests.helpers.brokers.kafka_records import create_topics, produce, unique_topic
    from tests.helpers.jobs import job_config, run_until_caught_up

    topics = [unique_topic("readback-a"), unique_topic("readback-b")]
    create_topics(bootstrap_servers, topics)
    sent = produce(bootstrap_servers, _produced_records(topics))
    cfg = job_config(bootstrap_servers, topics, tmp_path, segment_size=256 * 1024)
    run_until_caught_up(cfg, spark)

    stored = spark.read.format("rocketmq-commitlog").option("maxBytesPerPartition", 64 * 1024) \
        .load(cfg.store)  # type: ignore[attr-defined]
    assert stored.rdd.getNumPartitions() > 3
    expected = _expected_from_kafka(spark, bootstrap_servers, topics)
    got, want = _comparable(stored).cache(), _comparable(expected).cache()
    assert want.count() == len(sent) == got.count()
    missing, unexpected = _anti(want, got), _anti(got, want)
    assert missing.count() == 0 and unexpected.count() == 0, \
        f"produced but not read back: {missing.limit(3).collect()}; read back but not produced: " \
        f"{unexpected.limit(3).collect()}"
    assert got.exceptAll(want).count() == 0 and want.exceptAll(got).count() == 0     # duplicates too
    # the cases that matter are there: null and empty values, binary and absent keys, no headers
    assert stored.where(F.length("body") == 0).count() == 0      # RocketMQ has no empty body
    counts = stored.agg(F.sum(F.col("properties")["KAFKA_VALUE_NULL"].isNotNull().cast("int")),
                        F.sum(F.col("properties")["KAFKA_VALUE_EMPTY"].isNotNull().cast("int")),
                        F.sum(F.col("keys").isNull().cast("int")),
                        F.sum(F.col("properties")["KAFKA_KEY_BASE64"].isNotNull().cast("int")),
                        F.sum(F.col("tags").isNull().cast("int"))).first()
    assert all(c > 100 for c in counts), counts
    offsets = [r[0] for r in stored.select("physicalOffset").orderBy("physicalOffset").collect()]
    assert len(set(offsets)) == len(offsets)


def test_read_stream_follows_the_store_from_its_commit_point(spark: object, tmp_path: Path) -> None:
    """readStream reads what is committed, then, on the next trigger, only what was committed since."""
    from store import MessageStore
    from store.config import StoreConfig
    from store.format.codec import Message

    root, checkpoint = tmp_path / "store", tmp_path / "checkpoint"
    msgs = [Message(topic="T", body=b"m%d" % i, queue_id=i % 2, store_timestamp=1000 + i) for i in range(300)]

    out = tmp_path / "out"

    def drain() -> list[bytes]:
        """One trigger of the stream into a parquet sink; every body the sink holds so far."""
        query = (spark.readStream.format("rocketmq-commitlog").load(str(root))  # type: ignore[attr-defined]
                 .select("body").writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(checkpoint)).trigger(once=True).start())
        query.awaitTermination(120)
        return sorted(bytes(r.body) for r in spark.read.parquet(str(out)).collect())  # type: ignore[attr-defined]

    with MessageStore.open(root, StoreConfig(segment_size=64 * 1024)) as store:
        store.append(msgs[:200])
        store.commit()
        store.append(msgs[200:250])        # appended, not committed: not read
        store.flush()
        assert drain() == sorted(m.body for m in msgs[:200])
        store.commit()
        store.append(msgs[250:])
        store.commit()
    assert drain() == sorted(m.body for m in msgs)      # the rest, once: nothing read twice
