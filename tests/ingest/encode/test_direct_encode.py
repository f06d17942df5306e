"""The C path from fetched Kafka batches to CommitLog records gives, row for row and byte for byte,
what the general path (decode, map, encode) gives: the records it covers encoded by the kernel, every
other one handed back, mapped the general way and put back in its place."""

from __future__ import annotations

import random
import zlib

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.consumer.fetcher import Fetcher
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.structs import TopicPartition

from ingest.encode.direct_encode import DirectEncoder
from ingest.encode.mapping import MappingConfig
from ingest.encode.prepare import map_and_encode
from ingest.kafka.decode import CorruptBatchError
from ingest.kafka.fetch import ArrowChunk, fast_partition_records
from ingest.kafka.offsets import KafkaOffsetRange
from ingest.kafka.read import chunk_to_batch
from ingest.encode.restore import kafka_value
from sink.handover.schema import VALUE_EMPTY, VALUE_IN_BODY, VALUE_NULL
from store.format import EMPTY_VALUE_BODY
from store.format.codec import CodecConfig, decode_message
from tests.helpers.direct_encode import (
    MAPPINGS,
    PARTITION,
    RECORDS,
    Record,
    SCHEMA,
    TOPIC,
    assert_same,
    plain_records,
)

pytestmark = pytest.mark.unit

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4   # Kafka's codec ids in a batch's attributes


def fetched(batches: list[tuple[int, list[Record], int]], seed: int = 1, log_append: bool = False) -> bytes:
    """The bytes of a fetch response: (base offset, records, codec) per v2 batch."""
    rnd = random.Random(seed)
    data = b""
    for base, records, codec in batches:
        builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, batch_size=1 << 24)
        for i, (key, value, headers) in enumerate(records):
            builder.append(i, timestamp=1_700_000_000_000 + rnd.randrange(10**9), key=key, value=value,
                           headers=headers)
        raw = bytearray(builder.build())
        raw[0:8] = base.to_bytes(8, "big")   # the broker assigns the base offset
        if log_append:
            raw[22] |= 0x08                    # attributes: LogAppendTime
        data += bytes(raw)
    return data


def chunk_of(data: bytes, fetch_offset: int) -> ArrowChunk:
    cls = fast_partition_records(Fetcher.PartitionRecords)
    part = cls(fetch_offset, TopicPartition(TOPIC, PARTITION), MemoryRecords(data), check_crcs=False)
    (chunk,) = part.take(None)
    return chunk


def both_ways(data: bytes, fetch_offset: int, until: int, mapping: MappingConfig = MappingConfig(),
              codec: CodecConfig = CodecConfig()) -> tuple[pa.RecordBatch | None, pa.RecordBatch, DirectEncoder]:
    encoder = DirectEncoder.for_partition(TOPIC, PARTITION, mapping, codec)
    assert encoder is not None
    rng = KafkaOffsetRange(TOPIC, PARTITION, fetch_offset, until)

    def the_general_way(chunk: ArrowChunk) -> pa.RecordBatch:
        return map_and_encode(chunk_to_batch(chunk, rng, SCHEMA), mapping, codec)

    direct = encoder.encode(chunk_of(data, fetch_offset), until, the_general_way)
    return direct, the_general_way(chunk_of(data, fetch_offset)), encoder


def test_plain_records_are_encoded_exactly_as_the_general_path_does() -> None:
    rnd = random.Random(5)
    data = fetched([(0, plain_records(rnd, 300), NONE), (300, plain_records(rnd, 1), NONE),
                    (301, plain_records(rnd, 200), GZIP), (501, plain_records(rnd, 50), SNAPPY),
                    (551, plain_records(rnd, 50), LZ4), (601, plain_records(rnd, 50), ZSTD)])
    direct, general, _ = both_ways(data, 0, 651)
    assert direct.num_rows == 651
    assert_same(direct, general)


def test_the_range_is_cut_at_the_fetch_offset_and_at_the_task_end() -> None:
    rnd = random.Random(6)
    data = fetched([(100, plain_records(rnd, 50), NONE), (150, plain_records(rnd, 50), NONE)])
    direct, general, _ = both_ways(data, 117, 163)
    assert direct.column("kafka_offset").to_pylist() == list(range(117, 163))
    assert_same(direct, general)


@MAPPINGS
def test_mapping_settings_give_the_same_records(mapping: MappingConfig) -> None:
    rnd = random.Random(7)
    direct, general, _ = both_ways(fetched([(0, plain_records(rnd, 400), NONE)]), 0, 400, mapping)
    assert_same(direct, general)


def test_one_of_n_broker_groups_stores_partition_p_as_queue_p_div_n() -> None:
    direct, _, _ = both_ways(fetched([(0, plain_records(random.Random(8), 50), NONE)]), 0, 50,
                             MappingConfig(broker_groups=2))
    assert set(direct.column("queue_id").to_pylist()) == {PARTITION // 2}


def test_log_append_time_gives_every_record_the_batch_time() -> None:
    rnd = random.Random(8)
    direct, general, _ = both_ways(fetched([(0, plain_records(rnd, 20), NONE)], log_append=True), 0, 20)
    assert len(set(direct.column("raw_timestamp").to_pylist())) == 1
    assert_same(direct, general)


def test_utf8_keys_headers_and_tombstones_are_encoded_by_the_kernel() -> None:
    records = [(b"\xc3\xa9t\xc3\xa9", b"v", [("TAGS", "\u00e9t\u00e9 \U0001f600".encode())]),
               ("\u6771\u4eac".encode(), None, [("n\u00e4me", "caf\u00e9".encode()), ("trace", b"t")]),
               (b"k", None, []), (None, b"", [("x", b"\x00")]), ("\U0001f680".encode(), b"body", [])]
    for mapping in (MappingConfig(), MappingConfig(queue_mode="key-hash", queue_count=7)):
        direct, general, encoder = both_ways(fetched([(0, records, NONE)]), 0, 5, mapping)
        assert_same(direct, general)
        assert encoder.fallbacks == {} and encoder.direct_records == 5
    tombstones = [r for r in direct.column("record").to_pylist() if b"KAFKA_VALUE_NULL\x01true\x02" in r]
    assert len(tombstones) == 2


def test_null_and_empty_values_get_the_one_byte_body_in_the_kernel_too() -> None:
    records = [(b"a", None, []), (b"b", b"", [("TAGS", b"t")]), (b"c", b"\x00", []), (None, None, [])]
    direct, general, encoder = both_ways(fetched([(0, records, NONE)]), 0, 4)
    assert_same(direct, general)
    assert encoder.fallbacks == {} and encoder.direct_records == 4
    messages = [decode_message(r) for r in direct.column("record").to_pylist()]
    assert [m.body for m in messages] == [EMPTY_VALUE_BODY] * 4       # no record has an empty body
    assert [kafka_value(m.body, m.properties) for m in messages] == [None, b"", b"\x00", None]
    assert direct.column("value_kind").to_pylist() == [VALUE_NULL, VALUE_EMPTY, VALUE_IN_BODY, VALUE_NULL]


@pytest.mark.parametrize("record, reason", [
    ((b"caf\xe9", b"v", []), "key not UTF-8 text"),
    ((b"a\x02b", b"v", []), "key not UTF-8 text"),
    ((None, b"v", [("", b"v")]), "header name not UTF-8 text"),
    ((None, b"v", [("a\x01b", b"v")]), "header name not UTF-8 text"),
    ((None, b"v", [("trace", b"\xff\xfe")]), "header value null, empty or not UTF-8 text"),
    ((None, b"v", [("trace", b"a\x02b")]), "header value null, empty or not UTF-8 text"),
    ((None, b"v", [("trace", None)]), "header value null, empty or not UTF-8 text"),
    ((None, b"v", [("trace", b"")]), "header value null, empty or not UTF-8 text"),
    ((None, b"v", [("KAFKA_OFFSET", b"7")]), "header name reserved or repeated"),
    ((None, b"v", [("trace", b"1"), ("span", b"2"), ("trace", b"3")]), "header name reserved or repeated"),
    ((None, b"v", [("h%d" % i, b"v") for i in range(40)]), "header name reserved or repeated"),
    ((None, b"v", [("bornHost", b"10.0.0.1:5")]), "born-host or DELAY header"),
    ((None, b"v", [("DELAY", b"3")]), "born-host or DELAY header"),
    ((None, b"x" * 200, []), "record over a limit"),
    ((None, b"v", [("h", b"x" * 40000)]), "record over a limit"),
], ids=["latin1-key", "separator-key", "empty-header-name", "separator-header-name", "binary-header-value",
        "separator-value", "null-header-value", "empty-header-value", "reserved-header-name", "repeated-header",
        "many-headers", "born-host", "delay", "body-over-max", "properties-over-max"])
def test_a_record_the_kernel_does_not_cover_is_handed_back_and_put_back_in_its_place(record: Record,
                                                                                   reason: str) -> None:
    filler = [(b"k%d" % i, b"body", [("TAGS", b"T")]) for i in range(10)]
    records = filler + [record] + filler
    direct, general, encoder = both_ways(fetched([(0, records, NONE)]), 0, 21, MappingConfig(max_message_size=150))
    assert_same(direct, general)
    assert encoder.fallbacks == {reason: 1}
    assert encoder.direct_records == 20


def test_handed_back_records_keep_their_place_across_batches_and_codecs() -> None:
    rnd = random.Random(11)
    odd = [(b"\xff%d" % i, b"v", [("dup", b"1"), ("dup", b"2")]) for i in range(3)]
    batches = [(0, plain_records(rnd, 30) + odd[:1], GZIP), (31, odd[1:] + plain_records(rnd, 30), NONE),
               (63, plain_records(rnd, 5), ZSTD)]
    direct, general, encoder = both_ways(fetched(batches), 5, 66)
    assert_same(direct, general)
    assert direct.column("kafka_offset").to_pylist()[:59] == sorted(direct.column("kafka_offset").to_pylist()[:59])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=RECORDS, key_hash=st.booleans(), prop_crc=st.booleans())
def test_any_records_come_out_as_the_general_path_makes_them(records: list[Record], key_hash: bool,
                                                             prop_crc: bool) -> None:
    mapping = MappingConfig(queue_mode="key-hash", queue_count=5) if key_hash else MappingConfig()
    direct, general, encoder = both_ways(fetched([(0, records, NONE)]), 0, len(records), mapping,
                                         CodecConfig(enabled_append_prop_crc=prop_crc))
    assert_same(direct, general)
    assert encoder.direct_records + sum(encoder.fallbacks.values()) == len(records)


def test_settings_it_does_not_cover_leave_every_fetch_to_the_general_path() -> None:
    assert DirectEncoder.for_partition(TOPIC, 0, MappingConfig(envelope=True), CodecConfig()) is None
    assert DirectEncoder.for_partition("bad topic!", 0, MappingConfig(), CodecConfig()) is None


def test_property_crcs_are_written_by_the_kernel_as_the_general_path_writes_them() -> None:
    records = [(b"k%d" % i, b"v" * i, [("trace", b"t")]) for i in range(1, 51)]
    records.insert(7, (b"k", b"v", [("__CRC32#", b"1234567890")]))    # the codec drops such a property
    codec = CodecConfig(enabled_append_prop_crc=True)
    direct, general, encoder = both_ways(fetched([(0, records, NONE)]), 0, len(records), MappingConfig(), codec)
    assert_same(direct, general)
    assert encoder.direct_records == 50 and encoder.fallbacks == {"header name reserved or repeated": 1}
    for record in direct.column("record").to_pylist():
        # __CRC32#\x01, ten digits least significant first, \x02: the masked CRC-32 of all before it
        assert record[-20:-11] == b"__CRC32#\x01" and record[-1:] == b"\x02"
        assert int(record[-11:-1][::-1]) == zlib.crc32(record[:-20]) & 0x7FFFFFFF


def test_a_damaged_batch_is_left_to_the_general_path_which_reports_it() -> None:
    raw = bytearray(fetched([(0, [(b"k", b"value", [])] * 3, NONE)]))
    raw[61] = 0x7E  # first record's length varint now claims 63 bytes
    encoder = DirectEncoder.for_partition(TOPIC, PARTITION, MappingConfig(), CodecConfig())
    assert encoder.encode(chunk_of(bytes(raw), 0), 3, lambda rest: pytest.fail("no record is handed back")) is None
    assert encoder.fallbacks == {"damaged batch": 3}
    with pytest.raises(CorruptBatchError):
        chunk_of(bytes(raw), 0).columns


def test_a_task_encodes_what_the_kernel_covers_and_the_rest_the_general_way() -> None:
    from ingest.encode.message_reader import EncodedBatches
    from ingest.kafka.read import KafkaColumns

    maker = EncodedBatches(KafkaColumns(SCHEMA), MappingConfig(), CodecConfig())
    rng = KafkaOffsetRange(TOPIC, PARTITION, 0, 40)
    plain = fetched([(0, [(b"k", b"body", [])] * 20, NONE)])
    odd = fetched([(20, [(b"k", b"body", [])] * 19 + [(b"\xff", b"body", [])], NONE)])
    first, second = maker.from_chunk(chunk_of(plain, 0), rng), maker.from_chunk(chunk_of(odd, 20), rng)
    assert maker.fallbacks() == {"key not UTF-8 text": 1}
    assert maker.direct_records() == 39
    assert first.column("kafka_offset").to_pylist() == list(range(20))
    assert second.column("kafka_offset").to_pylist() == list(range(20, 40))
    _, general, _ = both_ways(odd, 20, 40)
    assert second.equals(general)
