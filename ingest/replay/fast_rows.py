"""The clean pieces of an export read with pyarrow's own readers, a column at a time: most pieces of
most exports hold no bad row, and reading them line by line (ingest.replay.export_rows) costs about
20 us a row in Python. A piece is taken this way only when every row of it is as the line-by-line
reading would take it without a reason (its position usable, key, value and header values base64,
its timestamp ISO-8601 with a zone); anything else, and the piece is read line by line, so that
every bad row is still named by file and line. tests/ingest/replay/test_replay_file_pieces.py holds the two ways
equal."""

from __future__ import annotations

import binascii
import io

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from ingest.replay.export_rows import HEADERS, INT32_MAX, ROWS_SCHEMA

try:
    from pybase64 import b64decode as _simd_b64decode

    def _decode_base64(text: np.ndarray) -> bytes:
        """Base64 text of whole groups, decoded; binascii.Error for a character outside the alphabet."""
        return _simd_b64decode(text, validate=True)
except ImportError:     # the same results, several times slower (an executor's Python without pybase64)
    def _decode_base64(text: np.ndarray) -> bytes:
        return binascii.a2b_base64(text.tobytes(), strict_mode=True)

PROBLEM = ROWS_SCHEMA.field(len(ROWS_SCHEMA) - 1).name
_TEXT_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
JSON_SCHEMA = pa.schema([("key", pa.string()), ("value", pa.string()), ("topic", pa.string()),
                         ("partition", pa.int64()), ("offset", pa.int64()), ("timestamp", pa.string()),
                         ("timestampType", pa.int64()), ("headers", _TEXT_HEADERS)])
POSITION_SCHEMA = pa.schema([JSON_SCHEMA.field(c) for c in ("topic", "partition", "offset", "timestamp")])
_PAD = ord("=")
_ZERO_DIGIT = ord("A")
# what datetime.fromisoformat reads the same as Arrow's cast: seconds, an optional fraction, a zone
_ISO = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$"


class _NotClean(Exception):
    """The piece holds a row the line-by-line reading must name."""


def jsonl_rows(data: bytes) -> pa.Table | None:
    """The rows of ``data`` (whole lines of a jsonl export) in ROWS_SCHEMA, or None when a row of it
    is not clean (see the module docstring)."""
    try:
        return _clean_rows(_read(data, JSON_SCHEMA))
    except (pa.ArrowException, _NotClean):
        return None


def jsonl_positions(data: bytes, timestamps: bool = True) -> pa.Table | None:
    """Only the position columns of jsonl_rows(data) (topic, partition, offset, and the timestamp unless
    ``timestamps`` is false): what the scan needs, the other fields parsed but not built, or None when
    a row of it is not clean."""
    try:
        raw = _read(data, POSITION_SCHEMA if timestamps else pa.schema(list(POSITION_SCHEMA)[:3]))
        cols = {"topic": raw.column("topic"), "partition": raw.column("partition").cast(pa.int32()),
                "offset": raw.column("offset")}
        if timestamps:
            cols["timestamp"] = _clean_positions(raw)
        else:
            _check_positions(raw)
        return pa.table(cols)
    except (pa.ArrowException, _NotClean):
        return None


def _read(data: bytes, schema: pa.Schema) -> pa.Table:
    return pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(use_threads=False,
                                                                      block_size=max(len(data), 1 << 20)),
                        parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"))


def _check_positions(raw: pa.Table) -> None:
    """Raises _NotClean unless every row's topic, partition and offset are usable."""
    topic, partition, offset = (raw.column(c) for c in ("topic", "partition", "offset"))
    if topic.null_count or partition.null_count or offset.null_count or raw.num_rows and (
            pc.min(pc.utf8_length(topic)).as_py() == 0 or pc.min(partition).as_py() < 0
            or pc.max(partition).as_py() > INT32_MAX or pc.min(offset).as_py() < 0):
        raise _NotClean


def _clean_positions(raw: pa.Table) -> pa.ChunkedArray:
    """The timestamps (microseconds, UTC) when every row's position and timestamp are clean."""
    n = raw.num_rows
    _check_positions(raw)
    ts = raw.column("timestamp")
    if ts.null_count or (n and not pc.all(pc.match_substring_regex(ts, _ISO)).as_py()):
        raise _NotClean
    return ts.cast(pa.timestamp("us", tz="UTC"))


def _clean_rows(raw: pa.Table) -> pa.Table:
    n = raw.num_rows
    topic, partition, offset = (raw.column(c) for c in ("topic", "partition", "offset"))
    ts = _clean_positions(raw)
    kind = pc.fill_null(raw.column("timestampType"), 0)
    if n and (pc.min(kind).as_py() < -(2**31) or pc.max(kind).as_py() > INT32_MAX):
        raise _NotClean
    cols = {"key": _unbase64(raw.column("key")), "value": _unbase64(raw.column("value")), "topic": topic,
            "partition": partition.cast(pa.int32()), "offset": offset,
            "timestamp": ts, "timestampType": kind.cast(pa.int32()),
            "headers": _headers(raw.column("headers")), PROBLEM: pa.nulls(n, pa.string())}
    return pa.table([cols[f.name] for f in ROWS_SCHEMA], schema=ROWS_SCHEMA)


def _unbase64(text: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each value decoded, all of them at once; refuses (_NotClean) whatever b64decode(validate=True),
    the line by line way, refuses, and a little more (a value that is not whole groups of four, or
    padding anywhere but its last two characters), which that way then reads and names."""
    arr = text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=n + 1, offset=arr.offset * 4).astype(np.int64)
    lengths = np.diff(offsets)
    if np.any(lengths % 4):
        raise _NotClean
    chars = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]] if n else np.empty(0, np.uint8)
    ends = offsets[1:] - offsets[0]
    pads = np.flatnonzero(chars == _PAD)
    owner = np.searchsorted(ends, pads, side="right")          # the value each '=' is in
    before_end = ends[owner] - pads                            # 1: its last character, 2: the one before
    if np.any(before_end > 2) or np.any(chars[pads[before_end == 2] + 1] != _PAD):
        raise _NotClean
    digits = chars.copy()
    digits[pads] = _ZERO_DIGIT      # the values' groups decoded as one text, each '=' a zero, its byte then dropped
    try:
        decoded = np.frombuffer(_decode_base64(digits), dtype=np.uint8)
    except binascii.Error:
        raise _NotClean from None     # a character outside the alphabet
    if pads.size:
        keep = np.ones(decoded.size, dtype=bool)
        keep[ends[owner] // 4 * 3 - before_end] = False
        decoded = decoded[keep]
    sizes = lengths // 4 * 3 - np.bincount(owner, minlength=n)
    new_offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    out_arr = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(new_offsets), pa.py_buffer(decoded)])
    return out_arr if not arr.null_count else pc.if_else(pc.is_valid(arr), out_arr, pa.scalar(None, pa.binary()))


def _headers(headers: pa.ChunkedArray) -> pa.Array:
    lists = headers.combine_chunks()
    pairs = lists.values            # every header, the offsets saying whose
    if pairs.null_count or pairs.field("key").null_count:
        raise _NotClean             # a header that is not {"key": text, ...}: named line by line
    values = _unbase64(pa.chunked_array([pairs.field("value")], pa.string()))
    rebuilt = pa.StructArray.from_arrays([pairs.field("key"), values], fields=list(HEADERS.value_type))
    return pa.ListArray.from_arrays(lists.offsets, rebuilt, type=HEADERS, mask=lists.is_null())
