"""Every C entry point checks the sizes and positions it is handed and says what is wrong in one
ValueError (the argument, its value and the limit), instead of reading or writing past a buffer.
Each test makes one good call first, so the refusal that follows is the bad argument's alone. The
C passes must be built here (setup.py; `make venv`)."""

from __future__ import annotations

import numpy as np
import pytest

from ingest.encode import _direct_encode
from store.format.codec import Message, encode_message
from store.format.constants import INDEX_HASH_SLOT_SIZE, INDEX_HEADER_SIZE, INDEX_ITEM_SIZE, MIN_RECORD_LENGTH
from store.index import _index_build, _index_check
from store.scan import _record_check, _record_columns, _scan_walk

pytestmark = pytest.mark.unit

RECORD = encode_message(Message(topic="TopicA", body=b"body", properties="UNIQ_KEY\u0001ABC\u0002KEYS\u0001k1"))
SEGMENT = np.frombuffer(RECORD + bytes(64), np.uint8)
N = len(RECORD)


def i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


# --- the segment walk ----------------------------------------------------------------------------

def test_walk_refuses_an_end_past_the_buffer_a_negative_pos_and_a_short_min_length() -> None:
    out = np.zeros(4, np.int64)
    assert _scan_walk.walk(SEGMENT, 0, len(SEGMENT), len(SEGMENT), 91, out)[0] == 1
    with pytest.raises(ValueError, match=f"walk: end {len(SEGMENT) + 1} outside the buffer of {len(SEGMENT)} bytes"):
        _scan_walk.walk(SEGMENT, 0, len(SEGMENT) + 1, len(SEGMENT), 91, out)
    with pytest.raises(ValueError, match="walk: pos -1 is negative"):
        _scan_walk.walk(SEGMENT, -1, len(SEGMENT), len(SEGMENT), 91, out)
    with pytest.raises(ValueError, match="min_length 3 below 4"):
        _scan_walk.walk(SEGMENT, 0, len(SEGMENT), len(SEGMENT), 3, out)


# --- the record checks ---------------------------------------------------------------------------

def test_check_refuses_starts_sizes_and_out_of_different_lengths() -> None:
    assert _record_check.check(SEGMENT, i64(0), i64(N), 0, False, True, np.zeros((6, 1), np.int64)) == 1
    with pytest.raises(ValueError, match="check: 1 starts, 2 sizes"):
        _record_check.check(SEGMENT, i64(0), i64(N, N), 0, False, True, np.zeros((6, 1), np.int64))
    with pytest.raises(ValueError, match=r"an out of 5 values \(6 per record\)"):
        _record_check.check(SEGMENT, i64(0), i64(N), 0, False, True, np.zeros(5, np.int64))


def test_check_fails_a_record_whose_size_runs_past_the_buffer_however_large() -> None:
    """start + size past INT64_MAX must not wrap around into the buffer."""
    out = np.zeros((6, 1), np.int64)
    for start, size in ((0, len(SEGMENT) + 1), (10, 2**63 - 5), (len(SEGMENT) + 1, N), (-1, N)):
        for placed in (False, True):
            assert _record_check.check(SEGMENT, i64(start), i64(size), 0, placed, True, out) == 0


def scan(buf: np.ndarray, end: int, out: np.ndarray, topics: np.ndarray, pos: int = 0) -> tuple:
    return _record_check.scan(buf, pos, end, end, 0, True, True, out, topics)


def test_scan_refuses_an_end_past_the_buffer_and_a_negative_pos() -> None:
    out, topics = np.zeros((10, 4), np.int64), np.zeros(1 + 2 * 4, np.int64)
    assert scan(SEGMENT, len(SEGMENT), out, topics)[0] == 1
    with pytest.raises(ValueError, match=f"scan: end {len(SEGMENT) + 1} outside the buffer of {len(SEGMENT)} bytes"):
        scan(SEGMENT, len(SEGMENT) + 1, out, np.zeros(9, np.int64))
    with pytest.raises(ValueError, match="scan: pos -1 is negative"):
        scan(SEGMENT, len(SEGMENT), out, np.zeros(9, np.int64), pos=-1)


def test_scan_refuses_an_out_too_small_for_the_records_the_walk_may_find() -> None:
    may_find = (len(SEGMENT) - MIN_RECORD_LENGTH) // MIN_RECORD_LENGTH + 1      # a record every 91 bytes
    with pytest.raises(ValueError, match=f"scan: out holds 0 records, the walk may find {may_find}"):
        scan(SEGMENT, len(SEGMENT), np.zeros((10, 0), np.int64), np.zeros(9, np.int64))


def test_scan_refuses_a_topic_table_without_room_or_with_a_count_past_it() -> None:
    out = np.zeros((10, 4), np.int64)
    with pytest.raises(ValueError, match="scan: topics holds room for 0 topics"):
        scan(SEGMENT, len(SEGMENT), out, np.zeros(2, np.int64))
    with pytest.raises(ValueError, match=r"scan: topics count 5 outside \[0, 4\]"):
        scan(SEGMENT, len(SEGMENT), out, i64(5, *[0] * 8))


def test_scan_refuses_a_topic_table_from_a_longer_buffer() -> None:
    """The table keeps each topic's first position from call to call: handed on to a shorter buffer,
    its positions would be compared past that buffer's end."""
    long = np.frombuffer(bytes(4096) + RECORD + bytes(64), np.uint8)
    topics = np.zeros(9, np.int64)
    _record_check.scan(long, 4096, len(long), len(long), -4096, True, True, np.zeros((10, 4), np.int64), topics)
    assert topics[0] == 1 and topics[1] > len(SEGMENT)
    with pytest.raises(ValueError, match=f"scan: topic 0 at {topics[1]}, 6 bytes, outside the buffer of "
                                         f"{len(SEGMENT)} bytes"):
        scan(SEGMENT, len(SEGMENT), np.zeros((10, 4), np.int64), topics)


# --- the read-back's columns ---------------------------------------------------------------------

def columns(starts: np.ndarray, topic_pos: np.ndarray, rows: int) -> object:
    i32, i64_ = (lambda: np.zeros(rows, np.int32)), (lambda: np.zeros(rows, np.int64))
    return _record_columns.columns(SEGMENT, starts, topic_pos, i64(*[6] * len(starts)), i32(), i64_(), i64_(), i32(),
                                   i32(), i32(), i32(), i64_(), i32(), np.zeros(rows + 1, np.int32),
                                   np.zeros(0, np.uint8))


def test_columns_refuses_short_outputs_and_records_outside_the_buffer() -> None:
    topic_at = N - 6 - 2 - len("UNIQ_KEY\u0001ABC\u0002KEYS\u0001k1")
    columns(i64(0), i64(topic_at), 1)
    with pytest.raises(ValueError, match=r"columns: 2 starts, but .* holds fewer \(body_offsets needs 3\)"):
        columns(i64(0, 0), i64(topic_at, topic_at), 1)
    with pytest.raises(ValueError, match=f"columns: record 0 at {len(SEGMENT) - 10} is outside the buffer"):
        columns(i64(len(SEGMENT) - 10), i64(topic_at), 1)
    with pytest.raises(ValueError, match=f"topic \\(6 bytes at {len(SEGMENT)}\\) is outside the buffer"):
        columns(i64(0), i64(len(SEGMENT)), 1)


# --- the index -----------------------------------------------------------------------------------

def key_outputs(cap: int) -> tuple[np.ndarray, ...]:
    return np.zeros(cap, np.int64), np.zeros(cap, np.int32), np.zeros(cap, np.int64), np.zeros(cap, np.int64)


def test_find_keys_refuses_short_outputs_and_a_first_record_out_of_range() -> None:
    assert _index_build.find_keys(SEGMENT, i64(0), 0, 0, *key_outputs(16386)) == (2, 1)
    with pytest.raises(ValueError, match="find_keys: output arrays shorter"):
        _index_build.find_keys(SEGMENT, i64(0), 0, 0, *key_outputs(100))
    with pytest.raises(ValueError, match="first out of range"):
        _index_build.find_keys(SEGMENT, i64(0), 2, 0, *key_outputs(16386))


SLOTS, ITEMS = 8, 16
HEADER = (0, 0, 0, 0, 0, 1)     # a new file: indexCount 1, item 0 never written


def index_file(size: int = INDEX_HEADER_SIZE + INDEX_HASH_SLOT_SIZE * SLOTS + INDEX_ITEM_SIZE * ITEMS) -> np.ndarray:
    return np.zeros(size, np.uint8)


def test_put_items_refuses_a_file_smaller_than_its_geometry_and_key_arrays_that_differ() -> None:
    hashes = np.array([7, 9], np.int32)
    assert _index_build.put_items(index_file(), SLOTS, ITEMS, HEADER, hashes, i64(0, 0), i64(1, 1))[1] == 2
    with pytest.raises(ValueError, match="does not match the geometry"):
        _index_build.put_items(index_file(100), SLOTS, ITEMS, HEADER, hashes, i64(0, 0), i64(1, 1))
    with pytest.raises(ValueError, match="put_items: key arrays of different lengths"):
        _index_build.put_items(index_file(), SLOTS, ITEMS, HEADER, hashes, i64(0), i64(1, 1))


def test_put_shipped_refuses_offsets_that_are_not_one_per_record_and_counts_past_the_keys() -> None:
    hashes, counts = np.array([7, 9], np.int32), np.array([2], np.int32)
    _index_build.put_shipped(index_file(), SLOTS, ITEMS, HEADER, hashes, counts, i64(0), 1, 0, 0, 0, 10)
    with pytest.raises(ValueError, match="put_shipped: not one offset per record"):
        _index_build.put_shipped(index_file(), SLOTS, ITEMS, HEADER, hashes, counts, i64(0, 0), 1, 0, 0, 0, 10)
    with pytest.raises(ValueError, match="put_shipped: the key counts add up to more keys"):
        _index_build.put_shipped(index_file(), SLOTS, ITEMS, HEADER, hashes, np.array([3], np.int32), i64(0), 1, 0, 0,
                                 0, 10)


def test_index_records_refuses_a_first_record_out_of_range_and_a_reserved_map_short_of_the_slots() -> None:
    _index_build.index_records(SEGMENT, i64(0), 0, 0, 0, index_file(), SLOTS, ITEMS, HEADER, b"", 12)
    with pytest.raises(ValueError, match="index_records: first or skip out of range"):
        _index_build.index_records(SEGMENT, i64(0), 2, 0, 0, index_file(), SLOTS, ITEMS, HEADER, b"", 12)
    slot_table = INDEX_HEADER_SIZE + INDEX_HASH_SLOT_SIZE * SLOTS       # 72 bytes: two units of 64
    _index_build.index_records(SEGMENT, i64(0), 0, 0, 0, index_file(), SLOTS, ITEMS, HEADER, b"\1\1", 6)
    for reserved, shift in ((b"\1", 6), (b"\1\1", 5), (b"\1", 40)):
        with pytest.raises(ValueError, match="index_records: reserved does not cover the slot table"):
            _index_build.index_records(SEGMENT, i64(0), 0, 0, 0, index_file(), SLOTS, ITEMS, HEADER, reserved, shift)
    assert slot_table > 64


def test_records_match_refuses_an_end_past_the_segment_and_runs_of_part_items() -> None:
    _index_check.records_match(SEGMENT, len(SEGMENT), 0, False, [])
    with pytest.raises(ValueError, match="records_match: end past the segment"):
        _index_check.records_match(SEGMENT, len(SEGMENT) + 1, 0, False, [])
    with pytest.raises(ValueError, match="records_match: a run that is not whole items"):
        _index_check.records_match(SEGMENT, len(SEGMENT), 0, False, [(bytes(INDEX_ITEM_SIZE - 1), 0, True)])


def test_chains_hold_and_item_columns_refuse_buffers_that_disagree_with_their_counts() -> None:
    items = bytes(INDEX_ITEM_SIZE * 2)
    _index_check.chains_hold(items, bytes(INDEX_HASH_SLOT_SIZE * SLOTS), SLOTS)
    with pytest.raises(ValueError, match="chains_hold: the slots or items do not match slot_num"):
        _index_check.chains_hold(items, bytes(INDEX_HASH_SLOT_SIZE * (SLOTS - 1)), SLOTS)
    _index_check.item_columns(items, 0, 100, np.zeros(2, np.int64), np.zeros(2, np.int32), np.zeros(2, np.int32))
    with pytest.raises(ValueError, match="item_columns: columns of another length than the items"):
        _index_check.item_columns(items, 0, 100, np.zeros(1, np.int64), np.zeros(2, np.int32), np.zeros(2, np.int32))


# --- the direct encoder --------------------------------------------------------------------------

def encoder_args(rows: int, queue_ids: int | None = None, head: int = 88) -> list[object]:
    """An empty fetch with outputs for ``rows`` records (``queue_ids`` rows of queue ids)."""
    n = rows if queue_ids is None else queue_ids
    return [bytes(), bytes(), 0, 10, np.zeros(1024, np.uint8), np.zeros(rows, np.int64), np.zeros(n, np.int32),
            np.zeros(rows, np.int64), np.zeros(rows, np.int64), np.zeros(rows, np.int64), np.zeros(rows, np.int8),
            np.zeros((rows, 4), np.int64), bytes(head), b"\x05Topic", b"", b"", b"", b"born", 1000, 2000, 3000, 0, 0, 0]


def test_encode_fetch_refuses_row_arrays_shorter_than_starts_and_a_short_head() -> None:
    assert _direct_encode.encode_fetch(*encoder_args(4)) == (0, 0, 0)
    with pytest.raises(ValueError, match="encode_fetch: queue_ids holds 3 rows, starts 4"):
        _direct_encode.encode_fetch(*encoder_args(4, queue_ids=3))
    with pytest.raises(ValueError, match="encode_fetch: head of 87 bytes, a record's head up to BODYLENGTH takes 88"):
        _direct_encode.encode_fetch(*encoder_args(4, head=87))


def test_encode_rows_refuses_row_arrays_shorter_than_starts() -> None:
    no_rows = [np.zeros(1, np.int32), b"", b"", np.zeros(1, np.int32), b"", b"", np.zeros(1, np.int32),
               np.zeros(1, np.int32), b"", b"", np.zeros(1, np.int32), b"", b"", np.zeros(0, np.int64),
               np.zeros(0, np.int64), np.zeros(0, np.int64), b""]
    assert _direct_encode.encode_rows(*no_rows, *encoder_args(4)[4:]) == (0, 0, 0)
    with pytest.raises(ValueError, match="encode_rows: queue_ids holds 3 rows, starts 4"):
        _direct_encode.encode_rows(*no_rows, *encoder_args(4, queue_ids=3)[4:])


def test_check_holds_physicaloffset_only_to_records_of_a_segment() -> None:
    """placed: the record's PHYSICALOFFSET must be base + its start; an encoded record waiting for
    its append has none to hold."""
    out = np.zeros((6, 1), np.int64)
    physical = int.from_bytes(RECORD[28:36], "big")
    assert _record_check.check(SEGMENT, i64(0), i64(N), physical, True, True, out) == 1
    assert _record_check.check(SEGMENT, i64(0), i64(N), physical + 1, True, True, out) == 0
    assert _record_check.check(SEGMENT, i64(0), i64(N), physical + 1, False, True, out) == 1
