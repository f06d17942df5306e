"""Encoded batches packed one per row for their trip through Spark, and back in order."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ingest.encode.mapping import MappingConfig
from ingest.encode.prepare import encode_and_pack, map_and_encode
from sink.handover.packed import CHUNK, PACKED_SCHEMA, PackedBatchError, gathered, pack, pack_batches, unpack
from sink.handover.schema import ENCODED_SCHEMA
from store.format.codec import CodecConfig
from tests.helpers.batches import encoded, kafka_rows

pytestmark = pytest.mark.unit


def test_batches_come_back_whole_and_in_order_whatever_the_chunking_of_the_column() -> None:
    parts = [encoded(0, 5), encoded(5, 1), encoded(6, 40)]
    rows = [pack(b) for b in parts]
    assert all(r.schema == PACKED_SCHEMA and r.num_rows == 1 for r in rows)
    table = pa.Table.from_batches([rows[0], rows[1]]).combine_chunks()   # one chunk of two rows ...
    table = pa.concat_tables([table, pa.Table.from_batches([rows[2]])])  # ... and a chunk of one
    out = unpack(table, ENCODED_SCHEMA)
    assert out.equals(pa.Table.from_batches(parts, schema=ENCODED_SCHEMA))
    assert out.column("kafka_offset").to_pylist() == list(range(46))


def test_a_task_packs_its_small_batches_gathered_into_one_row() -> None:
    batches = [kafka_rows({"offset": 0}), kafka_rows()[:0], kafka_rows({"offset": 1}, {"offset": 2})]
    rows = list(encode_and_pack(iter(batches), MappingConfig(), CodecConfig()))
    assert [unpack(pa.Table.from_batches([r]), ENCODED_SCHEMA).num_rows for r in rows] == [3]
    assert unpack(pa.Table.from_batches(rows), ENCODED_SCHEMA).column("kafka_offset").to_pylist() == [0, 1, 2]
    assert list(pack_batches(iter([encoded(0, 1).slice(0, 0)]))) == []
    assert unpack(pa.table({CHUNK: pa.array([], pa.binary())}), ENCODED_SCHEMA).num_rows == 0


def test_gathering_keeps_the_order_and_stops_at_its_row_and_byte_bounds() -> None:
    parts = [encoded(i * 5, 5) for i in range(7)] + [encoded(35, 30), encoded(65, 1)]
    joined = list(gathered(iter(parts), max_rows=12))
    assert [b.num_rows for b in joined] == [10, 10, 10, 5, 30, 1]   # a batch over the bound goes alone
    assert pa.Table.from_batches(joined).column("kafka_offset").to_pylist() == list(range(66))
    assert [b.num_rows for b in gathered(iter(parts[:3]), max_bytes=parts[0].nbytes + 1)] == [5, 5, 5]


def test_a_chunk_of_other_columns_is_refused_with_its_columns_named() -> None:
    stray = pack(pa.record_batch({"x": [1, 2]}))
    with pytest.raises(PackedBatchError, match=r"\['x'\].*another version"):
        unpack(pa.Table.from_batches([stray]), ENCODED_SCHEMA)


def test_a_packed_value_is_read_where_it_lies_not_copied() -> None:
    from sink.handover.packed import value_buffer

    for typ in (pa.binary(), pa.large_binary()):
        column = pa.array([b"first", b"x" * 100_000, b"third"], typ).slice(1)
        data = value_buffer(column, 0)
        assert data.to_pybytes() == b"x" * 100_000 and value_buffer(column, 1).to_pybytes() == b"third"
        assert data.address == column.buffers()[2].address + 5, "a view of the column's bytes"


def test_a_packed_row_says_how_many_records_bytes_and_dead_letters_it_holds(tmp_path) -> None:
    from sink.handover import spool_task as spool
    from sink.handover.spool import Spool

    store = tmp_path / "store"
    store.mkdir()
    spooler = Spool.for_store(str(store))
    from sink.handover.packed import COUNT_COLUMNS

    rows = kafka_rows(*[{"offset": i, "value": b"v" * 10} for i in range(5)], {"offset": 5, "value": b"w" * 500})
    batch = map_and_encode(rows, MappingConfig(max_message_size=100), CodecConfig())
    size = sum(len(r) for r in batch.column("record").to_pylist() if r is not None)
    for row in (pack(batch), spool.write(batch, spooler.target)):
        assert [row.column(c)[0].as_py() for c in COUNT_COLUMNS] == [5, size, 1]
    assert [pack(pa.record_batch({"x": [1, 2]})).column(c)[0].as_py() for c in COUNT_COLUMNS] == [2, 0, 0]
