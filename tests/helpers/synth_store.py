"""Synthetic stores for exercising and benchmarking the commands: valid RocketMQ stores (segments
closed by BLANKs, consume queues, checkpoint) built fast from a few encoded templates, with
numpy patching PHYSICALOFFSET and QUEUEOFFSET. Not a writer: no lock, no commit point."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from store.format.codec import Message, encode_message
from store.format.constants import (
    BLANK_MAGIC_CODE,
    CHECKPOINT_FILE,
    CHECKPOINT_FILE_SIZE,
    COMMITLOG_DIR,
    END_FILE_MIN_BLANK_LENGTH,
    POS_PHYSICALOFFSET,
    POS_QUEUEOFFSET,
)
from store.format.hosts import HostAddress
from store.format.properties import tags_code
from store.queue.consume_queue import ConsumeQueueStore
from store.queue.units import file_name


def _templates(topics: list[str], queues: int, body_size: int) -> list[tuple[str, int, bytes, str]]:
    out = []
    for t in topics:
        for q in range(queues):
            tags = f"tag{q}"
            props = f"TAGS\x01{tags}\x02KEYS\x01k-{t}-{q}\x02"
            body = bytes((i * 7 + q) & 0xFF for i in range(body_size))
            rec = encode_message(Message(topic=t, body=body, queue_id=q, properties=props,
                                         born_timestamp=1_700_000_000_000, store_timestamp=1_700_000_000_500,
                                         born_host=HostAddress("192.0.2.10", 53422),
                                         store_host=HostAddress("198.51.100.20", 10911)))
            out.append((t, q, rec, tags))
    return out


def write_synthetic_store(root: Path, n_records: int, *, body_size: int = 100, topics: tuple[str, ...] = ("TopicA",),
                          queues: int = 4, segment_size: int = 1 << 20, units_per_file: int = 300_000,
                          write_consume_queues: bool = True) -> dict[str, int]:
    """Write ``n_records`` messages cycling over topics x queues; returns {"end": offset, "records": n}."""
    root = Path(root)
    cdir = root / COMMITLOG_DIR
    cdir.mkdir(parents=True, exist_ok=True)
    temps = _templates(list(topics), queues, body_size)
    k = len(temps)
    which = np.arange(n_records) % k
    sizes = np.array([len(t[2]) for t in temps], dtype=np.int64)[which]
    # Place records: a record goes to the next segment when it and 8 BLANK bytes do not fit.
    offsets = np.empty(n_records, dtype=np.int64)
    seg_of = np.empty(n_records, dtype=np.int64)
    pos, seg = 0, 0
    blanks: list[tuple[int, int]] = []        # (segment, position)
    sizes_l = sizes.tolist()
    for i, s in enumerate(sizes_l):
        if pos + s + END_FILE_MIN_BLANK_LENGTH > segment_size:
            blanks.append((seg, pos))
            seg, pos = seg + 1, 0
        offsets[i] = seg * segment_size + pos
        seg_of[i] = seg
        pos += s
    end = int(seg * segment_size + pos)
    queue_offsets = np.zeros(n_records, dtype=np.int64)
    for j in range(k):
        idx = np.flatnonzero(which == j)
        queue_offsets[idx] = np.arange(len(idx))
    for s in range(seg + 1):
        buf = np.zeros(segment_size, dtype=np.uint8)
        idx = np.flatnonzero(seg_of == s)
        for j in range(k):
            sel = idx[which[idx] == j]
            if not len(sel):
                continue
            rec = np.frombuffer(temps[j][2], dtype=np.uint8)
            local = offsets[sel] - s * segment_size
            cols = local[:, None] + np.arange(len(rec))
            buf[cols] = rec
            for field_pos, values in ((POS_PHYSICALOFFSET, offsets[sel]), (POS_QUEUEOFFSET, queue_offsets[sel])):
                be = values.astype(">i8").view(np.uint8).reshape(-1, 8)
                buf[local[:, None] + field_pos + np.arange(8)] = be
        for bs, bpos in blanks:
            if bs == s:
                buf[bpos:bpos + 8] = np.frombuffer(struct.pack(">iI", segment_size - bpos, BLANK_MAGIC_CODE), np.uint8)
        (cdir / file_name(s * segment_size)).write_bytes(buf.tobytes())
    if write_consume_queues:
        cq = ConsumeQueueStore(root, units_per_file=units_per_file)
        names = list(topics)
        tidx = np.array([names.index(temps[j][0]) for j in range(k)])[which]
        qids = np.array([temps[j][1] for j in range(k)])[which]
        tags = np.array([tags_code(temps[j][3]) for j in range(k)], dtype=np.int64)[which]
        cq.dispatch(names, tidx, qids, queue_offsets, offsets, sizes, tags)
        cq.close()
    cp = bytearray(CHECKPOINT_FILE_SIZE)
    struct.pack_into(">qqqqq", cp, 0, 1_700_000_000_500, 1_700_000_000_500, 1_700_000_000_500, 0, end)
    (root / CHECKPOINT_FILE).write_bytes(bytes(cp))
    return {"end": end, "records": n_records, "segments": seg + 1}
