"""The store's index, fed by its appends: the keys of each appended batch are read from the encoded
records (store.index.batch_keys finds and hashes them for the whole batch at once) and put into the
IndexService; flushed with the commit log, so that every commit point covers it, and trimmed back
to the commit point after a crash."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from store.format.constants import INDEX_DIR
from store.format.fields import record_fields
from store.index.batch_keys import batch_keys
from store.index.service import IndexConfig, IndexService

log = logging.getLogger(__name__)


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

    def add(self, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, physical_offsets: np.ndarray,
            store_timestamp: int) -> int:
        """Index the keys of an appended batch (its encoded records, where they were before the copy
        into the commit log, and the offsets they were given there)."""
        if len(starts) == 0:
            return 0
        arr = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
        fields = record_fields(arr, np.asarray(starts, dtype=np.int64), np.asarray(sizes, dtype=np.int64))
        keys = batch_keys(arr, fields)
        if len(keys):
            phy = np.asarray(physical_offsets, dtype=np.int64)[keys.record]
            self.service.put_hashes(keys.key_hash, phy, np.full(len(keys), store_timestamp, dtype=np.int64))
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
