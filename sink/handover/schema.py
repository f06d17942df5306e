"""The hand-over from ingest to the sink: one micro-batch of encoded records, declared once.

ingest makes batches of ENCODED_SCHEMA rows (live records already encoded for the commit log, dead
letters with their reason and the raw Kafka record), in source order, and may carry them through
Spark packed (sink.handover.packed) or in spool files (sink.handover.spool). The sink takes it from
there (sink.batch.prepare); the store numbers each queue as it appends (store.log.commitlog), so
queue offsets are assigned in one place only.
"""

from __future__ import annotations

import pyarrow as pa

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

