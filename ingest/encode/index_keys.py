"""The read tasks' share of the store's index: each encoded record's index keys, found and hashed in
the task that encoded it (store.batch_index_keys, the key finder the store's own index uses) and
shipped in the batch's ``index_keys`` column (sink.handover.schema.INDEX_KEYS).

One driver writes a store, so whatever its writer does is the ceiling of the job however many
executors read Kafka; RocketMQ finds the keys behind the append, reading every record back from the
commit log on the broker's dispatcher thread. Found here, while the task's records are in its cache,
the writer only puts them (bench/index_bound.py, BENCHMARKS.md "Store append").
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from sink.handover.schema import ENCODED_SCHEMA, INDEX_KEYS
from store import batch_index_keys
from store.format import binary_parts


def with_index_keys(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Each ENCODED_SCHEMA batch with its live records' index keys (a dead row's list is empty)."""
    for batch in batches:
        yield add_index_keys(batch)


def add_index_keys(batch: pa.RecordBatch) -> pa.RecordBatch:
    records = batch.column("record")
    offsets, data = binary_parts(records)
    live = np.flatnonzero(np.asarray(records.is_valid(), dtype=bool))
    hashes, counts = batch_index_keys(data, offsets[:-1][live])
    per_row = np.zeros(batch.num_rows, np.int32)
    per_row[live] = counts
    ends = np.zeros(batch.num_rows + 1, np.int32)
    np.cumsum(per_row, out=ends[1:])
    keys = pa.ListArray.from_arrays(pa.array(ends), pa.array(hashes, pa.int32()))
    at = batch.schema.get_field_index(INDEX_KEYS)
    return batch.set_column(at, ENCODED_SCHEMA.field(INDEX_KEYS), keys)
