"""Grouping a batch's records by queue: batch order inside each queue, with or without a sort."""

from __future__ import annotations

import numpy as np
import pytest

from store.queue_groups import group_queues

pytestmark = pytest.mark.unit


def rows_of(groups, g):  # noqa: ANN001, ANN202 - test helper
    return np.arange(len(groups.inverse))[groups.rows(g)].tolist()


@pytest.mark.parametrize("topics, queues", [
    ([0] * 5, [3] * 5),                                  # one queue
    ([0, 0, 1, 1, 1, 0], [2, 2, 2, 2, 2, 5]),            # each queue one run
    ([0, 1, 0, 1, 0, 0], [1, 1, 1, 1, 2, 1]),            # interleaved
])
def test_each_queue_keeps_batch_order_and_ranks_count_from_zero(topics: list[int], queues: list[int]) -> None:
    groups = group_queues(np.array(topics), np.array(queues))
    keys = list(zip(topics, queues))
    seen: set[tuple[int, int]] = set()
    for g in range(len(groups)):
        rows = rows_of(groups, g)
        key = keys[rows[0]]
        assert rows == [i for i, k in enumerate(keys) if k == key]        # every row of the queue, in order
        assert groups.rank[rows].tolist() == list(range(len(rows)))
        assert groups.inverse[rows].tolist() == [g] * len(rows)
        assert int(groups.first[g]) == rows[0] and int(groups.counts[g]) == len(rows)
        seen.add(key)
    assert seen == set(keys)


def test_runs_need_no_sort() -> None:
    groups = group_queues(np.zeros(6, np.int64), np.array([0, 0, 1, 1, 1, 2]))
    assert groups.order is None and groups.rows(1) == slice(2, 5)
