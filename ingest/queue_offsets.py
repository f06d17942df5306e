"""QUEUEOFFSET assignment for one collected micro-batch, in the driver, vectorised.

A batch reaches the driver in source order (each Kafka partition's records in offset order, see
ingest.prepare), so the records of one (topic, queueId) take consecutive queue offsets from the
store's next one in the order they arrive. Only live NOT/COMMIT records take a slot: dead letters
never reach the commit log and PREPARED/ROLLBACK records carry QUEUEOFFSET 0 (FORMAT §3). The store
checks the result against its own next offsets, so a mistake here is refused, never written.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store.constants import TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, TRANSACTION_TYPE_MASK


def assign_queue_offsets(table: pa.Table, next_offsets: Mapping[tuple[str, int], int]) -> pa.Table:
    """``table`` (rows with topic, queue_id, sys_flag, dead_reason) with its ``queue_offset`` column
    set: consecutive per (topic, queue_id) in row order from ``next_offsets`` (0 for a new queue),
    null for dead rows, 0 for PREPARED/ROLLBACK."""
    n = table.num_rows
    out = np.zeros(n, dtype=np.int64)
    live = ~np.asarray(pc.is_valid(table.column("dead_reason")), dtype=bool) if n else np.zeros(0, bool)
    tx = np.asarray(table.column("sys_flag").fill_null(0), dtype=np.int32) & TRANSACTION_TYPE_MASK
    slot = live & ((tx == TRANSACTION_NOT_TYPE) | (tx == TRANSACTION_COMMIT_TYPE))
    rows = np.flatnonzero(slot)
    if rows.size:
        topics = pc.dictionary_encode(table.column("topic").take(pa.array(rows)).combine_chunks())
        names = topics.dictionary.to_pylist()
        queue_ids = np.asarray(table.column("queue_id").take(pa.array(rows)), dtype=np.int64)
        qmin = int(queue_ids.min())
        dense = np.asarray(topics.indices, dtype=np.int64) * (int(queue_ids.max()) - qmin + 1) + (queue_ids - qmin)
        keys, group = np.unique(dense, return_inverse=True)
        group = group.reshape(-1)
        first = np.zeros(keys.size, dtype=np.int64)
        first[group[::-1]] = np.arange(rows.size - 1, -1, -1)       # each group's first row
        bases = np.array([next_offsets.get((names[int(topics.indices[f].as_py())], int(queue_ids[f])), 0)
                          for f in first], dtype=np.int64)
        run_starts = np.flatnonzero(np.diff(dense)) + 1
        if run_starts.size + 1 == keys.size:
            # every queue arrives as one run (a task per Kafka partition): no sort needed
            starts = np.concatenate(([0], run_starts))
            rank = np.arange(rows.size, dtype=np.int64) - np.repeat(starts, np.diff(np.append(starts, rows.size)))
        else:
            # rank inside the group in arrival order: a stable sort keeps that order
            order = np.argsort(group.astype(np.uint16) if keys.size <= 65536 else group, kind="stable")
            counts = np.bincount(group, minlength=keys.size)
            rank = np.empty(rows.size, dtype=np.int64)
            rank[order] = np.arange(rows.size, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        out[rows] = bases[group] + rank
    column = pa.array(out, pa.int64(), mask=~live)
    idx = table.schema.get_field_index("queue_offset")
    if idx < 0:
        return table.append_column("queue_offset", column)
    return table.set_column(idx, pa.field("queue_offset", pa.int64()), column)
