"""Preparing one micro-batch in Spark: drop what the store already holds, map Kafka records to
RocketMQ messages, assign queue offsets with a window function, encode in the executors.

The result is ordered for the commit log: Spark's window partitions by (topic, queueId) and sorts
each partition by source order, ``mapInArrow`` keeps that order, and ``toArrow()`` collects the
partitions in order, so every queue arrives contiguous with its queue offsets ascending.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.mapping import MAPPED_SCHEMA, MappingConfig, map_kafka_batch, map_kafka_batches
from sink.foreach_batch import BatchInputs
from store.batch_codec import encode_batch_to_arrow, validate_batch
from store.codec import CodecConfig

ENCODED_SCHEMA = pa.schema([
    ("record", pa.binary()), ("topic", pa.string()), ("queue_id", pa.int32()), ("sys_flag", pa.int32()),
    ("tags_code", pa.int64()), ("delay_level", pa.int32()), ("queue_offset", pa.int64()),
    ("kafka_topic", pa.string()), ("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()),
    ("dead_reason", pa.string()), ("raw_key", pa.binary()), ("raw_value", pa.binary()),
    ("raw_headers", MAPPED_SCHEMA.field("raw_headers").type), ("raw_timestamp", pa.int64()),
])
MESSAGE_COLUMNS = ["topic", "queue_id", "flag", "body", "properties", "tags", "sys_flag", "born_timestamp",
                   "born_host", "store_host", "reconsume_times", "prepared_transaction_offset", "queue_offset"]
PASS_THROUGH = ["kafka_topic", "kafka_partition", "kafka_offset", "dead_reason", "raw_key", "raw_value",
                "raw_headers", "raw_timestamp"]


def encode_prepared_batch(batch: pa.RecordBatch, codec: CodecConfig) -> pa.RecordBatch:
    """Encode the live rows of a mapped batch (queue offsets assigned); dead rows pass through."""
    table = pa.Table.from_batches([batch])
    live_mask = pc.is_null(table.column("dead_reason"))
    live = table.filter(live_mask)
    dead = table.filter(pc.invert(live_mask))
    if live.num_rows:
        ok, reasons = validate_batch(live.select(MESSAGE_COLUMNS), codec)
        ok = np.asarray(ok, dtype=bool)
        if not ok.all():
            # Limits the mapping could not see (e.g. the whole record size) still end as dead letters.
            bad = live.filter(pa.array(~ok))
            bad = bad.set_column(bad.schema.get_field_index("dead_reason"), "dead_reason",
                                 pa.array([r for r, good in zip(reasons, ok) if not good], pa.string()))
            bad = _with_raw(bad)
            dead = pa.concat_tables([dead, bad])
            live = live.filter(pa.array(ok))
    parts = []
    if live.num_rows:
        encoded = encode_batch_to_arrow(live.select(MESSAGE_COLUMNS), codec)
        cols = {name: encoded.column(name) for name in ENCODED_SCHEMA.names if name in encoded.column_names}
        for name in PASS_THROUGH:
            cols[name] = live.column(name)
        parts.append(pa.table({f.name: cols[f.name].cast(f.type) for f in ENCODED_SCHEMA}, schema=ENCODED_SCHEMA))
    if dead.num_rows:
        n = dead.num_rows
        cols = {"record": pa.nulls(n, pa.binary()), "topic": dead.column("topic"),
                "queue_id": dead.column("queue_id"), "sys_flag": dead.column("sys_flag"),
                "tags_code": pa.nulls(n, pa.int64()), "delay_level": pa.nulls(n, pa.int32()),
                "queue_offset": pa.nulls(n, pa.int64())}
        for name in PASS_THROUGH:
            cols[name] = dead.column(name)
        parts.append(pa.table({f.name: cols[f.name].cast(f.type) for f in ENCODED_SCHEMA}, schema=ENCODED_SCHEMA))
    if not parts:
        return pa.RecordBatch.from_pylist([], ENCODED_SCHEMA)
    return pa.concat_tables(parts).combine_chunks().to_batches()[0]


def _with_raw(rows: pa.Table) -> pa.Table:
    """A live row turned dead keeps its mapped body as the raw value (the Kafka value it came from)."""
    idx = rows.schema.get_field_index("raw_value")
    return rows.set_column(idx, "raw_value", rows.column("body"))


def encode_prepared_batches(batches: Iterator[pa.RecordBatch], codec: CodecConfig) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        out = encode_prepared_batch(batch, codec)
        if out.num_rows:
            yield out


def fusable(mapping: MappingConfig) -> bool:
    """When a RocketMQ queue is exactly one Kafka partition (partition mode, no renaming, no envelope),
    the window can number the raw Kafka rows and one Python pass can map and encode."""
    return mapping.queue_mode == "partition" and not mapping.topic_map and not mapping.envelope


def map_and_encode_batches(batches: Iterator[pa.RecordBatch], mapping: MappingConfig,
                           codec: CodecConfig) -> Iterator[pa.RecordBatch]:
    """The fused pass: Kafka rows numbered by the window (``rn``, ``queue_start``) -> encoded records.

    A dead letter takes no queue offset, so each live row's offset is its window number less the dead
    rows before it in its queue; a queue's rows arrive in order in one Spark partition, possibly over
    several Arrow batches, hence the carried counts."""
    dead_before: dict[tuple[str, int], int] = {}
    for batch in batches:
        mapped = pa.Table.from_batches([map_kafka_batch(batch, mapping)])
        n = mapped.num_rows
        if n == 0:
            continue
        queue_offset = (np.asarray(batch.column("queue_start"), dtype=np.int64)
                        + np.asarray(batch.column("rn"), dtype=np.int64) - 1)
        dead = np.asarray(pc.is_valid(mapped.column("dead_reason")), dtype=bool)
        if dead.any() or dead_before:
            topics = batch.column("topic").to_pylist()
            parts = np.asarray(batch.column("partition"))
            bounds = [0] + [i for i in range(1, n) if parts[i] != parts[i - 1] or topics[i] != topics[i - 1]] + [n]
            for s, e in zip(bounds[:-1], bounds[1:]):
                key = (topics[s], int(parts[s]))
                d = dead[s:e].astype(np.int64)
                queue_offset[s:e] -= dead_before.get(key, 0) + np.cumsum(d) - d
                dead_before[key] = dead_before.get(key, 0) + int(d.sum())
        mapped = mapped.append_column("queue_offset", pa.array(queue_offset, pa.int64(), mask=dead))
        out = encode_prepared_batch(mapped.combine_chunks().to_batches()[0], codec)
        if out.num_rows:
            yield out


def _spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema
    return from_arrow_schema(schema)


def _lookup(keys: Any, mapping: Mapping[str, int]) -> Any:
    """A Spark column: ``mapping[keys]`` or null, from a literal map (a few thousand entries at most)."""
    from pyspark.sql import functions as F

    if not mapping:
        return F.lit(None).cast("long")
    args = []
    for k, v in mapping.items():
        args += [F.lit(k), F.lit(int(v))]
    return F.element_at(F.create_map(*args), keys)


def prepare_batch(df: Any, inputs: BatchInputs, mapping: MappingConfig, codec: CodecConfig) -> Any:
    """The whole Spark side of one micro-batch; returns a DataFrame in ENCODED_SCHEMA, commit-log order."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # 1. Exactly once at record granularity: whatever the store already holds is dropped here, so a
    #    re-run or a reset Spark checkpoint can never write a Kafka record twice.
    tp = F.concat(F.col("topic"), F.lit("/"), F.col("partition").cast("string"))
    stored_below = F.coalesce(_lookup(tp, inputs.kafka_next_offsets), F.lit(0))
    fresh = df.where(F.col("offset") >= stored_below)

    next_by_queue = {f"{t}/{q}": n for (t, q), n in inputs.next_queue_offsets.items()}

    def queue_start(queue_column: str) -> Any:
        """The store's next queue offset of each row's (topic, queue), 0 for a new queue."""
        key = F.concat(F.col("topic"), F.lit("/"), F.col(queue_column).cast("string"))
        return F.coalesce(_lookup(key, next_by_queue), F.lit(0)).cast("long")

    if fusable(mapping):
        # 2+3+4 in one pass: the window numbers each partition's rows in offset order (the shuffle
        # carries only the Kafka columns), then map, correct for dead letters and encode.
        window = Window.partitionBy("topic", "partition").orderBy("offset")
        numbered = (fresh.withColumn("rn", F.row_number().over(window))
                    .withColumn("queue_start", queue_start("partition")))
        return numbered.mapInArrow(partial(map_and_encode_batches, mapping=mapping, codec=codec),
                                   _spark_schema(ENCODED_SCHEMA))

    # 2. Kafka record -> RocketMQ message (or dead letter), in the executors.
    mapped = fresh.mapInArrow(partial(map_kafka_batches, cfg=mapping), _spark_schema(MAPPED_SCHEMA))

    # 3. QUEUEOFFSET per (topic, queueId) over source order, continuing from the store's next offsets.
    window = Window.partitionBy("topic", "queue_id").orderBy("kafka_topic", "kafka_partition", "kafka_offset")
    start = queue_start("queue_id")
    with_offsets = mapped.withColumn(
        "queue_offset",
        F.when(F.col("dead_reason").isNull(), start + F.row_number().over(window) - 1).cast("long"))

    # 4. Encode (and CRC) in the executors; the driver only copies bytes and patches two fields.
    return with_offsets.mapInArrow(partial(encode_prepared_batches, codec=codec), _spark_schema(ENCODED_SCHEMA))
