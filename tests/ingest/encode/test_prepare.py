"""One micro-batch before the writer, without Spark: map + encode in a task, then the sink's prepare."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ingest.encode.mapping import MappingConfig
from ingest.encode.prepare import encode_and_pack, map_and_encode, map_and_encode_batches
from sink import CommitLogWriter
from sink.batch import drop_held, prepare
from sink.handover.schema import ENCODED_SCHEMA, INDEX_KEYS, RECORD_COLUMNS
from store import EncodedBatch, StoreConfig
from store.format.codec import CodecConfig, decode_message
from store.index.build import record_keys
from store.index.service import IndexService
from tests.helpers.batches import kafka_rows

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


def test_the_store_numbers_each_queue_from_its_end_in_arrival_order(tmp_path: Path) -> None:
    """Queue offsets are assigned in one place, the store's append: a batch arrives with none, its
    dead letters take no slot and each queue continues where the store's ends."""
    batch = kafka_rows(*[{"offset": i, "partition": i % 3, "value": b"v%d" % i} for i in range(30)],
                       {"offset": 30, "partition": 1, "value": b"x", "topic": "bad topic"})
    encoded = pa.Table.from_batches([map_and_encode(batch, MappingConfig(), CodecConfig())])
    assert "queue_offset" not in encoded.column_names
    with CommitLogWriter(tmp_path / "store", StoreConfig(segment_size=1 << 20, flush_mode="sync")) as w:
        w.write_batch(0, None, prepare(encoded.slice(0, 12), {}))
        w.write_batch(1, None, prepare(encoded, dict(w.state.kafka_offsets)))
        assert w.store.next_queue_offsets() == {("orders", 0): 10, ("orders", 1): 10, ("orders", 2): 10}
        numbered = [(m.queue_id, m.queue_offset, bytes(m.body)) for _, m in w.store.iter_messages()]
    for q in range(3):
        assert [(o, body) for qid, o, body in numbered if qid == q] == [(i, b"v%d" % (3 * i + q)) for i in range(10)]


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


def test_a_packed_batch_is_unpacked_and_trimmed_by_the_sink() -> None:
    batch = kafka_rows(*[{"offset": i, "partition": 1, "value": b"v%d" % i} for i in range(6)])
    packed = pa.Table.from_batches(list(encode_and_pack(iter([batch]), MappingConfig(), CodecConfig())))
    out = prepare(packed, {"orders/1": 4})
    assert out.schema == ENCODED_SCHEMA and out.column("kafka_offset").to_pylist() == [4, 5]


def test_a_task_ships_each_live_records_index_keys_and_the_writer_puts_them(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    batch = kafka_rows(*[{"offset": i, "partition": 0, "value": b"v%d" % i, "key": b"k%d" % (i % 4)} for i in range(9)],
                       {"offset": 9, "partition": 0, "value": b"x", "topic": "bad topic"},
                       {"offset": 10, "partition": 0, "value": b"y", "key": "clé".encode()})
    plain = prepare(pa.Table.from_batches(list(encode_and_pack(iter([batch]), MappingConfig(), CodecConfig()))), {})
    keyed = prepare(pa.Table.from_batches(list(encode_and_pack(iter([batch]), MappingConfig(), CodecConfig(),
                                                               index_keys=True))), {})
    assert plain.column(INDEX_KEYS).null_count == plain.num_rows       # the store finds them
    rows = keyed.to_pylist()
    for row in rows:
        if row["record"] is None:
            assert row[INDEX_KEYS] == []                                 # a dead letter is not appended
        else:
            record = np.frombuffer(row["record"], np.uint8)
            assert row[INDEX_KEYS] == record_keys(record, np.array([0])).key_hash.tolist()
            assert len(row[INDEX_KEYS]) == 2                            # its UNIQ_KEY and its key
    live = np.flatnonzero(np.asarray(keyed.column("record").is_valid()))
    assert EncodedBatch.from_arrow(keyed.select(list(RECORD_COLUMNS)), live).key_hashes is not None
    found = {}
    for name, table in (("found", plain), ("shipped", keyed)):
        if name == "shipped":       # no record is read back from the commit log for its keys
            monkeypatch.setattr(IndexService, "put_records", lambda *a: pytest.fail("keys found, not shipped"))
        with CommitLogWriter(tmp_path / name, StoreConfig(segment_size=1 << 20, flush_mode="sync")) as w:
            w.write_batch(0, None, table)
            found[name] = [[o for o, _ in w.store.messages_by_key("orders", k)] for k in ("k0", "k3", "clé")]
    assert found["shipped"] == found["found"] and [len(offsets) for offsets in found["found"]] == [3, 2, 1]
