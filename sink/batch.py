"""The hand-over from ingest to the sink: one micro-batch of encoded records, declared once.

ingest makes batches of ENCODED_SCHEMA rows (live records already encoded for the commit log, dead
letters with their reason and the raw Kafka record), in source order, and may carry them through
Spark packed (sink.packed). The sink takes it from there: ``prepare`` unpacks a batch and drops the
records the store already holds; the store numbers each queue as it appends (store.log.commitlog),
so queue offsets are assigned in one place only.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sink.packed import CHUNK, unpack
from sink.state import tp_key
from store import INDEX_KEYS_COLUMN

# The Kafka record's coordinates: which partition offset a row is, for exactly once and dead letters.
COORD_COLUMNS = ("kafka_topic", "kafka_partition", "kafka_offset")
# What the store needs of a live row: the encoded record, how to dispatch it and, when the read task
# found them (a store with its index on), the record's index keys (store.batch_index_keys), which
# the store's writer then only puts. A batch with a row whose keys are null has its keys found by
# the store.
INDEX_KEYS = INDEX_KEYS_COLUMN
RECORD_COLUMNS = ("record", "topic", "queue_id", "sys_flag", "tags_code", "delay_level", INDEX_KEYS)
# Dead rows only: why (DEAD_COLUMNS: the text, and its store.DeadLetterReason code), and the Kafka
# record as it came (key, value, headers, timestamp).
DEAD_COLUMNS = ("dead_reason", "dead_code")
RAW_COLUMNS = ("raw_key", "raw_value", "raw_headers", "raw_timestamp")
# Live rows: what the body holds, for the counts of the batch log line. A Kafka null or 0-byte
# value is stored as a one-byte body and a property (store.format.constants.EMPTY_VALUE_BODY).
VALUE_KIND = "value_kind"
VALUE_IN_BODY, VALUE_NULL, VALUE_EMPTY = 0, 1, 2
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

ENCODED_SCHEMA = pa.schema([
    ("record", pa.binary()), ("topic", pa.string()), ("queue_id", pa.int32()), ("sys_flag", pa.int32()),
    ("tags_code", pa.int64()), ("delay_level", pa.int32()),
    ("kafka_topic", pa.string()), ("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()),
    (VALUE_KIND, pa.int8()), ("dead_reason", pa.string()), ("dead_code", pa.string()), ("raw_key", pa.binary()),
    ("raw_value", pa.binary()), ("raw_headers", HEADERS_TYPE), ("raw_timestamp", pa.int64()),
    (INDEX_KEYS, pa.list_(pa.int32())),
])
assert set(RECORD_COLUMNS) | set(COORD_COLUMNS) | set(RAW_COLUMNS) | set(DEAD_COLUMNS) | {VALUE_KIND} \
    == set(ENCODED_SCHEMA.names)


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


def prepare(collected: pa.Table, kafka_next_offsets: Mapping[str, int]) -> pa.Table:
    """A collected batch (packed or not) as ENCODED_SCHEMA rows in commit-log order, without what
    the store already holds. The driver's share of a batch, run on the sink's writer thread."""
    table = unpack(collected, ENCODED_SCHEMA) if CHUNK in collected.column_names else collected
    if table.schema != ENCODED_SCHEMA:
        table = table.select(ENCODED_SCHEMA.names).cast(ENCODED_SCHEMA)
    return drop_held(table, kafka_next_offsets)
