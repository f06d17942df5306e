"""read_committed on fetch responses built as a broker sends them: records of aborted transactions
are skipped, control records never become records, the position moves past both, and a
partition ends at its last stable offset, not its high watermark (the embedded broker does not
report aborted transactions, so this is pinned here, on the bytes)."""

from __future__ import annotations

import struct
from collections import namedtuple

import pytest
from kafka.consumer.fetcher import Fetcher
from kafka.protocol.consumer.offsets import IsolationLevel
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c
from kafka.structs import TopicPartition

from ingest.kafka.admin import true_end, watch_stable_offsets
from ingest.kafka.fetch import ArrowChunk, fast_partition_records

pytestmark = pytest.mark.unit

TP = TopicPartition("t", 0)
Aborted = namedtuple("Aborted", ["producer_id", "first_offset"])   # FetchResponse's AbortedTransaction
_ATTRIBUTES, _CRC, _CONTROL = 21, 17, 0x20


def batch(base: int, values: list[bytes], producer_id: int = -1) -> bytes:
    txn = producer_id >= 0
    b = DefaultRecordBatchBuilder(2, 0, txn, producer_id, 0 if txn else -1, 0 if txn else -1, batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp=1_700_000_000_000 + base + i, key=None, value=v, headers=[])
    raw = bytearray(b.build())
    raw[0:8] = base.to_bytes(8, "big")
    return bytes(raw)


def marker(base: int, producer_id: int, commit: bool) -> bytes:
    """The control batch a transaction coordinator writes: one record, key (version, type)."""
    b = DefaultRecordBatchBuilder(2, 0, True, producer_id, 0, -1, batch_size=1 << 10)
    b.append(0, timestamp=1_700_000_000_000, key=struct.pack(">hh", 0, 1 if commit else 0),
             value=struct.pack(">hi", 0, 5), headers=[])
    raw = bytearray(b.build())
    raw[0:8] = base.to_bytes(8, "big")
    attrs = int.from_bytes(raw[_ATTRIBUTES:_ATTRIBUTES + 2], "big") | _CONTROL
    raw[_ATTRIBUTES:_ATTRIBUTES + 2] = attrs.to_bytes(2, "big")
    raw[_CRC:_CRC + 4] = calc_crc32c(bytes(raw[_ATTRIBUTES:])).to_bytes(4, "big")
    return bytes(raw)


# offsets 0-2: a committed transaction (producer 7), 3: its commit marker; 4-6: an aborted one
# (producer 8), 7: its abort marker; 8-9: plain records
LOG = (batch(0, [b"c0", b"c1", b"c2"], 7) + marker(3, 7, True) + batch(4, [b"a4", b"a5", b"a6"], 8)
       + marker(7, 8, False) + batch(8, [b"p8", b"p9"]))


def read(data: bytes, level: int, aborted: list[Aborted] | None, fetch_offset: int = 0) -> tuple[list, int]:
    """(offset, value) of what the consumer returns, and where its next fetch starts."""
    cls = fast_partition_records(Fetcher.PartitionRecords)
    part = cls(fetch_offset, TP, MemoryRecords(data), check_crcs=True, isolation_level=level,
               aborted_transactions=aborted)
    out = []
    for item in part.take(None):
        if isinstance(item, ArrowChunk):
            out += list(zip(item.columns["offset"].to_pylist(), item.columns["value"].to_pylist()))
        else:
            out.append((item.offset, item.value))
    return out, part.next_fetch_offset


def test_read_committed_skips_aborted_records_and_every_marker() -> None:
    got, next_offset = read(LOG, IsolationLevel.READ_COMMITTED, [Aborted(8, 4)])
    assert got == [(0, b"c0"), (1, b"c1"), (2, b"c2"), (8, b"p8"), (9, b"p9")]
    assert next_offset == 10


def test_read_uncommitted_returns_aborted_records_but_never_a_marker() -> None:
    got, next_offset = read(LOG, IsolationLevel.READ_UNCOMMITTED, None)
    assert [o for o, _ in got] == [0, 1, 2, 4, 5, 6, 8, 9]
    assert next_offset == 10


def test_a_fetch_with_no_aborted_transaction_takes_the_fast_path_and_steps_over_the_marker() -> None:
    data = batch(0, [b"c0", b"c1"], 7) + marker(2, 7, True)
    got, next_offset = read(data, IsolationLevel.READ_COMMITTED, [])
    assert got == [(0, b"c0"), (1, b"c1")] and next_offset == 3
    got, next_offset = read(marker(0, 7, False), IsolationLevel.READ_COMMITTED, [])
    assert got == [] and next_offset == 1          # a fetch of nothing but a marker still moves on


def test_an_aborted_transaction_fetched_from_its_middle_is_skipped_from_there() -> None:
    got, _ = read(LOG, IsolationLevel.READ_COMMITTED, [Aborted(8, 4)], fetch_offset=5)
    assert got == [(8, b"p8"), (9, b"p9")]


def test_a_partition_ends_at_its_last_stable_offset_under_read_committed() -> None:
    # an open transaction from offset 40: the high watermark (60) is past what a read_committed
    # fetch will ever return before it ends
    assert true_end(reported=40, high_watermark=60, last_stable=40, read_committed=True) == 40
    assert true_end(reported=40, high_watermark=60, last_stable=40, read_committed=False) == 60
    # Kafka answers ListOffsets with the LSO under read_committed; an unprobed partition keeps it
    assert true_end(reported=40, high_watermark=None, last_stable=None, read_committed=True) == 40
    # a broker that reports no LSO (-1, or an old fetch version): the high watermark, as before
    assert true_end(reported=41, high_watermark=60, last_stable=None, read_committed=True) == 60
    # Tansu's ListOffsets answer is a batch base + 1; the fetch's high watermark is the end
    assert true_end(reported=31, high_watermark=60, last_stable=None, read_committed=False) == 60


def test_the_last_stable_offset_of_a_fetch_response_is_noted() -> None:
    class FakeFetcher:
        def _parse_fetched_data(self, completed_fetch):
            return "parsed"

    class FakeConsumer:
        _fetcher = FakeFetcher()

    PartitionData = namedtuple("PartitionData", ["last_stable_offset"])
    Completed = namedtuple("Completed", ["topic_partition", "partition_data"])
    noted: dict = {}
    consumer = FakeConsumer()
    assert watch_stable_offsets(consumer, noted)
    assert consumer._fetcher._parse_fetched_data(Completed(TP, PartitionData(42))) == "parsed"
    consumer._fetcher._parse_fetched_data(Completed(TopicPartition("u", 1), PartitionData(-1)))
    assert noted == {("t", 0): 42}
