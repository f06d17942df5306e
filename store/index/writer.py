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
from store.index.settings import IndexSettings, read_index_settings, write_index_settings

log = logging.getLogger(__name__)


class IndexWriter:
    """index/ of one store, written by its one writer. The geometry it was built with
    (config/messageIndex.json) wins over the configured one: changing it takes a reindex."""

    def __init__(self, root: Path, config: IndexConfig) -> None:
        self.root = Path(root)
        self.directory = self.root / INDEX_DIR
        self.existed = self.directory.is_dir() and any(self.directory.iterdir())
        self.settings = read_index_settings(self.root)
        if self.settings is not None and self.existed:
            if (self.settings.max_hash_slot_num, self.settings.max_index_num) != \
                    (config.max_hash_slot_num, config.max_index_num):
                log.info("index/ of %s was built with maxHashSlotNum %d and maxIndexNum %d; kept (`commitlog "
                         "reindex` changes them)", self.root, self.settings.max_hash_slot_num,
                         self.settings.max_index_num)
            config = self.settings.config()
        self.service = IndexService(self.directory, config)

    def recover(self, committed_end: int, min_offset: int, timestamp_of: Callable[[int], int]) -> None:
        """Bring the index to the commit point: items past it go. A store with messages but no
        index/ yet (written before the index existed, or with it off) is indexed from its next
        append on, and said so: ``commitlog reindex`` covers what it holds already."""
        self.service.trim_to(committed_end, timestamp_of)
        complete = self.existed and (self.settings is None or self.settings.complete) or committed_end <= min_offset
        if not complete:
            log.warning("the index of %s misses messages below offset %d (it was written with the index off or "
                        "before it existed); new messages are indexed; `commitlog reindex %s` indexes them all",
                        self.root, committed_end, self.root)
        cfg = self.service.config
        settings = IndexSettings(cfg.max_hash_slot_num, cfg.max_index_num, complete)
        if settings != self.settings:
            write_index_settings(self.root, settings)
            self.settings = settings

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

    @property
    def end_timestamp(self) -> int:
        """The store timestamp of the last message indexed (0: none)."""
        return self.service.files[-1].header.end_timestamp if self.service.files else 0

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


def mark_index_incomplete(root: Path) -> None:
    """A writer opened with the index off: what it appends is not indexed."""
    settings = read_index_settings(root)
    if settings is not None and settings.complete:
        write_index_settings(root, IndexSettings(settings.max_hash_slot_num, settings.max_index_num, False))
