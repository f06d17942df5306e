"""The record check (checkMessageAndReturnSize + our PHYSICALOFFSET rule) and the fast segment scan
(store/scan/_record_check.c, the walk and the checks in one pass), held to the record-by-record
check (slow_scan) and to the oracles of the walk and of a record's fields (tests/oracles/)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.format.codec import CodecConfig, Message, decode_message, encode_message
from store.format.constants import MIN_RECORD_LENGTH
from store.format.hosts import HostAddress
from store.scan import record_check as scan
from store.scan.record_check import RecordCheck, check_record, scan_segment, scan_segment_fast
from tests.oracles import record_spans as record_spans_oracle
from tests.oracles import walk as oracle_walk

pytestmark = pytest.mark.unit

BASE = 1 << 20
SEGMENT = 16384


def build_segment(n: int, *, base: int = BASE, size: int = SEGMENT, blank: bool = False,
                  config: CodecConfig | None = None) -> tuple[bytearray, list[int]]:
    """n records of varied shapes (V1/V2, IPv4/IPv6, empty bodies) at their real offsets."""
    buf = bytearray(size)
    pos, starts = 0, []
    for i in range(n):
        m = Message(topic="T" * (130 if i % 5 == 4 else 1 + i % 7), body=bytes([i % 256]) * (i * 13 % 150),
                    properties=f"TAGS\x01t{i}\x02KEYS\x01k{i}\x02" if i % 3 else "",
                    born_host=HostAddress.parse("[2001:db8::1]:1" if i % 4 == 1 else "10.0.0.1:1"),
                    store_host=HostAddress.parse("[::2]:10911" if i % 6 == 2 else "10.0.0.2:10911"),
                    physical_offset=base + pos, queue_offset=i)
        rec = encode_message(m, config)
        if pos + len(rec) + 8 > size:
            break
        buf[pos:pos + len(rec)] = rec
        starts.append(pos)
        pos += len(rec)
    if blank:
        buf[pos:pos + 8] = (size - pos).to_bytes(4, "big") + bytes.fromhex("CBD43194")
    return buf, starts


def slow_scan(buf, base: int, end: int, config: CodecConfig | None = None) -> list[RecordCheck]:
    out, pos = [], 0
    while True:
        c = check_record(buf, pos, end, base, config)
        out.append(c)
        if c.kind != "message":
            return out
        pos += c.size


def test_a_clean_segment_scans_to_its_end() -> None:
    buf, starts = build_segment(60)
    checks = list(scan_segment(buf, BASE, len(buf)))
    assert [c.offset - BASE for c in checks[:-1]] == starts
    assert checks[-1].kind == "end" and checks[-1].offset == BASE + starts[-1] + checks[-2].size


def test_a_blank_closes_the_segment() -> None:
    buf, starts = build_segment(1000, blank=True)
    stop = list(scan_segment(buf, BASE, len(buf)))[-1]
    assert stop.kind == "blank" and stop.offset + stop.size == BASE + SEGMENT


@pytest.mark.parametrize("where, value, kind", [
    (4, b"\x00\x00\x00\x01", "magic"),
    (0, b"\x00\x00\x00\x10", "size"),
    (0, b"\x00\x01\x00\x00", "truncated"),
    (29, b"\x01", "physicalOffset"),
    (95, b"\xff", "crc"),
])
def test_the_first_broken_record_stops_the_scan_with_its_reason(where: int, value: bytes, kind: str) -> None:
    buf, starts = build_segment(30)
    victim = starts[6]
    buf[victim + where:victim + where + len(value)] = value
    result = scan_segment_fast(buf, BASE, len(buf))
    assert len(result.offsets) == 6 and result.end_offset == BASE + victim
    assert (result.stop.kind, result.stop.error_kind, result.stop.offset) == ("error", kind, BASE + victim)
    assert result.stop.detail


def test_crc_failures_are_ignored_when_check_crc_on_recover_is_off() -> None:
    buf, starts = build_segment(30)
    buf[starts[6] + 95] ^= 0xFF
    assert scan_segment_fast(buf, BASE, len(buf), CodecConfig(check_crc_on_recover=False)).stop.kind == "end"


def test_force_verify_prop_crc_checks_the_whole_record_crc_instead_of_the_body_crc() -> None:
    config = CodecConfig(enabled_append_prop_crc=True, force_verify_prop_crc=True)
    buf, starts = build_segment(20, config=config)
    assert scan_segment_fast(buf, BASE, len(buf), config).stop.kind == "end"
    buf[starts[3] + 17] ^= 0x01                          # FLAG: outside the body, only the prop CRC sees it
    assert scan_segment_fast(buf, BASE, len(buf), CodecConfig()).stop.kind == "end"
    stop = scan_segment_fast(buf, BASE, len(buf), config).stop
    assert (stop.error_kind, stop.offset) == ("propCrc", BASE + starts[3])
    # a record without the property fails when verification is forced
    plain, _ = build_segment(3)
    assert scan_segment_fast(plain, BASE, len(plain), config).stop.error_kind == "propCrc"


def test_a_torn_tail_is_truncated_and_a_short_zero_tail_is_the_end() -> None:
    buf, starts = build_segment(10)
    end = starts[5] + 50
    stop = scan_segment_fast(buf, BASE, end).stop
    assert (stop.error_kind, stop.offset) == ("truncated", BASE + starts[5])
    assert check_record(bytes(5), 0, 5, 0).kind == "end"
    assert check_record(b"\x00\x00\x00\x01\x00", 0, 5, 0).error_kind == "truncated"


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), victim=st.integers(0, 39), at=st.integers(0, 300), byte=st.integers(0, 255),
       cut=st.integers(0, 3000))
def test_fast_scan_agrees_with_the_record_by_record_check(n: int, victim: int, at: int, byte: int, cut: int) -> None:
    buf, starts = build_segment(n, size=8192)
    if victim < len(starts):
        buf[starts[victim] + at] = byte
    end = max(0, len(buf) - cut)
    fast = list(scan_segment(buf, BASE, end))
    assert fast == slow_scan(buf, BASE, end)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 40), victim=st.integers(0, 39), at=st.integers(0, 3), byte=st.integers(0, 255),
       start=st.integers(0, 2), stop_at=st.integers(0, 9000), cut=st.integers(0, 3000))
def test_the_c_walk_follows_totalsize_as_the_python_walk_does(n: int, victim: int, at: int, byte: int, start: int,
                                                               stop_at: int, cut: int) -> None:
    """The walk alone, C against the plain Python walk: TOTALSIZE bytes damaged, a pause at any
    place, an end anywhere."""
    from store.scan import _scan_walk
    buf, starts = build_segment(n, size=8192)
    if victim < len(starts):
        buf[starts[victim] + at] = byte
    pos = starts[start] if start < len(starts) else 0
    end = max(0, len(buf) - cut)
    out = np.empty(len(buf) // MIN_RECORD_LENGTH + 1, np.int64)
    count, c_next, c_more = _scan_walk.walk(np.frombuffer(buf, np.uint8), pos, end, stop_at, MIN_RECORD_LENGTH, out)
    py_starts, py_next, py_more = oracle_walk._walk(memoryview(buf), pos, end, stop_at)
    assert (out[:count].tolist(), c_next, c_more) == (list(py_starts), py_next, py_more)


def test_scan_in_small_walk_chunks_gives_the_same_result(monkeypatch: pytest.MonkeyPatch) -> None:
    buf, starts = build_segment(200, blank=True)
    victim = starts[len(starts) * 3 // 4]
    buf[victim + 35] ^= 0x55                  # PHYSICALOFFSET
    whole = list(scan_segment(buf, BASE, len(buf)))
    monkeypatch.setattr(scan, "_SCAN_CHUNK_BYTES", 700)
    assert list(scan_segment(buf, BASE, len(buf))) == whole == slow_scan(buf, BASE, len(buf))
    assert whole[-1].offset == BASE + victim and len(whole) > 20


def test_records_reaching_the_very_end_of_the_buffer_are_checked() -> None:
    buf, starts = build_segment(40)
    end = starts[-1] + check_record(buf, starts[-1], len(buf), BASE).size
    exact = bytes(buf[:end])                      # no byte after the last record
    assert list(scan_segment(exact, BASE, end)) == slow_scan(exact, BASE, end)
    assert list(scan_segment(exact, BASE, end))[-1].kind == "end"
    broken = bytearray(exact)
    broken[-3] ^= 0x40                            # inside the last record's properties
    assert list(scan_segment(broken, BASE, end)) == slow_scan(broken, BASE, end)
    broken = bytearray(exact)
    props = decode_message(exact, starts[-1]).properties_string.encode()
    broken[end - len(props) - 1] ^= 0x01           # PROPERTIESLENGTH of the last record
    assert list(scan_segment(broken, BASE, end))[-1].error_kind == "size"


@settings(max_examples=40, deadline=None)
@given(topic=st.integers(1, 200), n=st.integers(1, 30), victim=st.integers(0, 29), at=st.integers(0, 400),
       byte=st.integers(0, 255))
def test_fast_scan_agrees_for_long_topics_and_tight_buffers(topic: int, n: int, victim: int, at: int, byte: int) -> None:
    buf = bytearray()
    for i in range(n):
        buf += encode_message(Message(topic="t" * topic, body=bytes(i), properties="K\x01v\x02" * (i % 4),
                                      physical_offset=BASE + len(buf)))
    starts = [c.offset - BASE for c in slow_scan(buf, BASE, len(buf))[:-1]]
    if victim < len(starts) and starts[victim] + at < len(buf):
        buf[starts[victim] + at] = byte
    assert list(scan_segment(bytes(buf), BASE, len(buf))) == slow_scan(bytes(buf), BASE, len(buf))


@pytest.mark.parametrize("records_with_magic_in_body", [1, 5, 40])
def test_magic_codes_inside_bodies_do_not_mislead_the_scan(records_with_magic_in_body: int) -> None:
    fake = b"\x00\x00\x00\x64\xda\xa3\x20\xa7" + b"\xda\xa3\x20\xab" * 3
    buf = bytearray(32768)
    pos, starts = 0, []
    for i in range(60):
        body = fake * (1 + i % 3) if i < records_with_magic_in_body else bytes([i]) * 20
        rec = encode_message(Message(topic="T", body=body, physical_offset=BASE + pos))
        buf[pos:pos + len(rec)] = rec
        starts.append(pos)
        pos += len(rec)
    checks = list(scan_segment(buf, BASE, len(buf)))
    assert [c.offset - BASE for c in checks[:-1]] == starts and checks[-1].kind == "end"
    buf[starts[50] + 90] ^= 0x01
    assert list(scan_segment(buf, BASE, len(buf))) == slow_scan(buf, BASE, len(buf))


def test_ipv6_flags_on_a_record_too_short_for_them_are_a_length_error() -> None:
    record = bytearray(encode_message(Message(topic="T", body=b"", physical_offset=BASE)))
    record[39] |= 0x30                                # claims two IPv6 hosts in a 95-byte record
    assert len(record) < 112
    stop = list(scan_segment(bytes(record), BASE, len(record)))[-1]
    assert (stop.kind, stop.error_kind) == ("error", "size")
    assert stop == slow_scan(bytes(record), BASE, len(record))[-1]


@settings(max_examples=80, deadline=None)
@given(flips=st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 255)), max_size=6), n=st.integers(1, 12))
def test_damaged_segments_never_raise_and_both_scans_agree(flips: list[tuple[int, int]], n: int, tmp_path_factory) -> None:
    from store.tools.dump import decode_segment_files
    buf, _ = build_segment(n, size=4096)
    for at, value in flips:
        buf[at] = value
    assert list(scan_segment(bytes(buf), BASE, len(buf))) == slow_scan(bytes(buf), BASE, len(buf))
    path = tmp_path_factory.mktemp("seg") / f"{BASE:020d}"
    path.write_bytes(bytes(buf))
    report = list(decode_segment_files([path]))
    assert report[-1]["type"] == "summary" and report[-1]["fileBytes"] == 4096


def test_the_scan_columns_are_each_records_fields_read_field_after_field() -> None:
    """What verify reads from the scan (queue, topic place, PROPERTIESLENGTH, the topic numbered)
    is what the record-walk oracle reads from each record, and a paused scan (verify's pieces)
    pauses at the record after ``until``."""
    buf, starts = build_segment(120, blank=True)
    until = starts[70] + 1
    for kw in ({}, {"until": until}, {"start": starts[33], "until": until}):
        c = scan_segment_fast(buf, BASE, len(buf), columns=True, **kw)
        first = starts.index(kw.get("start", 0))
        assert c.offsets.tolist() == [BASE + s for s in starts[first:first + len(c.offsets)]]
        assert c.columns is not None
        for i, (at, size) in enumerate(zip((c.offsets - BASE).tolist(), c.sizes.tolist())):
            rec = bytes(buf[at:at + size])
            fields = record_spans_oracle.walk(rec).fields
            want = (int.from_bytes(rec[12:16], "big"), int.from_bytes(rec[20:28], "big"),
                    int.from_bytes(rec[36:40], "big"), at + fields["TOPIC"][0], fields["TOPIC"][1],
                    fields["PROPERTIES"][1])
            got = tuple(int(getattr(c.columns, name)[i]) for name in
                        ("queue_id", "queue_offset", "sys_flag", "topic_pos", "topic_len", "props_len"))
            assert got == want, i
        assert c.columns.topic_id is not None and c.columns.topics is not None
        mv = memoryview(buf)
        assert [c.columns.topics[t] for t in c.columns.topic_id.tolist()] == \
            [bytes(mv[p:p + n]).decode() for p, n in zip(c.columns.topic_pos.tolist(), c.columns.topic_len.tolist())]
    assert scan_segment_fast(buf, BASE, len(buf), until=until).stop == RecordCheck("pause", BASE + starts[71], 0)


def test_more_topics_than_the_c_scan_numbers_are_left_to_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    import store.scan.record_check as scan
    buf, _ = build_segment(60)            # seven topics and a long one
    monkeypatch.setattr(scan, "_MOST_TOPICS", 3)
    got = scan_segment_fast(buf, BASE, len(buf), columns=True)
    assert got.columns is not None and got.columns.topic_id is None and len(got.offsets) == 60
