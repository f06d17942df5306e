"""One micro-batch before the writer, without Spark: map + encode in a task, queue offsets in the driver."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ingest.mapping import MappingConfig
from ingest.prepare import ENCODED_SCHEMA, drop_held, finish_batch, map_and_encode, map_and_encode_batches
from ingest.queue_offsets import assign_queue_offsets
from store import EncodedBatch
from store.codec import CodecConfig, decode_message
from store.constants import TRANSACTION_PREPARED_TYPE
from sink.foreach_batch import BatchInputs
from tests.test_mapping import kafka_rows

pytestmark = pytest.mark.unit


def test_live_records_are_encoded_in_source_order_and_dead_ones_keep_the_kafka_record() -> None:
    headers = [{"key": "trace", "value": b"t-1"}]
    batch = kafka_rows(
        {"offset": 0, "value": b"a", "key": b"k0"},
        {"offset": 1, "value": b"x" * 200, "key": b"k1", "headers": headers},   # over the codec's limit
        {"offset": 2, "value": b"c", "topic": "bad topic"},                     # refused by the mapping
        {"offset": 3, "value": b"d"})
    out = pa.Table.from_batches([map_and_encode(batch, MappingConfig(), CodecConfig(max_message_size=100))])
    assert out.schema == ENCODED_SCHEMA

    live = out.filter(pc.is_null(out.column("dead_reason")))
    assert live.column("kafka_offset").to_pylist() == [0, 3]
    assert live.column("queue_offset").null_count == 2          # numbered in the driver
    assert [decode_message(r).body for r in live.column("record").to_pylist()] == [b"a", b"d"]
    assert live.column("raw_value").null_count == 2               # live rows carry no raw copy

    dead = out.filter(pc.is_valid(out.column("dead_reason"))).to_pylist()
    assert [d["kafka_offset"] for d in dead] == [1, 2]
    too_big, bad_topic = dead
    assert "100" in too_big["dead_reason"] and too_big["record"] is None
    assert (too_big["raw_key"], too_big["raw_value"], too_big["raw_headers"]) == (b"k1", b"x" * 200, headers)
    assert "topic" in bad_topic["dead_reason"] and bad_topic["raw_value"] == b"c"


def test_empty_batches_are_dropped_by_the_task_form() -> None:
    assert list(map_and_encode_batches(iter([kafka_rows()[:0]]), MappingConfig(), CodecConfig())) == []


def rows(*specs: tuple[str, int, bool, int]) -> pa.Table:
    """(topic, queue_id, dead, sys_flag) per row, in arrival order."""
    return pa.table({"topic": [t for t, _, _, _ in specs], "queue_id": pa.array([q for _, q, _, _ in specs], pa.int32()),
                     "dead_reason": [("bad" if d else None) for _, _, d, _ in specs],
                     "sys_flag": pa.array([f for *_, f in specs], pa.int32()),
                     "queue_offset": pa.nulls(len(specs), pa.int64())})


def test_each_queue_continues_from_the_store_in_arrival_order() -> None:
    table = rows(("a", 0, False, 0), ("b", 1, False, 0), ("a", 0, False, 0), ("a", 1, False, 0),
                 ("a", 0, True, 0), ("b", 1, False, 0), ("a", 0, False, 0))
    out = assign_queue_offsets(table, {("a", 0): 7, ("b", 1): 100})
    assert out.column("queue_offset").to_pylist() == [7, 100, 8, 0, None, 101, 9]


def test_prepared_records_take_no_slot_and_carry_zero() -> None:
    table = rows(("a", 0, False, 0), ("a", 0, False, TRANSACTION_PREPARED_TYPE), ("a", 0, False, 0))
    assert assign_queue_offsets(table, {("a", 0): 5}).column("queue_offset").to_pylist() == [5, 0, 6]


def test_assigned_offsets_are_what_the_store_expects() -> None:
    """The driver's numbering and the store's own check agree (the store refuses any other)."""
    batch = kafka_rows(*[{"offset": i, "partition": i % 3, "value": b"v%d" % i} for i in range(30)])
    encoded = pa.Table.from_batches([map_and_encode(batch, MappingConfig(), CodecConfig())])
    numbered = assign_queue_offsets(encoded, {("orders", 1): 40})
    got = EncodedBatch.from_arrow(numbered.select(["record", "topic", "queue_id", "sys_flag", "tags_code",
                                                   "delay_level", "queue_offset"])).queue_offsets
    assert list(got[1::3]) == list(range(40, 50)) and list(got[0::3]) == list(range(10))


def test_what_the_store_already_holds_is_dropped_per_partition_dead_letters_too() -> None:
    batch = kafka_rows(*[{"offset": i // 2, "partition": i % 2, "value": b"v%d" % i} for i in range(10)],
                       {"offset": 5, "partition": 0, "value": b"x", "topic": "bad topic"},
                       {"offset": 9, "partition": 7, "value": b"y", "topic": "other"})
    encoded = pa.Table.from_batches([map_and_encode(batch, MappingConfig(), CodecConfig())])
    kept = drop_held(encoded, {"orders/0": 3, "orders/1": 1, "other/7": 10, "orders/9": 100})
    got = sorted(zip(kept.column("kafka_topic").to_pylist(), kept.column("kafka_partition").to_pylist(),
                     kept.column("kafka_offset").to_pylist()))
    assert got == [("bad topic", 0, 5)] + [("orders", 0, o) for o in (3, 4)] + [("orders", 1, o) for o in (1, 2, 3, 4)]
    assert drop_held(encoded, {}) is encoded and drop_held(encoded, {"orders/0": 0}).num_rows == encoded.num_rows


def test_finishing_a_batch_numbers_only_the_records_it_keeps() -> None:
    batch = kafka_rows(*[{"offset": i, "partition": 1, "value": b"v%d" % i} for i in range(6)])
    encoded = pa.Table.from_batches([map_and_encode(batch, MappingConfig(), CodecConfig())])
    out = finish_batch(encoded, BatchInputs({"orders/1": 4}, {("orders", 1): 40}))
    assert out.column("kafka_offset").to_pylist() == [4, 5]
    assert out.column("queue_offset").to_pylist() == [40, 41]
