"""The C pass over Kafka rows already in Arrow columns (Spark's Kafka source, a replayed export) gives,
row for row and byte for byte, what the general path (map, encode) gives: the rows it covers encoded by
the kernel, every other one handed back, mapped the general way and put back in its place."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.encode.direct_encode import DirectEncoder
from ingest.encode.mapping import PROBLEM, MappingConfig
from ingest.encode.prepare import map_and_encode, map_and_encode_batches, partition_runs
from store.format.codec import CodecConfig
from tests.helpers.direct_encode import (
    RECORDS,
    MAPPINGS,
    PARTITION,
    SCHEMA,
    TOPIC,
    Record,
    assert_same,
    plain_records,
)

pytestmark = [pytest.mark.unit]

T0 = 1_700_000_000_000_000      # microseconds


def kafka_rows(records: list[Record], first: int = 0, topic: str = TOPIC, partition: int = PARTITION,
               problem: dict[int, str] | None = None, timestamps: list[int | None] | None = None) -> pa.RecordBatch:
    """``records`` (key, value, headers) as Spark's Kafka columns at offsets ``first``, ``first`` + 1, ...;
    ``problem``: a reason for some rows (a ``problem`` column as a replayed export has)."""
    rows = [{"key": key, "value": value, "topic": topic, "partition": partition, "offset": first + i,
             "timestamp": T0 + 1237 * i if timestamps is None else timestamps[i], "timestampType": 0,
             "headers": [{"key": k, "value": v} for k, v in headers]}
            for i, (key, value, headers) in enumerate(records)]
    batch = pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
    if problem is None:
        return batch
    reasons = pa.array([problem.get(i) for i in range(len(records))], pa.string())
    return pa.RecordBatch.from_arrays([*batch.columns, reasons], schema=SCHEMA.append(pa.field(PROBLEM, pa.string())))


def both_ways(rows: pa.RecordBatch, mapping: MappingConfig = MappingConfig(), codec: CodecConfig = CodecConfig()
              ) -> tuple[pa.RecordBatch | None, pa.RecordBatch, DirectEncoder]:
    encoder = DirectEncoder.for_partition(TOPIC, PARTITION, mapping, codec)
    assert encoder is not None
    direct = encoder.encode_rows(rows, lambda rest: map_and_encode(rest, mapping, codec))
    return direct, map_and_encode(rows, mapping, codec), encoder


def test_plain_rows_are_encoded_exactly_as_the_general_path_does() -> None:
    direct, general, encoder = both_ways(kafka_rows(plain_records(random.Random(5), 600), first=40))
    assert_same(direct, general)
    assert direct.num_rows == 600 and encoder.direct_records > 300


@MAPPINGS
def test_mapping_settings_give_the_same_records(mapping: MappingConfig) -> None:
    direct, general, _ = both_ways(kafka_rows(plain_records(random.Random(7), 400)), mapping)
    assert_same(direct, general)


@pytest.mark.parametrize("record, reason", [
    ((b"caf\xe9", b"v", []), "key not UTF-8 text"),
    ((None, b"v", [("a\x01b", b"v")]), "header name not UTF-8 text"),
    ((None, b"v", [("trace", None)]), "header value null, empty or not UTF-8 text"),
    ((None, b"v", [("trace", b"1"), ("trace", b"3")]), "header name reserved or repeated"),
    ((None, b"v", [("h%d" % i, b"v") for i in range(40)]), "header name reserved or repeated"),
    ((None, b"v", [("DELAY", b"3")]), "born-host or DELAY header"),
    ((None, b"x" * 200, []), "record over a limit"),
    ((None, b"v", [("h", b"x" * 40000)]), "record over a limit"),
], ids=["latin1-key", "separator-header-name", "null-header-value", "repeated-header", "many-headers", "delay",
        "body-over-max", "properties-over-max"])
def test_a_row_the_kernel_does_not_cover_is_handed_back_and_put_back_in_its_place(record: Record,
                                                                                reason: str) -> None:
    filler = [(b"k%d" % i, b"body", [("TAGS", "T")]) for i in range(10)]
    direct, general, encoder = both_ways(kafka_rows(filler + [record] + filler), MappingConfig(max_message_size=150))
    assert_same(direct, general)
    assert encoder.fallbacks == {reason: 1}
    assert encoder.direct_records == 20


def test_rows_with_a_reason_of_their_own_or_no_timestamp_are_the_general_paths() -> None:
    records = [(b"k%d" % i, b"body", []) for i in range(8)]
    rows = kafka_rows(records, problem={2: "line 3: key is not base64"},
                      timestamps=[T0, T0, T0, None, T0, T0, T0, T0])
    direct, general, encoder = both_ways(rows)
    assert_same(direct, general)
    assert encoder.fallbacks == {"a row with a reason of its own or a null field": 2}
    assert general.column("dead_reason").to_pylist()[-1] == "line 3: key is not base64"


def test_a_null_header_is_handed_back_and_becomes_the_general_paths_dead_letter() -> None:
    rows = kafka_rows([(b"k%d" % i, b"body", [("h", b"1")]) for i in range(4)])
    headers = pa.array([[{"key": "h", "value": b"1"}], [None], [{"key": None, "value": b"1"}], []],
                       rows.schema.field("headers").type)
    rows = rows.set_column(rows.schema.get_field_index("headers"), rows.schema.field("headers"), headers)
    direct, general, _ = both_ways(rows)
    assert_same(direct, general)
    assert general.column("dead_reason").to_pylist()[-2:] == [
        "header 0 is null (a Kafka header has a name and a value or null value)",
        "header 0 has a null name (a Kafka header's name is text)"]


def test_timestamps_before_1970_and_between_milliseconds_are_divided_as_the_mapping_divides() -> None:
    records = [(b"k", b"v", [])] * 4
    direct, general, _ = both_ways(kafka_rows(records, timestamps=[-1_500, -1, 999, 1_001]))
    assert_same(direct, general)


def test_a_slice_of_the_columns_is_read_from_its_own_first_row() -> None:
    rows = kafka_rows(plain_records(random.Random(9), 100))
    direct, general, _ = both_ways(rows.slice(37, 40))
    assert_same(direct, general)
    assert direct.column("kafka_offset").to_pylist() == list(range(37, 77))


def test_headers_whose_elements_start_inside_their_child_array_are_read_from_there() -> None:
    rows = kafka_rows([(b"k%d" % i, b"v%d" % i, [("h%d" % j, b"x%d" % j) for j in range(i % 3)]) for i in range(30)])
    headers = rows.column("headers")
    padding = pa.array([{"key": "zz", "value": b"zz"}] * 5, headers.type.value_type)
    child = pa.concat_arrays([padding, headers.values]).slice(5)
    moved = pa.ListArray.from_arrays(headers.offsets, child)
    assert moved.values.offset == 5 and moved.equals(headers)
    direct, general, encoder = both_ways(pa.RecordBatch.from_arrays(
        [moved if name == "headers" else rows.column(name) for name in rows.schema.names], schema=rows.schema))
    assert_same(direct, general)
    assert encoder.direct_records == 30


def test_columns_of_spark_s_large_variable_types_are_read_as_the_usual_ones() -> None:
    rows = kafka_rows([(b"k%d" % i, b"body", [("TAGS", "T"), ("trace", b"t%d" % i)]) for i in range(50)])
    large = {"key": pa.large_binary(), "value": pa.large_binary(),
             "headers": pa.large_list(pa.struct([("key", pa.large_string()), ("value", pa.large_binary())]))}
    wide = pa.RecordBatch.from_arrays([rows.column(f.name).cast(large.get(f.name, f.type)) for f in rows.schema],
                                      names=rows.schema.names)
    direct, _, encoder = both_ways(wide)
    assert_same(direct, map_and_encode(rows, MappingConfig(), CodecConfig()))
    assert encoder.direct_records == 50


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=RECORDS, key_hash=st.booleans(), start=st.integers(0, 3), prop_crc=st.booleans())
def test_any_rows_come_out_as_the_general_path_makes_them(records: list[Record], key_hash: bool, start: int,
                                                          prop_crc: bool) -> None:
    mapping = MappingConfig(queue_mode="key-hash", queue_count=5) if key_hash else MappingConfig()
    rows = kafka_rows(records).slice(min(start, len(records) - 1))
    direct, general, encoder = both_ways(rows, mapping, CodecConfig(enabled_append_prop_crc=prop_crc))
    assert_same(direct, general)
    assert encoder.direct_records + sum(encoder.fallbacks.values()) == rows.num_rows


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    return pa.concat_batches(batches)


def test_a_task_encodes_each_partition_of_a_batch_in_source_order_as_its_own_run() -> None:
    rnd = random.Random(12)
    runs = [kafka_rows(plain_records(rnd, 50), 0, "orders", 0), kafka_rows(plain_records(rnd, 30), 7, "orders", 1),
            kafka_rows(plain_records(rnd, 20), 3, "payments", 0)]
    batch = _concat(runs)
    assert [tp for _, tp in partition_runs(batch)] == [("orders", 0), ("orders", 1), ("payments", 0)]
    codec, mapping = CodecConfig(), MappingConfig()
    got = list(map_and_encode_batches(iter([batch]), mapping, codec))
    assert len(got) == 3
    for out, run in zip(got, runs):
        assert_same(out, map_and_encode(run, mapping, codec))


def test_interleaved_partitions_go_the_general_way_whole() -> None:
    rnd = random.Random(13)
    a, b = kafka_rows(plain_records(rnd, 200), 0, "orders", 0), kafka_rows(plain_records(rnd, 200), 0, "orders", 1)
    interleaved = _concat([a.slice(i, 1) if i % 2 == 0 else b.slice(i, 1) for i in range(200)])
    assert partition_runs(interleaved) == [(interleaved, None)]
    (out,) = map_and_encode_batches(iter([interleaved]), MappingConfig(), CodecConfig())
    assert_same(out, map_and_encode(interleaved, MappingConfig(), CodecConfig()))


def test_a_batch_with_a_row_of_no_partition_is_not_cut() -> None:
    a = kafka_rows(plain_records(random.Random(14), 20))
    no_partition = pa.RecordBatch.from_arrays(
        [*a.columns[:3], pa.array([None] + [0] * 19, pa.int32()), *a.columns[4:]], schema=a.schema)
    assert partition_runs(no_partition) == [(no_partition, None)]
