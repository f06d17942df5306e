"""The vectorized v2 record decoder gives exactly what kafka-python's own decoding gives."""

from __future__ import annotations

import random

import pytest
from kafka.consumer.fetcher import Fetcher
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.structs import TopicPartition

from ingest.kafka.decode import CorruptBatchError, decode_sections
from ingest.kafka.fetch import ArrowChunk, FetchBudget, fast_partition_records

pytestmark = pytest.mark.unit

TP = TopicPartition("t", 3)
NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4   # Kafka's codec ids in a batch's attributes


def build_batches(specs: list[tuple[int, int, int]], seed: int = 7) -> tuple[bytes, list[tuple]]:
    """specs: (base offset, record count, codec). Returns the fetched bytes and the expected
    (offset, timestamp, key, value, headers) of every record."""
    rnd = random.Random(seed)
    data, expected = b"", []
    for base, count, codec in specs:
        builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, batch_size=1 << 22)
        for i in range(count):
            ts = 1_700_000_000_000 + rnd.randrange(-10**6, 10**9)
            key = None if rnd.random() < 0.2 else rnd.randbytes(rnd.choice([0, 1, 5, 200]))
            value = None if rnd.random() < 0.05 else rnd.randbytes(rnd.choice([0, 3, 130, 20_000]))
            headers = [(rnd.choice(["TAGS", "k", "ünï", ""]), None if rnd.random() < 0.2 else rnd.randbytes(4))
                       for _ in range(rnd.choice([0, 0, 1, 3]))]
            builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
            expected.append((base + i, ts, key, value, headers))
        raw = bytearray(builder.build())
        raw[0:8] = base.to_bytes(8, "big")   # the broker assigns the base offset
        data += bytes(raw)
    return data, expected


def decode_fast(data: bytes, fetch_offset: int) -> list[tuple]:
    cls = fast_partition_records(Fetcher.PartitionRecords)
    part = cls(fetch_offset, TP, MemoryRecords(data), check_crcs=False)
    items = part.take(None)
    assert all(isinstance(i, ArrowChunk) for i in items) and len(items) <= 1
    out = []
    for chunk in items:
        cols = {k: v.to_pylist() for k, v in chunk.columns.items()}
        for i in range(chunk.num_rows):
            headers = [(h["key"], h["value"]) for h in cols["headers"][i]]
            out.append((cols["offset"][i], cols["timestamp"][i], cols["key"][i], cols["value"][i], headers))
    return out


def decode_kafka_python(data: bytes, fetch_offset: int) -> list[tuple]:
    part = Fetcher.PartitionRecords(fetch_offset, TP, MemoryRecords(data), check_crcs=False)
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in part.take(None)]


def test_fast_decoding_matches_kafka_python_across_batches_and_codecs() -> None:
    data, expected = build_batches([(0, 50, NONE), (50, 1, NONE), (51, 120, GZIP), (171, 7, NONE), (178, 40, SNAPPY),
                                    (218, 60, LZ4), (278, 33, ZSTD)])
    assert decode_kafka_python(data, 0) == expected
    assert decode_fast(data, 0) == expected


def test_a_fetch_starting_inside_a_batch_skips_the_records_before_it() -> None:
    data, expected = build_batches([(100, 30, NONE), (130, 30, GZIP)])
    assert decode_fast(data, 117) == expected[17:] == decode_kafka_python(data, 117)


def test_batches_past_a_range_end_are_dropped_before_decoding() -> None:
    data, expected = build_batches([(0, 40, NONE), (40, 40, GZIP), (80, 40, NONE)])
    cls = fast_partition_records(Fetcher.PartitionRecords)
    (chunk,) = cls(0, TP, MemoryRecords(data), check_crcs=False).take(None)
    chunk.drop_from(50)   # the batch at 80 lies wholly past the end; the one at 40 straddles it
    assert [s.base_offset for s in chunk.sections] == [0, 40]
    assert chunk.columns["offset"].to_pylist() == [e[0] for e in expected[:80]]
    chunk.drop_from(10)   # once decoded, the columns stay whole
    assert chunk.num_rows == 80


def test_fetches_ask_for_what_is_left_of_the_range_at_the_record_size_seen() -> None:
    data, _ = build_batches([(0, 40, NONE), (40, 40, GZIP)])
    (chunk,) = fast_partition_records(Fetcher.PartitionRecords)(0, TP, MemoryRecords(data), check_crcs=False).take(None)
    budget = FetchBudget(until_offset=100_000, ceiling=16 << 20, probe=1 << 20, floor=64 << 10)
    assert budget.limit(0) == 1 << 20                  # nothing seen yet: a probe
    budget.observe(chunk)
    per_record = len(data) / 80
    assert budget.limit(99_000) == int(1000 * per_record * 1.1)
    assert budget.limit(100_000) == 64 << 10           # at the end: the floor, never 0
    assert budget.limit(0) == min(16 << 20, int(100_000 * per_record * 1.1))


def test_log_append_time_batches_give_every_record_the_batch_time() -> None:
    data, expected = build_batches([(0, 5, NONE)])
    raw = bytearray(data)
    raw[21:23] = (int.from_bytes(raw[21:23], "big") | 0x08).to_bytes(2, "big")  # attributes: LogAppendTime
    max_ts = int.from_bytes(raw[35:43], "big")
    cls = fast_partition_records(Fetcher.PartitionRecords)
    (chunk,) = cls(0, TP, MemoryRecords(bytes(raw)), check_crcs=False).take(None)
    assert chunk.columns["timestamp"].to_pylist() == [max_ts] * 5
    assert chunk.columns["timestampType"].to_pylist() == [1] * 5


def test_a_damaged_record_is_reported_not_misread() -> None:
    data, _ = build_batches([(0, 10, NONE)], seed=3)
    raw = bytearray(data)
    raw[61] = 0x7E  # first record's length varint now claims 63 bytes
    with pytest.raises(CorruptBatchError):
        decode_fast(bytes(raw), 0)


def test_no_sections_decode_to_empty_columns() -> None:
    assert decode_sections([]) ["offset"].to_pylist() == []
