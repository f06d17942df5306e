"""Grouping a batch's records by queue: batch order inside each queue, with or without a sort."""

from __future__ import annotations

import numpy as np
import pytest

from store.queue.groups import FEW_QUEUES, group_queues

pytestmark = pytest.mark.unit


def rows_of(groups, g):  # noqa: ANN001, ANN202 - test helper
    return np.arange(len(groups.inverse))[groups.rows(g)].tolist()


@pytest.mark.parametrize("topics, queues", [
    ([0] * 5, [3] * 5),                                  # one queue
    ([0, 0, 1, 1, 1, 0], [2, 2, 2, 2, 2, 5]),            # each queue one run
    ([0, 1, 0, 1, 0, 0], [1, 1, 1, 1, 2, 1]),            # interleaved, a pass per queue
    ([0] * 60, [i % 20 for i in range(60)]),             # interleaved, more queues than FEW_QUEUES: argsort
    ([i % 3 for i in range(40)], [i % 7 for i in range(40)]),
    ([0] * 8, [0, 50, 0, 50, 7, 7, 0, 50]),              # few queues, far apart
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


@pytest.mark.parametrize("queues", [[4, 4, 4, 9, 9], [1, 2, 1, 2, 2, 1], [i % (FEW_QUEUES + 3) for i in range(50)]])
def test_number_counts_each_queue_on_from_its_base(queues: list[int]) -> None:
    groups = group_queues(np.zeros(len(queues), np.int64), np.array(queues))
    keys = [queues[int(f)] for f in groups.first]
    bases = np.array([100 * k for k in keys])
    expected, seen = [], dict.fromkeys(keys, 0)
    for q in queues:
        expected.append(100 * q + seen[q])
        seen[q] += 1
    assert groups.number(bases).tolist() == expected
