"""Encoded batches handed from the read tasks to the driver through files, when they share a disk.

Through Spark, a task's packed batch (sink.packed) is compressed in the task, copied into the
executor JVM, sent to the driver JVM with the task's result, copied again into the driver's Python
by ``toArrow()`` and decompressed there: for bodies of kilobytes these copies cost more than reading
and encoding the records. When the executors run on the driver's machine (local mode), the task
instead writes its batch, uncompressed, as an Arrow IPC stream to a file in the spool directory
and sends only the file's path through Spark; the driver maps the file (no copy: the appends read
the records from the page cache) and removes its name at once.

Exactly once does not depend on these files: a batch is committed by the store's commit point,
never by a file; a spool file is read once by the batch whose task wrote it, and a file no
collected row names (a failed or speculative task attempt, a driver killed mid-batch) is an orphan,
removed by ``sweep``. The spool directory belongs to one job (the store's lock keeps out a second
one): ``prepare_dir`` empties it before the first batch, ``sweep`` after each collect.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from sink.packed import CHUNK, SPOOL, PackedBatchError, packed_row

SUFFIX = ".arrow"


class SpoolError(PackedBatchError):
    """A spool file or directory is not where the driver or a task expects it."""


def write(batch: pa.RecordBatch, spool_dir: str) -> pa.RecordBatch:
    """One PACKED_SCHEMA row naming a new file in ``spool_dir`` that holds ``batch`` (run in a task)."""
    if not os.path.isdir(spool_dir):
        raise SpoolError(f"spool directory {spool_dir} does not exist on {socket.gethostname()}: the executors "
                         "must run on the driver's machine (local mode), or share that path with it "
                         "(--spool-dir a shared path, or off to send batches through Spark)")
    path = os.path.join(spool_dir, uuid.uuid4().hex + SUFFIX)
    with pa.OSFile(path, "wb") as out, pa.ipc.new_stream(out, batch.schema) as writer:
        writer.write_batch(batch)
    return packed_row(pa.nulls(1, pa.binary()), pa.array([path], pa.string()), batch)


def spool_batches(batches: Iterator[pa.RecordBatch], spool_dir: str) -> Iterator[pa.RecordBatch]:
    """sink.packed.pack_batches, through files: every non-empty batch as a row naming its file."""
    for batch in batches:
        if batch.num_rows:
            yield write(batch, spool_dir)


def resolve(table: pa.Table) -> pa.Table:
    """``table`` (collected PACKED_SCHEMA rows) with every spooled row's file mapped in as its
    chunk, and the file's name removed: what sink.packed.unpack reads. Rows stay in order."""
    if SPOOL not in table.column_names or table.column(SPOOL).null_count == table.num_rows:
        return table
    chunks: list[pa.Array] = []
    for chunk, path in zip(_rows(table, CHUNK), table.column(SPOOL).to_pylist()):
        if path is None:
            chunks.append(chunk)
            continue
        try:
            data = pa.memory_map(path, "r").read_buffer()
        except FileNotFoundError:
            raise SpoolError(f"spool file {path} is not on the driver's machine: the executors must run "
                             "on it (local mode) or share the spool directory with it (--spool-dir)") from None
        os.unlink(path)   # the mapping keeps the bytes until the batch is written
        offsets = pa.py_buffer(np.array([0, data.size], dtype=np.int32))
        chunks.append(pa.Array.from_buffers(pa.binary(), 1, [None, offsets, data]))
    column = pa.chunked_array(chunks, pa.binary())
    return (table.set_column(table.schema.get_field_index(CHUNK), CHUNK, column)
            .set_column(table.schema.get_field_index(SPOOL), SPOOL, pa.nulls(table.num_rows, pa.string())))


def _rows(table: pa.Table, name: str) -> list[pa.Array]:
    """Each row of a column as a one-row array (a chunk keeps its own buffers)."""
    column = table.column(name)
    return [chunk.slice(i, 1) for chunk in column.chunks for i in range(len(chunk))]


def sweep(spool_dir: str) -> int:
    """Remove what is left in ``spool_dir`` once a batch is collected (no task is running then):
    files of task attempts whose results were not taken. Returns how many."""
    removed = 0
    for path in Path(spool_dir).glob("*" + SUFFIX):
        try:
            path.unlink()
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def prepare_dir(spool_dir: str) -> None:
    """Create ``spool_dir`` if needed and empty it of an earlier run's files."""
    os.makedirs(spool_dir, exist_ok=True)
    sweep(spool_dir)


def remove_dir(spool_dir: str) -> None:
    """Empty and remove ``spool_dir`` (the job's own, at its end)."""
    sweep(spool_dir)
    try:
        os.rmdir(spool_dir)
    except OSError:
        pass    # not empty (someone else's files) or already gone: leave it
