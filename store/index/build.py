"""The index's keys of many records where they lie (a commit-log segment, or a batch's bytes), as
IndexService.buildIndex takes them: for each record its UNIQ_KEY, then each KEYS token, hashed,
with the record's offset and STORETIMESTAMP. In C (_index_build.c, built by setup.py) one pass
with the GIL released, so that the index can be built on a thread behind the append while the
next batch is copied. Text the C pass cannot decode as Java would without a replacement, it leaves
to store.index.keys record by record (decoded_keys). tests/store/index/test_index_build.py holds the pass equal
to the numpy oracle (tests/oracles/index_keys.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from store.format.constants import MIN_RECORD_LENGTH
from store.format.layout import TOTAL_AND_MAGIC, message_version, record_spans
from store.format.properties import java_string, string_to_properties
from store.index import _index_build
from store.index.hashing import index_key_hashes
from store.index.keys import indexed_keys

RECORD_LEFT = 2             # IndexFile.put_records: the C pass left a record to decoded_keys
_MOST_KEYS = 16386          # keys of one record at most: UNIQ_KEY and a token per 2 of 32,767 bytes


@dataclass
class RecordKeys:
    """One entry per key, in record order (UNIQ_KEY first, then each KEYS token)."""

    record: np.ndarray            # the record's place among the starts given, int64
    key_hash: np.ndarray          # IndexService's keyHash, int32
    phy_offset: np.ndarray        # the record's offset, int64
    store_timestamp: np.ndarray   # its STORETIMESTAMP, int64

    def __len__(self) -> int:
        return len(self.key_hash)

    @staticmethod
    def empty() -> RecordKeys:
        return RecordKeys(np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64))


def record_keys(arr: np.ndarray, starts: np.ndarray, base: int = 0) -> RecordKeys:
    """The keys of the records at ``starts`` in ``arr`` (uint8); ``base`` is the offset of arr[0]."""
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    if len(starts) == 0:
        return RecordKeys.empty()
    first, n, done = 0, len(starts), 0
    out = _key_arrays(2 * n + _MOST_KEYS)       # two keys a record is the usual; grown if not
    while first < n:
        if len(out[1]) - done < _MOST_KEYS:
            grown = _key_arrays(2 * len(out[1]))
            for old, new in zip(out, grown):
                new[:done] = old[:done]
            out = grown
        count, first = _index_build.find_keys(arr, starts, first, base, *(o[done:] for o in out))
        done += count
    keys = RecordKeys(*(o[:done] for o in out))
    left = np.flatnonzero(keys.key_hash < 0)
    return _with_decoded(arr, starts, keys, left) if len(left) else keys


def _key_arrays(cap: int) -> tuple[np.ndarray, ...]:
    return np.empty(cap, np.int64), np.empty(cap, np.int32), np.empty(cap, np.int64), np.empty(cap, np.int64)


def _with_decoded(arr: np.ndarray, starts: np.ndarray, keys: RecordKeys, left: np.ndarray) -> RecordKeys:
    """``keys`` with each record the C pass left (one entry, key hash -1) replaced by its keys,
    decoded as Java decodes its text (store.index.keys)."""
    counts = np.ones(len(keys), dtype=np.int64)
    extra_hash: list[np.ndarray] = []
    for i in left.tolist():
        hashes, ts = decoded_keys(arr, int(starts[keys.record[i]]))
        counts[i] = len(hashes)
        keys.store_timestamp[i] = ts
        extra_hash.append(hashes)
    take = np.repeat(np.arange(len(keys)), counts)
    out = RecordKeys(keys.record[take], keys.key_hash[take], keys.phy_offset[take], keys.store_timestamp[take])
    # each left record's entries sit where its placeholder was, in its keys' order
    first_of = np.cumsum(counts) - counts
    for i, hashes in zip(left.tolist(), extra_hash):
        out.key_hash[first_of[i]:first_of[i] + len(hashes)] = hashes
    return out


def decoded_keys(arr: np.ndarray, at: int) -> tuple[np.ndarray, int]:
    """(key hashes, STORETIMESTAMP) of one record, decoded; a record whose lengths do not add up
    has none (RocketMQ's dispatcher does not read past such a record either)."""
    total = int.from_bytes(arr[at:at + 4].tobytes(), "big") if 0 <= at <= len(arr) - 4 else 0
    rec = memoryview(arr[at:at + total].tobytes())
    if total < MIN_RECORD_LENGTH or len(rec) != total:
        return np.zeros(0, np.int32), 0
    version = message_version(TOTAL_AND_MAGIC.unpack_from(rec)[1])
    if not version:
        return np.zeros(0, np.int32), 0
    s = record_spans(rec, 0, total, version)
    if s.fault is not None:
        return np.zeros(0, np.int32), 0
    keys = indexed_keys(string_to_properties(java_string(rec[s.properties_pos:s.properties_end])), s.sys_flag)
    ts = int.from_bytes(rec[s.store_timestamp_pos:s.store_timestamp_pos + 8], "big", signed=True)
    topic_text = java_string(rec[s.topic_pos:s.topic_pos + s.topic_length])
    return (index_key_hashes([topic_text] * len(keys), keys) if keys else np.zeros(0, np.int32)), ts
