"""Rows of an export by their Kafka position (topic, partition, offset): one row per position, and
source order. Most pieces of an export hold one partition in offset order already, seen cheaply."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

POSITION = ["topic", "partition", "offset"]


def one_partition(table: pa.Table) -> bool:
    """Whether every row of ``table`` is of one (topic, partition)."""
    return table.num_rows > 0 and all(pc.count_distinct(table.column(c)).as_py() == 1 for c in ("topic", "partition"))


def rising_in_one_partition(table: pa.Table) -> bool:
    """Rows in source order with no position twice: one partition whose offsets rise (an export's
    usual piece)."""
    offsets = np.asarray(table.column("offset"), dtype=np.int64)
    return bool(np.all(offsets[1:] > offsets[:-1])) and one_partition(table)


def first_of_each_position(table: pa.Table) -> tuple[pa.Table, int]:
    """The first row of each (topic, partition, offset), and how many later ones were dropped."""
    if table.num_rows == 0 or rising_in_one_partition(table):
        return table, 0
    return _first_rows(table)


def source_order(table: pa.Table) -> pa.Table:
    """``table``'s rows in (topic, partition, offset) order, the first in file order of each position kept."""
    if table.num_rows < 2 or rising_in_one_partition(table):
        return table
    table, _ = _first_rows(table)
    return table.take(pc.sort_indices(table, sort_keys=[(c, "ascending") for c in POSITION]))


def _first_rows(table: pa.Table) -> tuple[pa.Table, int]:
    indexed = table.select(POSITION).append_column("i", pa.array(range(table.num_rows), pa.int64()))
    first = indexed.group_by(POSITION).aggregate([("i", "min")]).column("i_min")
    if len(first) == table.num_rows:
        return table, 0
    # the groups come in whatever order group_by's threads finish: the rows kept, in file order
    return table.take(np.sort(first.to_numpy())), table.num_rows - len(first)
