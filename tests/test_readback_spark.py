"""The ``rocketmq-commitlog`` Spark source: every golden store read through it equals RocketMQ's
reference decoding; filters are pushed down and give what Spark's own filtering gives; a store
written by the job from Kafka reads back as exactly what was produced (compared in Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from store.format.record_batch import READBACK_SCHEMA
from tests.readback_expect import assert_rows_equal, expected_rows, golden_root, golden_stores

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


def test_a_path_that_is_no_store_is_refused_with_its_name(spark: object, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="is not a store"):
        spark.read.format("rocketmq-commitlog").load(str(tmp_path)).count()  # type: ignore[attr-defined]
