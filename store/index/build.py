"""The index's keys of many records where they lie (a commit-log segment, or a batch's bytes), as
IndexService.buildIndex takes them: for each record its UNIQ_KEY, then each KEYS token, hashed,
with the record's offset and STORETIMESTAMP. In C (_index_build.c, built by setup.py) one pass
with the GIL released, so that the index can be built on a thread behind the append while the
next batch is copied. Text the C pass cannot decode as Java would without a replacement, it leaves
to store.index.keys record by record (decoded_keys). tests/test_index_build.py holds the pass equal
to the numpy oracle (tests/oracles/index_keys.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from store.format.constants import (
    BORNHOST_V6_FLAG,
    IPV6_HOST_EXTRA_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    MIN_RECORD_LENGTH,
    POS_BODYLENGTH_V4,
    POS_STORETIMESTAMP_V4,
    POS_STORETIMESTAMP_V6,
    POS_SYSFLAG,
    STOREHOSTADDRESS_V6_FLAG,
)
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
    rec = arr[at:at + total].tobytes()
    place = _text_places(rec)
    if place is None:
        return np.zeros(0, np.int32), 0
    sys_flag, topic, props = place
    keys = indexed_keys(string_to_properties(java_string(rec[props[0]:props[1]])), sys_flag)
    ts = int.from_bytes(rec[_ts_pos(sys_flag):_ts_pos(sys_flag) + 8], "big", signed=True)
    topic_text = java_string(rec[topic[0]:topic[1]])
    return (index_key_hashes([topic_text] * len(keys), keys) if keys else np.zeros(0, np.int32)), ts


def _text_places(rec: bytes) -> tuple[int, tuple[int, int], tuple[int, int]] | None:
    """(sysFlag, topic span, properties span) of a whole record, None if its lengths do not add up."""
    total = len(rec)
    if total < MIN_RECORD_LENGTH or int.from_bytes(rec[:4], "big") != total or \
            int.from_bytes(rec[4:8], "big") not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        return None
    sys_flag = int.from_bytes(rec[POS_SYSFLAG:POS_SYSFLAG + 4], "big", signed=True)
    p = POS_BODYLENGTH_V4 + IPV6_HOST_EXTRA_LENGTH * (bool(sys_flag & BORNHOST_V6_FLAG)
                                                      + bool(sys_flag & STOREHOSTADDRESS_V6_FLAG))
    body_len = int.from_bytes(rec[p:p + 4], "big", signed=True)
    width = 2 if int.from_bytes(rec[4:8], "big") == MESSAGE_MAGIC_CODE_V2 else 1
    p += 4 + body_len
    if body_len < 0 or p + width > total:
        return None
    topic_len = int.from_bytes(rec[p:p + width], "big", signed=True)     # as MessageVersion reads it
    if topic_len < 0:
        return None
    topic = (p + width, p + width + topic_len)
    props_len = int.from_bytes(rec[topic[1]:topic[1] + 2], "big", signed=True)
    if topic[1] + 2 > total or topic[1] + 2 + max(props_len, 0) > total:
        return None
    return sys_flag, topic, (topic[1] + 2, topic[1] + 2 + max(props_len, 0))


def _ts_pos(sys_flag: int) -> int:
    return POS_STORETIMESTAMP_V6 if sys_flag & BORNHOST_V6_FLAG else POS_STORETIMESTAMP_V4
