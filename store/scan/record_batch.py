"""Segment bytes -> Arrow record batches: every message of a byte range of one segment as columns,
with no Python step per record.

The walk and the record checks are record_check.py's (the ones recovery and verify use). The fixed
fields, hosts, topics and bodies then come from one pass over the records: _record_columns.c
(built by setup.py), a batch of records at most 2 GiB long (its int32 body offsets, and Arrow's
binary column's), more records in more batches. tests/store/scan/test_readback_columns.py holds the columns
to the messages written, tests/store/scan/test_readback_arrow.py to the golden stores. Bodies are copied into a plain ``binary`` column, or with ``zero_copy`` are views
(binary_view: pointers into the mapped segment). Properties are split into a map<string, string> the way RocketMQ's
``MessageDecoder.string2messageProperties`` does (arrow_text.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store.errors import CorruptRecordError
from store.scan.arrow_text import binary_views, few_distinct, parse_properties
from store.format.codec import CodecConfig
from store.format.constants import (
    IPV4_HOST_LENGTH,
    MIN_RECORD_LENGTH,
    POS_BORNHOST,
    PROPERTY_KAFKA_OFFSET,
    PROPERTY_KAFKA_PARTITION,
    PROPERTY_KAFKA_TOPIC,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
)
from store.format.layout import be_ints, host_positions
from store.scan.fields import byte_rows, text_ids
from store.format.hosts import HostAddress
from store.format.properties import java_string
from store.scan import _record_columns as _columns_kernel
from store.scan.record_check import RecordCheck, ScanColumns, check_record, first_bad, scan_segment_fast

READBACK_SCHEMA = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("queueId", pa.int32(), nullable=False),
    pa.field("queueOffset", pa.int64(), nullable=False),
    pa.field("physicalOffset", pa.int64(), nullable=False),
    pa.field("storeTimestamp", pa.int64(), nullable=False),
    pa.field("bornTimestamp", pa.int64(), nullable=False),
    pa.field("bornHost", pa.string(), nullable=False),
    pa.field("storeHost", pa.string(), nullable=False),
    pa.field("sysFlag", pa.int32(), nullable=False),
    pa.field("flag", pa.int32(), nullable=False),
    pa.field("reconsumeTimes", pa.int32(), nullable=False),
    pa.field("keys", pa.string()),
    pa.field("tags", pa.string()),
    pa.field("properties", pa.map_(pa.string(), pa.string()), nullable=False),
    pa.field("body", pa.binary(), nullable=False),
    pa.field("kafka_topic", pa.string()),
    pa.field("kafka_partition", pa.int32()),
    pa.field("kafka_offset", pa.int64()),
])
"""The columns of a store read back (StoreReader.record_batches, the rocketmq-commitlog Spark source).
Timestamps are RocketMQ's epoch milliseconds; hosts are "ip:port" ("[v6]:port")."""

_NAMED = (PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_KAFKA_TOPIC, PROPERTY_KAFKA_PARTITION, PROPERTY_KAFKA_OFFSET)
DEFAULT_BATCH_SIZE = 65_536
SCAN_WINDOW_BYTES = 32 << 20        # scanned, then turned into columns, at a time (bounded memory)


@dataclass(frozen=True)
class RecordFilter:
    """Which messages to keep (all when every field is None). Store timestamps are inclusive
    bounds in epoch milliseconds."""

    topics: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    min_store_timestamp: int | None = None
    max_store_timestamp: int | None = None

    @classmethod
    def of(cls, topics: Iterable[str] | None = None, queue_ids: Iterable[int] | None = None,
           min_store_timestamp: int | None = None, max_store_timestamp: int | None = None) -> RecordFilter:
        return cls(frozenset(topics) if topics is not None else None,
                   frozenset(queue_ids) if queue_ids is not None else None, min_store_timestamp, max_store_timestamp)

    @property
    def everything(self) -> bool:
        return self == RecordFilter()


def segment_record_batches(buf: Any, base_offset: int, start: int, end: int, *, until: int | None = None,
                           batch_size: int = DEFAULT_BATCH_SIZE, record_filter: RecordFilter | None = None,
                           config: CodecConfig | None = None, zero_copy: bool = False,
                           segment_name: str = "") -> Iterator[pa.RecordBatch]:
    """The messages of one segment (``buf``, starting at global ``base_offset``) from position
    ``start`` (a record start) to ``end`` (a record boundary: the commit point or the segment's
    size), or only those starting before ``until``. Zeroed space or a damaged record before
    ``end`` raises CorruptRecordError naming its offset: committed data is never skipped. A BLANK
    record ends the segment. With ``zero_copy`` the body is a binary_view into ``buf``."""
    config = config or CodecConfig(check_crc_on_recover=False)
    rf = record_filter or RecordFilter()
    arr = np.frombuffer(buf, dtype=np.uint8)
    pos = start
    stop_at = end if until is None else min(until, end)
    while pos < stop_at:
        scan = scan_segment_fast(buf, base_offset, end, config, pos, min(pos + SCAN_WINDOW_BYTES, stop_at),
                                 columns=True)
        stop = scan.stop
        starts = scan.offsets - base_offset
        if len(starts):
            for a in range(0, len(starts), batch_size):
                yield from _batches(arr, base_offset, starts[a:a + batch_size], scan.sizes[a:a + batch_size],
                                    scan.columns.rows(a, a + batch_size), rf, zero_copy)
        if stop.kind == "pause":
            pos = stop.offset - base_offset
            continue
        if stop.kind == "blank" or stop.offset - base_offset >= stop_at:
            return
        if stop.kind == "end":
            raise CorruptRecordError(stop.offset, "end", f"zeroed space below the readable end "
                                     f"{base_offset + end}: committed records are missing", segment_name)
        raise CorruptRecordError(stop.offset, stop.error_kind or "error", stop.detail, segment_name)


def record_batches_at(buf: Any, base_offset: int, starts: np.ndarray, sizes: np.ndarray, *,
                      batch_size: int = DEFAULT_BATCH_SIZE, record_filter: RecordFilter | None = None,
                      config: CodecConfig | None = None, zero_copy: bool = False,
                      segment_name: str = "") -> Iterator[pa.RecordBatch]:
    """As segment_record_batches, for the records at known positions ``starts`` (ascending, with
    their TOTALSIZEs): what the consume queues point at, read without walking the segment. Each
    record is checked as the scan checks it; a failure raises CorruptRecordError."""
    config = config or CodecConfig(check_crc_on_recover=False)
    rf = record_filter or RecordFilter()
    arr = np.frombuffer(buf, dtype=np.uint8)
    for a in range(0, len(starts), batch_size):
        s, z = starts[a:a + batch_size], sizes[a:a + batch_size]
        bad, cols = check_records(buf, base_offset, s, z, config)
        yield from _batches(arr, base_offset, s[:len(cols.queue_id)], z[:len(cols.queue_id)], cols, rf, zero_copy)
        if bad is not None:
            raise CorruptRecordError(bad.offset, bad.error_kind or "error", bad.detail, segment_name)


def check_records(buf: Any, base_offset: int, starts: np.ndarray, sizes: np.ndarray,
                  config: CodecConfig | None = None) -> tuple[RecordCheck | None, ScanColumns]:
    """The scan's checks of records at known positions (from consume-queue units, say) instead of
    walking to them: (the first failure or None, the fields of the records before it)."""
    config = config or CodecConfig()
    mv = memoryview(buf)
    mv = mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")
    arr = np.frombuffer(mv, dtype=np.uint8)
    starts = np.asarray(starts, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    fits = (starts >= 0) & (sizes >= MIN_RECORD_LENGTH) & (starts + sizes <= len(arr))
    n = int(np.argmin(fits)) if not fits.all() else len(starts)
    first, cols = first_bad(arr, mv, starts[:n], sizes[:n], base_offset, config)
    if first < len(starts):
        at = int(starts[first])
        check = check_record(mv, at, min(at + max(int(sizes[first]), 0), len(arr)), base_offset, config) \
            if 0 <= at < len(arr) else _failure(base_offset + at, "size", "outside the segment")
        if check.ok:   # well-formed, but not the record the unit says (another size)
            check = _failure(base_offset + at, "size", f"the record is {check.size} bytes, not {int(sizes[first])}")
        return check, cols.head(first)
    return None, cols


def _failure(offset: int, kind: str, detail: str) -> RecordCheck:
    return RecordCheck("error", offset, 0, kind, detail)


def _batches(arr: np.ndarray, base_offset: int, starts: np.ndarray, sizes: np.ndarray, cols: ScanColumns,
             rf: RecordFilter, zero_copy: bool, most_bytes: int | None = None) -> Iterator[pa.RecordBatch]:
    """The READBACK_SCHEMA batches of these records, those the filter keeps: one, or one per run
    of records of at most ``most_bytes`` (2 GiB: an Arrow binary column's int32 offsets, and the
    C pass's)."""
    most_bytes = _MOST_BATCH_BYTES if most_bytes is None else most_bytes
    ends = np.cumsum(sizes, dtype=np.int64)
    a = 0
    while a < len(starts):
        b = max(a + 1, int(np.searchsorted(ends, (ends[a - 1] if a else 0) + most_bytes, side="right")))
        batch = _batch(arr, base_offset, starts[a:b], sizes[a:b], cols.rows(a, b), rf, zero_copy)
        if batch.num_rows:
            yield batch
        a = b


_MOST_BATCH_BYTES = (1 << 31) - 1


def _assemble(arr: np.ndarray, topics: pa.Array, cols: Any, physical_offset: np.ndarray,
              store_ts: np.ndarray, born_ts: np.ndarray, born_host: pa.Array, store_host: pa.Array,
              flag: np.ndarray, reconsume: np.ndarray, props_pos: np.ndarray, props_len: np.ndarray,
              body: pa.Array, zero_copy: bool) -> pa.RecordBatch:
    """The READBACK_SCHEMA batch from the columns either way builds; the properties split here.
    ``cols``: anything with queue_id, queue_offset and sys_flag per record."""
    props = parse_properties(arr, props_pos, props_len, _NAMED)
    keys, tags, kafka_topic, kafka_partition, kafka_offset = (props.named[name] for name in _NAMED)
    columns = [
        topics, _int32(cols.queue_id), pa.array(cols.queue_offset), pa.array(physical_offset), pa.array(store_ts),
        pa.array(born_ts), born_host, store_host, _int32(cols.sys_flag), _int32(flag), _int32(reconsume),
        keys, tags, props.map, body,
        kafka_topic, _to_int(kafka_partition, pa.int32()), _to_int(kafka_offset, pa.int64()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=_schema(zero_copy))


def _batch(arr: np.ndarray, base_offset: int, starts: np.ndarray, sizes: np.ndarray, cols: ScanColumns,
             rf: RecordFilter, zero_copy: bool) -> pa.RecordBatch:
    if not rf.everything:   # rows dropped before their columns are built
        idx = np.flatnonzero(_keep_scanned(arr, starts, cols, rf))
        starts, sizes, cols = starts[idx], sizes[idx], cols.take(idx)
    n = len(starts)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    topic_pos = np.ascontiguousarray(cols.topic_pos, dtype=np.int64)
    topic_len = np.ascontiguousarray(cols.topic_len, dtype=np.int64)
    flag, reconsume, born, store, topic_id, body_len = (np.empty(n, dtype=np.int32) for _ in range(6))
    born_ts, store_ts, body_pos = (np.empty(n, dtype=np.int64) for _ in range(3))
    body_offsets = np.empty(n + 1, dtype=np.int32)
    body_data = pa.allocate_buffer(0 if zero_copy else int(np.sum(sizes)), resizable=True)
    hosts, topics = _columns_kernel.columns(arr, starts, topic_pos, topic_len, flag, born_ts, store_ts, reconsume,
                                            born, store, topic_id, body_pos, body_len, body_offsets, body_data)
    sys_flag = cols.sys_flag
    if hosts == -1:     # many distinct hosts: grouped the numpy way
        at = host_positions(sys_flag)
        born_host = _hosts(arr, starts + POS_BORNHOST, at.born_host_length != IPV4_HOST_LENGTH)
        store_host = _hosts(arr, starts + at.store_host_pos, at.store_host_length != IPV4_HOST_LENGTH)
    else:
        names = pa.array([str(HostAddress.from_bytes(arr[a:a + k])) for a, k in hosts], pa.string())
        born_host, store_host = names.take(pa.array(born)), names.take(pa.array(store))
    if topics == -1:
        topic_ids, topic_list = text_ids(arr, topic_pos, topic_len)
    else:
        topic_ids, topic_list = topic_id, [java_string(arr[a:a + k].tobytes()) for a, k in topics]
    if zero_copy:
        body = binary_views(arr, body_pos, body_len)
    else:
        body_data.resize(int(body_offsets[-1]))
        body = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(body_offsets), body_data])
    return _assemble(arr, pa.array(topic_list, pa.string()).take(pa.array(topic_ids)), cols, starts + base_offset,
                     store_ts, born_ts, born_host, store_host, flag, reconsume, topic_pos + topic_len + 2,
                     np.maximum(cols.props_len, 0), body, zero_copy)


def _keep_scanned(arr: np.ndarray, starts: np.ndarray, cols: ScanColumns, rf: RecordFilter) -> np.ndarray:
    """_keep from the scan's columns, reading topics and store timestamps only when it filters on them."""
    topic_id, topics = text_ids(arr, cols.topic_pos, cols.topic_len) if rf.topics is not None else (None, [])
    bounded = rf.min_store_timestamp is not None or rf.max_store_timestamp is not None
    store_ts = be_ints(arr, starts + host_positions(cols.sys_flag).store_timestamp_pos, 8) if bounded else None
    keep = _keep(topic_id, topics, cols.queue_id, store_ts, rf)
    assert keep is not None
    return keep


def _int32(values: np.ndarray) -> pa.Array:
    return pa.array(values.astype(np.int32, copy=False))


def _schema(zero_copy: bool) -> pa.Schema:
    return READBACK_SCHEMA if not zero_copy else \
        READBACK_SCHEMA.set(READBACK_SCHEMA.get_field_index("body"), pa.field("body", pa.binary_view(), False))


def _keep(topic_id: np.ndarray | None, topics: list[str], queue_id: np.ndarray, store_ts: np.ndarray | None,
          rf: RecordFilter) -> np.ndarray | None:
    """The rows the filter keeps, or None for all (topic ids and store timestamps are only read
    when it filters on them)."""
    if rf.everything:
        return None
    keep = np.ones(len(queue_id), dtype=bool)
    if rf.topics is not None:
        assert topic_id is not None
        wanted = [i for i, t in enumerate(topics) if t in rf.topics]
        keep &= np.isin(topic_id, wanted)
    if rf.queue_ids is not None:
        keep &= np.isin(queue_id, list(rf.queue_ids))
    if rf.min_store_timestamp is not None:
        assert store_ts is not None
        keep &= store_ts >= rf.min_store_timestamp
    if rf.max_store_timestamp is not None:
        assert store_ts is not None
        keep &= store_ts <= rf.max_store_timestamp
    return keep


def _hosts(arr: np.ndarray, pos: np.ndarray, v6: np.ndarray) -> pa.Array:
    """"ip:port" of each host field; a store has few distinct hosts, so each is spelled once."""
    n = len(pos)
    out = np.empty(n, dtype=np.int64)
    names: list[str] = []
    for six in (False, True):
        rows = np.flatnonzero(v6 == six) if six or v6.any() else np.arange(n)
        if not len(rows):
            continue
        width = 20 if six else 8
        raw = np.ascontiguousarray(byte_rows(arr, pos[rows], width))
        if six:
            uniq, inverse = np.unique(raw.view(f"V{width}")[:, 0], return_inverse=True)
            found = [u.tobytes() for u in uniq]
        else:
            words = raw.view(np.uint64)[:, 0]
            inverse, where = few_distinct(words)
            found = [words[w].tobytes() for w in where.tolist()]
        out[rows] = inverse.reshape(-1) + len(names)
        names.extend(str(HostAddress.from_bytes(u)) for u in found)
    return pa.array(names, pa.string()).take(pa.array(out))


def _to_int(values: pa.Array, typ: pa.DataType) -> pa.Array:
    """Digits as an integer column; anything Java's parseInt/parseLong would refuse is null (and
    digits of other scripts, which Java takes but no Kafka coordinate holds)."""
    if values.null_count == len(values):
        return pa.nulls(len(values), typ)
    if pc.all(pc.ascii_is_decimal(values)).as_py():         # the usual case: plain digits (nulls skipped)
        as_text = values
    else:   # a sign, or text Java refuses (Arrow's cast alone would also take "0x1f")
        ok = pc.match_substring_regex(values, r"^[+-]?[0-9]{1,19}$")
        as_text = pc.if_else(ok, values, pa.scalar(None, pa.string()))
    limit = 2**31 if typ == pa.int32() else 2**63
    try:
        return pc.cast(as_text, typ)
    except (pa.ArrowInvalid, OverflowError):
        return pa.array([int(v) if v is not None and -limit <= int(v) < limit else None
                         for v in as_text.to_pylist()], typ)


