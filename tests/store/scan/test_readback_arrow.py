"""StoreReader as Arrow: every golden store read back equals RocketMQ's reference decoding; the
properties split equals string2messageProperties; reads stop at the commit point, follow the
filters, and fail on damage with the offset instead of skipping."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store import CorruptRecordError, StoreReader
from store.scan.arrow_text import parse_properties, properties_of
from store.scan.record_batch import READBACK_SCHEMA
from tests.oracles import properties_split as split_oracle
from tests.helpers.readback_expect import assert_rows_equal, expected_rows, golden_root, golden_stores

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("case", golden_stores())
@pytest.mark.parametrize("zero_copy", [False, True])
def test_each_golden_store_read_as_arrow_is_its_reference_decoding(case: str, zero_copy: bool) -> None:
    expected = expected_rows(case)
    with StoreReader.open(golden_root() / case) as reader:
        batches = list(reader.record_batches(batch_size=5, zero_copy=zero_copy))
    assert batches and all(b.num_rows <= 5 for b in batches)
    names = [b.schema.names for b in batches]
    assert all(n == READBACK_SCHEMA.names for n in names)
    rows = [r for b in batches for r in b.to_pylist()]
    assert_rows_equal(rows, expected)


@pytest.mark.parametrize("case", golden_stores())
def test_ranges_of_a_golden_store_cover_each_record_once(case: str) -> None:
    expected = expected_rows(case)
    with StoreReader.open(golden_root() / case) as reader:
        ranges = reader.read_ranges(max_bytes=1000)
        rows = [r for lo, hi in ranges for b in reader.record_batches(lo, hi) for r in b.to_pylist()]
    assert len(ranges) > len({lo // 4096 for lo, _ in ranges}), "no segment was cut in pieces"
    assert_rows_equal(rows, expected)


def _split_reference(blobs: list[bytes]) -> list[dict[str, str]]:
    return [properties_of(b) for b in blobs]


def _laid_out(blobs: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The blobs in one buffer as a segment holds PROPERTIES: never adjacent, other bytes between."""
    buf = b"#".join(blobs)
    pos, at = [], 0
    for b in blobs:
        pos.append(at)
        at += len(b) + 1
    return np.frombuffer(buf, np.uint8), np.array(pos, np.int64), np.array([len(b) for b in blobs], np.int64)


def _split(blobs: list[bytes]) -> list[dict[str, str]]:
    props = parse_properties(*_laid_out(blobs))
    return [dict(x) for x in props.map.to_pylist()]


SPLIT_CASES = [b"", b"a\x01b\x02", b"a\x01b", b"\x01b\x02", b"a\x01\x02", b"noname\x02k\x01v\x02",
               b"a\x011\x02a\x012\x02", b"k\x01v\x01w\x02", b"\x02\x02k\x01v", "ü\x01€\x02".encode(),
               b"bad\x01\xff\xfe\x02ok\x01\xe2\x02", b"\x02", b"\x01", b"x\x01y\x02\x02z\x01\x02x\x01q",
               b"".join(b"k%d\x01v%d\x02" % (i % 23, i) for i in range(100)),   # many pairs, names repeated
               # long runs without a separator (read a word at a time), bad or good UTF-8 inside them
               b"key\x01" + b"abcdefg\xff" * 3 + b"\x02" + "ü".encode() * 12 + b"\x01" + b"x" * 17,
               b"abcdefghijklmnop\x01qrstuvwxyz012345\x02ABCDEFGHIJKLMNOP\x01\xe2\x82\xacQRSTUVWXYZ"]


def test_the_properties_split_is_string2messageProperties() -> None:
    assert _split(SPLIT_CASES) == _split_reference(SPLIT_CASES)
    for blob in SPLIT_CASES:        # alone: no other record's bytes decide whether text is checked
        assert _split([blob]) == _split_reference([blob]), blob
    rng = random.Random(28)
    alphabet = [b"a", b"b", b"K", b"\x01", b"\x02", b"\xc3\xbc", b"\xff", b"TAGS", b"a_long_run_of_text"]
    fuzz = [b"".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 30))) for _ in range(3000)]
    assert _split(fuzz) == _split_reference(fuzz)


_PIECES = st.sampled_from([b"a", b"b", b"KEYS", b"TAGS", b"\x01", b"\x02", b"\xc3\xbc", b"\xff", b"\xe2\x82",
                           b"\xf0\x9f\x98\x80", b"\x00", b"#", b"0123456789abcdef", b"\xc3\xbc" * 5])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_PIECES, max_size=40).map(b"".join), max_size=30))
def test_the_split_gives_the_oracles_pairs_in_its_order(blobs: list[bytes]) -> None:
    wanted = ("KEYS", "TAGS", "b")
    c = parse_properties(*_laid_out(blobs), wanted)
    assert c.map.to_pylist() == [split_oracle.pairs(b) for b in blobs]      # the same pairs, in the same order
    assert {k: v.to_pylist() for k, v in c.named.items()} == \
        {k: [split_oracle.named(b, k) for b in blobs] for k in wanted}
    assert [dict(x) for x in c.map.to_pylist()] == _split_reference(blobs)


def test_the_c_split_refuses_properties_outside_its_buffer() -> None:
    data, pos, length = _laid_out([b"a\x01b", b"c\x01d"])
    with pytest.raises(ValueError, match="outside the buffer"):
        parse_properties(data, pos, length + 5)


def test_sixteen_named_values_are_picked_out_and_more_are_refused() -> None:
    names = tuple(f"n{i}" for i in range(17))
    blobs = [b"\x02".join(b"%s\x01v%d" % (n.encode(), r) for n in names) for r in range(3)]
    got = parse_properties(*_laid_out(blobs), names[:16])
    assert got.named["n15"].to_pylist() == ["v0", "v1", "v2"]
    with pytest.raises(ValueError, match="17 wanted names, at most 16"):
        parse_properties(*_laid_out(blobs), names)


def _store_with_uncommitted_tail(root: Path) -> tuple[int, list]:
    from store import MessageStore
    from store.config import StoreConfig
    from store.format.codec import Message

    msgs = [Message(topic=f"T{i % 2}", body=bytes([i % 251]) * (i % 300), queue_id=i % 3, store_timestamp=1000 + i,
                    properties=f"TAGS\x01t{i % 5}\x02" + (f"KEYS\x01k{i}\x02" if i % 2 else ""))
            for i in range(1200)]
    with MessageStore.open(root, StoreConfig(segment_size=64 * 1024, consume_queue_units=50)) as store:
        store.append(msgs[:900])
        committed = store.commit().offset
        store.append(msgs[900:])
        store.flush()
        with StoreReader.open(root) as reader:
            table = reader.to_table()
            ranges = reader.read_ranges(max_bytes=16 * 1024)
            pieces = [reader.to_table(lo, hi) for lo, hi in ranges]
    return committed, [table, ranges, pieces]


def test_a_reader_reads_up_to_the_commit_point_while_a_writer_runs(tmp_path: Path) -> None:
    committed, (table, ranges, pieces) = _store_with_uncommitted_tail(tmp_path / "store")
    assert table.num_rows == 900
    assert max(table.column("physicalOffset").to_pylist()) < committed
    assert table.column("keys").to_pylist()[:3] == [None, "k1", None]
    assert table.column("tags").to_pylist()[:3] == ["t0", "t1", "t2"]
    assert ranges[-1][1] == committed and len(ranges) > 3
    assert sum(p.num_rows for p in pieces) == 900
    offsets = [o for p in pieces for o in p.column("physicalOffset").to_pylist()]
    assert offsets == table.column("physicalOffset").to_pylist()


def test_filters_keep_exactly_the_matching_rows(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store_with_uncommitted_tail(root)
    with StoreReader.open(root) as reader:
        everything = reader.to_pandas()
        ts = everything.storeTimestamp.sort_values().tolist()
        lo, hi = ts[100], ts[800]
        got = reader.to_pandas(topics=["T1"], queue_ids=[0, 2], min_store_timestamp=lo, max_store_timestamp=hi)
    want = everything[(everything.topic == "T1") & everything.queueId.isin([0, 2])
                      & everything.storeTimestamp.between(lo, hi)]
    assert len(want) > 50
    assert got.physicalOffset.tolist() == want.physicalOffset.tolist()


def test_zeroed_bytes_below_the_commit_point_raise_with_their_offset(golden_dir: Path, tmp_path: Path) -> None:
    case = golden_stores()[0]
    copy = tmp_path / "store"
    shutil.copytree(golden_dir / case, copy)
    rows = expected_rows(case)
    victim = rows[len(rows) // 2]                       # a record in the middle of the log
    seg = copy / "commitlog" / f"{victim['physicalOffset'] // 4096 * 4096:020d}"
    data = bytearray(seg.read_bytes())
    pos = victim["physicalOffset"] % 4096
    data[pos + 20:pos + 28] = b"\xff" * 8               # QUEUEOFFSET: structure still valid
    data[pos + 28:pos + 36] = (12345).to_bytes(8, "big")   # PHYSICALOFFSET: damage
    seg.write_bytes(bytes(data))
    with StoreReader.open(copy) as reader, pytest.raises(CorruptRecordError) as exc:
        reader._committed = rows[-1]["physicalOffset"] + 1     # as a commit point past it would say
        list(reader.record_batches())
    assert exc.value.offset == victim["physicalOffset"] and str(victim["physicalOffset"]) in str(exc.value)


def test_a_missing_segment_below_the_commit_point_raises(tmp_path: Path) -> None:
    root = tmp_path / "store"
    committed, _ = _store_with_uncommitted_tail(root)
    base = (committed - 1) // (64 * 1024) * (64 * 1024)      # the segment holding the last committed record
    for seg in (root / "commitlog").iterdir():
        if int(seg.name) >= base:
            seg.unlink()
    with StoreReader.open(root) as reader:
        assert reader.committed_offset == committed > base
        with pytest.raises(CorruptRecordError) as exc:
            list(reader.record_batches())
    assert exc.value.offset == base


@pytest.mark.parametrize("partitions, offsets, want_partitions, want_offsets", [
    (["0", "7", "2147483647"], ["0", "42", "9223372036854775807"],
     [0, 7, 2147483647], [0, 42, 9223372036854775807]),                     # plain digits
    (["+7", "-1", "2147483648"], ["-5", "+6", "9223372036854775808"],
     [7, -1, None], [-5, 6, None]),                                         # signs; past the type: null
    (["0x1f", " 1", "1.0"], ["", "1e3", "12a"], [None, None, None], [None, None, None]),   # what Java refuses
])
def test_kafka_coordinates_are_read_as_javas_parse_int_reads_them(
        tmp_path: Path, partitions: list[str], offsets: list[str], want_partitions: list, want_offsets: list) -> None:
    from store import MessageStore
    from store.config import StoreConfig
    from store.format.codec import Message

    def props(p: str, o: str) -> str:
        return "".join(f"{k}\x01{v}\x02" for k, v in (("KAFKA_TOPIC", "events"), ("KAFKA_PARTITION", p),
                                                      ("KAFKA_OFFSET", o)) if v)
    with MessageStore.open(tmp_path / "store", StoreConfig(segment_size=64 * 1024)) as store:
        store.append([Message(topic="T", body=b"x", properties=props(p, o)) for p, o in zip(partitions, offsets)])
        store.commit()
    with StoreReader.open(tmp_path / "store") as reader:
        table = reader.to_table()
    assert table.column("kafka_topic").to_pylist() == ["events"] * 3
    assert table.column("kafka_partition").to_pylist() == want_partitions
    assert table.column("kafka_offset").to_pylist() == want_offsets
