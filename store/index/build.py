"""Feeding the index from decoded messages: after an append, in recovery past the index's end, and
for `commitlog reindex` over a whole commit log."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from store.index.keys import indexed_keys
from store.index.service import IndexService, KeyBatch

CHUNK_KEYS = 1 << 16


def index_messages(service: IndexService, messages: Iterable[tuple[int, Any]]) -> int:
    """Index the keys of ``messages`` ((physical offset, decoded message with topic, properties,
    sys_flag, store_timestamp), commit-log order). A message below the index's end is not indexed
    again (IndexService.buildIndex). Returns how many keys were put."""
    end = service.end_phy_offset
    topics: list[str] = []
    keys: list[str] = []
    offsets: list[int] = []
    stamps: list[int] = []
    total = 0
    for phy, m in messages:
        if phy < end:
            continue
        ks = indexed_keys(m.properties, m.sys_flag)
        topics += [m.topic] * len(ks)
        keys += ks
        offsets += [phy] * len(ks)
        stamps += [m.store_timestamp] * len(ks)
        if len(keys) >= CHUNK_KEYS:
            total += _put(service, topics, keys, offsets, stamps)
            topics, keys, offsets, stamps = [], [], [], []
    return total + _put(service, topics, keys, offsets, stamps)


def _put(service: IndexService, topics: list[str], keys: list[str], offsets: list[int], stamps: list[int]) -> int:
    service.put(KeyBatch(topics, keys, np.asarray(offsets, dtype=np.int64), np.asarray(stamps, dtype=np.int64)))
    return len(keys)
