"""verify catches every kind of damage at the offset where it is."""

from __future__ import annotations

import json
import struct
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.cli import main
from store.read.view import open_view
from store.queue.units import read_units
from store.tools.verify import verify_source
from tests.store.conftest import SEG

pytestmark = pytest.mark.unit


def messages(root: Path) -> list[dict]:
    """(offset, size, topic, queueId, queueOffset) of every record, from the clean store."""
    from store.tools.dump import walk

    return [dict(offset=f.offset, size=f.size, topic=f.decoded.topic, queue_id=f.decoded.queue_id,
                 queue_offset=f.decoded.queue_offset, segment=f.segment.path, pos=f.pos)
            for f in walk(open_view(root)) if f.type == "message"]


def patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def problems(root: Path) -> list[tuple[int, str]]:
    return [(p.offset, p.kind) for p in verify_source(open_view(root)).problems]


def test_the_synthetic_store_is_clean_with_every_unit_checked(pristine: Path) -> None:
    report = verify_source(open_view(pristine))
    assert report.problems == []
    assert report.messages == 1500 and report.units_checked == 1500 and report.queues == 4
    assert report.segments > 3


def target(root: Path, k: int = 40) -> dict:
    """A record in the middle of the first segment."""
    m = messages(root)[k]
    assert m["segment"].name == "0".zfill(20)
    return m


def test_a_flipped_body_byte_is_a_crc_error_at_its_record(store: Path) -> None:
    m = target(store)
    patch(m["segment"], m["pos"] + 88 + 10, b"\xff")
    assert problems(store) == [(m["offset"], "crc")]


def test_a_wrong_magic_code_is_reported_at_its_record(store: Path) -> None:
    m = target(store)
    patch(m["segment"], m["pos"] + 4, struct.pack(">I", 0xDAA320A8))
    found = problems(store)
    assert found[0] == (m["offset"], "magic")
    # the rest of that segment is unreadable, so the checkpoint is past the valid data
    assert {k for _, k in found[1:]} <= {"checkpoint"}


def test_a_wrong_totalsize_is_reported_at_its_record(store: Path) -> None:
    m = target(store)
    patch(m["segment"], m["pos"], struct.pack(">i", m["size"] + 4))
    found = problems(store)
    assert found[0] == (m["offset"], "size")
    assert {k for _, k in found[1:]} <= {"checkpoint"}


def test_a_wrong_physical_offset_is_reported_at_its_record(store: Path) -> None:
    m = target(store)
    patch(m["segment"], m["pos"] + 28, struct.pack(">q", m["offset"] + 1))
    assert problems(store) == [(m["offset"], "physicalOffset")]


def test_a_missing_segment_is_reported_where_it_should_start(store: Path) -> None:
    (store / "commitlog" / str(2 * SEG).zfill(20)).unlink()
    found = problems(store)
    assert (2 * SEG, "missingSegment") in found
    assert found[0] == (2 * SEG, "missingSegment")


def test_a_segment_of_the_wrong_size_is_reported_at_its_start(store: Path) -> None:
    seg = store / "commitlog" / str(SEG).zfill(20)
    with open(seg, "r+b") as f:
        f.truncate(SEG - 4096)
    found = problems(store)
    assert found[0] == (SEG, "segmentSize")


def test_a_consume_queue_unit_pointing_at_another_record_is_reported_at_the_record(store: Path) -> None:
    ms = [m for m in messages(store) if (m["topic"], m["queue_id"]) == ("TopicB", 1)]
    victim, other = ms[30], ms[31]
    qfile = store / "consumequeue" / "TopicB" / "1" / "0".zfill(20)
    units = read_units(qfile)
    assert units[30]["phys"] == victim["offset"]
    patch(qfile, 30 * 20, struct.pack(">q", other["offset"]))
    assert problems(store) == [(victim["offset"], "consumeQueueUnit")]


def test_a_wrong_tags_code_and_a_missing_unit_are_reported(store: Path) -> None:
    ms = [m for m in messages(store) if (m["topic"], m["queue_id"]) == ("TopicA", 0)]
    qfile = store / "consumequeue" / "TopicA" / "0" / "0".zfill(20)
    patch(qfile, 5 * 20 + 12, struct.pack(">q", 12345))
    patch(qfile, 6 * 20, bytes(20))
    found = problems(store)
    assert (ms[5]["offset"], "consumeQueueUnit") in found
    assert (ms[6]["offset"], "consumeQueueMissing") in found


def test_a_queue_offset_gap_is_reported_at_the_first_record_after_it(store: Path) -> None:
    ms = [m for m in messages(store) if (m["topic"], m["queue_id"]) == ("TopicA", 1)]
    for m in ms[50:]:   # the queue skips one offset from the 51st record on
        patch(m["segment"], m["pos"] + 20, struct.pack(">q", m["queue_offset"] + 1))
    found = problems(store)
    assert found[0] == (ms[50]["offset"], "queueOffsetGap")
    # the consume queue still has the old offsets: its units now dangle or mismatch, nothing else
    assert {k for _, k in found} <= {"queueOffsetGap", "consumeQueueUnit", "consumeQueueMissing",
                                     "consumeQueueDangling"}


def test_a_commit_point_past_the_data_or_inside_a_record_is_reported(store: Path) -> None:
    from store.log.commit_point import CommitPoint, write_commit_point

    ms = messages(store)
    end = ms[-1]["offset"] + ms[-1]["size"]
    write_commit_point(store, CommitPoint(offset=end + 100))
    assert (end + 100, "commitPoint") in problems(store)
    m = ms[-3]
    write_commit_point(store, CommitPoint(offset=m["offset"] + 10))
    assert problems(store) == [(m["offset"], "commitPoint")]
    patch(store / "checkpoint", 32, struct.pack(">q", m["offset"]))
    write_commit_point(store, CommitPoint(offset=m["offset"], queue_offsets={(m["topic"], m["queue_id"]): 3}))
    assert [k for _, k in problems(store)] == ["commitPointQueueOffset"]


def test_the_checkpoint_past_the_data_is_reported(store: Path) -> None:
    ck = store / "checkpoint"
    end = messages(store)[-1]["offset"] + messages(store)[-1]["size"]
    patch(ck, 32, struct.pack(">q", end + 1))
    assert problems(store) == [(end + 1, "checkpoint")]


def test_verify_exit_codes_and_report(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(store)]) == 0
    assert ": OK" in capsys.readouterr().out
    m = target(store)
    patch(m["segment"], m["pos"] + 88 + 10, b"\xff")
    assert main(["verify", str(store), "--json"]) == 1
    out = capsys.readouterr().out
    report = json.loads(out)
    assert report["problems"] == [{"offset": m["offset"], "kind": "crc", "detail": report["problems"][0]["detail"]}]
    assert main(["verify", str(tmp_path / "missing")]) == 2


def test_parallel_verification_finds_the_same_as_serial(store: Path) -> None:
    m = messages(store)[700]
    patch(m["segment"], m["pos"] + 88 + 10, b"\xff")
    (store / "commitlog" / str(4 * SEG).zfill(20)).unlink()
    serial = verify_source(open_view(store), jobs=1)
    parallel = verify_source(open_view(store), jobs=2)           # forked workers
    assert [(p.offset, p.kind) for p in serial.problems] == [(p.offset, p.kind) for p in parallel.problems]
    busy = threading.Event()
    other = threading.Thread(target=busy.wait, daemon=True)      # with another thread: spawned workers
    other.start()
    try:
        spawned = verify_source(open_view(store), jobs=2)
    finally:
        busy.set()
        other.join()
    assert [(p.offset, p.kind) for p in spawned.problems] == [(p.offset, p.kind) for p in serial.problems]
    assert (m["offset"], "crc") in [(p.offset, p.kind) for p in serial.problems]
    assert (serial.messages, serial.units_checked, serial.data_end) == \
        (parallel.messages, parallel.units_checked, parallel.data_end)
    assert parallel.elapsed_s > 0 and np.isfinite(parallel.mb_per_s)


PROPERTY_CASES = [
    "", "TAGS\x01a\x02", "KEYS\x01k\x02TAGS\x01TagA\x02", "TAGS\x01\x02", "TAGS\x01x\x02TAGS\x01y\x02",
    "XTAGS\x01no\x02", "K\x01vTAGS\x01no\x02", "TAGS\x01é中\x02", "TAGS\x01" + "t" * 100 + "\x02",
    "TAGS\x01a\x01b\x02", "TAGS\x01last", "UNIQ_KEY\x01" + "A" * 600 + "\x02TAGS\x01far\x02",
    "DELAY\x013\x02TAGS\x01d\x02", "K\x01xTAGS\x01no\x02TAGS\x01yes\x02",
    "UNIQ_KEY\x01" + "A" * 1500 + "\x02TAGS\x01beyond-a-row\x02",
]


@pytest.mark.parametrize("topic", ["TopicA", "SCHEDULE_TOPIC_XXXX"])
def test_vectorized_tags_codes_equal_the_reference_rule(topic: str) -> None:
    from store.format.codec import Message, decode_message, encode_message
    from store.format.record_json import consume_queue_tags_code
    from store.scan.fields import record_fields, tags_codes

    recs = [encode_message(Message(topic=topic, body=bytes(range(i)), properties=p, store_timestamp=1000 + i))
            for i, p in enumerate(PROPERTY_CASES)]
    buf = np.frombuffer(b"".join(recs), dtype=np.uint8)
    starts = np.cumsum([0] + [len(r) for r in recs[:-1]])
    got = tags_codes(buf, record_fields(buf, starts, np.array([len(r) for r in recs])))
    want = []
    for s in starts.tolist():
        d = decode_message(buf, s)
        want.append(consume_queue_tags_code(d.topic, d.properties, d.store_timestamp) if d.properties_string else 0)
    assert got.tolist() == want


def _placed(topic: str, properties: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Records with these properties at their real offsets (0 on): the bytes, starts, sizes."""
    from store.format.codec import Message, encode_message

    recs, pos = [], 0
    for i, p in enumerate(properties):
        recs.append(encode_message(Message(topic=topic, body=bytes(range(i % 50)), properties=p,
                                           store_timestamp=1000 + i, physical_offset=pos, queue_offset=i)))
        pos += len(recs[-1])
    buf = np.frombuffer(b"".join(recs), dtype=np.uint8)
    return buf, np.cumsum([0] + [len(r) for r in recs[:-1]]), np.array([len(r) for r in recs])


def _reference_tags_codes(buf: np.ndarray, starts: np.ndarray) -> list[int]:
    from store.format.codec import decode_message
    from store.format.record_json import consume_queue_tags_code

    out = []
    for s in starts.tolist():
        d = decode_message(buf, s)
        out.append(consume_queue_tags_code(d.topic, d.properties, d.store_timestamp) if d.properties_string else 0)
    return out


@pytest.mark.parametrize("topic", ["TopicA", "SCHEDULE_TOPIC_XXXX"])
def test_tags_codes_read_by_the_c_scan_equal_the_reference_rule(topic: str) -> None:
    from store.scan.fields import fields_from_scan, tags_codes
    from store.scan.record_check import scan_segment_fast

    buf, starts, sizes = _placed(topic, PROPERTY_CASES)
    scan = scan_segment_fast(buf, 0, columns=True)
    assert scan.columns is not None and scan.columns.tags_code is not None, "the C scan did not run"
    assert scan.offsets.tolist() == starts.tolist()
    assert tags_codes(buf, fields_from_scan(buf, starts, sizes, scan.columns)).tolist() == \
        _reference_tags_codes(buf, starts)


_PIECE = st.one_of(
    st.tuples(st.sampled_from(["TAGS", "__CRC32#", "KEYS", "XTAGS", "TAG", "", "__CRC32"]),
              st.sampled_from(["\x01", "", "\x01\x01"]),
              st.text(st.sampled_from("ab \x01é中9"), max_size=12)).map("".join),
    st.text(st.sampled_from("TAGS\x01\x02ab"), max_size=10))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_PIECE, max_size=5).map("\x02".join), min_size=1, max_size=8))
def test_the_c_scan_reads_tags_and_crc_pieces_as_java_splits_the_properties(properties: list[str]) -> None:
    """Any mix of TAGS pairs (empty, repeated, non-ASCII, a name ending in TAGS), __CRC32# pieces
    and stray separators: the tagsCode is the reference rule's, and every record whose
    properties hold a __CRC32# value is marked for the whole-record CRC check."""
    from store.scan.fields import MARK_PROP_CRC, fields_from_scan, tags_codes
    from store.format.properties import string_to_properties
    from store.scan.record_check import scan_segment_fast

    buf, starts, sizes = _placed("TopicA", properties)
    scan = scan_segment_fast(buf, 0, columns=True)
    assert scan.columns is not None and scan.columns.marks is not None
    assert tags_codes(buf, fields_from_scan(buf, starts, sizes, scan.columns)).tolist() == \
        _reference_tags_codes(buf, starts)
    marked = (scan.columns.marks & MARK_PROP_CRC) != 0
    for i, p in enumerate(properties):
        if "__CRC32#" in string_to_properties(p):
            assert marked[i], p


def test_a_queue_starting_past_zero_in_a_fresh_store_is_no_gap(tmp_path: Path) -> None:
    """Queue offsets may come from outside (the sink writes Kafka offsets): a queue whose first
    record has queue offset 1000 is fine when its consume queue starts there too."""
    from store import MessageStore
    from store.config import StoreConfig
    from store.format.codec import Message

    root = tmp_path / "store"
    with MessageStore.open(root, StoreConfig(segment_size=SEG, consume_queue_units=64)) as store:
        store.append([Message(topic="T", body=b"x" * 50, queue_offset=1000 + i) for i in range(5)])
        store.commit()
    assert problems(root) == []


def test_units_before_a_queue_s_first_record_are_reported(store: Path) -> None:
    ms = [m for m in messages(store) if (m["topic"], m["queue_id"]) == ("TopicA", 0)]
    for m in ms[:3]:   # the first three records of the queue become another queue's
        patch(m["segment"], m["pos"] + 12, struct.pack(">i", 7))
    found = problems(store)
    assert [(o, k) for o, k in found if k == "consumeQueueDangling"] == [(m["offset"], "consumeQueueDangling")
                                                                        for m in ms[:3]]


@pytest.mark.parametrize("names", [["A", "B", "AB", "B\x00"[:1], "x" * 16, "x" * 15 + "y"],
                                   [f"t{i}" for i in range(40)], ["long-topic-name-over-16-bytes", "short"]])
def test_topics_are_grouped_exactly(names: list[str]) -> None:
    from store.format.codec import Message, encode_message
    from store.scan.fields import record_fields

    topics = [names[i % len(names)] for i in range(3 * len(names))]
    recs = [encode_message(Message(topic=t, body=b"b")) for t in topics]
    buf = np.frombuffer(b"".join(recs), dtype=np.uint8)
    starts = np.cumsum([0] + [len(r) for r in recs[:-1]])
    f = record_fields(buf, starts, np.array([len(r) for r in recs]))
    assert [f.topics[i] for i in f.topic_id] == topics


def _verdict(report) -> tuple:
    return ([(p.offset, p.kind) for p in report.problems], report.messages, report.message_bytes,
            report.units_checked, report.queues, report.data_end, report.blanks)


@pytest.mark.parametrize("damage", ["none", "body", "totalSize"])
def test_segments_checked_in_pieces_give_the_serial_verdict(store: Path, monkeypatch: pytest.MonkeyPatch,
                                                            damage: str) -> None:
    m = messages(store)[700]
    if damage == "body":                   # the record is whole: checking goes on after it
        patch(m["segment"], m["pos"] + 88 + 10, b"\xff")
    elif damage == "totalSize":            # the chain breaks: the rest of the segment is not data
        patch(m["segment"], m["pos"], struct.pack(">i", 5))
    serial = verify_source(open_view(store), jobs=1)
    monkeypatch.setattr("store.tools.verify.PIECE_BYTES", 16 * 1024)   # four pieces per 64 KiB segment
    in_pieces = verify_source(open_view(store), jobs=2)
    assert _verdict(in_pieces) == _verdict(serial)
    assert (damage == "none") == serial.ok


def test_a_wrong_guess_of_where_a_piece_starts_costs_time_not_the_verdict(store: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import store.tools.verify_segment as vs

    real = vs.find_record_start
    guesses = []

    def off_by_four(mv, near: int, end: int) -> int | None:   # inside a record, not at its start
        g = real(mv, near, end)
        guesses.append(g)
        return None if g is None else g + 4

    serial = verify_source(open_view(store), jobs=1)
    monkeypatch.setattr(vs, "find_record_start", off_by_four)
    monkeypatch.setattr("store.tools.verify.PIECE_BYTES", 16 * 1024)
    assert _verdict(verify_source(open_view(store), jobs=2)) == _verdict(serial)
    assert guesses and serial.ok


def test_a_piece_start_is_found_where_a_chain_of_records_starts(pristine: Path) -> None:
    from store.tools.verify_segment import find_record_start

    ms = [m for m in messages(pristine) if m["offset"] < SEG]
    data = ms[0]["segment"].read_bytes()
    assert find_record_start(data, ms[10]["pos"] + 3, SEG) == ms[11]["pos"]
    assert find_record_start(data, ms[10]["pos"], SEG) == ms[10]["pos"]
    assert find_record_start(bytes(SEG), 100, SEG) is None                  # zeros: no record
