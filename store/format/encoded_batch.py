"""EncodedBatch: records encoded back to back and the per-record fields the store and the consume
queue need, and its Arrow form (``record`` binary beside topic, queue_id, sys_flag, tags_code,
delay_level, queue_offset), the form the read tasks send to the driver. How records are encoded is
store.format.batch_codec's."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store.errors import InvalidMessageError
from store.format.batch_columns import (
    binary_from,
    binary_parts,
    columns_of,
    gather_binary,
    index_keys_column,
    int_column,
)
from store.format.constants import POS_BORNTIMESTAMP

PIECE_MIN_BYTES = 1 << 20       # records of a batch left in their buffers when these are this large on average
# from_arrow's optional column of each record's index keys (list<int32>, store.index.shipped)
INDEX_KEYS_COLUMN = "index_keys"


@dataclass
class EncodedBatch:
    """Records back to back in ``data`` plus what the store and the consume queue need per record.
    A batch collected from several buffers (the read tasks' spool files) may hold its records
    where they are instead: ``pieces`` (first record, buffer) in record order, each piece's
    records back to back in its buffer, ``offsets`` then into their piece (``data`` unused)."""

    data: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    topic_names: list[str]
    topic_index: np.ndarray
    queue_ids: np.ndarray
    sys_flags: np.ndarray
    tags_codes: np.ndarray
    delay_levels: np.ndarray
    queue_offsets: np.ndarray | None
    pieces: tuple[tuple[int, np.ndarray], ...] = ()
    # The records' index keys when they came with the batch (store.index.shipped: found and hashed
    # where the batch was encoded): every key in record order, and a count per record. None: the
    # store's index finds them in the commit log.
    key_hashes: np.ndarray | None = None
    key_counts: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def nbytes(self) -> int:
        return sum(int(d.nbytes) for _, d in self.pieces) if self.pieces else int(self.data.nbytes)

    def record(self, i: int) -> memoryview:
        data = self.data
        if self.pieces:
            data = self.pieces[bisect.bisect_right([first for first, _ in self.pieces], i) - 1][1]
        return memoryview(data)[int(self.offsets[i]):int(self.offsets[i]) + int(self.sizes[i])]

    def born_timestamps(self) -> np.ndarray:
        """Each record's BORNTIMESTAMP (ms; a Kafka record's own timestamp), in record order."""
        out = np.empty(len(self), dtype=np.int64)
        for first, end, data in self.sources():
            at = np.asarray(self.offsets[first:end], dtype=np.int64) + POS_BORNTIMESTAMP
            out[first:end] = np.asarray(data, dtype=np.uint8)[at[:, None] + np.arange(8)].view(">i8")[:, 0]
        return out

    def sources(self) -> list[tuple[int, int, np.ndarray]]:
        """(first record, end record, buffer) of each buffer holding records, in record order."""
        if not self.pieces:
            return [(0, len(self), self.data)]
        ends = [first for first, _ in self.pieces[1:]] + [len(self)]
        return [(first, end, d) for (first, d), end in zip(self.pieces, ends) if end > first]

    @classmethod
    def from_arrow(cls, table: pa.Table | pa.RecordBatch, rows: np.ndarray | None = None) -> "EncodedBatch":
        """From the ``encode_batch_to_arrow`` form: a ``record`` binary column (records encoded
        elsewhere, e.g. by Spark executors) with topic, queue_id, sys_flag, tags_code,
        delay_level and queue_offset columns. Metadata columns are used without copying; the
        record bytes too when they lie in large chunks (``pieces``), else they are copied once
        into one buffer. ``rows`` (ascending) takes only those rows; the others' records must be
        null and empty (a batch's dead letters), so nothing more is copied."""
        records = table.column("record")
        if not (pa.types.is_binary(records.type) or pa.types.is_large_binary(records.type)):
            raise InvalidMessageError(f"column record is {records.type}, not binary")
        if rows is not None:
            present = pc.is_valid(records).to_numpy(zero_copy_only=False)
            if not present[rows].all():
                raise InvalidMessageError(f"column record has {int((~present[rows]).sum())} null rows to append")
            left_out = np.ones(len(records), dtype=bool)
            left_out[rows] = False
            if pc.binary_length(records).fill_null(0).to_numpy(zero_copy_only=False)[left_out].any():
                return cls.from_arrow(table.take(pa.array(rows)))    # rows left out hold bytes: copy
        elif records.null_count:
            raise InvalidMessageError(f"column record has {records.null_count} null rows")
        starts, sizes, data, pieces = _record_bytes(records)
        key_hashes, key_counts = index_keys_column(table, INDEX_KEYS_COLUMN, rows)
        meta = table.select([name for name in table.schema.names if name not in ("record", INDEX_KEYS_COLUMN)])
        if rows is not None:
            starts, sizes, meta = starts[rows], sizes[rows], meta.take(pa.array(rows))
            pieces = tuple((int(np.searchsorted(rows, first)), d) for first, d in pieces)
        n = len(starts)
        cols = columns_of(meta)
        topics = pc.dictionary_encode(cols["topic"])
        queue_offsets = None
        if "queue_offset" in cols and cols["queue_offset"].null_count < n:
            queue_offsets = int_column(cols["queue_offset"], np.int64)
        return cls(
            data=data, offsets=starts, sizes=sizes,
            topic_names=topics.dictionary.to_pylist(), topic_index=int_column(topics.indices, np.int32),
            queue_ids=int_column(cols["queue_id"], np.int32), sys_flags=int_column(cols["sys_flag"], np.int32),
            tags_codes=int_column(cols["tags_code"], np.int64), delay_levels=int_column(cols["delay_level"], np.int32),
            queue_offsets=queue_offsets, pieces=pieces, key_hashes=key_hashes, key_counts=key_counts)


def _record_bytes(records: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple]:
    """(starts, sizes, data, pieces) of a binary column of records: where they are when its chunks
    are large (the spool files' buffers, nothing copied: the commit log copies from them), else
    copied once into one buffer (many small pieces would cost more than the copy)."""
    chunks = [c for c in (records.chunks if isinstance(records, pa.ChunkedArray) else [records]) if len(c)]
    total = sum(int(c.buffers()[2].size) if c.buffers()[2] is not None else 0 for c in chunks)
    if len(chunks) <= 1 or total < PIECE_MIN_BYTES * len(chunks):
        starts, data = gather_binary(records)
        return starts, np.diff(np.append(starts, data.size)).astype(np.int32), data, ()
    starts, sizes, pieces, first = [], [], [], 0
    for c in chunks:
        offs, values = binary_parts(c)
        starts.append(offs[:-1] - offs[0])
        sizes.append(np.diff(offs))
        pieces.append((first, values[offs[0]:offs[-1]]))
        first += len(c)
    return np.concatenate(starts), np.concatenate(sizes).astype(np.int32), np.zeros(0, np.uint8), tuple(pieces)


def to_arrow(batch: EncodedBatch) -> pa.Table:
    """The Arrow form of ``batch`` (EncodedBatch.from_arrow reads it back): its records in one
    ``record`` column, its per-record fields beside them."""
    n = len(batch)
    data, offsets = batch.data, batch.offsets
    if batch.pieces:        # one buffer again
        data = np.concatenate([d[int(batch.offsets[a]):int(batch.offsets[b - 1]) + int(batch.sizes[b - 1])]
                               for a, b, d in batch.sources()])
        offsets = np.cumsum(batch.sizes, dtype=np.int64) - batch.sizes
    records = binary_from(data, np.append(offsets, data.nbytes))
    names = pa.array(batch.topic_names, pa.string())
    topic = names.take(pa.array(batch.topic_index)) if n else pa.array([], pa.string())
    queue_offset = pa.array(batch.queue_offsets, pa.int64()) if batch.queue_offsets is not None \
        else pa.nulls(n, pa.int64())
    return pa.table({"record": records, "topic": topic, "queue_id": pa.array(batch.queue_ids, pa.int32()),
                     "sys_flag": pa.array(batch.sys_flags, pa.int32()),
                     "tags_code": pa.array(batch.tags_codes, pa.int64()),
                     "delay_level": pa.array(batch.delay_levels, pa.int32()), "queue_offset": queue_offset})
