"""The read-back's record columns (the C pass, store/scan/_record_columns.c) are the messages that
were written: hosts of both widths and more distinct ones than the C pass groups itself, many
topics, version 2 records, empty bodies, filters, bodies copied or viewed, and records of more
than an Arrow batch's 2 GiB cut into batches under it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from store import MessageStore, StoreReader
from store.config import StoreConfig
from store.scan import record_batch
from store.format.batch_codec import encode_messages
from store.format.codec import Message
from store.format.constants import BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG
from store.format.hosts import HostAddress

pytestmark = pytest.mark.unit


def _messages(count: int, hosts: int, topics: int, seed: int) -> list[Message]:
    rnd = random.Random(seed)
    out = []
    for i in range(count):
        born6, store6 = rnd.random() < 0.3, rnd.random() < 0.3
        h = rnd.randrange(hosts)
        born = HostAddress(f"fe80::{h:x}:1" if born6 else f"10.0.{h // 256}.{h % 256}", 1000 + h)
        store = HostAddress("::1" if store6 else "192.168.1.7", 10911 + h % 3)
        topic = f"topic-{rnd.randrange(topics)}" + ("x" * 130 if rnd.random() < 0.1 else "")   # > 127: version 2
        body = b"" if rnd.random() < 0.1 else rnd.randbytes(rnd.randrange(1, 300))
        props = f"TAGS\x01t{i % 7}\x02KEYS\x01k{i}\x02" if i % 4 else ""
        out.append(Message(topic=topic, body=body, queue_id=i % 5, flag=rnd.randrange(-5, 5), properties=props,
                           sys_flag=(BORNHOST_V6_FLAG if born6 else 0) | (STOREHOSTADDRESS_V6_FLAG if store6 else 0),
                           born_timestamp=1_700_000_000_000 + i, born_host=born, store_timestamp=1_700_000_001_000 + i,
                           store_host=store, reconsume_times=i % 3))
    return out


STORED_AT = 1_700_000_001_000


def _store(root: Path, messages: list[Message]) -> list[int]:
    """The messages appended 100 at a time, stored a millisecond apart; their store timestamps."""
    stamps = []
    with MessageStore.open(root, StoreConfig(segment_size=256 * 1024)) as store:
        for k in range(0, len(messages), 100):
            chunk = messages[k:k + 100]
            store.append_encoded(encode_messages(chunk, store.config.codec), store_timestamp=STORED_AT + k // 100)
            stamps += [STORED_AT + k // 100] * len(chunk)
        store.commit()
    return stamps


def _text(host: HostAddress) -> str:
    return str(HostAddress.from_bytes(host.to_bytes()))      # Java's spelling: IPv6 in full


@pytest.mark.parametrize("hosts, topics", [(3, 2), (2000, 3), (5, 1000)], ids=["few", "many-hosts", "many-topics"])
@pytest.mark.parametrize("zero_copy", [False, True])
def test_the_columns_are_the_messages_written(tmp_path: Path, hosts: int, topics: int, zero_copy: bool) -> None:
    messages = _messages(1500, hosts, topics, seed=hosts * 1000 + topics)
    stamps = _store(tmp_path / "store", messages)
    with StoreReader.open(tmp_path / "store") as reader:
        c = reader.to_table(batch_size=400, zero_copy=zero_copy)
    assert c.num_rows == len(messages)
    assert c.column("queueId").to_pylist() == [m.queue_id for m in messages]
    assert c.column("sysFlag").to_pylist() == [m.sys_flag for m in messages]
    assert c.column("bornHost").to_pylist() == [_text(m.born_host) for m in messages]
    assert c.column("storeHost").to_pylist() == [_text(m.store_host) for m in messages]
    assert c.column("topic").to_pylist() == [m.topic for m in messages]
    assert [bytes(b) for b in c.column("body").to_pylist()] == [m.body for m in messages]
    assert c.column("flag").to_pylist() == [m.flag for m in messages]
    assert c.column("reconsumeTimes").to_pylist() == [m.reconsume_times for m in messages]
    assert c.column("storeTimestamp").to_pylist() == stamps
    assert c.column("bornTimestamp").to_pylist() == [m.born_timestamp for m in messages]


def test_filters_keep_the_rows_they_name(tmp_path: Path) -> None:
    messages = _messages(1200, 4, 6, seed=7)
    stamps = _store(tmp_path / "store", messages)
    lo, hi = STORED_AT + 2, STORED_AT + 9
    with StoreReader.open(tmp_path / "store") as reader:
        c = reader.to_table(topics=["topic-1", "topic-4"], queue_ids=[0, 3], min_store_timestamp=lo,
                            max_store_timestamp=hi)
    want = [(m, ts) for m, ts in zip(messages, stamps) if m.topic in ("topic-1", "topic-4") and m.queue_id in (0, 3)
            and lo <= ts <= hi]
    assert len(want) > 20
    assert c.column("bornTimestamp").to_pylist() == [m.born_timestamp for m, _ in want]
    assert c.column("storeTimestamp").to_pylist() == [ts for _, ts in want]
    assert [bytes(b) for b in c.column("body").to_pylist()] == [m.body for m, _ in want]
    assert c.column("bornHost").to_pylist() == [_text(m.born_host) for m, _ in want]


def test_the_c_pass_refuses_a_record_that_runs_past_its_buffer() -> None:
    import numpy as np

    kernel = record_batch._columns_kernel
    data = np.zeros(200, dtype=np.uint8)
    data[84:88] = [0, 0, 0x7F, 0]            # BODYLENGTH 32,512: past the 200-byte buffer
    for starts in ([0], [150], [-1]):
        n = len(starts)
        out32 = [np.empty(n, np.int32) for _ in range(6)]
        out64 = [np.empty(n, np.int64) for _ in range(3)]
        with pytest.raises(ValueError, match="outside the buffer"):
            kernel.columns(data, np.array(starts, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64),
                           out32[0], out64[0], out64[1], out32[1], out32[2], out32[3], out32[4], out64[2], out32[5],
                           np.empty(n + 1, np.int32), bytearray(0))


@pytest.mark.parametrize("zero_copy", [False, True])
def test_records_of_more_than_a_batchs_bytes_come_in_batches_under_it(tmp_path: Path, zero_copy: bool) -> None:
    """The cut the C pass makes at 2 GiB (int32 offsets), at a small size: every batch holds at most
    that many record bytes (or one record), and together they are every record, in order."""
    import numpy as np

    from store.scan.record_batch import RecordFilter, _batches
    from store.scan.record_check import scan_segment_fast

    messages = _messages(300, 3, 2, seed=11)
    _store(tmp_path / "store", messages)
    segment = sorted((tmp_path / "store" / "commitlog").iterdir())[0]
    buf = segment.read_bytes()
    scan = scan_segment_fast(buf, 0, columns=True)
    starts, sizes = scan.offsets, scan.sizes.astype(np.int64)
    most = int(sizes.max()) * 7 + 3
    arr = np.frombuffer(buf, np.uint8)
    batches = list(_batches(arr, 0, starts, sizes, scan.columns, RecordFilter(), zero_copy, most_bytes=most))
    assert len(batches) > 5
    got = [b for batch in batches for b in batch.column("physicalOffset").to_pylist()]
    assert got == starts.tolist()
    bytes_per_batch = [int(sizes[np.isin(starts, batch.column("physicalOffset").to_numpy())].sum()) for batch in batches]
    assert max(bytes_per_batch) <= most
    assert [bytes(b) for batch in batches for b in batch.column("body").to_pylist()] == \
        [m.body for m in messages][:len(starts)]
