"""The clean pieces of an export read with pyarrow's own readers, a column at a time: most pieces of
most exports hold no bad row, and reading them line by line (ingest.replay.export_rows) costs about
20 us a row in Python. A piece is taken this way only when every row of it is as the line-by-line
reading would take it without a reason (its position usable, key, value and header values base64,
its timestamp ISO-8601 with a zone); anything else, and the piece is read line by line, so that
every bad row is still named by file and line. tests/test_replay_file_pieces.py holds the two ways
equal."""

from __future__ import annotations

import binascii
import io

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from ingest.replay.export_rows import HEADERS, INT32_MAX, ROWS_SCHEMA

PROBLEM = ROWS_SCHEMA.field(len(ROWS_SCHEMA) - 1).name
_TEXT_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
JSON_SCHEMA = pa.schema([("key", pa.string()), ("value", pa.string()), ("topic", pa.string()),
                         ("partition", pa.int64()), ("offset", pa.int64()), ("timestamp", pa.string()),
                         ("timestampType", pa.int64()), ("headers", _TEXT_HEADERS)])
# what datetime.fromisoformat reads the same as Arrow's cast: seconds, an optional fraction, a zone
_ISO = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$"


class _NotClean(Exception):
    """The piece holds a row the line-by-line reading must name."""


def jsonl_rows(data: bytes) -> pa.Table | None:
    """The rows of ``data`` (whole lines of a jsonl export) in ROWS_SCHEMA, or None when a row of it
    is not clean (see the module docstring)."""
    try:
        raw = pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(use_threads=False,
                                                                         block_size=max(len(data), 1 << 20)),
                           parse_options=pj.ParseOptions(explicit_schema=JSON_SCHEMA,
                                                         unexpected_field_behavior="ignore"))
        return _clean_rows(raw)
    except (pa.ArrowException, _NotClean):
        return None


def _clean_rows(raw: pa.Table) -> pa.Table:
    n = raw.num_rows
    topic, partition, offset = (raw.column(c) for c in ("topic", "partition", "offset"))
    if topic.null_count or partition.null_count or offset.null_count or n and (
            pc.min(pc.utf8_length(topic)).as_py() == 0 or pc.min(partition).as_py() < 0
            or pc.max(partition).as_py() > INT32_MAX or pc.min(offset).as_py() < 0):
        raise _NotClean
    ts = raw.column("timestamp")
    if ts.null_count or (n and not pc.all(pc.match_substring_regex(ts, _ISO)).as_py()):
        raise _NotClean
    kind = pc.fill_null(raw.column("timestampType"), 0)
    if n and (pc.min(kind).as_py() < -(2**31) or pc.max(kind).as_py() > INT32_MAX):
        raise _NotClean
    cols = {"key": _unbase64(raw.column("key")), "value": _unbase64(raw.column("value")), "topic": topic,
            "partition": partition.cast(pa.int32()), "offset": offset,
            "timestamp": ts.cast(pa.timestamp("us", tz="UTC")), "timestampType": kind.cast(pa.int32()),
            "headers": _headers(raw.column("headers")), PROBLEM: pa.nulls(n, pa.string())}
    return pa.table([cols[f.name] for f in ROWS_SCHEMA], schema=ROWS_SCHEMA)


def _unbase64(text: pa.ChunkedArray) -> pa.Array:
    """Each value decoded; strict decoding refuses whatever b64decode(validate=True), the line by
    line way, refuses (and a little more, which that way then reads and names)."""
    decode = binascii.a2b_base64
    try:
        return pa.array([None if t is None else decode(t, strict_mode=True) for t in text.to_pylist()], pa.binary())
    except (binascii.Error, ValueError):
        raise _NotClean from None


def _headers(headers: pa.ChunkedArray) -> pa.Array:
    lists = headers.combine_chunks()
    pairs = lists.values            # every header, the offsets saying whose
    if pairs.null_count or pairs.field("key").null_count:
        raise _NotClean             # a header that is not {"key": text, ...}: named line by line
    values = _unbase64(pa.chunked_array([pairs.field("value")], pa.string()))
    rebuilt = pa.StructArray.from_arrays([pairs.field("key"), values], fields=list(HEADERS.value_type))
    return pa.ListArray.from_arrays(lists.offsets, rebuilt, type=HEADERS, mask=lists.is_null())
