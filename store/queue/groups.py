"""Records of a batch grouped by queue, (topic index, queue id), batch order kept inside each queue.

The commit log needs it to number each queue, the consume queues to write each queue's units; the
grouping is computed once per append and handed from one to the other. Batches usually arrive with
each queue in one contiguous run (a Spark task per Kafka partition), which needs no sort at all;
a producer's round robin over a few queues interleaves them, which a pass per queue sorts faster
than an argsort does.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

# Up to this many queues in a batch are gathered with one pass per queue instead of an argsort,
# which costs more for a handful of queues (BENCHMARKS.md, "Store append").
FEW_QUEUES = 16
# Runs of up to this many are checked for being whole groups (each queue one run).
MAX_RUNS_CHECKED = 4096


@dataclass(frozen=True)
class QueueGroups:
    first: np.ndarray           # first row of each group, groups in order of first appearance or of key
    counts: np.ndarray          # rows per group
    order: np.ndarray | None    # rows sorted by group, stable; None when each group is one run
    starts: np.ndarray          # where each group begins in ``order`` (in the batch when order is None)

    def __len__(self) -> int:
        return len(self.counts)

    @property
    def n(self) -> int:
        return int(self.starts[-1] + self.counts[-1]) if len(self.counts) else 0

    def rows(self, g: int) -> slice | np.ndarray:
        """The rows of group ``g`` in batch order: a slice when the group is one run."""
        start = int(self.starts[g])
        rows = slice(start, start + int(self.counts[g]))
        return rows if self.order is None else self.order[rows]

    def number(self, bases: np.ndarray) -> np.ndarray:
        """``bases[g] + rank`` for every row: each record's queue offset when ``bases`` holds
        each queue's next offset. No per-row group index is needed: in grouped order a row's rank
        is its position minus its group's start."""
        bases = np.asarray(bases, dtype=np.int64)
        if len(self) <= FEW_QUEUES:     # a range per queue, put in place: no whole-batch temporaries
            out = np.empty(self.n, dtype=np.int64)
            for g, (start, count) in enumerate(zip(self.starts.tolist(), self.counts.tolist())):
                values = np.arange(int(bases[g]), int(bases[g]) + count, dtype=np.int64)
                if self.order is None:
                    out[start:start + count] = values
                else:
                    out[self.order[start:start + count]] = values
            return out
        grouped = np.arange(self.n, dtype=np.int64)
        grouped += np.repeat(bases - self.starts, self.counts)
        return self._scatter(grouped)

    @cached_property
    def inverse(self) -> np.ndarray:
        """The group of each row."""
        return self._scatter(np.repeat(np.arange(len(self), dtype=np.int64), self.counts))

    @cached_property
    def rank(self) -> np.ndarray:
        """The rank of each row inside its group (0, 1, ... in batch order)."""
        return self.number(np.zeros(len(self), dtype=np.int64))

    def _scatter(self, grouped: np.ndarray) -> np.ndarray:
        """Per-row values in grouped order, put back in batch order."""
        if self.order is None:
            return grouped
        out = np.empty_like(grouped)
        out[self.order] = grouped
        return out


def group_queues(topic_index: np.ndarray, queue_ids: np.ndarray) -> QueueGroups:
    """Group rows by (topic index, queue id). Needs at least one row."""
    tidx = np.asarray(topic_index)
    qids = np.asarray(queue_ids)
    n = len(tidx)
    qmin, qmax = int(qids.min()), int(qids.max())
    tmin, tmax = int(tidx.min()), int(tidx.max())
    span = qmax - qmin + 1
    n_keys = (tmax - tmin + 1) * span
    # The key: 0 .. n_keys-1, in the narrowest integer type that holds it (a batch has a few
    # topics and queues; the usual one has one topic, whose queue ids are the key).
    kind = np.uint8 if n_keys <= 256 else np.int32 if n_keys <= 1 << 31 else np.int64
    if tmin == tmax and qmin == 0 and qids.dtype == kind:
        dense = qids
    else:
        dense = (qids - qmin).astype(kind) if qmin else qids.astype(kind)
        if tmin != tmax:
            dense += (tidx - tmin).astype(kind) * kind(span)
    changes = dense[1:] != dense[:-1]
    n_runs = int(np.count_nonzero(changes)) + 1
    if n_runs == 1:
        zero = np.zeros(1, np.int64)
        return QueueGroups(zero, np.array([n], np.int64), None, zero)
    if n_runs <= MAX_RUNS_CHECKED:
        starts = np.concatenate(([0], np.flatnonzero(changes) + 1))
        if len(np.unique(dense[starts])) == len(starts):
            return QueueGroups(starts, np.diff(np.append(starts, n)), None, starts)
    if n_keys <= FEW_QUEUES:     # a pass per possible key, no counting pass first
        rows = [r for r in (np.flatnonzero(dense == key) for key in range(n_keys)) if len(r)]
        counts = np.array([len(r) for r in rows], dtype=np.int64)
        group_start = np.cumsum(counts) - counts
        order = np.concatenate(rows)
        return QueueGroups(order[group_start], counts, order, group_start)
    if n_keys <= 1 << 20:
        counts_all = np.bincount(dense, minlength=n_keys)
        present = np.flatnonzero(counts_all)
        counts = counts_all[present]
        if len(present) <= FEW_QUEUES:
            order = np.concatenate([np.flatnonzero(dense == key) for key in present.tolist()])
            group_start = np.cumsum(counts) - counts
            return QueueGroups(order[group_start], counts, order, group_start)
        group_of_key = np.zeros(n_keys, dtype=np.int64)
        group_of_key[present] = np.arange(len(present))
        inverse = group_of_key[dense]
    else:
        _, inverse = np.unique(dense, return_inverse=True)
        inverse = inverse.reshape(-1)
        counts = np.bincount(inverse)
    # A small dtype lets numpy's stable sort use radix sort.
    small = inverse.astype(np.uint8 if len(counts) <= 256 else np.uint16) if len(counts) <= 65536 else inverse
    order = np.argsort(small, kind="stable")
    group_start = np.cumsum(counts) - counts
    return QueueGroups(order[group_start], counts, order, group_start)
