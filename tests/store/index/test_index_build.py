"""The index's C passes (store/index/_index_build.c) give what the numpy oracles
(tests/oracles/index_keys.py, index_put.py) give, byte for byte:
the keys of any records (each found, hashed and placed as store.index.keys says RocketMQ does),
and the IndexFiles built from them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.format.batch_codec import encode_messages
from store.format.codec import CodecConfig, HostAddress, Message
from store.format.constants import BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG, TRANSACTION_ROLLBACK_TYPE
from store.index.build import record_keys
from store.index.file import IndexFile, IndexHeader
from tests.helpers.index_stores import expected, property_names, property_texts
from tests.oracles import index_keys, index_put

pytestmark = pytest.mark.unit


def encoded(messages: list[Message], store_timestamp: int = 1_700_000_000_123) -> tuple[np.ndarray, np.ndarray]:
    batch = encode_messages([replace(m, store_timestamp=store_timestamp + i) for i, m in enumerate(messages)],
                            CodecConfig())
    return np.array(batch.data, dtype=np.uint8), np.asarray(batch.offsets, dtype=np.int64)


def both_ways(messages: list[Message], base: int = 0):
    arr, starts = encoded(messages)
    c = record_keys(arr, starts, base)
    py = index_keys.record_keys(arr, starts, base)
    for name in ("record", "key_hash", "phy_offset", "store_timestamp"):
        assert getattr(c, name).tolist() == getattr(py, name).tolist(), name
    assert (c.record.tolist(), c.key_hash.tolist()) == expected(messages)
    return c


def test_uniq_key_then_each_keys_token_with_offsets_and_store_timestamps():
    msgs = [Message("T", b"x", properties="KEYS\x01a  b c\x02UNIQ_KEY\x01U1\x02"),
            Message("T", b"x", properties="TAGS\x01t\x02KEYS\x01solo"),
            Message("Other", b"x" * 300, properties="UNIQ_KEY\x01U2\x02")]
    keys = both_ways(msgs, base=1 << 40)
    arr, starts = encoded(msgs)
    assert keys.record.tolist() == [0, 0, 0, 0, 1, 2]
    assert keys.phy_offset.tolist() == [(1 << 40) + int(starts[r]) for r in keys.record.tolist()]
    assert keys.store_timestamp.tolist() == [1_700_000_000_123 + r for r in keys.record.tolist()]


def test_what_is_not_indexed():
    msgs = [Message("T", b"x", properties="UNIQ_KEY\x01U\x02", sys_flag=TRANSACTION_ROLLBACK_TYPE),
            Message("T", b"x", properties="KEYS\x01\x02UNIQ_KEY\x01\x02"),
            Message("T", b"x", properties="MYKEYS\x01k\x02XUNIQ_KEY\x01u\x02"),
            Message("T", b"KEYS\x01body\x02", properties=""),
            Message("T", b"x", properties="\x01KEYS\x02KEYS\x02")]
    assert len(both_ways(msgs)) == 0


def test_later_pairs_win_and_long_values_and_names_inside_values():
    msgs = [Message("T", b"x", properties="KEYS\x01first\x02KEYS\x01second\x02"),
            Message("T", b"x", properties="KEYS\x01" + "k" * 600 + " tail\x02"),
            Message("T", b"x", properties="A\x01" + "v" * 5000 + "\x02KEYS\x01big\x02"),
            Message("T", b"x", properties="A\x01xKEYS\x01inside\x02KEYS\x01real\x02"),
            Message("T", b"x", properties="KEYS\x01a\x01b c\x02")]
    both_ways(msgs)


def test_utf8_topics_and_keys_hash_over_utf16_units():
    msgs = [Message("Tópico", b"x", properties="KEYS\x01clé ключ\x02UNIQ_KEY\x01ü\x02"),
            Message("T", b"x", properties="UNIQ_KEY\x01ü-\U0001F600\x02KEYS\x01\u6771\u4eac  x\x02"),
            Message("\u6771", b"x", properties="KEYS\x01" + "\u00e9" * 40 + " " + "abcdefgh" * 5 + "é\x02")]
    both_ways(msgs)


def test_hosts_of_either_kind_move_the_fields():
    msgs = [Message("T", b"x", properties="UNIQ_KEY\x01A\x02", sys_flag=BORNHOST_V6_FLAG,
                    born_host=HostAddress("::1", 1)),
            Message("T", b"yy", properties="UNIQ_KEY\x01B\x02", sys_flag=STOREHOSTADDRESS_V6_FLAG,
                    store_host=HostAddress("::2", 2)),
            Message("T", b"zzz", properties="UNIQ_KEY\x01C\x02", sys_flag=BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG,
                    born_host=HostAddress("::1", 1), store_host=HostAddress("::2", 2))]
    keys = both_ways(msgs)
    assert keys.store_timestamp.tolist() == [1_700_000_000_123, 1_700_000_000_124, 1_700_000_000_125]


def test_text_java_would_replace_is_decoded_as_java_decodes_it():
    """Bytes that are not UTF-8 (a lone continuation byte, a cut sequence, an encoded surrogate)
    become U+FFFD in Java: the C pass leaves such records to store.index.keys."""
    msgs = [Message("T", b"x", properties="UNIQ_KEY\x01ok\x02")]
    arr, starts = encoded(msgs + msgs + msgs + msgs)
    for bad, record in ((b"\x80k", 0), (b"o\xe2", 1), (b"\xed\xa0", 2)):
        at = bytes(arr).index(b"UNIQ_KEY\x01ok", int(starts[record])) + 9
        arr[at:at + 2] = np.frombuffer(bad, dtype=np.uint8)
    assert bytes(arr).count(b"UNIQ_KEY\x01ok") == 1        # the last record's key is the one left whole
    c = record_keys(arr, starts)
    py = index_keys.record_keys(arr, starts)
    assert c.key_hash.tolist() == py.key_hash.tolist()
    assert c.record.tolist() == py.record.tolist() == [0, 1, 2, 3]
    assert c.store_timestamp.tolist() == py.store_timestamp.tolist()


def test_a_record_whose_lengths_do_not_add_up_has_no_keys():
    msgs = [Message("T", b"x", properties="UNIQ_KEY\x01A\x02") for _ in range(3)]
    arr, starts = encoded(msgs)
    body_len_at = int(starts[1]) + 84
    arr[body_len_at:body_len_at + 4] = np.frombuffer((10_000).to_bytes(4, "big"), dtype=np.uint8)
    assert record_keys(arr, starts).record.tolist() == [0, 2]


def test_many_records_cross_the_chunks_of_the_c_pass():
    msgs = [Message(f"T{i % 3}", b"", properties=f"UNIQ_KEY\x01{i:032X}\x02KEYS\x01k{i} " + "x " * (i % 5))
            for i in range(12_000)]
    keys = both_ways(msgs)
    assert len(keys) > (1 << 15)


def test_records_with_thousands_of_keys_grow_the_c_pass_outputs():
    """Far more keys than two a record: the outputs, sized for two, grow as the keys come."""
    msgs = [Message("T", b"", properties=f"UNIQ_KEY\x01U{i}\x02KEYS\x01" + " ".join(f"k{j}" for j in range(4_000)))
            for i in range(8)]
    keys = both_ways(msgs)
    assert len(keys) == 8 * 4_001


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["T", "topic-b", "Tö", "x" * 130]),
                          st.lists(st.tuples(property_names, property_texts), max_size=5),
                          st.sampled_from([0, 4, TRANSACTION_ROLLBACK_TYPE, 8])), min_size=1, max_size=20))
def test_any_properties_agree(rows):
    msgs = [Message(topic, b"body", properties="".join(f"{k}\x01{v}\x02" for k, v in pairs), sys_flag=flag)
            for topic, pairs, flag in rows]
    both_ways(msgs)


def put_both_ways(tmp: Path, slots: int, items: int, hashes, phys, ts, begin: int = 0):
    """One IndexFile filled by the C put, one by the oracle's; both files' bytes."""
    out = []
    for name, put in (("c", IndexFile.put), ("numpy", index_put.put)):
        f = IndexFile(tmp / name, slots, items, create=True, start=IndexHeader(begin, begin, 0, 0))
        done = 0
        while done < len(hashes) and f.room:
            take = min(f.room, len(hashes) - done, 7)     # several puts, as batches come
            put(f, hashes[done:done + take], phys[done:done + take], ts[done:done + take])
            done += take
        f.flush()
        out.append((tmp / name).read_bytes())
        f.close()
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(2, 60), st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=80),
       st.integers(0, 5_000), st.sampled_from([0, 1_700_000_000_000, 1_700_000_100_000]))
def test_items_and_slots_put_alike(tmp_path_factory, slots, items, hashes, step, begin):
    tmp = tmp_path_factory.mktemp("put")
    n = len(hashes)
    phys = np.arange(n, dtype=np.int64) * 97 + 5
    ts = 1_700_000_050_000 + np.arange(n, dtype=np.int64) * step - 60_000 * (np.arange(n) % 3 == 1)
    c, py = put_both_ways(tmp, slots, items, np.array(hashes, dtype=np.int32), phys, ts, begin)
    assert c == py


def test_the_c_put_refuses_a_file_of_another_geometry(tmp_path: Path):
    from store.index import _index_build

    f = IndexFile(tmp_path / "f", 4, 4, create=True)
    with pytest.raises(ValueError):
        _index_build.put_items(f._mm, 8, 4, (0, 0, 0, 0, 0, 1), np.zeros(1, np.int32), np.zeros(1, np.int64),
                               np.zeros(1, np.int64))
    f.close()
