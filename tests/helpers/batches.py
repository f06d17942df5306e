"""Batches for the tests: Kafka rows as Spark's Kafka source gives them, and the encoded batches
ingest hands the sink (and one with a byte of a record flipped)."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pyarrow as pa

from ingest.encode.mapping import KAFKA_SCHEMA, MappingConfig
from ingest.encode.prepare import map_and_encode
from store.format.codec import CodecConfig

TS = datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)


def kafka_rows(*rows: dict) -> pa.RecordBatch:
    base = {"key": None, "value": b"v", "topic": "orders", "partition": 0, "offset": 0,
            "timestamp": TS, "timestampType": 0, "headers": []}
    return pa.RecordBatch.from_pylist([{**base, **r} for r in rows], schema=KAFKA_SCHEMA)


def encoded(first: int, count: int) -> pa.RecordBatch:
    return map_and_encode(kafka_rows(*[{"offset": i, "value": b"v%d" % i} for i in range(first, first + count)]),
                          MappingConfig(), CodecConfig())


def collected(first_offset: int, n: int = 5) -> pa.Table:
    """A batch as ``collect`` leaves it on the driver: n records of orders/0 from first_offset."""
    rows = kafka_rows(*[{"key": b"k%d" % i, "value": b"v%d" % i, "offset": i}
                        for i in range(first_offset, first_offset + n)])
    return pa.Table.from_batches([map_and_encode(rows, MappingConfig(), CodecConfig())])


def corrupt(batch: pa.RecordBatch, row: int, at: int) -> pa.RecordBatch:
    """``batch`` with one byte of one record flipped (what an encoder bug could hand over)."""
    records = batch.column("record")
    offsets = np.frombuffer(records.buffers()[1], np.int32)[records.offset:]
    data = bytearray(records.buffers()[2].to_pybytes())
    data[int(offsets[row]) + at] ^= 0xFF
    flipped = pa.Array.from_buffers(pa.binary(), len(records), [None, pa.py_buffer(offsets.tobytes()),
                                                                pa.py_buffer(bytes(data))])
    return batch.set_column(0, "record", flipped)
