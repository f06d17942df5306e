"""The sink's exactly-once state and its dead-letter log, without Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from store import CommitPointError

from ingest.encode.mapping import HEADER_TYPE
from sink.deadletter import DEAD_LETTER_DIR, DEAD_LETTER_FILE, DeadLetterLog, read_dead_letters
from sink.state import STATE_VERSION, SinkState, compact_offsets, parse_tp_key, tp_key
from sink.writer import kafka_next_offsets

pytestmark = pytest.mark.unit


def dead_rows(*offsets: int) -> pa.Table:
    n = len(offsets)
    return pa.table({
        "kafka_topic": ["t"] * n, "kafka_partition": pa.array([0] * n, pa.int32()),
        "kafka_offset": pa.array(list(offsets), pa.int64()), "raw_timestamp": pa.array([1] * n, pa.int64()),
        "dead_reason": ["too big"] * n, "dead_code": ["body_too_large"] * n, "raw_key": pa.array([b"k"] * n), "raw_value": pa.array([b"\xff"] * n),
        "raw_headers": pa.array([[{"key": "h", "value": b"v"}]] * n, HEADER_TYPE),
    })


def test_state_round_trips_through_commit_metadata() -> None:
    state = SinkState().advanced(3, "q1", {"orders/0": 10, "orders/1": 5}, 120, 2, 40, 3, 4)
    again = SinkState.from_metadata(state.to_metadata())
    assert again == state
    assert (again.tombstones, again.empty_values) == (3, 4)
    assert again.advanced(4, "q1", {}, 120, 0, 5, 1, 0).tombstones == 4
    assert again.starting_offsets_json() == {"orders": {"0": 10, "1": 5}}


def test_offsets_are_kept_one_list_per_topic_and_read_in_either_form() -> None:
    state = SinkState(kafka_offsets={"t/0": 10, "t/2": 4, "u.v/0": 1})
    meta = state.to_metadata()
    assert meta["sink"]["version"] == STATE_VERSION == 2
    assert meta["sink"]["kafkaOffsets"] == {"t": [10, -1, 4], "u.v": [1]}
    assert SinkState.from_metadata(meta).kafka_offsets == state.kafka_offsets
    # what every earlier release wrote (version 1, a key per partition) is read as before
    old = {"sink": {**meta["sink"], "version": 1, "kafkaOffsets": {"t/0": 10, "t/2": 4, "u.v/0": 1}}}
    assert SinkState.from_metadata(old) == state


def test_the_offsets_of_twelve_thousand_partitions_take_a_third_of_the_old_form() -> None:
    offsets = {tp_key(f"wide-{t:04d}", p): 100 + p for t in range(1000) for p in range(12)}
    old = len(json.dumps(offsets, separators=(",", ":")))
    new = len(json.dumps(compact_offsets(offsets), separators=(",", ":")))
    assert new * 3 < old, (new, old)


def test_a_damaged_compact_offset_list_is_refused_in_words() -> None:
    with pytest.raises(CommitPointError, match=r"kafkaOffsets\['t'\] is dict, not a list"):
        SinkState.from_metadata({"sink": {"version": 2, "batchId": 0, "kafkaOffsets": {"t": {"0": 1}}}})


def test_kafka_offsets_only_move_forward() -> None:
    state = SinkState(kafka_offsets={"t/0": 10}).advanced(1, None, {"t/0": 7, "t/1": 3}, 0, 0, 0)
    assert state.kafka_offsets == {"t/0": 10, "t/1": 3}


def test_topic_partition_keys_survive_topics_with_dots_and_dashes() -> None:
    assert parse_tp_key(tp_key("a.b-c_d", 12)) == ("a.b-c_d", 12)


def test_next_offsets_cover_live_and_dead_rows() -> None:
    table = pa.table({"kafka_topic": ["t", "t", "u"], "kafka_partition": pa.array([0, 0, 2], pa.int32()),
                      "kafka_offset": pa.array([4, 9, 1], pa.int64())})
    assert kafka_next_offsets(table) == {"t/0": 10, "u/2": 2}


def test_dead_letters_beyond_the_commit_are_cut_on_open(tmp_path: Path) -> None:
    log = DeadLetterLog(tmp_path, 0)
    committed = log.append(dead_rows(1, 2), batch_id=0)
    log.append(dead_rows(3), batch_id=1)          # a crash before this batch committed
    log.close()
    DeadLetterLog(tmp_path, committed).close()
    letters = read_dead_letters(tmp_path)
    assert [d["offset"] for d in letters] == [1, 2]
    assert letters[0]["reason"] == "too big" and letters[0]["valueBase64"] == "/w=="
    assert letters[0]["reasonCode"] == "body_too_large"


def test_a_dead_letter_without_a_code_is_written_as_other(tmp_path: Path) -> None:
    log = DeadLetterLog(tmp_path, 0)
    dead = dead_rows(1)
    log.append(dead.set_column(dead.schema.get_field_index("dead_code"), "dead_code", pa.nulls(1, pa.string())), 0)
    log.close()
    assert read_dead_letters(tmp_path)[0]["reasonCode"] == "other"


def test_a_dead_letter_file_from_before_reason_codes_still_reads(tmp_path: Path) -> None:
    old = {"topic": "t", "partition": 0, "offset": 7, "timestampUs": 1, "reason": "too big", "batchId": 0,
           "keyBase64": None, "valueBase64": "/w==", "headers": []}
    line = (json.dumps(old) + "\n").encode()
    (tmp_path / DEAD_LETTER_DIR).mkdir()
    (tmp_path / DEAD_LETTER_DIR / DEAD_LETTER_FILE).write_bytes(line)
    log = DeadLetterLog(tmp_path, len(line))            # a job opening it goes on appending after it
    log.append(dead_rows(8), batch_id=1)
    log.close()
    letters = read_dead_letters(tmp_path)
    assert letters[0] == {**old, "reasonCode": None}
    assert (letters[1]["offset"], letters[1]["reasonCode"]) == (8, "body_too_large")


def test_a_dead_letter_keeps_a_null_header_as_null(tmp_path: Path) -> None:
    dead = dead_rows(5)
    headers = pa.array([[None, {"key": "h", "value": b"\xff"}]], HEADER_TYPE)
    log = DeadLetterLog(tmp_path, 0)
    log.append(dead.set_column(dead.schema.get_field_index("raw_headers"), "raw_headers", headers), batch_id=0)
    log.close()
    assert read_dead_letters(tmp_path)[0]["headers"] == [None, {"key": "h", "valueBase64": "/w=="}]


def test_a_dead_letter_file_shorter_than_committed_is_an_error(tmp_path: Path) -> None:
    DeadLetterLog(tmp_path, 0).close()
    with pytest.raises(OSError, match="committed"):
        DeadLetterLog(tmp_path, 100)


def test_the_broker_group_rides_in_the_state_and_is_kept_by_every_commit() -> None:
    state = SinkState(broker_group="1/2").advanced(0, "q", {"t/1": 4}, 0, 0, 4).advanced(1, "q", {"t/3": 2}, 0, 0, 2)
    assert SinkState.from_metadata(state.to_metadata()).broker_group == "1/2"
    assert "brokerGroup" not in SinkState().to_metadata()["sink"], "a store of no group is written as before"
    assert SinkState().empty and not state.empty


def test_a_writer_records_its_broker_group_on_a_new_store_only(tmp_path: Path) -> None:
    from store import StoreConfig
    from sink import CommitLogWriter
    from tests.helpers.batches import collected

    config = StoreConfig(segment_size=1 << 20)
    with CommitLogWriter(tmp_path / "s", config, broker_group="0/2") as w:
        w.write_batch(0, "q", collected(0))
    with CommitLogWriter(tmp_path / "s", config, broker_group="1/2") as w:
        assert w.state.broker_group == "0/2", "the store keeps the group it was written as"
