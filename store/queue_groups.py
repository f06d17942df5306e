"""Records of a batch grouped by queue, (topic index, queue id), batch order kept inside each queue.

The commit log needs it to number each queue, the consume queues to write each queue's units; the
grouping is computed once per append and handed from one to the other. Batches usually arrive with
each queue in one contiguous run (a Spark task per Kafka partition), which needs no sort at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class QueueGroups:
    first: np.ndarray           # first row of each group, groups in order of first appearance or of key
    counts: np.ndarray          # rows per group
    inverse: np.ndarray         # group of each row
    rank: np.ndarray            # rank of each row inside its group (0, 1, ... in batch order)
    order: np.ndarray | None    # rows sorted by group, stable; None when each group is one run
    starts: np.ndarray          # where each group begins in ``order`` (in the batch when order is None)

    def __len__(self) -> int:
        return len(self.counts)

    def rows(self, g: int) -> slice | np.ndarray:
        """The rows of group ``g`` in batch order: a slice when the group is one run."""
        start = int(self.starts[g])
        rows = slice(start, start + int(self.counts[g]))
        return rows if self.order is None else self.order[rows]


def group_queues(topic_index: np.ndarray, queue_ids: np.ndarray) -> QueueGroups:
    """Group rows by (topic index, queue id). Needs at least one row."""
    tidx = np.asarray(topic_index, dtype=np.int64)
    qids = np.asarray(queue_ids, dtype=np.int64)
    n = len(tidx)
    qmin = int(qids.min())
    dense = tidx * (int(qids.max()) - qmin + 1) + (qids - qmin)
    run_starts = np.flatnonzero(dense[1:] != dense[:-1]) + 1
    if len(run_starts) == 0:
        return QueueGroups(np.zeros(1, np.int64), np.array([n], np.int64), np.zeros(n, np.int64),
                           np.arange(n, dtype=np.int64), None, np.zeros(1, np.int64))
    starts = np.concatenate(([0], run_starts))
    if len(starts) <= 4096 and len(np.unique(dense[starts])) == len(starts):
        lengths = np.diff(np.append(starts, n))
        inverse = np.repeat(np.arange(len(starts), dtype=np.int64), lengths)
        rank = np.arange(n, dtype=np.int64) - np.repeat(starts, lengths)
        return QueueGroups(starts, lengths, inverse, rank, None, starts)
    n_keys = int(dense.max()) + 1
    if n_keys <= 1 << 20:
        counts_all = np.bincount(dense, minlength=n_keys)
        present = np.flatnonzero(counts_all)
        group_of_key = np.zeros(n_keys, dtype=np.int64)
        group_of_key[present] = np.arange(len(present))
        inverse = group_of_key[dense]
        counts = counts_all[present]
    else:
        _, inverse = np.unique(dense, return_inverse=True)
        inverse = inverse.reshape(-1)
        counts = np.bincount(inverse)
    # A small dtype lets numpy's stable sort use radix sort.
    small = inverse.astype(np.uint8 if len(counts) <= 256 else np.uint16) if len(counts) <= 65536 else inverse
    order = np.argsort(small, kind="stable")
    group_start = np.cumsum(counts) - counts
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64) - np.repeat(group_start, counts)
    return QueueGroups(order[group_start], counts, inverse, rank, order, group_start)
