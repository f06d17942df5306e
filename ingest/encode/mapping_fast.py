"""The vectorized path of the Kafka -> RocketMQ mapping (the hot path of every micro-batch).

Works on whole Arrow columns with pyarrow.compute and numpy. A row this path cannot map exactly
(a non-ASCII or separator-bearing key or header, a born-host header, the envelope mode) is flagged
``slow`` and mapped by the per-row path in ``ingest.encode.mapping``, which knows every rule; both paths give
the same result for the rows they both can map (tests/test_mapping.py compares them).
"""

from __future__ import annotations

import binascii
import zlib
from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store import DeadLetterReason
from store.format import MAX_PROPERTIES_LENGTH
from store.format import NAME_VALUE_SEPARATOR as SEP1
from store.format import PROPERTY_SEPARATOR as SEP2


def flat_bytes(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets) of a binary/string array: row i is values[offsets[i]:offsets[i+1]]."""
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    n = len(arr)
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32)[arr.offset: arr.offset + n + 1].astype(np.int64)
    values = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return values, offsets


def rows_with_bytes(arr: pa.Array, bad_byte: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Per row: does any byte satisfy ``bad_byte``? (cumulative counts, no per-row loop)."""
    values, offsets = flat_bytes(arr)
    if len(offsets) <= 1:
        return np.zeros(0, dtype=bool)
    span = values[offsets[0]: offsets[-1]]
    counts = np.concatenate([[0], np.cumsum(bad_byte(span), dtype=np.int64)])
    rel = offsets - offsets[0]
    return counts[rel[1:]] > counts[rel[:-1]]


def java_hash_ascii(arr: pa.Array) -> np.ndarray:
    """Java ``String.hashCode`` of each ASCII row (a UTF-16 code unit per byte), as int64."""
    values, offsets = flat_bytes(arr)
    n = len(offsets) - 1
    if n <= 0:
        return np.zeros(0, np.int64)
    span = values[offsets[0]: offsets[-1]].astype(np.uint32)
    rel = offsets - offsets[0]
    lengths = np.diff(rel)
    row_end = np.repeat(rel[1:], lengths)
    pos = np.arange(len(span), dtype=np.int64)
    maxlen = int(lengths.max()) if n else 0
    # 31**i mod 2**32, as Java's int arithmetic wraps
    pow31 = np.array([pow(31, i, 2**32) for i in range(max(maxlen, 1))], dtype=np.uint32)
    contrib = span * pow31[row_end - 1 - pos] if len(span) else span
    sums = np.concatenate([[0], np.cumsum(contrib, dtype=np.uint32)]).astype(np.uint32)
    h = (sums[rel[1:]] - sums[rel[:-1]]).astype(np.uint32).view(np.int32)
    return h.astype(np.int64)


_UNIQ_RAW = np.dtype([("crc", ">u4"), ("partition", ">u4"), ("offset", ">u8")])


def uniq_keys(topic_crc: np.ndarray, partition: np.ndarray, offset: np.ndarray) -> pa.Array:
    """32 upper-case hex chars: crc32(topic) | partition | offset, big-endian (see mapping.uniq_key)."""
    n = len(offset)
    raw = np.empty(n, dtype=_UNIQ_RAW)
    raw["crc"], raw["partition"], raw["offset"] = topic_crc, partition, offset
    text = binascii.hexlify(raw.tobytes()).upper()    # one C pass: 16 bytes -> 32 hex digits a row
    offs = np.arange(0, 32 * (n + 1), 32, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offs.tobytes()), pa.py_buffer(text))


def _repeated_names(parent: np.ndarray, names: pa.Array) -> np.ndarray:
    """Per header element: does its record carry another header of the same name?"""
    if len(parent) < 2:
        return np.zeros(len(parent), dtype=bool)
    codes = np.asarray(pc.fill_null(pc.index_in(names, pc.unique(names)), -1), dtype=np.int64)
    pair = parent * (int(codes.max()) + 2) + codes + 1
    _, inverse, counts = np.unique(pair, return_inverse=True, return_counts=True)
    return counts[inverse.reshape(-1)] > 1


def _join(*parts: pa.Array | str) -> pa.Array:
    return pc.binary_join_element_wise(*parts, "")


def map_fast(batch: pa.RecordBatch, topic_map: Mapping[str, str], reserved: frozenset[str],
             born_host_header: str, key_hash_queues: int | None, max_body: int,
             topic_problem: Callable[[str], str | None]) -> tuple[dict[str, pa.Array], np.ndarray]:
    """Map every row the vectorized way; returns the columns and the mask of rows to redo slowly."""
    n = batch.num_rows
    key, headers = batch.column("key"), batch.column("headers")
    topic = batch.column("topic").cast(pa.string())
    partition = batch.column("partition").cast(pa.int32())
    offset = batch.column("offset").cast(pa.int64())

    def odd_key_byte(b: np.ndarray) -> np.ndarray:
        return (b >= 0x80) | (b == 1) | (b == 2)

    slow = rows_with_bytes(key, odd_key_byte) if n else np.zeros(0, bool)
    key_text = pc.if_else(pa.array(slow), pa.scalar(None, pa.binary()), key).cast(pa.string())
    has_key = pc.fill_null(pc.greater(pc.binary_length(key_text), 0), False)
    # Properties are one join of every part; a part present in some rows only is joined first.
    if n and pc.all(has_key).as_py():
        key_parts: list[pa.Array | str] = ["KEYS" + SEP1, key_text, SEP2]
    else:
        key_parts = [pc.if_else(has_key, _join("KEYS" + SEP1, key_text, SEP2), "")]

    # Headers: one "name\x01value\x02" element each, joined per row; reserved names dropped.
    flat = pc.list_flatten(headers)
    parent = np.asarray(pc.list_parent_indices(headers), dtype=np.int64)
    names = flat.field("key").cast(pa.string())
    vals = flat.field("value").cast(pa.binary())
    # what only the per-row path maps: a null header, a header whose name=value property would lose something
    # (it then writes KAFKA_HEADERS), the born-host header, and null or empty values (a one-byte
    # body and KAFKA_VALUE_NULL or KAFKA_VALUE_EMPTY)
    bad_elem = (np.asarray(flat.is_null(), dtype=bool)     # a null header: its fields are not its own
                | rows_with_bytes(vals, lambda b: (b >= 0x80) | (b == 2))
                | np.asarray(pc.fill_null(pc.match_substring_regex(names, "[\\x01\\x02]"), True))
                | np.asarray(pc.fill_null(pc.equal(pc.binary_length(names), 0), True))
                | np.asarray(pc.fill_null(pc.equal(names, born_host_header), False))
                | np.asarray(pc.fill_null(pc.equal(pc.binary_length(vals), 0), True))
                | np.asarray(pc.fill_null(pc.is_in(names, pa.array(sorted(reserved))), False))
                | _repeated_names(parent, names))
    slow[parent[bad_elem]] = True
    if n:
        slow |= np.asarray(pc.fill_null(pc.equal(pc.binary_length(batch.column("value")), 0), True))
    keep = ~bad_elem
    vals_text = pc.if_else(pa.array(bad_elem), pa.scalar(b"", pa.binary()), pc.fill_null(vals, b"")).cast(pa.string())
    elems = _join(names, SEP1, vals_text, SEP2).filter(pa.array(keep))
    counts = np.bincount(parent[keep], minlength=n)
    list_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    header_parts = [pc.binary_join(pa.ListArray.from_arrays(pa.array(list_offsets), elems), "")] if len(elems) else []

    is_tags = keep & np.asarray(pc.fill_null(pc.equal(names, "TAGS"), False))
    tags = np.full(n, None, dtype=object)
    tags[parent[is_tags]] = np.asarray(vals_text.filter(pa.array(is_tags)).to_pylist(), dtype=object)

    # Topic: renamed and checked once per distinct name.
    uniq = pc.unique(topic)
    index = np.asarray(pc.index_in(topic, uniq))
    names_u = uniq.to_pylist()
    targets_u = [topic_map.get(t, t) for t in names_u]
    target = pa.array(targets_u, pa.string()).take(pa.array(index))
    crc_u = np.array([zlib.crc32(t.encode("utf-8")) for t in names_u], dtype=np.uint32)

    part_np = np.asarray(partition, dtype=np.int64)
    off_np = np.asarray(offset, dtype=np.int64)
    properties = _join(*key_parts, *header_parts, f"KAFKA_TOPIC{SEP1}", topic,
                       f"{SEP2}KAFKA_PARTITION{SEP1}", partition.cast(pa.string()),
                       f"{SEP2}KAFKA_OFFSET{SEP1}", offset.cast(pa.string()), f"{SEP2}UNIQ_KEY{SEP1}",
                       uniq_keys(crc_u[index], part_np, off_np), SEP2)

    if key_hash_queues:
        h = java_hash_ascii(pc.fill_null(key_text, "").cast(pa.binary()))
        queue_id = pa.array((np.abs(h) % key_hash_queues).astype(np.int32))
    else:
        queue_id = partition
    body = pc.fill_null(batch.column("value").cast(pa.binary()), b"")
    reasons, codes = limit_reasons([topic_problem(t) for t in targets_u], index,
                                   np.asarray(pc.binary_length(properties)), np.asarray(pc.binary_length(body)),
                                   max_body)
    cols = {"topic": target, "queue_id": queue_id, "properties": properties, "tags": pa.array(tags, pa.string()),
            "body": body, "dead_reason": pa.array(reasons, pa.string()), "dead_code": pa.array(codes, pa.string())}
    return cols, slow


def limit_reasons(topic_problems: list[str | None], topic_index: np.ndarray, props_len: np.ndarray,
                  body_len: np.ndarray, max_body: int) -> tuple[list[str | None], list[DeadLetterReason | None]]:
    """The dead-letter reason of each row and its code (same wording and priority as the per-row path)."""
    reasons: list[str | None] = [None] * len(body_len)
    codes: list[DeadLetterReason | None] = [None] * len(body_len)
    for i in np.nonzero(body_len > max_body)[0]:
        reasons[i] = f"body is {body_len[i]} bytes, over the limit of {max_body} (maxMessageSize)"
        codes[i] = DeadLetterReason.BODY_TOO_LARGE
    for i in np.nonzero(props_len > MAX_PROPERTIES_LENGTH)[0]:
        reasons[i] = f"properties are {props_len[i]} bytes, over the limit of {MAX_PROPERTIES_LENGTH}"
        codes[i] = DeadLetterReason.PROPERTIES_TOO_LARGE
    for u, problem in enumerate(topic_problems):
        if problem:
            for i in np.nonzero(topic_index == u)[0]:
                reasons[i], codes[i] = problem, DeadLetterReason.TOPIC_INVALID
    return reasons, codes
