"""Variable-length fields of many records as Arrow arrays, with no Python step per record:
binary_view values pointing into a buffer (a mapped segment), short strings that repeat (hosts,
property names) told apart once each, and the properties string of every record split into
(record, name, value) pairs the way RocketMQ's MessageDecoder.string2messageProperties does.

The split has two ways with the same result: store/scan/_properties_split.c (built by setup.py,
one pass per record) and, for what the C split cannot take (many wanted names, 2 GiB of text), a
dozen numpy passes over all the records at once; tests/test_readback_arrow.py holds them to each
other and to the per-record reference."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from store.format.constants import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from store.scan.fields import byte_rows, text_ids
from store.format.properties import java_string, string_to_properties
from store.scan import _properties_split as _kernel

_SEP2 = ord(PROPERTY_SEPARATOR)
_SEP1 = ord(NAME_VALUE_SEPARATOR)
_KERNEL_MAX_WANTED = 16             # named values the C split picks out in its pass
_INLINE = 12                        # binary_view: values up to 12 bytes live in the view itself
_KEEP_16 = np.frombuffer(b"".join(b"\xff" * k + bytes(16 - k) for k in range(17)), dtype=np.uint64).reshape(17, 2)
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
    Java's new String(UTF_8). In C (_properties_split.c); the numpy split takes what the C one
    cannot: more than _KERNEL_MAX_WANTED names, or 2 GiB of text (its int32 offsets)."""
    props_pos = np.ascontiguousarray(props_pos, dtype=np.int64)
    props_len = np.ascontiguousarray(props_len, dtype=np.int64)
    if len(wanted) <= _KERNEL_MAX_WANTED and int(props_len.sum()) < 1 << 31:
        return _split_c(arr, props_pos, props_len, wanted)
    return _split_numpy(arr, props_pos, props_len, wanted)


def _split_c(arr: np.ndarray, pos: np.ndarray, length: np.ndarray, wanted: tuple[str, ...]) -> Properties:
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


def _split_numpy(arr: np.ndarray, props_pos: np.ndarray, props_len: np.ndarray,
                 wanted: tuple[str, ...]) -> Properties:
    n = len(props_pos)
    # each record's properties and the byte after them, which stands for a closing \x02: then
    # every piece of every record ends at a separator (the last record of a buffer may have none)
    room = np.ones(n, dtype=np.int64)
    if n and props_pos[-1] + props_len[-1] >= len(arr):
        room[-1] = 0
    text = binary_views(arr, props_pos, props_len + room).cast(pa.binary())
    offs = np.frombuffer(text.buffers()[1], dtype=np.int32, count=n + 1).astype(np.int64)
    data = np.frombuffer(text.buffers()[2], dtype=np.uint8) if text.buffers()[2] is not None \
        else np.zeros(0, np.uint8)
    data = data[:offs[-1]] if n else data[:0]
    is_end = data == _SEP2
    term = offs[np.flatnonzero(room) + 1] - 1     # where each record's closing separator stands
    is_end[term] = True
    piece_end = np.flatnonzero(is_end)
    at_end = np.zeros(len(piece_end) + 1, dtype=bool)
    at_end[np.searchsorted(piece_end, term)] = True
    if n and not room[-1]:
        piece_end = np.append(piece_end, len(data))
        at_end[len(piece_end) - 1] = True
    at_end = at_end[:len(piece_end)]
    record = np.cumsum(at_end) - at_end            # record ends before each piece
    piece_start = np.empty_like(piece_end)
    piece_start[:1] = 0
    piece_start[1:] = piece_end[:-1] + 1
    sep1 = np.flatnonzero(data == _SEP1)
    at = np.searchsorted(sep1, piece_start)
    name_end = sep1[np.minimum(at, len(sep1) - 1)] if len(sep1) else piece_end
    ok = (at < len(sep1)) & (name_end > piece_start) & (name_end + 1 < piece_end)
    if not ok.all():
        record, piece_start, piece_end, name_end = record[ok], piece_start[ok], piece_end[ok], name_end[ok]
    name_id, name_list = _names(data, piece_start, name_end - piece_start)
    values = _text(data, name_end + 1, piece_end - name_end - 1)
    keep = _last_of_each_name(record, name_id, len(name_list), n)
    if keep is not None:
        record, name_id, values = record[keep], name_id[keep], values.filter(pa.array(keep))
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(record, minlength=n), out=offsets[1:])
    names = pa.array(name_list, pa.string()).take(pa.array(name_id))
    named = {}
    for name in wanted:
        pair = np.full(n, -1, dtype=np.int64)
        if name in name_list:
            hit = np.flatnonzero(name_id == name_list.index(name))
            pair[record[hit]] = hit
        named[name] = _pick(values, pair)
    return Properties(pa.MapArray.from_arrays(pa.array(offsets), names, values), named)


def _names(data: np.ndarray, pos: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Property names (a handful, repeated in every record) as ids into the distinct ones, each
    decoded once. Names of up to 16 bytes are grouped by their first 8 bytes, one pass per
    distinct name, and each group checked byte for byte; anything else takes fields.text_ids."""
    if len(pos) and int(length.max()) <= 16:
        words = byte_rows(data, pos, 16).view(np.uint64) & _KEEP_16[length]
        ids, firsts = few_distinct(words[:, 0], 64)
        rep = firsts[ids]
        if ((words[:, 1] == words[rep, 1]) & (length == length[rep])).all():
            return ids, [java_string(data[pos[r]:pos[r] + length[r]].tobytes()) for r in firsts.tolist()]
    return text_ids(data, pos, length)


def _text(data: np.ndarray, pos: np.ndarray, length: np.ndarray) -> pa.Array:
    raw = binary_views(data, pos, length)
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:     # malformed UTF-8: Java puts U+FFFD in its place
        return pa.array([java_string(b) for b in raw.to_pylist()], pa.string())


def _last_of_each_name(record: np.ndarray, name_id: np.ndarray, names: int, n: int) -> np.ndarray | None:
    """Mask keeping only the last pair of each (record, name), or None when no name repeats."""
    if not len(record):
        return None
    code = record * names + name_id
    if not (np.diff(record) == 0).any():
        return None                              # one pair per record at most
    if names * n <= 1 << 24 and not (np.bincount(code, minlength=names * n) > 1).any():
        return None
    _, last_rev = np.unique(code[::-1], return_index=True)
    if len(last_rev) == len(code):
        return None
    keep = np.zeros(len(code), dtype=bool)
    keep[len(code) - 1 - last_rev] = True
    return keep


def properties_of(props_bytes: bytes) -> dict[str, str]:
    """One record's properties, the per-record way (the reference the vectorized split is tested against)."""
    return string_to_properties(java_string(props_bytes))
