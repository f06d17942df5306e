"""Variable-length fields of many records as Arrow arrays, with no Python step per record:
binary_view values pointing into a buffer (a mapped segment), short strings that repeat (hosts,
property names) told apart once each, and the properties string of every record split into
(record, name, value) pairs the way RocketMQ's MessageDecoder.string2messageProperties does.

The split is store/scan/_properties_split.c's (built by setup.py, one pass per record);
tests/store/scan/test_readback_arrow.py holds it to the per-record reference (properties_of) and to the
oracle of its pairs' order (tests/oracles/properties_split.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from store.scan.fields import byte_rows
from store.format.properties import java_string, string_to_properties
from store.scan import _properties_split as _kernel

_MOST_WANTED = 16                   # named values the C split picks out in its pass
_INLINE = 12                        # binary_view: values up to 12 bytes live in the view itself
# the first k of 12 bytes, as three 32-bit masks, for k = 0..12
_KEEP_BYTES = np.frombuffer(b"".join(b"\xff" * k + bytes(_INLINE - k) for k in range(_INLINE + 1)),
                            dtype=np.uint32).reshape(_INLINE + 1, 3)


def binary_views(arr: np.ndarray, pos: np.ndarray, length: np.ndarray) -> pa.Array:
    """binary_view values arr[pos:pos+length] (positions < 2 GiB: a segment's), sharing arr's memory.
    A view is 16 bytes: the length, then up to 12 bytes of the value itself, or the first 4 of
    them, a buffer number (0) and the position."""
    n = len(pos)
    views = np.empty((n, 4), dtype="<i4")
    lead = byte_rows(arr, pos, _INLINE).view(np.uint32)
    # zeros after a short value; a long one keeps all 12 (its last 8 are overwritten below)
    np.bitwise_and(lead, _KEEP_BYTES[np.minimum(length, _INLINE)], out=views[:, 1:].view(np.uint32))
    views[:, 0] = length
    inline = length <= _INLINE
    np.copyto(views[:, 2], 0, where=~inline)
    np.copyto(views[:, 3], pos, where=~inline, casting="unsafe")
    return pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views), pa.py_buffer(arr)])


def few_distinct(words: np.ndarray, most: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """(index of each word into the distinct ones, the row where each first occurs): a pass per
    distinct word while there are few (the usual handful of hosts or property names), a sort beyond."""
    ids = np.full(len(words), -1, dtype=np.int64)
    firsts: list[int] = []
    first = 0
    while first < len(words) and len(firsts) < most:
        ids[words == words[first]] = len(firsts)
        firsts.append(first)
        rest = np.flatnonzero(ids[first:] < 0)
        first = first + int(rest[0]) if len(rest) else len(words)
    if first < len(words):
        _, where, inverse = np.unique(words, return_index=True, return_inverse=True)
        return inverse.reshape(-1), where
    return ids, np.array(firsts, dtype=np.int64)


@dataclass
class Properties:
    """Every record's properties: ``map`` (map<string, string>, one entry per kept pair, in the
    order the pairs stand) and ``named``, the value of each wanted name per record (null where
    absent)."""

    map: pa.MapArray
    named: dict[str, pa.Array]


def parse_properties(arr: np.ndarray, props_pos: np.ndarray, props_len: np.ndarray,
                     wanted: tuple[str, ...] = ()) -> Properties:
    """string2messageProperties over every record: pieces split on \\x02, the name ends at the
    first \\x01, pieces without one or with an empty name or value are dropped, a later pair
    overwrites an earlier one of the same name (the earlier one is dropped). Text is decoded like
    Java's new String(UTF_8). In C (_properties_split.c), for at most _MOST_WANTED names and
    properties under 2 GiB in all (its int32 offsets; a read-back batch's records are)."""
    pos = np.ascontiguousarray(props_pos, dtype=np.int64)
    length = np.ascontiguousarray(props_len, dtype=np.int64)
    if len(wanted) > _MOST_WANTED:
        raise ValueError(f"parse_properties: {len(wanted)} wanted names, at most {_MOST_WANTED}")
    if int(length.sum()) >= 1 << 31:
        raise ValueError(f"parse_properties: {int(length.sum())} bytes of properties, at most {(1 << 31) - 1}")
    n = len(pos)
    pair_cap = int(((length + 1) // 4).sum())
    text_cap = int(length.sum())
    map_offsets = np.empty(n + 1, dtype=np.int32)
    name_offsets = np.empty(pair_cap + 1, dtype=np.int32)
    value_offsets = np.empty(pair_cap + 1, dtype=np.int32)
    name_data = pa.allocate_buffer(text_cap)
    value_data = pa.allocate_buffer(text_cap)
    wanted_pair = np.empty(len(wanted) * n, dtype=np.int32)
    pairs, not_ascii = _kernel.split(arr, pos, length, b"\0".join(w.encode() for w in wanted), map_offsets,
                                     name_offsets, name_data, value_offsets, value_data, wanted_pair)
    names = _strings(name_offsets[:pairs + 1], name_data, not_ascii)
    values = _strings(value_offsets[:pairs + 1], value_data, not_ascii)
    out = pa.MapArray.from_arrays(pa.array(map_offsets), names, values)
    return Properties(out, {name: _pick(values, wanted_pair[k * n:(k + 1) * n]) for k, name in enumerate(wanted)})


def _pick(values: pa.Array, pair: np.ndarray) -> pa.Array:
    """values[pair] per record, null where the record has no such pair (-1)."""
    return values.take(pa.array(pair, mask=pair < 0))


def _strings(offsets: np.ndarray, data: pa.Buffer, check: bool) -> pa.Array:
    """A string array over the split's output; bytes that are not UTF-8 become U+FFFD as in Java."""
    out = pa.Array.from_buffers(pa.string(), len(offsets) - 1, [None, pa.py_buffer(offsets), data])
    if check:
        try:
            out.validate(full=True)
        except pa.ArrowInvalid:
            raw = out.view(pa.binary())
            return pa.array([java_string(b) for b in raw.to_pylist()], pa.string())
    return out


def properties_of(props_bytes: bytes) -> dict[str, str]:
    """One record's properties, the per-record way (the reference the vectorized split is tested against)."""
    return string_to_properties(java_string(props_bytes))
