"""Kafka record -> RocketMQ message mapping, on Arrow batches, without Spark: the general path's rules
(the C pass is held to them by tests/test_direct_encode*.py)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.encode.mapping import KAFKA_SCHEMA, MappingConfig, MappingConfigError, uniq_key
from ingest.encode.mapping_batch import map_kafka_batch
from ingest.encode.restore import RestoreError, kafka_headers, kafka_key, kafka_value
from sink.handover.schema import VALUE_EMPTY, VALUE_IN_BODY, VALUE_NULL
from store.format import EMPTY_VALUE_BODY
from store.format.hosts import HostAddress
from store.format.properties import string_to_properties, tags_code
from tests.helpers.batches import TS, kafka_rows

pytestmark = pytest.mark.unit


def one(batch: pa.RecordBatch, cfg: MappingConfig | None = None) -> dict:
    return map_kafka_batch(batch, cfg or MappingConfig()).to_pylist()[0]


def test_a_record_becomes_a_message_with_its_source_coordinates() -> None:
    row = one(kafka_rows({"key": b"order-7", "value": b"payload", "partition": 3, "offset": 41,
                          "headers": [{"key": "TAGS", "value": b"TagA"}, {"key": "trace", "value": b"abc"}]}))
    props = string_to_properties(row["properties"])
    assert row["dead_reason"] is None
    assert (row["topic"], row["queue_id"], row["body"]) == ("orders", 3, b"payload")
    assert props == {"KEYS": "order-7", "TAGS": "TagA", "trace": "abc", "KAFKA_TOPIC": "orders",
                     "KAFKA_PARTITION": "3", "KAFKA_OFFSET": "41", "UNIQ_KEY": uniq_key("orders", 3, 41)}
    assert row["tags"] == "TagA"
    assert row["born_timestamp"] == int(TS.timestamp() * 1000)
    assert row["store_host"] == HostAddress.parse("127.0.0.1:10911").to_bytes()
    assert (row["raw_key"], row["raw_value"], row["raw_headers"]) == (None, None, None)


def test_uniq_key_is_crc32_of_the_topic_then_partition_then_offset_in_upper_hex() -> None:
    # crc32(b"orders") = 0xE52FFDEE; partition 3 and offset 41 (0x29), big-endian
    assert uniq_key("orders", 3, 41) == "E52FFDEE" "00000003" "0000000000000029"
    assert uniq_key("orders", -1, -1) == "E52FFDEE" "FFFFFFFF" "FFFFFFFFFFFFFFFF"   # as Java's int and long


def test_topic_map_and_born_host_header() -> None:
    cfg = MappingConfig(topic_map={"orders": "OrderTopic"})
    row = one(kafka_rows({"headers": [{"key": "bornHost", "value": b"10.1.2.3:5555"}]}), cfg)
    assert row["topic"] == "OrderTopic"
    assert row["born_host"] == HostAddress.parse("10.1.2.3:5555").to_bytes()
    assert "bornHost" not in string_to_properties(row["properties"])


def test_key_hash_queues_follow_rocketmq_select_by_hash() -> None:
    cfg = MappingConfig(queue_mode="key-hash", queue_count=8)
    row = one(kafka_rows({"key": b"customer-42", "partition": 5}), cfg)
    assert row["queue_id"] == abs(tags_code("customer-42")) % 8


def test_one_of_n_broker_groups_stores_partition_p_as_queue_p_div_n() -> None:
    batch = kafka_rows(*[{"partition": p, "offset": p} for p in (1, 3, 5, 7, 9)])
    rows = map_kafka_batch(batch, MappingConfig(broker_groups=2)).to_pylist()
    assert [r["queue_id"] for r in rows] == [0, 1, 2, 3, 4]
    assert [string_to_properties(r["properties"])["KAFKA_PARTITION"] for r in rows] == ["1", "3", "5", "7", "9"]
    with pytest.raises(MappingConfigError, match="broker groups 0"):
        MappingConfig(broker_groups=0)


def test_binary_key_is_kept_losslessly_not_as_keys() -> None:
    props = string_to_properties(one(kafka_rows({"key": b"\xff\x00\x01"}))["properties"])
    assert "KEYS" not in props and props["KAFKA_KEY_BASE64"] == "/wAB"


def test_a_header_cannot_forge_the_source_coordinates() -> None:
    props = string_to_properties(one(kafka_rows({"offset": 9, "headers": [
        {"key": "KAFKA_OFFSET", "value": b"1"}]}))["properties"])
    assert props["KAFKA_OFFSET"] == "9"
    assert kafka_headers(props) == [("KAFKA_OFFSET", b"1")]


def test_plain_headers_are_properties_of_their_own() -> None:
    props = string_to_properties(one(kafka_rows({"headers": [
        {"key": "TAGS", "value": b"TagA"}, {"key": "trace", "value": "caf\u00e9".encode()}]}))["properties"])
    assert "KAFKA_HEADERS" not in props
    assert kafka_headers(props) == [("TAGS", b"TagA"), ("trace", "caf\u00e9".encode())]


@pytest.mark.parametrize("headers", [
    [("h", b"1"), ("h", b"2")],
    [("h", None), ("x", b"1")],
    [("h", b"")],
    [("h", b"\xff\xfe"), ("ok", b"1")],
    [("h", b"a\x02b")],
    [("a\x01b", b"v")],
    [("KEYS", b"forged"), ("UNIQ_KEY", b"u")],
    [("bornHost", b"10.0.0.1:5"), ("t", b"1")],
], ids=["repeated", "null", "empty", "not-utf8", "separator-value", "separator-name", "reserved", "born-host"])
def test_headers_a_property_would_lose_are_all_kept_in_kafka_headers(headers: list) -> None:
    row = one(kafka_rows({"key": b"k", "headers": [{"key": k, "value": v} for k, v in headers]}))
    assert row["dead_reason"] is None
    props = string_to_properties(row["properties"])
    assert kafka_headers(props) == headers
    assert props["KEYS"] == "k" and props["KAFKA_OFFSET"] == "0"


def test_null_and_empty_values_get_a_one_byte_body_and_a_property_saying_which() -> None:
    tomb, empty, full = map_kafka_batch(kafka_rows({"value": None}, {"value": b"", "offset": 1},
                                                   {"value": b"\x00", "offset": 2}), MappingConfig()).to_pylist()
    # RocketMQ has no empty body (its 4.9 consumers fail on one): the marker stands in, the property says for what
    assert tomb["body"] == empty["body"] == full["body"] == EMPTY_VALUE_BODY
    props = [string_to_properties(r["properties"]) for r in (tomb, empty, full)]
    assert (props[0].get("KAFKA_VALUE_NULL"), props[0].get("KAFKA_VALUE_EMPTY")) == ("true", None)
    assert (props[1].get("KAFKA_VALUE_NULL"), props[1].get("KAFKA_VALUE_EMPTY")) == (None, "true")
    assert "KAFKA_VALUE_NULL" not in props[2] and "KAFKA_VALUE_EMPTY" not in props[2]
    assert [r["value_kind"] for r in (tomb, empty, full)] == [VALUE_NULL, VALUE_EMPTY, VALUE_IN_BODY]
    assert [kafka_value(r["body"], p) for r, p in zip((tomb, empty, full), props)] == [None, b"", b"\x00"]


def test_stores_written_before_the_marker_still_read_back() -> None:
    # an empty body: a tombstone with KAFKA_VALUE_NULL, a 0-byte value without
    assert kafka_value(b"", {"KAFKA_VALUE_NULL": "true"}) is None
    assert kafka_value(b"", {}) == b""


def test_a_marker_property_on_another_body_is_not_restored_silently() -> None:
    with pytest.raises(RestoreError, match="KAFKA_VALUE_EMPTY=true, but the body is 3 bytes"):
        kafka_value(b"abc", {"KAFKA_VALUE_EMPTY": "true"})


def test_an_empty_envelope_body_gets_the_marker_too() -> None:
    row = one(kafka_rows({"value": b'{"body": ""}'}), MappingConfig(envelope=True))
    assert row["body"] == EMPTY_VALUE_BODY and row["value_kind"] == VALUE_EMPTY
    assert string_to_properties(row["properties"])["KAFKA_VALUE_EMPTY"] == "true"


_HEADER_BYTES = st.one_of(st.none(), st.binary(max_size=5), st.text(max_size=5).map(str.encode),
                          st.sampled_from([b"\x01", b"\x02", b"a\x02"]))


@settings(max_examples=200, deadline=None)
@given(key=st.one_of(st.none(), st.binary(max_size=6), st.text(max_size=6).map(str.encode)),
       value=st.one_of(st.none(), st.binary(max_size=6)),
       headers=st.lists(st.tuples(st.one_of(st.text(max_size=5), st.sampled_from(["KEYS", "TAGS", "DELAY"])),
                                  _HEADER_BYTES), max_size=4))
def test_key_value_and_headers_read_back_as_they_were(key: bytes | None, value: bytes | None,
                                                      headers: list) -> None:
    headers = [(k, v) for k, v in headers if k != "DELAY" or (v or b"").isdigit()]   # DELAY must be a level
    row = one(kafka_rows({"key": key, "value": value, "headers": [{"key": k, "value": v} for k, v in headers]}))
    if row["dead_reason"] is not None:
        return          # a record RocketMQ cannot hold (say, a DELAY level out of range) is a dead letter
    props = string_to_properties(row["properties"])
    assert kafka_key(props) == (key or None)
    assert kafka_value(row["body"], props) == value
    assert kafka_headers(props) == headers


@pytest.mark.parametrize("record, reason", [
    ({"value": b"x" * 101}, "body is 101 bytes, over the limit of 100"),
    ({"topic": "bad topic"}, "characters outside"),
    ({"headers": [{"key": "big", "value": b"y" * 33000}]}, "over the limit of 32767"),
])
def test_bad_records_are_dead_letters_with_a_reason_and_the_raw_record(record: dict, reason: str) -> None:
    row = one(kafka_rows({"key": b"k", **record}), MappingConfig(max_message_size=100))
    assert reason in row["dead_reason"]
    assert row["raw_key"] == b"k"
    assert row["raw_value"] == record.get("value", b"v")


def test_a_null_header_or_a_header_without_a_name_makes_a_dead_letter_not_a_crash() -> None:
    # Kafka sends neither; a parquet export from another tool may hold both (a null list element,
    # a null name): a record that cannot be Kafka's goes to the dead letters, as it came
    at = KAFKA_SCHEMA.get_field_index("headers")
    # the null element's fields hold a name and a value of their own, which are not a header's
    elements = pa.StructArray.from_arrays([pa.array(["x", "a"]), pa.array([b"0", b"1"])], names=["key", "value"],
                                          mask=pa.array([True, False]))
    null_header = pa.ListArray.from_arrays(pa.array([0, 2], pa.int32()), elements).cast(KAFKA_SCHEMA.field(at).type)
    rows = pa.concat_batches([
        kafka_rows({"offset": 0}),
        kafka_rows({"offset": 1}).set_column(at, KAFKA_SCHEMA.field(at), null_header),
        kafka_rows({"offset": 2, "headers": [{"key": "ok", "value": b"1"}, {"key": None, "value": b"x"}]}),
    ])
    out = map_kafka_batch(rows, MappingConfig()).to_pylist()
    assert [r["dead_reason"] for r in out] == [
        None, "header 0 is null (a Kafka header has a name and a value or null value)",
        "header 1 has a null name (a Kafka header's name is text)"]
    assert out[1]["raw_headers"] == [None, {"key": "a", "value": b"1"}]


def test_envelope_sets_rocketmq_fields() -> None:
    env = {"topic": "Payments", "tags": "paid", "keys": ["a", "b"], "flag": 7,
           "properties": {"region": "eu"}, "body": "hello"}
    row = one(kafka_rows({"value": json.dumps(env).encode()}), MappingConfig(envelope=True))
    props = string_to_properties(row["properties"])
    assert (row["topic"], row["flag"], row["body"], row["tags"]) == ("Payments", 7, b"hello", "paid")
    assert props["KEYS"] == "a b" and props["TAGS"] == "paid" and props["region"] == "eu"


def test_envelope_that_does_not_parse_is_a_dead_letter() -> None:
    row = one(kafka_rows({"value": b"{not json"}), MappingConfig(envelope=True))
    assert row["dead_reason"].startswith("envelope is not JSON")


def test_order_and_row_count_are_kept() -> None:
    rows = [{"offset": i, "partition": i % 2, "value": b"v" * (i % 5)} for i in range(50)]
    out = map_kafka_batch(kafka_rows(*rows), MappingConfig()).to_pylist()
    assert [r["kafka_offset"] for r in out] == list(range(50))


def test_bad_settings_are_refused() -> None:
    with pytest.raises(MappingConfigError, match="queue mode"):
        MappingConfig(queue_mode="round-robin")
    with pytest.raises(MappingConfigError, match="store_host"):
        MappingConfig(store_host="nowhere")
