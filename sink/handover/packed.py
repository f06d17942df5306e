"""Encoded batches cross Spark as a few big binary values, not as one row per record.

A task's ENCODED_SCHEMA record batch (tens of thousands of records) becomes ONE row of PACKED_SCHEMA:
its Arrow IPC stream as a binary value. Spark's JVM converts every row it moves twice (Arrow to its
own rows after the Python task, and back to Arrow for ``toArrow()``), at a cost per row and per
column; for a batch of 15 columns that was about as much CPU as reading and encoding the records
(BENCHMARKS.md, replay). A packed batch crosses as a handful of large byte copies, LZ4-compressed
(the record headers, properties, topics and Kafka coordinates repeat: 100-byte random bodies still
shrink to about a third), which is less for the JVM to copy and collect. Row order is kept: chunks
come back in partition order, each holding its records in order.

Each row also says what its batch holds (records, their encoded bytes, dead letters), so the job can
``observe()`` those sums into Spark's own progress without opening a chunk (ingest.metrics).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

CHUNK = "chunk"
SPOOL = "spool"     # instead of a chunk: the file holding it (sink.handover.spool) ...
MAC = "mac"         # ... and what the driver checks it against
# what the packed batch holds: live records, their encoded bytes, dead letters
COUNT_COLUMNS = ("records", "record_bytes", "dead_letters")
PACKED_SCHEMA = pa.schema([(CHUNK, pa.binary()), (SPOOL, pa.string()), (MAC, pa.binary())]
                          + [(name, pa.int64()) for name in COUNT_COLUMNS])
# costs the task a little and saves the JVM more (BENCHMARKS.md, "Replay")
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")
# gathered(): a task's small batches joined up to this size; well below one binary column's 2 GiB,
# and about what a task's range holds at most when its ranges are read together (ingest.kafka.read)
GATHER_MAX_ROWS = 20_000
GATHER_MAX_BYTES = 16 << 20


class PackedBatchError(ValueError):
    """A packed chunk is not an Arrow stream of the expected schema."""


def pack(batch: pa.RecordBatch) -> pa.RecordBatch:
    """One PACKED_SCHEMA row holding ``batch`` as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=_IPC_OPTIONS) as writer:
        writer.write_batch(batch)
    data = sink.getvalue()
    offsets = pa.py_buffer(np.array([0, data.size], dtype=np.int32))
    return packed_row(pa.Array.from_buffers(pa.binary(), 1, [None, offsets, data]), pa.nulls(1, pa.string()),
                      pa.nulls(1, pa.binary()), batch)


def packed_row(chunk: pa.Array, spool: pa.Array, mac: pa.Array, batch: pa.RecordBatch) -> pa.RecordBatch:
    """The PACKED_SCHEMA row of ``batch``: its chunk, or its spool file and that file's MAC, and its counts."""
    names = batch.schema.names
    dead = batch.num_rows - batch.column("dead_reason").null_count if "dead_reason" in names else 0
    size = pc.sum(pc.binary_length(batch.column("record"))).as_py() if "record" in names else 0
    counts = [pa.array([n], pa.int64()) for n in (batch.num_rows - dead, size or 0, dead)]
    return pa.RecordBatch.from_arrays([chunk, spool, mac, *counts], schema=PACKED_SCHEMA)


def gathered(batches: Iterator[pa.RecordBatch], max_rows: int = GATHER_MAX_ROWS,
             max_bytes: int = GATHER_MAX_BYTES) -> Iterator[pa.RecordBatch]:
    """Consecutive small batches as one, in order, up to ``max_rows`` rows or ``max_bytes`` bytes; a
    batch that size or larger passes as it is. A task reading many partitions makes a small batch
    per partition, and what follows (index keys, packing or spooling, the driver's unpacking) costs
    per batch: gathered, a batch over 1,000 partitions costs about what one over a few does."""
    held: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        if held and (rows + batch.num_rows > max_rows or size + batch.nbytes > max_bytes):
            yield _joined(held)
            held, rows, size = [], 0, 0
        held.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
    if held:
        yield _joined(held)


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def pack_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The per-task form: every non-empty batch as one packed row."""
    for batch in batches:
        if batch.num_rows:
            yield pack(batch)


def unpack(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The record batches packed in ``table``'s rows, in order, as one table of ``schema``."""
    if SPOOL in table.column_names and table.column(SPOOL).null_count < table.num_rows:
        raise PackedBatchError("a packed batch names a spool file not yet mapped and checked: "
                               "sink.handover.spool.Spool.resolve and .check it first")
    batches: list[pa.RecordBatch] = []
    for chunk in table.column(CHUNK).chunks:
        if chunk.null_count:
            raise PackedBatchError("a packed batch names a spool file: sink.handover.spool.resolve it first")
        for i in range(len(chunk)):
            reader = pa.ipc.open_stream(value_buffer(chunk, i))
            if not reader.schema.equals(schema):
                raise PackedBatchError(f"a packed batch has columns {reader.schema.names}, expected "
                                       f"{schema.names}: was it written by another version of the job?")
            batches.extend(reader)
    return pa.Table.from_batches(batches, schema=schema)


def value_buffer(chunk: pa.Array, i: int) -> pa.Buffer:
    """Value ``i`` of a binary array as a slice of its data buffer (a scalar's ``as_buffer()``
    copies it: tens of megabytes for a batch, and for a mapped spool file the first read of it)."""
    width = 8 if pa.types.is_large_binary(chunk.type) else 4
    offsets = np.frombuffer(chunk.buffers()[1], dtype=f"i{width}", count=2, offset=(chunk.offset + i) * width)
    return chunk.buffers()[2].slice(int(offsets[0]), int(offsets[1] - offsets[0]))


def packed_spark_schema() -> Any:
    """PACKED_SCHEMA as a Spark StructType."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(PACKED_SCHEMA)
