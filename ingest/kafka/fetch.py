"""Plugging the vectorized decoder into kafka-python's consumer.

kafka-python's fetcher turns each fetched partition response into ``Fetcher.PartitionRecords`` and
iterates ``_unpack_records`` for ConsumerRecords. For our task consumers that class is replaced, on
the one consumer instance, by one whose ``_unpack_records`` yields a single ``ArrowChunk`` (all
records of the response as Arrow columns). Fetching, sessions, leader changes, offsets out of range
and errors stay kafka-python's. Anything the fast path does not cover (read_committed with aborted
transactions, message format v0/v1) goes through kafka-python's own decoding, so poll() may return
ConsumerRecords too; ``read_range`` accepts both. If kafka-python's internals change shape,
``install`` says so and the consumer keeps its own decoding.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa

from ingest.kafka.decode import BatchSection, CorruptBatchError, decode_sections

log = logging.getLogger(__name__)

_CONTROL = 0x20
_LOG_APPEND_TIME = 0x08


@dataclass
class ArrowChunk:
    """Records of one fetch response, decoded into columns (kafka_decode.decode_sections) on first
    use: after poll() has returned, so that the consumer's next fetch is already on its way."""

    offset: int                   # >= the fetch offset: kafka-python drops items below it
    sections: list[BatchSection]
    fetch_offset: int             # a fetch may start inside a batch: records below it are dropped

    def drop_from(self, until_offset: int) -> None:
        """Forget the batches that start at or after ``until_offset`` before decoding: a fetch
        brings up to max.partition.fetch.bytes (16 MiB), often far past the end of a task's range,
        and decoding is what a record costs here."""
        if "columns" not in self.__dict__:
            self.sections = [s for s in self.sections if s.base_offset < until_offset]

    @cached_property
    def columns(self) -> dict[str, pa.Array]:
        columns = decode_sections(self.sections)
        self.sections = []
        offsets = columns["offset"].to_numpy()
        first = int(np.searchsorted(offsets, self.fetch_offset))
        return {k: v.slice(first) for k, v in columns.items()} if first else columns

    @property
    def num_rows(self) -> int:
        return len(self.columns["offset"])


@dataclass
class FetchBudget:
    """How many bytes the next fetch of a task's one partition asks for: what is left of its range at
    the bytes per record fetched so far, plus a margin. A fetch takes up to max.partition.fetch.bytes
    (16 MiB: ~115k records of 140 bytes), and whatever lies past the range end is still sent by the
    broker and received, for nothing: a task reading 50k records of a longer log paid for 2.3x them."""

    until_offset: int
    ceiling: int                  # the consumer's max.partition.fetch.bytes
    probe: int = 1 << 20          # the first fetch, before any record size is known
    floor: int = 64 * 1024
    fetched_bytes: int = 0
    fetched_records: int = 0

    def observe(self, chunk: "ArrowChunk") -> None:
        self.fetched_bytes += sum(s.wire_bytes for s in chunk.sections)
        self.fetched_records += sum(s.count for s in chunk.sections)

    def limit(self, position: int) -> int:
        if not self.fetched_records or not self.fetched_bytes:
            return min(self.ceiling, self.probe)
        left = max(self.until_offset - position, 0)
        want = int(left * self.fetched_bytes / self.fetched_records * 1.1)
        return min(self.ceiling, max(self.floor, want))     # the user's max.partition.fetch.bytes bounds all


def install(consumer: Any, budgets: Mapping[Any, FetchBudget] | None = None) -> bool:
    """Make ``consumer`` decode fetched records into ArrowChunks, and size its fetches by ``budgets``
    (per assigned TopicPartition: a fetch asks each partition for the largest of their limits, the
    setting being one for all). False if not possible."""
    fetcher = getattr(consumer, "_fetcher", None)
    base = getattr(type(fetcher), "PartitionRecords", None)
    create = getattr(fetcher, "_create_fetch_requests", None)
    if base is None or not hasattr(base, "_unpack_records") or create is None:
        log.warning("kafka-python %s has no Fetcher.PartitionRecords; using its per-record decoding",
                    getattr(__import__("kafka"), "__version__", "?"))
        return False
    fetcher.PartitionRecords = fast_partition_records(base)
    # a pooled consumer is installed once per task: the bound wraps kafka-python's own method, once
    create = fetcher.__dict__.setdefault("_create_fetch_requests_unbounded", create)
    if budgets:
        def create_bounded() -> Any:
            limits = [budgets[tp].limit(state.position.offset)
                      for tp, state in fetcher._subscriptions.assignment.items()
                      if tp in budgets and getattr(state, "position", None) is not None]
            if limits:
                fetcher.config["max_partition_fetch_bytes"] = max(limits)
            return create()

        fetcher._create_fetch_requests = create_bounded
    return True


_CLASSES: dict[type, type] = {}


def fast_partition_records(base: type) -> type:
    if base in _CLASSES:
        return _CLASSES[base]

    class FastPartitionRecords(base):  # type: ignore[misc, valid-type]
        def _unpack_records(self, tp: Any, records: Any, key_deserializer: Any, value_deserializer: Any) -> Any:
            from kafka.errors import CorruptRecordError

            if int(self.isolation_level) != 0 and self.aborted_transactions:  # 1 = READ_COMMITTED
                # aborted-transaction filtering is kafka-python's
                yield from super()._unpack_records(tp, records, key_deserializer, value_deserializer)
                return
            sections: list[BatchSection] = []
            batch = records.next_batch()
            last = None
            while batch is not None:
                if batch.magic < 2:
                    raise CorruptBatchError(f"{tp.topic}-{tp.partition}: message format v{batch.magic} "
                                            "(Kafka < 0.11) is not supported by the kafka-python source")
                last = batch
                if self.check_crcs and not batch.validate_crc():
                    raise CorruptRecordError(f"record batch for partition {tp} at offset "
                                             f"{batch.base_offset} failed its CRC check")
                self.leader_epoch = batch.leader_epoch
                if not batch.attributes & _CONTROL and batch.records_count:
                    batch._maybe_uncompress()
                    buffer = batch._buffer
                    sections.append(BatchSection(
                        records=bytes(memoryview(buffer)[batch._pos:]), count=batch.records_count,
                        base_offset=batch.base_offset, first_timestamp=batch.first_timestamp,
                        max_timestamp=batch.max_timestamp,
                        log_append_time=bool(batch.attributes & _LOG_APPEND_TIME),
                        wire_bytes=batch.size_in_bytes))
                batch = records.next_batch()
            if last is not None:
                # v2 keeps a batch's last offset even when compaction removed its last records
                self.next_fetch_offset = last.next_offset
            if sections:
                self.records_read += sum(sec.count for sec in sections)
                yield ArrowChunk(max(self.fetch_offset, sections[0].base_offset), sections, self.fetch_offset)
            self.drain()

    _CLASSES[base] = FastPartitionRecords
    return FastPartitionRecords
