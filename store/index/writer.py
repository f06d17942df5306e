"""The store's index, fed by its appends: the keys of each appended batch are read from the encoded
records (store.format.fields finds every record's topic and properties at once) and put into the
IndexService; flushed with the commit log, so that every commit point covers it, and trimmed back
to the commit point after a crash."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from store.format.constants import INDEX_DIR, PROPERTY_KEYS, PROPERTY_UNIQ_KEY
from store.format.fields import record_fields
from store.format.properties import java_string, string_to_properties
from store.index.keys import indexed_keys
from store.index.service import IndexConfig, IndexService, KeyBatch

log = logging.getLogger(__name__)
_NAMES = (f"{PROPERTY_KEYS}\x01".encode(), f"{PROPERTY_UNIQ_KEY}\x01".encode())


class IndexWriter:
    """index/ of one store, written by its one writer."""

    def __init__(self, root: Path, config: IndexConfig) -> None:
        self.directory = Path(root) / INDEX_DIR
        self.existed = self.directory.is_dir()
        self.service = IndexService(self.directory, config)

    def recover(self, committed_end: int, min_offset: int, timestamp_of: Callable[[int], int]) -> None:
        """Bring the index to the commit point: items past it go. A store written before the index
        existed (no index/ yet) is indexed from its next append on; ``commitlog reindex`` covers
        what it holds already."""
        self.service.trim_to(committed_end, timestamp_of)
        if not self.existed and committed_end > min_offset:
            log.warning("store %s has no index/: its messages up to %d are not indexed (run `commitlog "
                        "reindex %s` to index them); new messages are", self.directory.parent, committed_end,
                        self.directory.parent)

    def add(self, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, topic_names: list[str],
            topic_index: np.ndarray, sys_flags: np.ndarray, physical_offsets: np.ndarray, store_timestamp: int) -> int:
        """Index the keys of an appended batch (its encoded records, where they were before the copy)."""
        n = len(starts)
        if n == 0:
            return 0
        arr = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
        fields = record_fields(arr, np.asarray(starts, dtype=np.int64), np.asarray(sizes, dtype=np.int64))
        pos, length = fields.props_pos.tolist(), fields.props_len.tolist()
        mem = memoryview(arr)
        topics: list[str] = []
        keys: list[str] = []
        offsets: list[int] = []
        for i in range(n):
            if not length[i]:
                continue
            raw = bytes(mem[pos[i]:pos[i] + length[i]])
            if _NAMES[0] not in raw and _NAMES[1] not in raw:
                continue
            ks = indexed_keys(string_to_properties(java_string(raw)), int(sys_flags[i]))
            topics += [topic_names[int(topic_index[i])]] * len(ks)
            keys += ks
            offsets += [int(physical_offsets[i])] * len(ks)
        if keys:
            self.service.put(KeyBatch(topics, keys, np.asarray(offsets, dtype=np.int64),
                                      np.full(len(keys), store_timestamp, dtype=np.int64)))
        return len(keys)

    @property
    def index_msg_timestamp(self) -> int:
        return self.service.index_msg_timestamp

    def flush(self) -> None:
        self.service.flush()

    def delete_below(self, min_offset: int) -> list[Path]:
        return self.service.delete_below(min_offset)

    def close(self, flush: bool = True) -> None:
        if flush:
            self.service.flush()
        self.service.close()

    def query(self, *args: Any, **kwargs: Any) -> list[int]:
        return self.service.query(*args, **kwargs)
