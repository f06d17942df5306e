"""Vectorized batch encoding: every record equals encode_message of its row."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.errors import FieldLimitError, InvalidMessageError
from store.format.batch_codec import (
    MESSAGE_TABLE_SCHEMA,
    EncodedBatch,
    encode_batch,
    encode_batch_to_arrow,
    validate_batch,
)
from store.format.codec import CodecConfig, Message, decode_message, encode_message
from store.format.hosts import HostAddress
from store.format.properties import java_parse_int, string_to_properties, tags_code

pytestmark = pytest.mark.unit

V4 = HostAddress("10.0.0.1", 5).to_bytes()
V6 = HostAddress.parse("[2001:db8::1]:7").to_bytes()


def row(**kw) -> dict:
    base = dict(topic="TopicTest", queue_id=0, flag=0, body=b"body", properties="TAGS\x01TagA\x02", tags="TagA",
                sys_flag=0, born_timestamp=1700000000000, born_host=V4, store_host=V4, reconsume_times=0,
                prepared_transaction_offset=0, queue_offset=0)
    base.update(kw)
    return base


def table(rows: list[dict], with_queue_offset: bool = True) -> pa.Table:
    schema = MESSAGE_TABLE_SCHEMA if with_queue_offset else pa.schema(
        [f for f in MESSAGE_TABLE_SCHEMA if f.name != "queue_offset"])
    return pa.Table.from_pylist([{k: v for k, v in r.items() if k in schema.names} for r in rows], schema=schema)


def single(r: dict, config: CodecConfig | None = None, with_queue_offset: bool = True) -> bytes:
    return encode_message(Message(
        topic=r["topic"], body=r["body"] or b"", queue_id=r["queue_id"], flag=r["flag"], properties=r["properties"] or "",
        sys_flag=r["sys_flag"], born_timestamp=r["born_timestamp"], born_host=HostAddress.from_bytes(r["born_host"]),
        store_host=HostAddress.from_bytes(r["store_host"]), reconsume_times=r["reconsume_times"],
        prepared_transaction_offset=r["prepared_transaction_offset"],
        queue_offset=r["queue_offset"] if with_queue_offset else 0), config)


int32 = st.integers(-2**31, 2**31 - 1)
int64 = st.integers(-2**63, 2**63 - 1)
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
rows_strategy = st.lists(st.fixed_dictionaries({
    "topic": st.one_of(st.text("abcXYZ_%-", min_size=1, max_size=10), st.just("R" * 128), st.just("é主题")),
    "queue_id": int32, "flag": int32,
    "body": st.one_of(st.binary(max_size=64), st.none()),
    "properties": st.one_of(st.builds(lambda k, v, last: f"{k}\x01{v}" + ("\x02" if last else ""), text, text, st.booleans()),
                            st.just(""), st.just("DELAY\x013\x02TAGS\x01x\x02"), st.just("__CRC32#\x011\x02A\x01b\x02")),
    "tags": st.one_of(st.none(), text),
    "sys_flag": st.sampled_from([0, 1, 2, 4, 8, 12, 0x301, 0x40000]),
    "born_timestamp": int64, "born_host": st.sampled_from([V4, V6]), "store_host": st.sampled_from([V4, V6]),
    "reconsume_times": int32, "prepared_transaction_offset": int64, "queue_offset": st.integers(0, 2**62),
}), min_size=1, max_size=12)


@settings(max_examples=80, deadline=None)
@given(rows=rows_strategy, prop_crc=st.booleans(), with_queue_offset=st.booleans())
def test_every_record_equals_encode_message_of_its_row(rows: list[dict], prop_crc: bool, with_queue_offset: bool) -> None:
    config = CodecConfig(enabled_append_prop_crc=prop_crc)
    batch = encode_batch(table(rows, with_queue_offset), config)
    assert len(batch) == len(rows)
    for i, r in enumerate(rows):
        assert bytes(batch.record(i)) == single(r, config, with_queue_offset), f"row {i}"
    assert batch.data.flags.writeable and batch.data.flags.c_contiguous
    assert int(batch.offsets[-1] + batch.sizes[-1]) == batch.nbytes
    assert [batch.topic_names[i] for i in batch.topic_index] == [r["topic"] for r in rows]
    assert batch.tags_codes.tolist() == [tags_code(r["tags"]) for r in rows]
    assert batch.queue_ids.tolist() == [r["queue_id"] for r in rows]
    assert batch.sys_flags.tolist() == [decode_message(batch.record(i)).sys_flag for i in range(len(rows))]
    # DELAY read as RocketMQ reads it (Integer.parseInt): "DELAY" with a non-number means no delay
    assert batch.delay_levels.tolist() == [java_parse_int(string_to_properties(r["properties"] or "").get("DELAY")) or 0
                                           for r in rows]
    if with_queue_offset:
        assert batch.queue_offsets.tolist() == [decode_message(batch.record(i)).queue_offset for i in range(len(rows))]
    else:
        assert batch.queue_offsets is None
    again = EncodedBatch.from_arrow(encode_batch_to_arrow(table(rows, with_queue_offset), config))
    assert bytes(again.data) == bytes(batch.data) and again.sizes.tolist() == batch.sizes.tolist()
    assert [again.topic_names[i] for i in again.topic_index] == [r["topic"] for r in rows]
    assert again.tags_codes.tolist() == batch.tags_codes.tolist()
    assert (again.queue_offsets is None) == (batch.queue_offsets is None)


def test_prepared_and_rollback_rows_carry_queue_offset_zero() -> None:
    batch = encode_batch(table([row(sys_flag=4, queue_offset=9), row(sys_flag=8, queue_offset=9), row(sys_flag=12, queue_offset=9)]))
    assert batch.queue_offsets.tolist() == [0, 9, 0]


def test_chunked_and_sliced_tables_encode_like_whole_ones() -> None:
    rows = [row(body=bytes([i]) * i, topic=f"T{i % 3}", born_host=V6 if i % 2 else V4) for i in range(30)]
    whole = encode_batch(table(rows))
    chunked = pa.concat_tables([table(rows[:10]), table(rows[10:])])
    assert bytes(encode_batch(chunked).data) == bytes(whole.data)
    sliced = table(rows).slice(7, 11)
    assert bytes(encode_batch(sliced).data) == b"".join(single(r) for r in rows[7:18])


def test_records_encoded_elsewhere_read_the_same_from_chunks_and_slices() -> None:
    rows = [row(body=bytes([i]) * i, topic=f"T{i % 3}") for i in range(30)]
    encoded = encode_batch_to_arrow(table(rows))
    whole = EncodedBatch.from_arrow(encoded)
    pieces = pa.concat_tables([encoded.slice(0, 4), encoded.slice(4, 0), encoded.slice(4, 19), encoded.slice(23)])
    assert pieces.column("record").num_chunks == 4
    again = EncodedBatch.from_arrow(pieces)
    assert bytes(again.data) == bytes(whole.data) and again.data.flags.writeable
    assert list(again.offsets) == list(whole.offsets) and list(again.sizes) == list(whole.sizes)
    assert list(again.topic_index) == list(whole.topic_index) and again.topic_names == whole.topic_names


def test_chosen_rows_skip_the_empty_null_records_of_dead_letters() -> None:
    rows = [row(body=bytes([i]) * i, topic=f"T{i % 3}", queue_id=i % 4) for i in range(12)]
    encoded = encode_batch_to_arrow(table(rows))
    dead = [2, 5, 11]
    live = np.array([i for i in range(12) if i not in dead])
    records = pa.array([None if i in dead else r for i, r in enumerate(encoded.column("record").to_pylist())],
                       pa.binary())
    with_dead = encoded.set_column(encoded.schema.get_field_index("record"), "record", records)
    chosen = EncodedBatch.from_arrow(with_dead, live)
    want = EncodedBatch.from_arrow(encoded.take(pa.array(live)))
    assert bytes(chosen.data) == bytes(want.data)
    assert list(chosen.offsets) == list(want.offsets) and list(chosen.sizes) == list(want.sizes)
    assert list(chosen.queue_ids) == list(want.queue_ids) and chosen.topic_names == want.topic_names
    # rows left out that still hold bytes are taken out by a copy, not appended
    kept = EncodedBatch.from_arrow(encoded, live)
    assert bytes(kept.data) == bytes(want.data)
    with pytest.raises(InvalidMessageError, match="null rows to append"):
        EncodedBatch.from_arrow(with_dead, np.array([0, 2]))


def test_a_row_over_the_body_limit_is_refused_naming_field_size_limit_and_row() -> None:
    config = CodecConfig(max_message_size=100)
    t = table([row(body=bytes(100)), row(body=bytes(101))])
    with pytest.raises(FieldLimitError) as exc:
        encode_batch(t, config)
    assert (exc.value.field, exc.value.size, exc.value.limit) == ("body", 101, 100)
    assert "row 1" in str(exc.value)
    ok, reasons = validate_batch(t, config)
    assert ok.tolist() == [True, False] and reasons[0] is None and "body is 101 bytes" in reasons[1]


def test_properties_limit_and_topic_limit_per_row() -> None:
    t = table([row(properties="K\x01" + "v" * 32764 + "\x02"), row(properties="K\x01" + "v" * 32765 + "\x02"),
               row(topic="é" * 100)])
    ok, reasons = validate_batch(t)
    assert ok.tolist() == [True, False, False]
    assert "properties is 32768 bytes, over the limit of 32767" in reasons[1]
    assert "topic is 200 bytes, over the limit of 127" in reasons[2]
    with pytest.raises(FieldLimitError, match="row 1"):
        encode_batch(t)


def test_bad_host_bytes_and_contradicting_flags_are_refused() -> None:
    t = table([row(), row(born_host=b"\x01\x02\x03"), row(sys_flag=0x20)])
    ok, reasons = validate_batch(t)
    assert ok.tolist() == [True, False, False]
    assert "born_host is 3 bytes" in reasons[1] and "STOREHOSTADDRESS_V6_FLAG" in reasons[2]
    with pytest.raises(InvalidMessageError, match="row 1"):
        encode_batch(t)


def test_int_columns_out_of_range_are_refused_not_wrapped() -> None:
    t = table([row()]).set_column(1, "queue_id", pa.array([2**40], pa.int64()))
    with pytest.raises(InvalidMessageError, match="queue_id"):
        encode_batch(t)


def test_an_empty_table_gives_an_empty_batch() -> None:
    batch = encode_batch(table([]))
    assert len(batch) == 0 and batch.nbytes == 0


@pytest.mark.parametrize("lengths", [[0, 7, 7, 30], list(range(0, 300, 3)), [64]])
def test_bodies_grouped_by_length_get_their_own_crc(lengths: list[int]) -> None:
    rng = np.random.default_rng(len(lengths))
    rows = [row(body=rng.integers(0, 256, lengths[i % len(lengths)], dtype=np.uint8).tobytes(), flag=i)
            for i in range(400)]
    batch = encode_batch(table(rows))
    assert [bytes(batch.record(i)) for i in range(len(rows))] == [single(r) for r in rows]
