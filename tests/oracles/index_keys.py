"""The test oracle of the index's key finder (store/index/_index_keys.h, store.index.build.record_keys):
the index keys of a whole encoded batch at once, hashed, what store.index.keys decides for one
decoded message, found with numpy in the records' bytes.

Each record's properties are laid side by side as fixed-width byte strings (numpy's C string
search finds UNIQ_KEY and KEYS in them), the values are cut out as small windows, and the Java
hash of "topic#key" is built from the hash of "topic#" and running hashes of the value bytes
(uint32 arithmetic wraps as Java's int does); a non-ASCII value alone is decoded, as Java would,
before its keys are hashed. A record the fast path cannot be sure of (a name found twice or inside
another, very long properties or values) is decoded and keyed one at a time by
store.index.keys: the ways agree byte for byte (tests/store/index/test_index_keys.py, tests/store/index/test_index_build.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from store.format.constants import (
    BORNHOST_V6_FLAG,
    INDEX_KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_UNIQ_KEY,
    POS_STORETIMESTAMP_V4,
    POS_STORETIMESTAMP_V6,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from store.index.build import RecordKeys
from store.format.layout import be_ints
from store.scan.fields import RecordFields, record_fields, rows_at
from store.format.properties import java_string, string_to_properties
from store.index.hashing import index_key_hashes, java_string_hashes
from store.index.keys import indexed_keys, keys_tokens

_MAX_PROPS_ROW = 2048       # longer properties: the record is keyed the slow way
_MAX_VALUE = 256            # longer UNIQ_KEY / KEYS values: likewise
_SEP = ord(PROPERTY_SEPARATOR)
_SPACE = ord(INDEX_KEY_SEPARATOR)
_UNIQ_NAME = f"{PROPERTY_UNIQ_KEY}\x01".encode()
_KEYS_NAME = f"{PROPERTY_KEYS}\x01".encode()
_POW31 = np.cumprod(np.concatenate([[1], np.full(1 << 16, 31)]).astype(np.uint32), dtype=np.uint32)


@dataclass
class BatchKeys:
    """One entry per indexed key, in message order (UNIQ_KEY first, then each KEYS token)."""

    record: np.ndarray      # the record (row of the batch) the key belongs to
    key_hash: np.ndarray    # IndexService's keyHash, int32

    def __len__(self) -> int:
        return len(self.record)


def batch_keys(arr: np.ndarray, f: RecordFields) -> BatchKeys:
    """The keys RocketMQ's IndexService would put for every record of ``f`` (rows of ``arr``)."""
    n = len(f.starts)
    slow = np.zeros(n, dtype=bool)
    slow |= f.props_len > _MAX_PROPS_ROW
    live = np.flatnonzero(((f.sys_flag & TRANSACTION_TYPE_MASK) != TRANSACTION_ROLLBACK_TYPE) & (f.props_len >= 3)
                          & ~slow)
    record: list[np.ndarray] = []      # per key: its record, its place among the record's keys, its hash
    rank: list[np.ndarray] = []
    key_hash: list[np.ndarray] = []
    if len(live):
        width = int(f.props_len[live].max())
        rows = rows_at(arr, f.props_pos[live], width)
        plen = f.props_len[live]
        text = rows.view(f"S{width}")[:, 0]
        prefix = _topic_prefix_hashes(f.topics)[f.topic_id[live]]
        has_uniq = np.zeros(n, dtype=np.int64)
        for name in (_UNIQ_NAME, _KEYS_NAME):          # UNIQ_KEY is put before the KEYS tokens
            at, vstart, vend, unsure = _value_of(text, rows, plen, name)
            slow[live[unsure]] = True
            if len(at):
                pos, length = f.props_pos[live[at]] + vstart, vend - vstart
                rec, r, h, bad, utf8 = _hashes(arr, pos, length, prefix[at], split=name == _KEYS_NAME)
                slow[live[at[bad]]] = True
                owner = live[at[rec]]
                record.append(owner)
                rank.append(r + has_uniq[owner])
                key_hash.append(h)
                if len(utf8):
                    rec, r, h = _utf8_hashes(arr, pos[utf8], length[utf8], [f.topics[t] for t in f.topic_id[live[at[utf8]]]],
                                             split=name == _KEYS_NAME)
                    owner = live[at[utf8[rec]]]
                    record.append(owner)
                    rank.append(r + has_uniq[owner])
                    key_hash.append(h)
                if name == _UNIQ_NAME:
                    has_uniq[live[at]] = 1
        if record:
            keep = ~slow[np.concatenate(record)]
            record, rank, key_hash = ([np.concatenate(x)[keep]] for x in (record, rank, key_hash))
    # the records the fast path is not sure of: decoded one at a time, hashed all together
    slow_rec: list[int] = []
    slow_rank: list[int] = []
    slow_topics: list[str] = []
    slow_keys: list[str] = []
    for i in np.flatnonzero(slow).tolist():
        p, ln = int(f.props_pos[i]), int(f.props_len[i])
        keys = indexed_keys(string_to_properties(java_string(arr[p:p + ln].tobytes())), int(f.sys_flag[i]))
        topic = f.topics[f.topic_id[i]]
        for r, key in enumerate(keys):
            slow_rec.append(i)
            slow_rank.append(r)
            slow_topics.append(topic)
            slow_keys.append(key)
    if slow_keys:
        record.append(np.array(slow_rec, dtype=np.int64))
        rank.append(np.array(slow_rank, dtype=np.int64))
        key_hash.append(index_key_hashes(slow_topics, slow_keys))
    if not record:
        return BatchKeys(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32))
    rec_all = np.concatenate(record)
    # message order: each key goes to its record's first place plus its rank (no sort needed)
    counts = np.bincount(rec_all, minlength=n)
    dest = (np.cumsum(counts) - counts)[rec_all] + np.concatenate(rank)
    out_rec = np.empty(len(rec_all), dtype=np.int64)
    out_hash = np.empty(len(rec_all), dtype=np.int32)
    out_rec[dest] = rec_all
    out_hash[dest] = np.concatenate(key_hash)
    return BatchKeys(out_rec, out_hash)


def _topic_prefix_hashes(topics: list[str]) -> np.ndarray:
    return java_string_hashes([f"{t}#" for t in topics]).view(np.uint32)


def _value_of(text: np.ndarray, rows: np.ndarray, plen: np.ndarray, name: bytes
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows holding one ``name`` pair with a non-empty value: (rows, value start, value end) in
    row coordinates, and the rows to key the slow way (the name twice, or found where it is not
    a pair's name)."""
    first = np.strings.find(text, name)
    has = np.flatnonzero((first >= 0) & (first + len(name) <= plen))
    col = first[has]
    at_pair = (col == 0) | (rows[has, np.maximum(col - 1, 0)] == _SEP)
    second = np.strings.find(text[has], name, col + 1)
    unsure = ~at_pair | ((second >= 0) & (second + len(name) <= plen[has]))
    unsure_rows = has[unsure]
    has, col = has[~unsure], col[~unsure]
    vstart = col + len(name)
    stop = np.strings.find(text[has], bytes([_SEP]), vstart)
    vend = np.where((stop < 0) | (stop > plen[has]), plen[has], stop)
    nonempty = vend > vstart               # string2messageProperties drops a pair with no value
    return has[nonempty], vstart[nonempty], vend[nonempty], unsure_rows


def _utf8_hashes(arr: np.ndarray, pos: np.ndarray, length: np.ndarray, topics: list[str], split: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """_hashes for values that are not ASCII: each value decoded as Java decodes it (Java's hash
    is over UTF-16 units), the keys of all of them hashed together. The separators are ASCII, so a
    value decodes alone as it does inside the whole properties string."""
    rec: list[int] = []
    rank: list[int] = []
    keys: list[str] = []
    key_topics: list[str] = []
    for row, (p, ln) in enumerate(zip(pos.tolist(), length.tolist())):
        text = java_string(arr[p:p + ln].tobytes())
        tokens = keys_tokens(text) if split else [text]
        for r, token in enumerate(tokens):
            rec.append(row)
            rank.append(r)
            keys.append(token)
            key_topics.append(topics[row])
    return (np.array(rec, dtype=np.int64), np.array(rank, dtype=np.int64),
            index_key_hashes(key_topics, keys) if keys else np.zeros(0, dtype=np.int32))


def _hashes(arr: np.ndarray, pos: np.ndarray, length: np.ndarray, prefix: np.ndarray, split: bool
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """keyHash of each value (or, with ``split``, of each non-empty space-separated token of it):
    (value row, rank within its value, hash) per key of the ASCII values, the value rows whose
    record is to be keyed the slow way (too long) and the non-ASCII value rows (_utf8_hashes)."""
    width = int(min(length.max(), _MAX_VALUE))
    win = rows_at(arr, pos, width)
    inside = np.arange(width) < length[:, None]
    bad = length > _MAX_VALUE
    utf8 = ~bad & ((win >= 0x80) & inside).any(axis=1)
    # running[c] = Java hash of each value's first c bytes (uint32 wraps as Java's int); one
    # contiguous row per byte position, so that each step is one pass over the values
    cols = np.ascontiguousarray(win.T)
    running = np.zeros((width + 1, len(pos)), dtype=np.uint32)
    for c in range(width):
        np.multiply(running[c], np.uint32(31), out=running[c + 1])
        running[c + 1] += cols[c]
    spaced = win == _SPACE
    if split and (spaced & inside).any():
        word = inside & ~spaced
        edge = np.zeros((len(pos), width + 2), dtype=np.int8)
        edge[:, 1:-1] = word
        step = np.diff(edge, axis=1)
        rec, start = np.nonzero(step == 1)       # row-major: tokens in order within each value
        _, end = np.nonzero(step == -1)
    else:
        rec = np.arange(len(pos))
        start, end = np.zeros(len(pos), dtype=np.int64), np.minimum(length, width)
    tok_len = end - start
    h = running[end, rec] - running[start, rec] * _POW31[tok_len]
    h = prefix[rec] * _POW31[tok_len] + h
    signed = h.view(np.int32).astype(np.int64)
    key_hash = np.abs(signed)
    key_hash[key_hash > 0x7FFFFFFF] = 0
    first_of_value = np.searchsorted(rec, rec, side="left")
    rank = np.arange(len(rec)) - first_of_value
    ascii_key = ~utf8[rec]
    return (rec[ascii_key], rank[ascii_key], key_hash.astype(np.int32)[ascii_key], np.flatnonzero(bad),
            np.flatnonzero(utf8))


def record_keys(arr: np.ndarray, starts: np.ndarray, base: int = 0) -> RecordKeys:
    """What store.index.build.record_keys gives, the numpy way."""
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    if len(starts) == 0:
        return RecordKeys.empty()
    sizes = be_ints(arr, starts, 4)
    fields = record_fields(arr, starts, sizes)
    keys = batch_keys(arr, fields)
    if not len(keys):
        return RecordKeys.empty()
    at = starts[keys.record]
    born6 = (fields.sys_flag[keys.record] & BORNHOST_V6_FLAG) != 0
    ts = be_ints(arr, at + np.where(born6, POS_STORETIMESTAMP_V6, POS_STORETIMESTAMP_V4), 8)
    return RecordKeys(keys.record, keys.key_hash.astype(np.int32), at + base, ts)
