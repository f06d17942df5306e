"""The one driver-side writer of a store, and the exactly-once protocol around each batch.

Per batch: append the ordered, encoded records; append the dead letters; flush; then ONE atomic commit
holding the batch id, the commit-log end offset (the store's commit point), every queue's next offset
and every Kafka partition's next offset. A crash anywhere before the commit leaves bytes that the
store's recovery (and the dead-letter log) cut away on the next open; Spark re-runs the batch.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sink.deadletter import DeadLetterLog
from sink.faults import CrashPoints
from sink.handover.schema import COORD_COLUMNS, RECORD_COLUMNS, VALUE_EMPTY, VALUE_KIND, VALUE_NULL
from sink.state import SinkState, tp_key
from store import DeadLetterReason, EncodedBatch, MessageStore, StoreConfig

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class BatchStats:
    """What one batch did: the figures of its log line, and what the job's metrics count."""

    batch_id: int
    records: int
    dead_letters: int
    append_ms: float                # the commit log and its queues (index/ not included)
    flush_ms: float                 # the commit log and the consume queues (index/ not included)
    commit_ms: float
    commit_offset: int
    index_ms: float = 0.0           # keys into index/, and its flush
    collect_ms: float = 0.0         # Spark's part: read, encode, collect (set by sink.foreach_batch)
    topic_records: Mapping[str, int] = field(default_factory=dict)   # messages stored, per RocketMQ topic
    topic_bytes: Mapping[str, int] = field(default_factory=dict)     # their commit-log bytes
    dead_reasons: Mapping[str, int] = field(default_factory=dict)    # dead letters, per DeadLetterReason code
    tombstones: int = 0             # records whose Kafka value was null, stored as a 1-byte body
    empty_values: int = 0           # ... 0 bytes, the same
    committed_ms: int = 0           # when the commit point covering the batch was written (epoch ms)
    born_ms: np.ndarray | None = field(default=None, repr=False)   # each stored record's Kafka timestamp

    def latency_s(self) -> np.ndarray:
        """Each stored record's end-to-end latency: from its producer's timestamp (the Kafka record's,
        BORNTIMESTAMP) to the commit that made it durable, in seconds (empty: no record)."""
        if self.born_ms is None or not len(self.born_ms):
            return np.zeros(0)
        return (self.committed_ms - self.born_ms) / 1000.0


def topic_totals(batch: EncodedBatch) -> tuple[dict[str, int], dict[str, int]]:
    """(messages, commit-log bytes) per topic of an encoded batch."""
    if not len(batch):
        return {}, {}
    n = len(batch.topic_names)
    counts = np.bincount(batch.topic_index, minlength=n)
    sizes = np.bincount(batch.topic_index, weights=batch.sizes, minlength=n)
    return ({t: int(c) for t, c in zip(batch.topic_names, counts) if c},
            {t: int(b) for t, b, c in zip(batch.topic_names, sizes, counts) if c})


def reason_counts(dead: pa.Table) -> dict[str, int]:
    if dead.num_rows == 0:
        return {}
    # a row with a reason but no code comes from a hand-over that did not set one: "other"
    codes = dead.column("dead_code").combine_chunks().fill_null(DeadLetterReason.OTHER.value)
    counted = pc.value_counts(codes)
    return {str(v): int(c) for v, c in zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist())}


def kafka_next_offsets(table: pa.Table) -> dict[str, int]:
    """Next offset per Kafka partition seen in ``table`` (valid and dead rows alike). A dead letter
    with no Kafka position (a replayed file's row without a topic, or with a negative partition or
    offset) moves none: it is written, but no partition's progress depends on it."""
    if table.num_rows == 0:
        return {}
    coords = table.select(list(COORD_COLUMNS))
    placed = pc.and_(pc.is_valid(coords.column("kafka_topic")),
                     pc.and_(pc.greater_equal(coords.column("kafka_partition"), 0),
                             pc.greater_equal(coords.column("kafka_offset"), 0)))
    placed = pc.fill_null(placed, False)
    if not pc.all(placed).as_py():
        coords = coords.filter(placed)
        if coords.num_rows == 0:
            return {}
    grouped = coords.group_by(["kafka_topic", "kafka_partition"]).aggregate(
        [("kafka_offset", "max")])
    topics = grouped.column("kafka_topic").to_pylist()
    parts = grouped.column("kafka_partition").to_pylist()
    maxes = grouped.column("kafka_offset_max").to_pylist()
    return {tp_key(t, p): m + 1 for t, p, m in zip(topics, parts, maxes)}


class CommitLogWriter:
    """Owns the MessageStore and the dead-letter log of one store; one per store, on the driver."""

    def __init__(self, root: str | os.PathLike[str], config: StoreConfig | None = None,
                 truncate_on_corruption: bool = False, broker_group: str | None = None) -> None:
        self.root = Path(root)
        self.store = MessageStore.open(self.root, config or StoreConfig(),
                                       truncate_on_corruption=truncate_on_corruption)
        self.state = SinkState.from_metadata(self.store.last_commit.metadata)
        if self.state.empty:
            # recorded with the first commit; a store holding data keeps the group it was written as
            # (the job refuses another before it writes: ingest.broker_groups)
            self.state = replace(self.state, broker_group=broker_group)
        self.dead_letters = DeadLetterLog(self.root, self.state.dead_letter_bytes)
        self.crash = CrashPoints()
        log.info("store %s open: committed offset %d, batch %d, %d records, %d dead letters",
                 self.root, self.store.committed_offset, self.state.batch_id, self.state.records,
                 self.state.dead_letters)
        damaged = self.store.damaged_records
        if damaged:
            shown = ", ".join(map(str, damaged[:10])) + (", ..." if len(damaged) > 10 else "")
            log.error("store %s: %d committed record(s) below the commit point are damaged (their CRC fails) at "
                      "offset %s; kept, and every record after them; readers refuse them; `commitlog verify %s` "
                      "lists them", self.root, len(damaged), shown, self.root)

    @property
    def damaged_records(self) -> int:
        """Committed records the store's open found damaged (their content fails its CRC)."""
        return len(self.store.damaged_records)

    def should_skip(self, batch_id: int, query_id: str | None) -> bool:
        """Spark re-runs the last batch after a crash: one at or below the committed id is done."""
        return query_id is not None and query_id == self.state.query_id and batch_id <= self.state.batch_id

    def write_batch(self, batch_id: int, query_id: str | None, table: pa.Table) -> BatchStats:
        """Append one prepared, ordered batch (sink.batch.prepare) and commit it; the store numbers
        each queue. ``table`` rows are in commit-log order."""
        reasons = table.column("dead_reason")
        live: np.ndarray | None = None              # the usual batch: every row, no selection
        if reasons.null_count == table.num_rows:
            dead = table.slice(0, 0)
        else:
            dead_mask = pc.is_valid(reasons)
            dead = table.filter(dead_mask)          # a few rows; the records are not copied for them
            live = np.flatnonzero(~dead_mask.to_numpy(zero_copy_only=False))

        t0 = time.perf_counter()
        i0 = self.store.index_seconds
        per_topic: tuple[dict[str, int], dict[str, int]] = ({}, {})
        born: np.ndarray | None = None
        if live is None or len(live):
            batch = EncodedBatch.from_arrow(table.select(list(RECORD_COLUMNS)), live)
            self.store.append_encoded(batch)
            per_topic = topic_totals(batch)
            born = batch.born_timestamps()
        dl_size = self.dead_letters.append(dead, batch_id)
        self.crash.reached("after-append")
        t1 = time.perf_counter()
        i1 = self.store.index_seconds
        self.store.flush()
        self.crash.reached("after-flush")
        t2 = time.perf_counter()
        i2 = self.store.index_seconds
        kinds = np.bincount(table.column(VALUE_KIND).fill_null(0).to_numpy(), minlength=3)
        tombstones, empty_values = int(kinds[VALUE_NULL]), int(kinds[VALUE_EMPTY])
        new_state = self.state.advanced(batch_id, query_id, kafka_next_offsets(table), dl_size,
                                        dead.num_rows, table.num_rows - dead.num_rows, tombstones, empty_values)
        point = self.store.commit(None, metadata=new_state.to_metadata())
        committed_ms = time.time_ns() // 1_000_000
        t3 = time.perf_counter()
        self.state = new_state
        self.crash.reached("after-commit")
        return BatchStats(batch_id, table.num_rows - dead.num_rows, dead.num_rows, (t1 - t0 - (i1 - i0)) * 1e3,
                          (t2 - t1 - (i2 - i1)) * 1e3, (t3 - t2) * 1e3, point.offset, index_ms=(i2 - i0) * 1e3,
                          topic_records=per_topic[0], topic_bytes=per_topic[1], dead_reasons=reason_counts(dead),
                          tombstones=tombstones, empty_values=empty_values, committed_ms=committed_ms, born_ms=born)

    def close(self) -> None:
        self.dead_letters.close()
        self.store.close()

    def __enter__(self) -> "CommitLogWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


