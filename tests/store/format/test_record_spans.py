"""The one walk of a record (store/format/layout.py): record_spans and record_spans_many find every
field where RocketMQ's own writer put it (the golden manifests' ``layout``, every case there is),
and stop at the field the oracle (tests/oracles/record_spans.py) stops at, for records whose
lengths were changed one at a time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from store.format.layout import RecordSpans, message_version, record_spans, record_spans_many
from store.format.properties import tags_code
from tests.oracles import record_spans as oracle

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).resolve().parents[4] / "shared" / "golden"


def golden_records() -> Iterator[tuple[str, bytes, list[dict]]]:
    for manifest in sorted(GOLDEN.glob("p*.manifest.json")):
        data = json.loads(manifest.read_text())
        blob = (GOLDEN / data["file"]).read_bytes()
        for m in data["messages"]:
            if m.get("expectReject") or not m.get("written", True):
                continue
            yield f"{manifest.name}#{m['index']}", blob[m["offset"]:m["offset"] + m["length"]], m["layout"]


RECORDS = list(golden_records())


def spans_of(rec: bytes) -> RecordSpans:
    return record_spans(memoryview(rec), 0, len(rec), message_version(int.from_bytes(rec[4:8], "big")))


def positions(s: RecordSpans) -> dict[str, tuple[int, int]]:
    out = {"BORNHOST": (48, s.born_host_length), "STORETIMESTAMP": (s.store_timestamp_pos, 8),
           "STOREHOST": (s.store_host_pos, s.store_host_length), "RECONSUMETIMES": (s.reconsume_times_pos, 4),
           "PREPAREDTRANSACTIONOFFSET": (s.prepared_transaction_offset_pos, 8), "BODYLENGTH": (s.body_length_pos, 4)}
    if s.fault not in ("hosts",):
        out["BODY"] = (s.body_pos, s.body_length)
    if s.fault not in ("hosts", "body"):
        out["TOPICLENGTH"] = (s.topic_length_pos, s.version)
        out["TOPIC"] = (s.topic_pos, s.topic_length)
    if s.fault not in ("hosts", "body", "topic"):
        out["PROPERTIESLENGTH"] = (s.properties_length_pos, 2)
        out["PROPERTIES"] = (s.properties_pos, s.properties_length)
    return out


def test_there_are_golden_records_to_walk() -> None:
    assert len(RECORDS) >= 20


@pytest.mark.parametrize("name, rec, layout", RECORDS, ids=[r[0] for r in RECORDS])
def test_every_field_lies_where_rocketmq_wrote_it(name: str, rec: bytes, layout: list[dict]) -> None:
    s = spans_of(rec)
    assert s.fault is None and s.computed_length == len(rec)
    ours = positions(s)
    for field in layout:
        if field["field"] in ours:
            assert ours[field["field"]] == (field["offset"], field["length"]), (name, field)
    assert set(ours) <= {f["field"] for f in layout}


def mutations(rec: bytes) -> Iterator[bytes]:
    """The record with one length or host flag changed: each way a walk can stop, and lengths that
    still fit but no longer add up."""
    spans = oracle.walk(rec).fields
    body_at, _ = spans["BODYLENGTH"]
    tl_at, tl_width = spans["TOPICLENGTH"]
    pl_at, _ = spans["PROPERTIESLENGTH"]
    total = len(rec)
    for value in (-1, 0, 1, total, total - body_at, 0x7FFFFFFF, -0x80000000):
        yield rec[:body_at] + value.to_bytes(4, "big", signed=True) + rec[body_at + 4:]
    for value in ((-1, 0, 1, 127, 128, 200, 255) if tl_width == 1 else (-1, 0, 1, 0x7FFF, -0x8000, 300)):
        if tl_width == 1:
            yield rec[:tl_at] + bytes([value & 0xFF]) + rec[tl_at + 1:]
        else:
            yield rec[:tl_at] + value.to_bytes(2, "big", signed=True) + rec[tl_at + 2:]
    for value in (-1, -300, 0, 1, 0x7FFF, total - pl_at - 2, total - pl_at - 1):
        yield rec[:pl_at] + value.to_bytes(2, "big", signed=True) + rec[pl_at + 2:]
    for bits in (0x10, 0x20, 0x30):
        flag = int.from_bytes(rec[36:40], "big") ^ bits
        yield rec[:36] + flag.to_bytes(4, "big") + rec[40:]
    for cut in (1, 2, 20):       # TOTALSIZE says less than the fields hold
        if total - cut >= 91:
            yield (total - cut).to_bytes(4, "big") + rec[4:total - cut]


MUTATED = [(name, m) for name, rec, _ in RECORDS for m in mutations(rec)]


def test_each_changed_record_stops_where_the_oracle_stops() -> None:
    assert len(MUTATED) > 500
    for name, rec in MUTATED:
        want = oracle.walk(rec)
        got = spans_of(rec)
        assert got.fault == want.fault, name
        if want.fault is None:
            assert got.computed_length == len(rec) if oracle.adds_up(rec, want) else got.computed_length != len(rec)
        ours = positions(got)
        for field, place in want.fields.items():
            if field in ours:
                assert ours[field] == place, (name, field)


def test_the_vectorized_walk_agrees_record_for_record() -> None:
    recs = [rec for _, rec, _ in RECORDS] + [rec for _, rec in MUTATED]
    arr = np.frombuffer(b"".join(recs), dtype=np.uint8)      # the last ones near the end: its other path
    sizes = np.array([len(r) for r in recs], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    many = record_spans_many(arr, starts, sizes)
    for i, rec in enumerate(recs):
        want = oracle.walk(rec)
        assert bool(many.ok[i]) == oracle.adds_up(rec, want), i
        if many.ok[i]:
            s = spans_of(rec)
            assert (many.body_pos[i] - starts[i], many.body_len[i]) == (s.body_pos, s.body_length)
            assert (many.topic_pos[i] - starts[i], many.topic_len[i]) == (s.topic_pos, s.topic_length)
            assert (many.props_pos[i] - starts[i], many.props_len[i]) == (s.properties_pos, s.properties_length)
            assert many.hosts.store_timestamp_pos[i] == s.store_timestamp_pos
            assert many.hosts.reconsume_times_pos[i] == s.reconsume_times_pos


def test_the_c_check_passes_exactly_the_records_whose_lengths_add_up() -> None:
    """_layout.h's record_spans through check_one (_record_check.check): the golden records' bodies
    are untouched by the changes, so only the walk and the lengths decide."""
    from store.scan import _record_check
    for name, rec in [(n, r) for n, r, _ in RECORDS] + MUTATED:
        values = np.frombuffer(rec, dtype=np.uint8)
        passed = _record_check.check(values, np.zeros(1, np.int64), np.array([len(rec)], np.int64), 0, False, True,
                                     np.zeros((6, 1), np.int64)) == 1
        assert passed == oracle.adds_up(rec, oracle.walk(rec)), name


def test_the_c_index_pass_leaves_to_python_exactly_the_records_the_walk_stops_in() -> None:
    """_layout.h's record_spans through record_keys (_index_build.find_keys): a record whose fields
    do not fit is one entry with hash -1 (decoded_keys then finds no key in it); a rollback record
    has no keys, whatever its lengths."""
    from store.index import _index_build
    from store.index.build import decoded_keys
    out = np.zeros(16386, np.int64), np.zeros(16386, np.int32), np.zeros(16386, np.int64), np.zeros(16386, np.int64)
    for name, rec in [(n, r) for n, r, _ in RECORDS] + MUTATED:
        values = np.frombuffer(rec, dtype=np.uint8)
        count, done = _index_build.find_keys(values, np.zeros(1, np.int64), 0, 0, *out)
        assert done == 1, name
        rollback = int.from_bytes(rec[36:40], "big") & 0xC == 0xC
        left = count == 1 and int(out[1][0]) == -1
        assert left == (oracle.walk(rec).fault is not None and not rollback), name
        if left:
            assert len(decoded_keys(values, 0)[0]) == 0, name


TAGS = ["a", "TagA", "x" * 40, "é", "ταγ", "日本語のタグ", "emoji \U0001F600 tag", "\U00010348" * 3]


def test_the_c_scan_hashes_any_well_formed_tags_as_java_does_and_marks_the_rest() -> None:
    """One String.hashCode in C (_text.h hash_text): the scan's tagsCode of every well-formed TAGS
    value is Java's (properties.tags_code); a value that is not UTF-8 is left to Python, marked."""
    from store.format.codec import Message, encode_message
    from store.scan.fields import MARK_TAGS_SLOW
    from store.scan.record_check import scan_segment_fast
    records, offset = [], 0
    for tags in TAGS:
        rec = encode_message(Message(topic="T", body=b"b", properties=f"TAGS\u0001{tags}\u0002",
                                     physical_offset=offset))
        records.append(rec)
        offset += len(rec)
    bad = bytearray(encode_message(Message(topic="T", body=b"b", properties="TAGS\u0001ab\u0002",
                                           physical_offset=offset)))
    at = bytes(bad).index(b"TAGS\x01ab") + 5
    bad[at:at + 2] = b"\xc3\x28"          # a lead byte whose continuation is not one
    scan = scan_segment_fast(b"".join(records) + bytes(bad) + bytes(64), 0, columns=True)
    assert len(scan.offsets) == len(TAGS) + 1
    cols = scan.columns
    assert cols is not None and cols.tags_code is not None and cols.marks is not None
    assert cols.tags_code[:len(TAGS)].tolist() == [tags_code(t) for t in TAGS]
    assert not (cols.marks[:len(TAGS)] & MARK_TAGS_SLOW).any() and cols.marks[-1] & MARK_TAGS_SLOW
