"""Index keys shipped with a batch (store.index.shipped: found and hashed where the batch was
encoded): the store puts them as they come, and its IndexFiles are byte for byte those it builds
when it finds the same keys in the commit log itself."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store import EncodedBatch, MessageStore, StoreConfig, batch_index_keys
from store.format.batch_codec import INDEX_KEYS_COLUMN, encode_messages
from store.format.codec import CodecConfig, Message
from store.format.constants import TRANSACTION_ROLLBACK_TYPE
from store.index.build import record_keys
from store.index.file import IndexFile
from store.index.service import IndexConfig, IndexService
from tests.helpers.index_stores import property_names, property_texts
from tests.oracles import index_put

pytestmark = pytest.mark.unit
SEG = 1 << 16
T0 = 1_700_000_000_000
# few slots and items: keys share chains, and a batch fills files, some in the middle of a record
SMALL = IndexConfig(True, 64, 300)


def keyed(i: int) -> Message:
    return Message("T", b"body-%d" % i, queue_id=i % 3,
                   properties=f"KEYS\x01k{i} shared{i % 5}\x02UNIQ_KEY\x01U{i:08d}\x02")


def with_keys(batch: EncodedBatch) -> EncodedBatch:
    hashes, counts = batch_index_keys(np.asarray(batch.data, np.uint8), batch.offsets)
    return replace(batch, key_hashes=hashes, key_counts=counts)


def index_after(root: Path, batches: list[EncodedBatch], config: IndexConfig = SMALL) -> list[bytes]:
    with MessageStore.open(root, StoreConfig(segment_size=SEG, index=config)) as store:
        for k, b in enumerate(batches):
            store.append_encoded(b, store_timestamp=T0 + 1_500 * k)
        store.commit()
    return [p.read_bytes() for p in sorted((root / "index").iterdir())]


def assert_same_index(tmp: Path, batches: list[EncodedBatch]) -> list[bytes]:
    found = index_after(tmp / "found", batches)
    shipped = index_after(tmp / "shipped", [with_keys(b) for b in batches])
    assert shipped == found
    return shipped


def test_shipped_keys_make_the_index_the_commit_log_makes(tmp_path: Path) -> None:
    batches = [encode_messages([keyed(i) for i in range(b * 70, b * 70 + 70)], CodecConfig()) for b in range(6)]
    files = assert_same_index(tmp_path, batches)
    assert len(files) > 3      # filled files, the last keys of a record in the next one
    with MessageStore.open(tmp_path / "shipped", StoreConfig(segment_size=SEG, index=SMALL)) as store:
        assert len(store.messages_by_key("T", "k419")) == 1
        assert len(store.messages_by_key("T", "U00000007", uniq=True)) == 1


def test_keys_shipped_before_the_store_writes_each_record_s_crc_property_are_its_keys(tmp_path: Path) -> None:
    # enabledAppendPropCRC: the store writes a CRC32 property into space the encoder left
    # at the end of the properties; the keys are found before it is there
    codec = CodecConfig(enabled_append_prop_crc=True)
    batches = [encode_messages([keyed(i) for i in range(b * 60, b * 60 + 60)], codec) for b in range(3)]
    found, shipped = ([], [])
    for name, out, bs in (("found", found, batches), ("shipped", shipped, [with_keys(b) for b in batches])):
        with MessageStore.open(tmp_path / name, StoreConfig(segment_size=SEG, index=SMALL, codec=codec)) as store:
            for k, b in enumerate(bs):
                store.append_encoded(b, store_timestamp=T0 + k)
            store.commit()
        out += [p.read_bytes() for p in sorted((tmp_path / name / "index").iterdir())]
    assert shipped == found and len(found) > 1


def test_the_numpy_put_of_shipped_keys_gives_the_same_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    batches = [encode_messages([keyed(i) for i in range(b * 90, b * 90 + 90)], CodecConfig()) for b in range(4)]
    c = index_after(tmp_path / "c", [with_keys(b) for b in batches])
    monkeypatch.setattr(IndexService, "put_shipped", index_put.put_shipped)
    monkeypatch.setattr(IndexFile, "put", index_put.put)
    assert index_after(tmp_path / "numpy", [with_keys(b) for b in batches]) == c


def test_records_the_c_pass_cannot_decode_are_shipped_as_java_decodes_them(tmp_path: Path) -> None:
    batch = encode_messages([keyed(i) for i in range(8)], CodecConfig())
    data = np.array(batch.data, dtype=np.uint8)
    for record, bad in ((1, b"\x80k"), (4, b"\xed\xa0")):      # a lone continuation byte, a surrogate
        at = bytes(data).index(b"UNIQ_KEY\x01", int(batch.offsets[record])) + 9
        data[at:at + 2] = np.frombuffer(bad, dtype=np.uint8)
    batch = replace(batch, data=data)
    hashes, counts = batch_index_keys(data, batch.offsets)
    assert counts.tolist() == [3] * 8 and hashes.tolist() == record_keys(data, batch.offsets).key_hash.tolist()
    assert_same_index(tmp_path, [batch])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(["T", "Tö", "x" * 130]),
                                   st.lists(st.tuples(property_names, property_texts), max_size=4),
                                   st.sampled_from([0, 4, TRANSACTION_ROLLBACK_TYPE])), min_size=1, max_size=25),
                min_size=1, max_size=4))
def test_any_records_index_alike_shipped_or_found(tmp_path_factory: pytest.TempPathFactory, batches: list) -> None:
    encoded = [encode_messages([Message(topic, b"b", properties="".join(f"{k}\x01{v}\x02" for k, v in pairs),
                                        sys_flag=flag) for topic, pairs, flag in rows], CodecConfig())
               for rows in batches]
    assert_same_index(tmp_path_factory.mktemp("any"), encoded)


def test_a_batch_whose_counts_do_not_match_its_keys_is_refused(tmp_path: Path) -> None:
    service = IndexService(tmp_path / "index", SMALL)
    with pytest.raises(ValueError, match="do not match their records"):
        service.put_shipped(np.array([1, 2, 3], np.int32), np.array([1, 1], np.int32), np.array([0, 90]), T0)
    service.close()


def test_from_arrow_takes_the_keys_of_the_rows_it_takes_and_none_when_a_row_lacks_them() -> None:
    batch = encode_messages([keyed(i) for i in range(4)], CodecConfig())
    hashes, counts = batch_index_keys(np.asarray(batch.data, np.uint8), batch.offsets)
    records = pa.array([bytes(batch.record(i)) for i in range(4)], pa.binary())
    lists = pa.ListArray.from_arrays(pa.array(np.concatenate(([0], np.cumsum(counts))), pa.int32()),
                                     pa.array(hashes, pa.int32()))
    table = pa.table({"record": records, "topic": ["T"] * 4, "queue_id": pa.array([0] * 4, pa.int32()),
                      "sys_flag": pa.array([0] * 4, pa.int32()), "tags_code": pa.array([0] * 4, pa.int64()),
                      "delay_level": pa.array([0] * 4, pa.int32()), INDEX_KEYS_COLUMN: lists})
    whole = EncodedBatch.from_arrow(table)
    assert whole.key_hashes.tolist() == hashes.tolist() and whole.key_counts.tolist() == counts.tolist()
    some = EncodedBatch.from_arrow(table, np.array([1, 3]))
    assert some.key_counts.tolist() == [3, 3] and some.key_hashes.tolist() == hashes[3:6].tolist() + hashes[9:].tolist()
    lacking = table.set_column(table.schema.get_field_index(INDEX_KEYS_COLUMN), INDEX_KEYS_COLUMN,
                               pa.array([[1], None, [2], [3]], pa.list_(pa.int32())))
    assert EncodedBatch.from_arrow(lacking).key_hashes is None
