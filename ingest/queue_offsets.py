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

from store.commitlog import queue_eligible
from store.queue_groups import group_queues


def assign_queue_offsets(table: pa.Table, next_offsets: Mapping[tuple[str, int], int]) -> pa.Table:
    """``table`` (rows with topic, queue_id, sys_flag, dead_reason) with its ``queue_offset`` column
    set: consecutive per (topic, queue_id) in row order from ``next_offsets`` (0 for a new queue),
    null for dead rows, 0 for PREPARED/ROLLBACK."""
    n = table.num_rows
    out = np.zeros(n, dtype=np.int64)
    live = ~np.asarray(pc.is_valid(table.column("dead_reason")), dtype=bool) if n else np.zeros(0, bool)
    rows = np.flatnonzero(live & queue_eligible(np.asarray(table.column("sys_flag").fill_null(0))))
    if rows.size:
        topics = pc.dictionary_encode(table.column("topic").take(pa.array(rows)).combine_chunks())
        names = topics.dictionary.to_pylist()
        topic_index = np.asarray(topics.indices, dtype=np.int64)
        queue_ids = np.asarray(table.column("queue_id").take(pa.array(rows)), dtype=np.int64)
        groups = group_queues(topic_index, queue_ids)
        bases = np.array([next_offsets.get((names[topic_index[f]], int(queue_ids[f])), 0) for f in groups.first],
                         dtype=np.int64)
        out[rows] = groups.number(bases)
    column = pa.array(out, pa.int64(), mask=~live)
    idx = table.schema.get_field_index("queue_offset")
    if idx < 0:
        return table.append_column("queue_offset", column)
    return table.set_column(idx, pa.field("queue_offset", pa.int64()), column)
