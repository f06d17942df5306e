"""The sink's share of a hand-over batch (sink.handover.schema): ``prepare`` unpacks it and drops the
records the store already holds, so a re-run or a reset Spark checkpoint never writes a Kafka record
twice.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sink.handover.packed import CHUNK, unpack
from sink.handover.schema import ENCODED_SCHEMA
from sink.state import tp_key


def drop_held(table: pa.Table, next_offsets: Mapping[str, int]) -> pa.Table:
    """``table`` without the rows whose Kafka offset is below the store's next one for their
    partition ("topic/partition" -> offset): exactly once at record granularity, so a re-run or a
    reset Spark checkpoint can never write a Kafka record twice."""
    if not next_offsets or table.num_rows == 0:
        return table
    topics = pc.dictionary_encode(table.column("kafka_topic").combine_chunks())
    names = topics.dictionary.to_pylist()
    partitions = np.asarray(table.column("kafka_partition"), dtype=np.int64)
    keys, first, inverse = np.unique(np.asarray(topics.indices, dtype=np.int64) << 32 | partitions,
                                     return_index=True, return_inverse=True)
    below = np.array([next_offsets.get(tp_key(names[int(k) >> 32], int(partitions[f])), 0)
                      for k, f in zip(keys, first)], dtype=np.int64)
    fresh = np.asarray(table.column("kafka_offset"), dtype=np.int64) >= below[inverse]
    return table if fresh.all() else table.filter(pa.array(fresh))


def prepare(collected: pa.Table, kafka_next_offsets: Mapping[str, int]) -> pa.Table:
    """A collected batch (packed or not) as ENCODED_SCHEMA rows in commit-log order, without what
    the store already holds. The driver's share of a batch, run on the sink's writer thread."""
    table = unpack(collected, ENCODED_SCHEMA) if CHUNK in collected.column_names else collected
    if table.schema != ENCODED_SCHEMA:
        table = table.select(ENCODED_SCHEMA.names).cast(ENCODED_SCHEMA)
    return drop_held(table, kafka_next_offsets)
