"""Preparing one micro-batch: Kafka records become encoded RocketMQ records in the executors, come to
the driver in source order, and take their queue offsets there.

Two ways in, one result (a table in ENCODED_SCHEMA, commit-log order):
- The job's own source (ingest.message_source, format ``kafka-rocketmq``) maps and encodes inside its
  read tasks, so a record crosses into the JVM once, already a commit-log record. Its partitions are
  Kafka offset ranges in (topic, partition, offset) order and each range is read in offset order, so
  the collected rows are in source order with no shuffle.
- Any DataFrame of Kafka columns (Spark's own Kafka source, exported files) is sorted by (topic,
  partition, offset), then mapped and encoded by ``mapInArrow`` (a narrow step, order kept).
``toArrow()`` collects the packed partitions in order (collect_packed); on the driver, finish_packed
unpacks them, drops what the store already holds and numbers each queue (ingest.queue_offsets).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.mapping import MAPPED_SCHEMA, MappingConfig, map_kafka_batch
from ingest.packed import CHUNK, pack_batches, packed_spark_schema, unpack
from ingest.queue_offsets import assign_queue_offsets
from sink.foreach_batch import BatchInputs
from sink.state import tp_key
from store.batch_codec import encode_valid_rows
from store.codec import CodecConfig

ENCODED_SCHEMA = pa.schema([
    ("record", pa.binary()), ("topic", pa.string()), ("queue_id", pa.int32()), ("sys_flag", pa.int32()),
    ("tags_code", pa.int64()), ("delay_level", pa.int32()), ("queue_offset", pa.int64()),
    ("kafka_topic", pa.string()), ("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()),
    ("dead_reason", pa.string()), ("raw_key", pa.binary()), ("raw_value", pa.binary()),
    ("raw_headers", MAPPED_SCHEMA.field("raw_headers").type), ("raw_timestamp", pa.int64()),
])
MESSAGE_COLUMNS = ["topic", "queue_id", "flag", "body", "properties", "tags", "sys_flag", "born_timestamp",
                   "born_host", "store_host", "reconsume_times", "prepared_transaction_offset"]
COORD_COLUMNS = ["kafka_topic", "kafka_partition", "kafka_offset", "raw_timestamp"]
RAW_COLUMNS = {"raw_key": "key", "raw_value": "value", "raw_headers": "headers"}


def map_and_encode(batch: pa.RecordBatch, mapping: MappingConfig, codec: CodecConfig) -> pa.RecordBatch:
    """Kafka rows -> ENCODED_SCHEMA rows: the live ones encoded (in their order, queue_offset left
    null for the driver), then the dead letters with their reason and the raw Kafka record."""
    n = batch.num_rows
    if n == 0:
        return pa.RecordBatch.from_pylist([], schema=ENCODED_SCHEMA)
    mapped = map_kafka_batch(batch, mapping)
    reasons = mapped.column("dead_reason")
    dead = np.asarray(pc.is_valid(reasons), dtype=bool)
    live_idx = np.flatnonzero(~dead)
    encoded = None
    if live_idx.size:
        live = mapped if live_idx.size == n else mapped.take(pa.array(live_idx))
        ok, why, encoded = encode_valid_rows(live.select(MESSAGE_COLUMNS), codec)
        if not ok.all():
            # Limits the mapping could not see (the whole record's size) still end as dead letters.
            bad = live_idx[~ok]
            patched = reasons.to_pylist()
            for i, reason in zip(bad.tolist(), [r for r, good in zip(why, ok) if not good]):
                patched[i] = reason
            reasons = pa.array(patched, pa.string())
            dead[bad] = True
            live_idx = live_idx[ok]
            live = live.filter(pa.array(ok))
    parts = []
    if live_idx.size:
        m = live_idx.size
        cols = {name: encoded.column(name) for name in ("record", "topic", "queue_id", "sys_flag", "tags_code",
                                                        "delay_level")}
        cols["queue_offset"] = pa.nulls(m, pa.int64())
        cols.update({name: live.column(name) for name in COORD_COLUMNS})
        cols["dead_reason"] = pa.nulls(m, pa.string())
        cols.update({name: pa.nulls(m, ENCODED_SCHEMA.field(name).type) for name in RAW_COLUMNS})
        parts.append(_table(cols))
    dead_idx = np.flatnonzero(dead)
    if dead_idx.size:
        take = pa.array(dead_idx)
        d = dead_idx.size
        rows = mapped.take(take)
        cols = {"record": pa.nulls(d, pa.binary()), "topic": rows.column("topic"),
                "queue_id": rows.column("queue_id"), "sys_flag": rows.column("sys_flag"),
                "tags_code": pa.nulls(d, pa.int64()), "delay_level": pa.nulls(d, pa.int32()),
                "queue_offset": pa.nulls(d, pa.int64()), "dead_reason": reasons.take(take)}
        cols.update({name: rows.column(name) for name in COORD_COLUMNS})
        # the record as it came from Kafka, whichever step refused it
        cols.update({name: batch.column(src).take(take) for name, src in RAW_COLUMNS.items()})
        parts.append(_table(cols))
    return pa.concat_tables(parts).combine_chunks().to_batches()[0]


def _table(cols: Mapping[str, Any]) -> pa.Table:
    return pa.table({f.name: cols[f.name].cast(f.type) for f in ENCODED_SCHEMA}, schema=ENCODED_SCHEMA)


def map_and_encode_batches(batches: Iterator[pa.RecordBatch], mapping: MappingConfig,
                           codec: CodecConfig) -> Iterator[pa.RecordBatch]:
    """The per-task form (mapInArrow, or a read task of the message source)."""
    for batch in batches:
        out = map_and_encode(batch, mapping, codec)
        if out.num_rows:
            yield out


def encode_and_pack(batches: Iterator[pa.RecordBatch], mapping: MappingConfig,
                    codec: CodecConfig) -> Iterator[pa.RecordBatch]:
    """map_and_encode_batches, each result packed into one row (ingest.packed): what a ``mapInArrow``
    over Kafka columns hands Spark (the message source's read tasks pack what they encode alike)."""
    return pack_batches(map_and_encode_batches(batches, mapping, codec))


def collect_packed(df: Any, mapping: MappingConfig, codec: CodecConfig) -> pa.Table:
    """The Spark part of a micro-batch, independent of the store's state (so the next batch can be
    read while this one is written): ``df`` is either the message source's (packed ENCODED_SCHEMA
    batches, source order) or any DataFrame of Kafka columns, which is sorted into source order and
    encoded by the executors. Returns the packed batches on the driver (ingest.packed), in order."""
    if CHUNK not in df.columns:
        df = df.orderBy("topic", "partition", "offset").mapInArrow(
            partial(encode_and_pack, mapping=mapping, codec=codec), packed_spark_schema())
    return df.toArrow()


def collect_batch(df: Any, mapping: MappingConfig, codec: CodecConfig) -> pa.Table:
    """collect_packed, unpacked: the batch in ENCODED_SCHEMA, queue offsets not yet set."""
    return unpack(collect_packed(df, mapping, codec), ENCODED_SCHEMA)


def drop_held(table: pa.Table, next_offsets: Mapping[str, int]) -> pa.Table:
    """``table`` without the rows whose Kafka offset is below the store's next one for their
    partition ("topic/partition" -> offset): exactly once at record granularity, so a re-run or a
    reset Spark checkpoint can never write a Kafka record twice."""
    if not next_offsets or table.num_rows == 0:
        return table
    topics = pc.dictionary_encode(table.column("kafka_topic").combine_chunks())
    names = topics.dictionary.to_pylist()
    partitions = np.asarray(table.column("kafka_partition"), dtype=np.int64)
    keys, first, inverse = np.unique(np.asarray(topics.indices, dtype=np.int64) << 32 | partitions,
                                     return_index=True, return_inverse=True)
    below = np.array([next_offsets.get(tp_key(names[int(k) >> 32], int(partitions[f])), 0)
                      for k, f in zip(keys, first)], dtype=np.int64)
    fresh = np.asarray(table.column("kafka_offset"), dtype=np.int64) >= below[inverse]
    return table if fresh.all() else table.filter(pa.array(fresh))


def finish_batch(table: pa.Table, inputs: BatchInputs) -> pa.Table:
    """The driver part: drop what the store already holds, then number each queue from where the
    store's ends (ingest.queue_offsets). Returns the batch in commit-log order."""
    return assign_queue_offsets(drop_held(table, inputs.kafka_next_offsets), inputs.next_queue_offsets)


def finish_packed(packed: pa.Table, inputs: BatchInputs) -> pa.Table:
    """finish_batch of a collect_packed table: the unpacking is the driver's work too, done by the
    sink's writer thread while Spark runs the next batch."""
    return finish_batch(unpack(packed, ENCODED_SCHEMA), inputs)
