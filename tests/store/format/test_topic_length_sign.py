"""TOPICLENGTH is signed, as RocketMQ's MessageVersion reads it (V1: ByteBuffer.get(), a signed byte;
V2: getShort()), on every path that reads it. A V1 record whose TOPICLENGTH byte is 200 adds up if
the byte is read unsigned, so a reader that takes it unsigned would pass it; RocketMQ reads -56 and
takes the record as corrupt, and so must we. The same record with a 100-byte topic passes
everywhere: the only difference between the two is the byte's top bit."""

from __future__ import annotations

import numpy as np
import pytest

from store.errors import CorruptRecordError
from store.format.codec import Message, decode_message, encode_message
from store.format.constants import (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, POS_BODYLENGTH_V4, POS_MAGICCODE,
                                    POS_TOTALSIZE)
from store.index.build import decoded_keys, record_keys
from store.format.layout import topic_lengths
from store.scan.record_check import check_record, scan_segment_fast
from tests.oracles import index_keys

pytestmark = pytest.mark.unit

BODY = b"body"
KEYS = "UNIQ_KEY\u0001C0A8000100002A9F\u0002KEYS\u0001k1 k2"
SHORT, LONG = 100, 200      # TOPICLENGTH bytes below and above 0x7F


def v1_record(topic_length: int, physical_offset: int = 0) -> bytes:
    """A V1 record whose TOPICLENGTH byte is ``topic_length`` and whose TOTALSIZE counts it as
    unsigned: encoded as V2 (which may carry the topic), then its two-byte TOPICLENGTH made one."""
    v2 = encode_message(Message(topic="T" * topic_length, body=BODY, properties=KEYS, version=2,
                                physical_offset=physical_offset))
    assert int.from_bytes(v2[POS_MAGICCODE:POS_MAGICCODE + 4], "big") == MESSAGE_MAGIC_CODE_V2
    at = POS_BODYLENGTH_V4 + 4 + len(BODY)
    rec = bytearray(v2[:at] + bytes([topic_length]) + v2[at + 2:])
    rec[POS_TOTALSIZE:POS_TOTALSIZE + 4] = len(rec).to_bytes(4, "big")
    rec[POS_MAGICCODE:POS_MAGICCODE + 4] = MESSAGE_MAGIC_CODE.to_bytes(4, "big")
    return bytes(rec)


def test_the_crafted_records_differ_only_in_the_top_bit_of_topiclength() -> None:
    short, long = v1_record(SHORT), v1_record(LONG)
    assert len(long) - len(short) == LONG - SHORT
    at = POS_BODYLENGTH_V4 + 4 + len(BODY)
    assert short[at] == SHORT and long[at] == LONG


def test_codec_decodes_the_short_topic_and_refuses_the_long_one() -> None:
    assert decode_message(v1_record(SHORT)).topic == "T" * SHORT
    with pytest.raises(CorruptRecordError, match="TOPICLENGTH -56"):
        decode_message(v1_record(LONG))


def test_the_fields_reader_takes_topiclength_signed() -> None:
    for length, v2 in ((SHORT, False), (LONG, False), (40_000, True), (300, True)):
        width = 2 if v2 else 1
        arr = np.frombuffer(length.to_bytes(width, "big"), np.uint8)
        expected = int.from_bytes(length.to_bytes(width, "big"), "big", signed=True)
        assert topic_lengths(arr, np.array([0]), np.array([v2])).tolist() == [expected]


def test_the_scan_passes_the_short_topic_and_stops_at_the_long_one() -> None:
    good = v1_record(SHORT)
    buf = good + v1_record(LONG, physical_offset=len(good)) + bytes(64)
    scan = scan_segment_fast(buf, 0, columns=True)
    assert scan.offsets.tolist() == [0]
    assert scan.columns is not None and scan.columns.topic_len.tolist() == [SHORT]
    assert (scan.stop.kind, scan.stop.offset) == ("error", len(good))
    assert check_record(buf, len(good), len(buf), 0).kind == "error"


def test_record_check_c_passes_the_short_topic_and_fails_the_long_one() -> None:
    from store.scan import _record_check
    recs = [v1_record(SHORT), v1_record(LONG)]
    values = np.frombuffer(b"".join(recs), np.uint8)
    starts = np.array([0, len(recs[0])], np.int64)
    sizes = np.array([len(r) for r in recs], np.int64)
    out = np.zeros((6, 2), np.int64)
    assert _record_check.check(values, starts, sizes, 0, False, True, out) == 1
    assert out[4, 0] == SHORT
    assert _record_check.check(values, starts[1:], sizes[1:], 0, False, True, np.zeros((6, 1), np.int64)) == 0


def test_record_columns_c_refuses_the_negative_length_the_scan_reads() -> None:
    from store.scan import _record_columns
    rec = np.frombuffer(v1_record(LONG), np.uint8)
    topic_at = POS_BODYLENGTH_V4 + 4 + len(BODY) + 1

    def columns(topic_len: int) -> object:
        i32, i64 = (lambda: np.zeros(1, np.int32)), (lambda: np.zeros(1, np.int64))
        return _record_columns.columns(rec, np.zeros(1, np.int64), np.array([topic_at], np.int64),
                                       np.array([topic_len], np.int64), i32(), i64(), i64(), i32(), i32(), i32(),
                                       i32(), i64(), i32(), np.zeros(2, np.int32), np.zeros(0, np.uint8))

    columns(LONG)      # the unsigned read: a topic inside the buffer
    with pytest.raises(ValueError, match="topic"):
        columns(LONG - 256)


@pytest.mark.parametrize("keys_of", [record_keys, index_keys.record_keys], ids=["c", "oracle"])
def test_index_keys_of_the_short_topic_only(keys_of) -> None:  # noqa: ANN001
    short = np.frombuffer(v1_record(SHORT), np.uint8)
    assert len(keys_of(short, np.array([0]))) == 3        # UNIQ_KEY, k1, k2
    if keys_of is record_keys:       # the oracle reads records the scan passed; the long one never is
        long = np.frombuffer(v1_record(LONG), np.uint8)
        assert len(record_keys(long, np.array([0]))) == 0


def test_the_index_keys_fallback_finds_none_in_the_long_topic_record() -> None:
    """The C finder leaves a record it cannot read to decoded_keys, which must not read it unsigned."""
    from store.index import _index_build
    long = np.frombuffer(v1_record(LONG), np.uint8)
    out = np.zeros(16386, np.int64), np.zeros(16386, np.int32), np.zeros(16386, np.int64), np.zeros(16386, np.int64)
    count, done = _index_build.find_keys(long, np.array([0], np.int64), 0, 0, *out)
    assert (count, done, int(out[1][0])) == (1, 1, -1)       # one entry, left to the caller
    assert len(decoded_keys(long, 0)[0]) == 0
    assert len(decoded_keys(np.frombuffer(v1_record(SHORT), np.uint8), 0)[0]) == 3
