"""Vectorized decoding of Kafka record batches (message format v2) straight into Arrow columns.

kafka-python decodes every record in pure Python and builds a ConsumerRecord for it (~20 us a
record); here only the record-length varint is walked per record, every other field of all the
records of a fetch is decoded at once with numpy, and keys/values/headers become Arrow binary
arrays gathered from the fetched bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ingest.kafka.options import KafkaSourceError

_MAX_VARINT = 10  # bytes of a 64-bit varint
HEADER_FIELDS = [pa.field("key", pa.string()), pa.field("value", pa.binary())]
HEADER_TYPE = pa.list_(pa.struct(HEADER_FIELDS))


class CorruptBatchError(KafkaSourceError):
    """A fetched record batch does not parse as message format v2."""


@dataclass
class BatchSection:
    """The records part of one v2 batch (decompressed) and the batch fields the records need."""

    records: bytes
    count: int
    base_offset: int
    first_timestamp: int
    max_timestamp: int
    log_append_time: bool
    wire_bytes: int = 0       # the batch as fetched (compressed), header included


def _record_starts(buf: bytes, count: int, base: int) -> tuple[list[int], list[int], int]:
    """Start and end of each record's body (after its length varint) in ``buf``; the only
    per-record loop."""
    starts: list[int] = []
    ends: list[int] = []
    append = starts.append
    pos = base
    try:
        for _ in range(count):
            b = buf[pos]
            pos += 1
            value = b & 0x7F
            shift = 7
            while b & 0x80:
                b = buf[pos]
                pos += 1
                value |= (b & 0x7F) << shift
                shift += 7
            length = (value >> 1) ^ -(value & 1)
            append(pos)
            pos += length
            ends.append(pos)
    except IndexError:
        raise CorruptBatchError(f"record batch ends inside record {len(starts)} of {count}") from None
    return starts, ends, pos


def _varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints at each position: (values int64, sizes int64). ``buf`` has _MAX_VARINT pad bytes.

    Byte by byte over only the varints still going: most record fields are one or two bytes."""
    byte = buf[pos].astype(np.uint64)
    raw = byte & np.uint64(0x7F)
    sizes = np.ones(pos.size, np.int64)
    going = np.nonzero(byte & np.uint64(0x80))[0]
    shift = 7
    while going.size:
        if shift >= 7 * _MAX_VARINT:
            raise CorruptBatchError("varint longer than 10 bytes in a record")
        byte = buf[pos[going] + sizes[going]].astype(np.uint64)
        raw[going] |= (byte & np.uint64(0x7F)) << np.uint64(shift)
        sizes[going] += 1
        going = going[(byte & np.uint64(0x80)) != 0]
        shift += 7
    values = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return values, sizes


def _gather_binary(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, string: bool = False) -> pa.Array:
    """Arrow binary (or string) array of buf[start:start+len], null where len < 0.

    The ranges are disjoint and ascending, so an Arrow array over the whole buffer whose elements
    alternate wanted range / bytes between ranges needs only offsets (no copy); Arrow's take of
    the even elements then copies the wanted bytes in C++."""
    n = starts.size
    valid = lengths >= 0
    ends = starts + np.where(valid, lengths, 0)
    if buf.size >= 2**31:
        raise KafkaSourceError(f"one fetch of {buf.size} bytes is over Arrow's 2 GiB binary limit; "
                               "lower kafka.max.partition.fetch.bytes")
    offsets = np.empty(2 * n + 1, np.int32)
    offsets[0:2 * n:2] = starts
    offsets[1:2 * n:2] = ends
    offsets[2 * n] = ends[-1] if n else 0
    if n and np.any(np.diff(offsets) < 0):
        raise CorruptBatchError("record fields overlap: the batch is damaged")
    null_count = int(n - valid.sum())
    bitmap = None
    if null_count:
        mask = np.ones(2 * n, bool)
        mask[0::2] = valid
        bitmap = pa.py_buffer(np.packbits(mask, bitorder="little"))
    typ = pa.string() if string else pa.binary()
    whole = pa.Array.from_buffers(typ, 2 * n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(buf)],
                                  null_count=null_count)
    arr = whole.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))
    if string:
        arr.validate(full=True)  # header keys must be UTF-8
    return arr


def decode_sections(sections: Sequence[BatchSection]) -> dict[str, pa.Array]:
    """Columns key, value, offset, timestamp (ms), timestampType, headers of all records of the
    sections, in order. Raises CorruptBatchError when a record does not parse."""
    chunks: list[bytes] = []
    starts_all: list[np.ndarray] = [np.zeros(0, np.int64)]
    ends_all: list[np.ndarray] = [np.zeros(0, np.int64)]
    base = 0
    for s in sections:
        starts, ends, end = _record_starts(s.records, s.count, 0)
        if end != len(s.records):
            raise CorruptBatchError(f"batch at offset {s.base_offset}: records take {end} bytes of "
                                    f"{len(s.records)}")
        starts_all.append(np.array(starts, np.int64) + base)
        ends_all.append(np.array(ends, np.int64) + base)
        chunks.append(s.records)
        base += len(s.records)
    counts = np.array([s.count for s in sections], np.int64)
    buf = np.frombuffer(b"".join(chunks) + bytes(_MAX_VARINT), np.uint8)
    pos = np.concatenate(starts_all)
    ends = np.concatenate(ends_all)
    n = pos.size

    pos = pos + 1  # attributes byte (unused in v2)
    ts_delta, size = _varints(buf, pos)
    pos = pos + size
    off_delta, size = _varints(buf, pos)
    pos = pos + size
    key_len, size = _varints(buf, pos)
    key_start = pos + size
    pos = key_start + np.maximum(key_len, 0)
    val_len, size = _varints(buf, pos)
    val_start = pos + size
    pos = val_start + np.maximum(val_len, 0)
    header_count, size = _varints(buf, pos)
    pos = pos + size
    if (header_count < 0).any() or (key_len < -1).any() or (val_len < -1).any():
        raise CorruptBatchError("negative header count or length below -1 in a record")

    # headers, one "round" at a time: round j decodes header j of every record having more than j
    h_rec, h_round, hk_start, hk_len, hv_start, hv_len = [], [], [], [], [], []
    for j in range(int(header_count.max()) if n else 0):
        rows = np.nonzero(header_count > j)[0]
        p = pos[rows]
        kl, sz = _varints(buf, p)
        ks = p + sz
        p = ks + np.maximum(kl, 0)
        vl, sz = _varints(buf, p)
        vs = p + sz
        pos[rows] = vs + np.maximum(vl, 0)
        if (kl < 0).any():
            raise CorruptBatchError("a record header has a null key")
        h_rec.append(rows)
        h_round.append(np.full(rows.size, j))
        hk_start.append(ks), hk_len.append(kl), hv_start.append(vs), hv_len.append(vl)
    if not np.array_equal(pos, ends):
        bad = int(np.nonzero(pos != ends)[0][0])
        raise CorruptBatchError(f"record {bad} of the fetch: its fields do not add up to its length")

    base_offset = np.repeat(np.array([s.base_offset for s in sections], np.int64), counts)
    first_ts = np.repeat(np.array([s.first_timestamp for s in sections], np.int64), counts)
    max_ts = np.repeat(np.array([s.max_timestamp for s in sections], np.int64), counts)
    append_time = np.repeat(np.array([s.log_append_time for s in sections], bool), counts)
    timestamps = np.where(append_time, max_ts, first_ts + ts_delta)

    if h_rec:
        rec = np.concatenate(h_rec)
        order = np.lexsort((np.concatenate(h_round), rec))
        keys = _gather_binary(buf, np.concatenate(hk_start)[order], np.concatenate(hk_len)[order], string=True)
        vals = _gather_binary(buf, np.concatenate(hv_start)[order], np.concatenate(hv_len)[order])
    else:
        keys, vals = pa.array([], pa.string()), pa.array([], pa.binary())
    list_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(header_count, out=list_offsets[1:])
    headers = pa.ListArray.from_arrays(pa.array(list_offsets), pa.StructArray.from_arrays([keys, vals],
                                                                                           fields=HEADER_FIELDS),
                                       type=HEADER_TYPE)
    return {
        "key": _gather_binary(buf, key_start, key_len),
        "value": _gather_binary(buf, val_start, val_len),
        "offset": pa.array(base_offset + off_delta, pa.int64()),
        "timestamp": pa.array(timestamps, pa.int64()),
        "timestampType": pa.array(append_time.astype(np.int32), pa.int32()),
        "headers": headers,
    }
