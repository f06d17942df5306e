"""The Arrow side of batch encoding: MESSAGE_TABLE_SCHEMA, zero-copy access to Arrow columns,
and the plan of a batch (every record's lengths, version and flags, computed vectorized)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store.errors import DeadLetterReason, FieldLimitError, InvalidMessageError
from store.format.codec import CodecConfig, check_limits, message_version
from store.format.constants import (
    BORNHOST_V6_FLAG,
    CRC32_RESERVED_LEN,
    FIXED_PART_LENGTH,
    IPV4_HOST_LENGTH,
    IPV6_HOST_LENGTH,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH_V1,
    MAX_TOPIC_LENGTH_V2,
    PROPERTY_CRC32,
    STOREHOSTADDRESS_V6_FLAG,
)
from store.format.properties import delete_property

MESSAGE_TABLE_SCHEMA = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("queue_id", pa.int32()),
    pa.field("flag", pa.int32()),
    pa.field("body", pa.binary()),
    pa.field("properties", pa.string()),
    pa.field("tags", pa.string(), nullable=True),
    pa.field("sys_flag", pa.int32()),
    pa.field("born_timestamp", pa.int64()),
    pa.field("born_host", pa.binary()),
    pa.field("store_host", pa.binary()),
    pa.field("reconsume_times", pa.int32()),
    pa.field("prepared_transaction_offset", pa.int64()),
    pa.field("queue_offset", pa.int64()),         # optional column
])
OPTIONAL_COLUMNS = frozenset({"queue_offset", "tags"})

# --- Arrow column access -------------------------------------------------------------------------

def columns_of(table: pa.Table | pa.RecordBatch) -> dict[str, pa.Array]:
    """Each column as one Array, cast to its MESSAGE_TABLE_SCHEMA type when it has another (a
    value out of range is refused, never wrapped)."""
    out = {}
    for name in table.schema.names:
        col = table.column(name)
        if isinstance(col, pa.ChunkedArray):
            col = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
        idx = MESSAGE_TABLE_SCHEMA.get_field_index(name)
        if idx >= 0 and col.type != MESSAGE_TABLE_SCHEMA.field(idx).type:
            try:
                col = col.cast(MESSAGE_TABLE_SCHEMA.field(idx).type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise InvalidMessageError(
                    f"column {name} ({col.type}) does not fit {MESSAGE_TABLE_SCHEMA.field(idx).type}: {exc}") from None
        out[name] = col
    return out


def int_column(arr: pa.Array | None, dtype: Any, n: int = 0) -> np.ndarray:
    if arr is None:
        return np.zeros(n, dtype)
    if arr.null_count:
        arr = arr.fill_null(0)
    return np.asarray(arr.to_numpy(zero_copy_only=False)).astype(dtype, copy=False)


def binary_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets as int64, values buffer as uint8) of a binary/string array, honouring its slice offset."""
    large = pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)
    bufs = arr.buffers()
    width = 8 if large else 4
    offs = np.frombuffer(bufs[1], dtype=np.int64 if large else np.int32, count=len(arr) + 1, offset=arr.offset * width)
    values = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return offs.astype(np.int64), values


def pooled_bytes(size: int) -> np.ndarray:
    """A new writable uint8 array from pyarrow's memory pool, for a batch-sized buffer. numpy hands
    an allocation this large back to the OS when it is freed, so the next batch would fault fresh
    pages in again; the pool's pages are reused."""
    return np.frombuffer(pa.allocate_buffer(size), dtype=np.uint8)


def gather_binary(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(start offsets as int64, one new writable uint8 buffer of all the values) of a binary
    column, chunked or not, in ONE copy (combining the chunks first would be a second)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    parts = [binary_parts(c) for c in chunks if len(c)]
    sizes = np.concatenate([np.diff(offs) for offs, _ in parts]) if parts else np.zeros(0, np.int64)
    data = pooled_bytes(int(sizes.sum()))
    pos = 0
    for offs, values in parts:
        end = pos + int(offs[-1] - offs[0])
        data[pos:end] = values[offs[0]:offs[-1]]
        pos = end
    return np.cumsum(sizes) - sizes, data


def binary_column(cols: dict[str, pa.Array], name: str, n: int) -> pa.Array:
    arr = cols.get(name)
    if arr is None:
        return pa.array([b""] * n, pa.binary())
    if pa.types.is_string(arr.type):
        arr = arr.cast(pa.binary())
    return arr.fill_null(b"") if arr.null_count else arr


def fixed_rows(values: np.ndarray, offs: np.ndarray, rows: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes of each selected row of a binary column, as an (k, width) array."""
    starts = offs[rows]
    if len(starts) and np.all(np.diff(offs) == width) and offs[0] == 0:
        return values[: len(offs) * width - width].reshape(-1, width)[rows]
    windows = np.lib.stride_tricks.sliding_window_view(values, width) if len(values) >= width \
        else np.zeros((0, width), np.uint8)
    return windows[starts]


# --- the plan: every length and flag of every record, vectorized --------------------------------

@dataclass
class BatchPlan:
    n: int
    cols: dict[str, pa.Array]
    topic_names: list[str]
    topic_index: np.ndarray
    topic_parts: list[bytes]          # TOPICLENGTH + TOPIC per unique topic
    topic_len: np.ndarray
    version: np.ndarray
    body: pa.Array
    body_len: np.ndarray
    props: pa.Array
    props_len: np.ndarray             # as written, incl. a separator and the CRC reservation
    needs_separator: np.ndarray
    born_len: np.ndarray
    store_len: np.ndarray
    sys_flag: np.ndarray
    total: np.ndarray
    problems: np.ndarray              # per row: a reason that is not a size limit, or None
    problem_reasons: np.ndarray       # per row: the DeadLetterReason of its problem, or None


def plan_batch(table: pa.Table | pa.RecordBatch, config: CodecConfig) -> BatchPlan:
    cols = columns_of(table)
    missing = [f.name for f in MESSAGE_TABLE_SCHEMA if f.name not in cols and f.name not in OPTIONAL_COLUMNS]
    if missing:
        raise InvalidMessageError(f"message table lacks column(s) {', '.join(missing)} (see MESSAGE_TABLE_SCHEMA)")
    n = table.num_rows
    problems = np.full(n, None, dtype=object)
    problem_reasons = np.full(n, None, dtype=object)
    topic_col = cols["topic"]
    if topic_col.null_count:
        nulls = np.flatnonzero(null_mask(topic_col))
        problems[nulls], problem_reasons[nulls] = "topic is null", DeadLetterReason.TOPIC_INVALID
        topic_col = topic_col.fill_null("")
    topics = pc.dictionary_encode(topic_col)
    names = topics.dictionary.to_pylist()
    index = int_column(topics.indices, np.int32, n)
    encoded = [t.encode("utf-8") for t in names]
    versions = np.array([message_version(t, config) for t in names] or [1], dtype=np.int64)
    topic_len = np.array([len(b) for b in encoded] or [0], dtype=np.int64)[index] if n else np.zeros(0, np.int64)
    version = versions[index] if n else np.zeros(0, np.int64)
    parts = [((len(b) & 0xFFFF).to_bytes(2, "big") if v == 2 else bytes([len(b) & 0xFF])) + b
             for b, v in zip(encoded, versions.tolist())]

    body = binary_column(cols, "body", n)
    body_len = np.diff(binary_parts(body)[0]) if n else np.zeros(0, np.int64)
    props = binary_column(cols, "properties", n)
    needs_sep = np.zeros(n, dtype=bool)
    if config.enabled_append_prop_crc and n:
        has_crc = rows_containing(props, PROPERTY_CRC32.encode())
        if len(has_crc):
            py = props.to_pylist()
            for i in has_crc:
                py[i] = delete_property(py[i].decode("utf-8"), PROPERTY_CRC32).encode("utf-8")
            props = pa.array(py, pa.binary())
        p_offs, p_vals = binary_parts(props)
        p_len = np.diff(p_offs)
        last = p_vals[np.maximum(p_offs[1:] - 1, 0)] if len(p_vals) else np.zeros(n, np.uint8)
        needs_sep = (p_len > 0) & (last != 0x02)
        props_len = p_len + needs_sep + CRC32_RESERVED_LEN
    else:
        props_len = np.diff(binary_parts(props)[0]) if n else np.zeros(0, np.int64)

    born_len = np.diff(binary_parts(binary_column(cols, "born_host", n))[0]) if n else np.zeros(0, np.int64)
    store_len = np.diff(binary_parts(binary_column(cols, "store_host", n))[0]) if n else np.zeros(0, np.int64)
    for name, lens in (("born_host", born_len), ("store_host", store_len)):
        bad = np.flatnonzero((lens != IPV4_HOST_LENGTH) & (lens != IPV6_HOST_LENGTH))
        problems[bad] = [f"{name} is {int(lens[i])} bytes; expected 8 (IPv4) or 20 (IPv6)" for i in bad]
        problem_reasons[bad] = DeadLetterReason.OTHER
    sys_flag = int_column(cols.get("sys_flag"), np.int64, n)
    for flag, lens, name in ((BORNHOST_V6_FLAG, born_len, "BORNHOST_V6_FLAG"),
                             (STOREHOSTADDRESS_V6_FLAG, store_len, "STOREHOSTADDRESS_V6_FLAG")):
        bad = np.flatnonzero((sys_flag & flag != 0) & (lens == IPV4_HOST_LENGTH))
        problems[bad] = [f"sys_flag {int(sys_flag[i]):#x} has {name} but the host is IPv4" for i in bad]
        problem_reasons[bad] = DeadLetterReason.OTHER
        sys_flag = sys_flag | np.where(lens == IPV6_HOST_LENGTH, flag, 0)
    total = (FIXED_PART_LENGTH + body_len + topic_len + props_len + (born_len == IPV6_HOST_LENGTH) * 12
             + (store_len == IPV6_HOST_LENGTH) * 12 + (version == 2))
    return BatchPlan(n, cols, names, index, parts, topic_len, version, body, body_len, props, props_len, needs_sep,
                 born_len, store_len, sys_flag.astype(np.int32), total.astype(np.int64), problems,
                     problem_reasons)


def null_mask(arr: pa.Array) -> np.ndarray:
    return np.asarray(pc.is_null(arr))


def limit_mask(plan: BatchPlan, config: CodecConfig) -> np.ndarray:
    topic_limit = np.where(plan.version == 2, MAX_TOPIC_LENGTH_V2, MAX_TOPIC_LENGTH_V1)
    return ((plan.props_len > MAX_PROPERTIES_LENGTH) | (plan.topic_len > topic_limit)
            | (plan.body_len > config.max_message_size) | (plan.total > config.max_record_size))


def limit_error(plan: BatchPlan, i: int, config: CodecConfig) -> FieldLimitError:
    try:
        check_limits(int(plan.body_len[i]), int(plan.topic_len[i]), int(plan.version[i]), int(plan.props_len[i]),
                     int(plan.total[i]), config, row=i)
    except FieldLimitError as exc:
        return exc
    raise AssertionError(f"row {i} flagged over a limit but check_limits accepts it")


def binary_from(values: np.ndarray, offs: np.ndarray) -> pa.Array:
    large = len(values) > 0x7FFFFFFF
    o = offs.astype(np.int64 if large else np.int32)
    return pa.Array.from_buffers(pa.large_binary() if large else pa.binary(), len(offs) - 1,
                                 [None, pa.py_buffer(o), pa.py_buffer(values)])


def fixed_binary(values: np.ndarray, width: int, n: int) -> pa.Array:
    return binary_from(np.ascontiguousarray(values).view(np.uint8).reshape(-1),
                        np.arange(n + 1, dtype=np.int64) * width)


def rows_containing(arr: pa.Array, marker: bytes) -> np.ndarray:
    """Rows of a binary column whose value contains ``marker``: one regex scan of the values
    buffer (no copy); a match spanning two rows is discarded."""
    offs, values = binary_parts(arr)
    if not len(arr):
        return np.zeros(0, np.int64)
    hits = [m.start() for m in re.finditer(re.escape(marker), memoryview(values)[offs[0]:offs[-1]])]
    if not hits:
        return np.zeros(0, np.int64)
    starts = np.asarray(hits, dtype=np.int64) + offs[0]
    rows = np.searchsorted(offs, starts, side="right") - 1
    inside = starts + len(marker) <= offs[rows + 1]
    return np.unique(rows[inside])


def index_keys_column(table: pa.Table | pa.RecordBatch, name: str, rows: np.ndarray | None
                      ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(key hashes, key counts) of the list column ``name`` of ``table`` (its ``rows``): every key in
    row order and how many each row has; Nones when there is no such column or a row has no list."""
    if name not in table.schema.names:
        return None, None
    col = table.column(name)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if rows is not None:
        col = col.take(pa.array(rows))
    if col.null_count or not pa.types.is_integer(col.type.value_type):
        return None, None
    hashes = np.asarray(pc.list_flatten(col).cast(pa.int32()), dtype=np.int32)
    return hashes, np.asarray(pc.list_value_length(col), dtype=np.int32)
