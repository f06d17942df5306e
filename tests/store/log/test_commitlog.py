"""Commit-log append: the BLANK rule at segment ends (FORMAT §8), the fields the store patches,
queue offsets per (topic, queueId), batches carrying their own queue offsets."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from store import (
    CodecConfig,
    FieldLimitError,
    HostAddress,
    Message,
    MessageStore,
    QueueOffsetMismatchError,
    StoreConfig,
)
from store.format.batch_codec import encode_messages
from store.format.codec import encode_message
from store.format.constants import (
    BLANK_MAGIC_CODE,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from store.scan.record_check import check_record

pytestmark = pytest.mark.unit

SEG = 64 * 1024
TS = 1_700_000_000_123


def msg_of_size(total: int, topic: str = "T", queue_id: int = 0, **kw) -> Message:
    """A message whose record is exactly ``total`` bytes."""
    base = len(encode_message(Message(topic=topic, body=b"", **kw)))
    return Message(topic=topic, body=b"\xab" * (total - base), queue_id=queue_id, **kw)


def open_store(path: Path, **kw) -> MessageStore:
    return MessageStore.open(path, StoreConfig(segment_size=SEG, preallocate=False, **kw))


@pytest.fixture
def store(tmp_path: Path):
    s = open_store(tmp_path / "store")
    yield s
    s.close()


def segment_bytes(store: MessageStore, index: int) -> bytes:
    return (store.root / "commitlog" / str(index * SEG).zfill(20)).read_bytes()


def test_message_leaving_exactly_8_bytes_stays_in_the_segment(store: MessageStore) -> None:
    store.append([msg_of_size(1000)])
    r = store.append([msg_of_size(SEG - 1000 - 8)])
    assert r.physical_offsets.tolist() == [1000]
    assert store.max_offset == SEG - 8
    nxt = store.append([msg_of_size(200)])
    assert nxt.physical_offsets.tolist() == [SEG]
    assert struct.unpack_from(">iI", segment_bytes(store, 0), SEG - 8) == (8, BLANK_MAGIC_CODE)


def test_message_one_byte_too_large_rolls_behind_a_blank(store: MessageStore) -> None:
    store.append([msg_of_size(1000)])
    r = store.append([msg_of_size(SEG - 1000 - 7)])
    assert r.physical_offsets.tolist() == [SEG]
    seg0 = segment_bytes(store, 0)
    assert struct.unpack_from(">iI", seg0, 1000) == (SEG - 1000, BLANK_MAGIC_CODE)
    assert seg0[1008:] == bytes(SEG - 1008)   # only the BLANK header is written


def test_largest_message_is_segment_size_minus_8(store: MessageStore) -> None:
    r = store.append([msg_of_size(SEG - 8)])
    assert r.physical_offsets.tolist() == [0] and store.max_offset == SEG - 8
    with pytest.raises(FieldLimitError, match="record"):
        store.append([msg_of_size(SEG - 7)])
    assert store.max_offset == SEG - 8
    assert store.append([msg_of_size(100)]).physical_offsets.tolist() == [SEG]


def varied_messages(n: int, seed: int = 1) -> list[Message]:
    rng = np.random.default_rng(seed)
    return [Message(topic=f"T{i % 3}", queue_id=int(rng.integers(0, 3)),
                    body=rng.bytes(int(rng.integers(0, 3000))), properties=f"KEYS\x01k{i}\x02")
            for i in range(n)]


@pytest.mark.parametrize("copy_block", [512 * 1024, 3000], ids=["one-block", "many-blocks"])
def test_a_batch_crossing_segment_ends_is_written_like_one_message_at_a_time(tmp_path: Path, copy_block: int) -> None:
    msgs = varied_messages(300)
    with open_store(tmp_path / "a") as a, open_store(tmp_path / "b") as b:
        a.commit_log.writer.block_bytes = copy_block
        ra = a.append_encoded(encode_messages(msgs, a.config.codec), store_timestamp=TS)
        rb = [b.append_encoded(encode_messages([m], b.config.codec), store_timestamp=TS) for m in msgs]
        assert ra.physical_offsets.tolist() == [int(r.physical_offsets[0]) for r in rb]
        assert ra.queue_offsets.tolist() == [int(r.queue_offsets[0]) for r in rb]
        assert a.max_offset == b.max_offset > 5 * SEG
        files = sorted(p.name for p in (a.root / "commitlog").iterdir())
        assert files == sorted(p.name for p in (b.root / "commitlog").iterdir())
        for name in files:
            assert (a.root / "commitlog" / name).read_bytes() == (b.root / "commitlog" / name).read_bytes()


@pytest.mark.parametrize("ipv6_at", [None, 7], ids=["equal-sizes-strided", "mixed-scatter"])
def test_every_record_gets_its_offset_queue_offset_and_store_timestamp(store: MessageStore, ipv6_at) -> None:
    msgs = [msg_of_size(300, queue_id=i % 2) for i in range(400)]
    if ipv6_at is not None:  # an IPv6 born host moves STORETIMESTAMP to 68
        msgs[ipv6_at] = msg_of_size(300, queue_id=ipv6_at % 2, born_host=HostAddress("::1", 5))
    r = store.append_encoded(encode_messages(msgs, store.config.codec), store_timestamp=TS)
    assert r.end_offset > SEG
    for i, off in enumerate(r.physical_offsets.tolist()):
        m = store.read(off)
        assert (m.physical_offset, m.store_timestamp, m.queue_id) == (off, TS, i % 2)
        assert m.queue_offset == int(r.queue_offsets[i]) == i // 2
        assert m.body.tobytes() == msgs[i].body
    assert store.next_queue_offsets() == {("T", 0): 200, ("T", 1): 200}


def test_prepared_and_rollback_get_queue_offset_0_and_no_queue_slot(store: MessageStore) -> None:
    kinds = [0, TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE, 0]
    store.append([Message(topic="X", body=b"a")])
    r = store.append([Message(topic="X", body=b"b", sys_flag=k) for k in kinds])
    assert r.queue_offsets.tolist() == [1, 0, 2, 0, 3]
    assert [store.read(int(o)).queue_offset for o in r.physical_offsets] == [1, 0, 2, 0, 3]
    assert store.next_queue_offsets() == {("X", 0): 4}
    assert [m.body.tobytes() for m in store.get_by_queue("X", 0, 0, 10)] == [b"a", b"b", b"b", b"b"]


def test_a_batch_carrying_queue_offsets_must_continue_its_queues(store: MessageStore) -> None:
    store.append([Message(topic="Q", body=b"x", queue_id=1)] * 3)
    batch = encode_messages([Message(topic="Q", body=b"y", queue_id=1)] * 2, store.config.codec)
    batch.queue_offsets = np.array([3, 5], dtype=np.int64)
    before = store.max_offset
    with pytest.raises(QueueOffsetMismatchError, match=r"row 1: queue offset 5 for Q/1 .* next offset is 4"):
        store.append_encoded(batch)
    assert store.max_offset == before and store.next_queue_offsets() == {("Q", 1): 3}
    assert not any(segment_bytes(store, 0)[before:before + batch.nbytes])    # nothing was written
    batch.queue_offsets = np.array([3, 4], dtype=np.int64)
    r = store.append_encoded(batch)
    assert r.queue_offsets.tolist() == [3, 4]
    assert store.next_queue_offsets() == {("Q", 1): 5}


@pytest.mark.parametrize("equal_sizes", [True, False], ids=["equal", "unequal"])
def test_a_batch_whose_records_are_not_back_to_back_is_refused_whole(store: MessageStore, equal_sizes: bool) -> None:
    store.append([Message(topic="L", body=b"x")])
    msgs = [Message(topic="L", body=b"y" * (10 if equal_sizes else 10 + i % 3)) for i in range(300)]
    batch = encode_messages(msgs, store.config.codec)
    batch.offsets = np.asarray(batch.offsets).copy()
    batch.offsets[150] += 1            # a gap before record 150 and one byte missing after it
    before = store.max_offset
    with pytest.raises(ValueError, match="not back to back"):
        store.append_encoded(batch)
    assert store.max_offset == before and store.next_queue_offsets() == {("L", 0): 1}
    assert not any(segment_bytes(store, 0)[before:before + batch.nbytes])
    batch.data = batch.data[:-1]
    batch.offsets[150] -= 1
    with pytest.raises(ValueError, match=r"batch.data has \d+ bytes, its records need"):
        store.append_encoded(batch)
    assert store.max_offset == before


def test_prop_crc_is_rewritten_after_the_store_fields_are_patched(tmp_path: Path) -> None:
    codec = CodecConfig(enabled_append_prop_crc=True)
    with open_store(tmp_path / "s", codec=codec) as s:
        s.commit_log.writer.block_bytes = 1000     # copied and patched in several blocks, by two threads
        r = s.append([Message(topic="C", body=b"z" * i, properties="TAGS\x01t\x02") for i in range(50)])
        verify = CodecConfig(force_verify_prop_crc=True)
        seg = s.commit_log.queue.find(0)
        for off in r.physical_offsets.tolist():
            assert check_record(seg.view, off, SEG, 0, verify).kind == "message"
        assert "__CRC32#" in s.read(int(r.physical_offsets[0])).properties
