"""Encoded batches cross Spark as a few big binary values, not as one row per record.

A task's ENCODED_SCHEMA record batch (tens of thousands of records) becomes ONE row of PACKED_SCHEMA:
its Arrow IPC stream as a binary value. Spark's JVM converts every row it moves twice (Arrow to its
own rows after the Python task, and back to Arrow for ``toArrow()``), at a cost per row and per
column; for a batch of 15 columns that was about as much CPU as reading and encoding the records
(BENCHMARKS.md, replay). A packed batch crosses as a handful of large byte copies, LZ4-compressed
(the record headers, properties, topics and Kafka coordinates repeat: 100-byte random bodies still
shrink to about a third), which is less for the JVM to copy and collect. Row order is kept: chunks
come back in partition order, each holding its records in order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

CHUNK = "chunk"
SPOOL = "spool"     # instead of a chunk: the file holding it (sink.spool)
PACKED_SCHEMA = pa.schema([(CHUNK, pa.binary()), (SPOOL, pa.string())])
# costs the task a little and saves the JVM more (BENCHMARKS.md, "Replay")
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


class PackedBatchError(ValueError):
    """A packed chunk is not an Arrow stream of the expected schema."""


def pack(batch: pa.RecordBatch) -> pa.RecordBatch:
    """One PACKED_SCHEMA row holding ``batch`` as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=_IPC_OPTIONS) as writer:
        writer.write_batch(batch)
    data = sink.getvalue()
    offsets = pa.py_buffer(np.array([0, data.size], dtype=np.int32))
    return pa.RecordBatch.from_arrays([pa.Array.from_buffers(pa.binary(), 1, [None, offsets, data]),
                                       pa.nulls(1, pa.string())], schema=PACKED_SCHEMA)


def pack_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The per-task form: every non-empty batch as one packed row."""
    for batch in batches:
        if batch.num_rows:
            yield pack(batch)


def unpack(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The record batches packed in ``table``'s rows, in order, as one table of ``schema``."""
    batches: list[pa.RecordBatch] = []
    for chunk in table.column(CHUNK).chunks:
        if chunk.null_count:
            raise PackedBatchError("a packed batch names a spool file: sink.spool.resolve it first")
        for value in _values(chunk):
            reader = pa.ipc.open_stream(value)
            if not reader.schema.equals(schema):
                raise PackedBatchError(f"a packed batch has columns {reader.schema.names}, expected "
                                       f"{schema.names}: was it written by another version of the job?")
            batches.extend(reader)
    return pa.Table.from_batches(batches, schema=schema)


def _values(chunk: pa.Array) -> list[pa.Buffer]:
    """Each value of a binary array as a slice of its data buffer: ``chunk[i].as_buffer()`` copies
    the value (a spool file mapped in would be read whole, and its copy faulted in page by page)."""
    _, offsets, data = chunk.buffers()
    at = np.frombuffer(offsets, dtype=np.int32, count=len(chunk) + 1, offset=4 * chunk.offset).tolist()
    return [data.slice(a, b - a) for a, b in zip(at, at[1:])]


def packed_spark_schema() -> Any:
    """PACKED_SCHEMA as a Spark StructType."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(PACKED_SCHEMA)
