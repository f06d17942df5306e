"""Copying and patching a batch's records: whichever thread writes a block, and whether its queue
offsets were known then or patched in a last pass, the bytes are those of a one-thread write."""

from __future__ import annotations

import numpy as np
import pytest

from store import CodecConfig, HostAddress, Message
from store.batch_codec import encode_messages
from store.record_patch import Placement, RecordWriter

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
    rel = np.asarray(b.offsets, np.int64) + at
    fields = writer.fields(len(b))
    fields[:, 1] = rel + 10_000_000
    v6 = (np.asarray(b.sys_flags) & 0x10) != 0
    return Placement(buf, rel, np.asarray(b.sizes, np.int64), fields, v6, b.data, -at), buf


@pytest.mark.parametrize("uniform", [True, False], ids=["strided", "scattered"])
@pytest.mark.parametrize("prop_crc", [False, True], ids=["plain", "prop-crc"])
def test_blocks_written_before_the_queue_offsets_get_them_in_a_last_pass(uniform: bool, prop_crc: bool) -> None:
    b = batch(uniform, prop_crc)
    qo = np.arange(len(b), dtype=np.int64) * 3 + 7
    one = RecordWriter(1, prop_crc)
    p1, expected = place(b, one, 100)
    p1.fields[:, 0] = qo
    one.write(p1, TS)

    two = RecordWriter(2, prop_crc, block_bytes=4096)
    try:
        p2, got = place(b, two, 100)
        job = two.start(p2, TS)
        job._future.result()                 # the helper wrote every block, without QUEUEOFFSET
        assert len(job._without_offsets) > 10
        p2.fields[:, 0] = qo
        job.finish()
    finally:
        two.close()
    assert got.tobytes() == expected.tobytes()
    assert not np.array_equal(expected[100:200], np.zeros(100, np.uint8))


def test_an_aborted_write_leaves_nothing_behind() -> None:
    b = batch(True, False)
    writer = RecordWriter(2, False, block_bytes=4096)
    try:
        p, buf = place(b, writer, 0)
        job = writer.start(p, TS)
        job.abort()
    finally:
        writer.close()
    assert not buf.any()
