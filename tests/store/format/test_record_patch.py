"""Copying and patching a batch's records: whichever thread writes a block, the bytes are those of
a one-thread write, and a write never waits for work its helper thread took on before it."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from store import CodecConfig, HostAddress, Message
from store.format.batch_codec import encode_messages
from store.log.record_patch import BatchLayout, Placement, RecordWriter

pytestmark = pytest.mark.unit

TS = 1_700_000_000_321


def batch(uniform: bool, prop_crc: bool):  # noqa: ANN201 - test helper
    rng = np.random.default_rng(5)
    msgs = [Message(topic="P", queue_id=i % 3, properties="TAGS\x01a\x02",
                    body=b"b" * (40 if uniform else int(rng.integers(0, 400))),
                    born_host=HostAddress("::2", 9) if not uniform and i % 7 == 0 else HostAddress("10.0.0.1", 9))
            for i in range(2000)]
    return encode_messages(msgs, CodecConfig(enabled_append_prop_crc=prop_crc))


def place(b, writer: RecordWriter, at: int) -> tuple[Placement, np.ndarray]:  # noqa: ANN001
    buf = np.zeros(at + b.nbytes + 64, np.uint8)
    sizes = np.asarray(b.sizes)
    flags = np.asarray(b.sys_flags)
    v6 = (flags & 0x10) != 0
    layout = BatchLayout.of(sizes, int(sizes.min()), int(sizes.max()), bool(v6[0]) if (v6 == v6[0]).all() else v6)
    phys = np.empty(len(b), np.int64)
    return Placement(buf, 10_000_000, at, 0, len(b), layout, b.data, -at, writer.fields(len(b)), phys), buf


@pytest.mark.parametrize("uniform", [True, False], ids=["strided", "scattered"])
@pytest.mark.parametrize("prop_crc", [False, True], ids=["plain", "prop-crc"])
def test_blocks_shared_by_two_threads_give_the_bytes_of_one(uniform: bool, prop_crc: bool) -> None:
    b = batch(uniform, prop_crc)
    qo = np.arange(len(b), dtype=np.int64) * 3 + 7
    one = RecordWriter(1, prop_crc)
    p1, expected = place(b, one, 100)
    one.write(p1, TS, qo)

    two = RecordWriter(2, prop_crc, block_bytes=4096)
    try:
        p2, got = place(b, two, 100)
        two.write(p2, TS, qo)
    finally:
        two.close()
    assert got.tobytes() == expected.tobytes()
    assert not np.array_equal(expected[100:200], np.zeros(100, np.uint8))
    assert np.array_equal(p2.physical_offsets, p1.physical_offsets)
    assert np.array_equal(p1.physical_offsets, 10_000_100 + np.asarray(b.offsets))
    # every record carries its queue offset, physical offset and store timestamp
    for i in (0, 1, len(b) - 1):
        at = 100 + int(b.offsets[i])
        assert int.from_bytes(expected[at + 20:at + 28].tobytes(), "big") == qo[i]
        assert int.from_bytes(expected[at + 28:at + 36].tobytes(), "big") == 10_000_000 + at


def test_a_write_does_not_wait_for_the_helpers_other_work() -> None:
    b = batch(True, False)
    qo = np.arange(len(b), dtype=np.int64)
    one = RecordWriter(1, False)
    p1, expected = place(b, one, 0)
    one.write(p1, TS, qo)

    two = RecordWriter(2, False, block_bytes=4096)
    release = threading.Event()
    try:
        assert two.executor is not None
        busy = two.executor.submit(release.wait, 30)      # e.g. the previous batch's consume queues
        p2, got = place(b, two, 0)
        done = threading.Thread(target=two.write, args=(p2, TS, qo))
        done.start()
        done.join(10)
        assert not done.is_alive(), "the write waited for the helper"
        assert not busy.done()
    finally:
        release.set()
        two.close()
    assert got.tobytes() == expected.tobytes()
