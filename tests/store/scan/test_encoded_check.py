"""Records encoded elsewhere are checked as recovery checks a segment before the store takes them
(store.check_encoded): framing, lengths, BODYCRC, and the columns against the records. Every test
runs with the C checks (store/scan/_record_check.c) and with the numpy oracle's
(tests/oracles/encoded_check.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from store import InvalidMessageError, check_encoded
from store.format.batch_codec import encode_batch_to_arrow
from store.scan import encoded_check
from tests.helpers.batches import corrupt
from tests.oracles import encoded_check as oracle

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True, params=["c", "numpy"])
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "numpy":
        monkeypatch.setattr(encoded_check, "_records", oracle.records)
    return request.param


def records(n: int = 6, v6: bool = False, topics: tuple[str, str] = ("orders", "payments")) -> pa.Table:
    born = b"\0" * 15 + b"\x01" + b"\0\0\0\x07" if v6 else b"\x7f\0\0\x01\0\0\0\x07"
    table = pa.table({
        "topic": list(topics) * (n // 2),
        "queue_id": pa.array(range(n), pa.int32()),
        "flag": pa.array([0] * n, pa.int32()),
        "body": [b"x" * (i * 37) for i in range(n)],          # an empty one, and longer ones
        "properties": ["KEYS\x01k%d\x02" % i for i in range(n)],
        "sys_flag": pa.array([0] * n, pa.int32()),
        "born_timestamp": pa.array([1_700_000_000_000] * n, pa.int64()),
        "born_host": [born] * n,
        "store_host": [b"\x7f\0\0\x01\0\0\x2a\x8f"] * n,
        "reconsume_times": pa.array([0] * n, pa.int32()),
        "prepared_transaction_offset": pa.array([0] * n, pa.int64()),
    })
    return encode_batch_to_arrow(table)


@pytest.mark.parametrize("v6", [False, True])
def test_records_as_the_encoder_makes_them_pass(v6: bool) -> None:
    check_encoded(records(v6=v6))
    check_encoded(pa.concat_tables([records(), records()]))     # row numbers run across chunks


def test_a_record_shorter_than_any_is_named() -> None:
    table = records()
    short = pa.array([b"\0" * 40, *table.column("record").to_pylist()[1:]], pa.binary())
    with pytest.raises(InvalidMessageError, match=r"row 0 \(a record of 40 bytes\): shorter than any record"):
        check_encoded(table.set_column(0, "record", short))


@pytest.mark.parametrize("at, says", [(0, "TOTALSIZE"), (5, "MAGICCODE"), (10, "BODYCRC"), (84, "BODYLENGTH")])
def test_a_damaged_record_is_named_with_what_is_wrong(at: int, says: str) -> None:
    batch = records().to_batches()[0]
    with pytest.raises(InvalidMessageError, match=rf"row 4 \(a record of \d+ bytes\): {says}"):
        check_encoded(corrupt(batch, 4, at))


def test_the_store_owned_fields_are_not_checked_before_the_append() -> None:
    batch = records().to_batches()[0]
    check_encoded(corrupt(corrupt(batch, 2, 20), 2, 28))     # QUEUEOFFSET and PHYSICALOFFSET


def test_a_column_that_disagrees_with_its_record_is_named() -> None:
    with pytest.raises(InvalidMessageError, match="row 3 .*queue_id column says 9 but the record holds 3"):
        check_encoded(records().set_column(2, "queue_id", pa.array([0, 1, 2, 9, 4, 5], pa.int32())))
    table = records()
    wrong = ["orders", "payments", "orders", "payments", "orders", "paymentz"]
    with pytest.raises(InvalidMessageError, match="row 5 .*topic column says 'paymentz' but the record holds 'payments'"):
        check_encoded(table.set_column(1, "topic", pa.array(wrong)))
    longer = ["orders", "payments", "orders!", "payments", "orders", "payments"]
    with pytest.raises(InvalidMessageError, match="row 2 .*topic column says 'orders!'"):
        check_encoded(table.set_column(1, "topic", pa.array(longer)))
    flags = table.column("sys_flag").to_numpy().copy()
    flags[5] ^= 8
    with pytest.raises(InvalidMessageError, match="row 5 .*sys_flag column"):
        check_encoded(table.set_column(3, "sys_flag", pa.array(flags, pa.int32())))


def test_long_topics_are_compared_byte_for_byte() -> None:
    long = ("t" * 300, "u" * 299 + "v")          # version-2 records (a topic over 127 bytes)
    table = records(topics=long)
    check_encoded(table)
    wrong = [*long, *long, long[0], "u" * 299 + "w"]
    with pytest.raises(InvalidMessageError, match="row 5 .*topic column says 'uuu"):
        check_encoded(table.set_column(1, "topic", pa.array(wrong)))


def test_rows_without_a_record_are_dead_letters_with_nothing_to_check() -> None:
    table = records()
    rec = table.column("record").to_pylist()
    check_encoded(table.set_column(0, "record", pa.array([None, *rec[1:3], None, *rec[4:]], pa.binary())))
    check_encoded(table.set_column(0, "record", pa.nulls(len(rec), pa.binary())))
    assert np.all(table.column("queue_id").to_numpy() == np.arange(6))


@pytest.mark.parametrize("kernel", ["c"], indirect=True)     # the C against the oracle, not the oracle twice
def test_the_c_checks_find_what_the_numpy_ones_find(kernel: str) -> None:
    from store.format.batch_columns import binary_parts

    rng = np.random.default_rng(40)
    for v6, topics in ((False, ("orders", "payments")), (True, ("t" * 200, "u"))):
        batch = records(8, v6=v6, topics=topics).to_batches()[0]
        size = int(np.diff(binary_parts(batch.column("record"))[0]).min())
        for _ in range(150):
            row, at = int(rng.integers(8)), int(rng.integers(size))
            offs, values = binary_parts(corrupt(batch, row, at).column("record"))
            starts, sizes = offs[:-1], np.diff(offs)
            first_c, cols_c = encoded_check._records(values, starts, sizes)
            first_np, cols_np = oracle.records(values, starts, sizes)
            assert first_c == first_np, (row, at)
            for name in ("queue_id", "sys_flag", "topic_pos", "topic_len"):
                assert np.array_equal(getattr(cols_c, name)[:first_c], getattr(cols_np, name)[:first_c]), name
