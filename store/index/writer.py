"""The store's index, fed by its appends: the keys of each appended batch, as the batch brought them
(store.index.shipped) or else read from its records in the commit log (store.index.build finds and
hashes them for the whole batch at once, in C), are put into the IndexService behind the append, on
the commit log's copy helper (the store's dispatcher); settled and flushed before every commit point,
so that each covers it, and trimmed back to the commit point after a crash."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from store.errors import IndexFileError
from store.format.constants import INDEX_DIR
from store.index.file import index_file_names
from store.index.service import IndexConfig, IndexService
from store.index.settings import IndexSettings, read_index_settings, write_index_settings
from store.log.dispatch import DispatchService
from store.log.segment_queue import SegmentQueue

log = logging.getLogger(__name__)


class IndexWriter:
    """index/ of one store, written by its one writer. The geometry it was built with
    (config/messageIndex.json) wins over the configured one: changing it takes a reindex."""

    def __init__(self, root: Path, config: IndexConfig, gate: AbstractContextManager[Any] | None = None,
                 warm_first: bool = False) -> None:
        self.root = Path(root)
        self.directory = self.root / INDEX_DIR
        self.existed = bool(index_file_names(self.directory))
        self.settings = read_index_settings(self.root)
        if self.settings is not None and self.existed:
            if (self.settings.max_hash_slot_num, self.settings.max_index_num) != \
                    (config.max_hash_slot_num, config.max_index_num):
                log.info("index/ of %s was built with maxHashSlotNum %d and maxIndexNum %d; kept (`commitlog "
                         "reindex` changes them)", self.root, self.settings.max_hash_slot_num,
                         self.settings.max_index_num)
            config = self.settings.config()
        self.service = IndexService(self.directory, config, gate=gate, warm_first=warm_first)
        if self.service.files:
            self.service.files[-1].reserve()     # the one the next keys go into
        self._segments: SegmentQueue | None = None
        self._behind: DispatchService | None = None

    # --- behind the append -----------------------------------------------------------------------
    def start(self, segments: SegmentQueue, executor: ThreadPoolExecutor | None = None) -> None:
        """Index what is appended to ``segments`` from now on, behind the appends (RocketMQ's
        dispatcher does this work): on ``executor``, the commit log's copy helper, as the
        consume-queue units are, or without one on a thread of its own. The C pass runs without
        the GIL beside the next batch's copy; on the helper it runs where the copy's second thread
        would, so that two cores run two threads: a third, for the index alone, cost the copies
        their share of both cores and the puts their cache (BENCHMARKS.md, "Store append")."""
        self._segments = segments
        self._behind = DispatchService(self._index_appended, f"index-{self.root.name}", executor)

    def submit(self, physical_offsets: np.ndarray, store_timestamp: int, key_hashes: np.ndarray | None = None,
               key_counts: np.ndarray | None = None) -> None:
        """Index the records just appended at ``physical_offsets`` (ascending, one append's
        ``store_timestamp``), behind the caller: their keys as the batch brought them (``key_hashes``,
        ``key_counts``: store.index.shipped), else found in the commit log. Raises the failure of an
        earlier batch instead."""
        assert self._behind is not None, "start() first"
        self._behind.submit(physical_offsets=physical_offsets, store_timestamp=store_timestamp,
                            key_hashes=key_hashes, key_counts=key_counts)

    def settle(self) -> None:
        """Wait until every record submitted is indexed; raises a failure of any of them."""
        if self._behind is not None:
            self._behind.drain()

    @property
    def failure(self) -> Exception | None:
        return self._behind.failure if self._behind is not None else None

    def _index_appended(self, physical_offsets: np.ndarray, store_timestamp: int, key_hashes: np.ndarray | None,
                        key_counts: np.ndarray | None) -> None:
        if key_hashes is not None and key_counts is not None:
            self.service.put_shipped(key_hashes, key_counts, physical_offsets, store_timestamp)
            return
        assert self._segments is not None
        offsets, i = physical_offsets, 0
        while i < len(offsets):
            seg = self._segments.find(int(offsets[i]))
            if seg is None:
                raise IndexFileError(f"the commit log of {self.root} has no segment at offset {int(offsets[i])} "
                                     f"to index")
            j = int(np.searchsorted(offsets, seg.end_offset))
            self.add_records(seg.buf, offsets[i:j] - seg.base_offset, seg.base_offset)
            i = j

    def recover(self, committed_end: int, min_offset: int, timestamp_of: Callable[[int], int],
                matches: Callable[[int, int], bool] | None = None) -> None:
        """Bring the index to the commit point: items past it go, and items a power cut left
        zeroed or torn (``matches``: IndexFile.trusted_items). A store with messages but no
        index/ yet (written before the index existed, or with it off) is indexed from its next
        append on, and said so: ``commitlog reindex`` covers what it holds already."""
        self.service.trim_to(committed_end, timestamp_of, matches)
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

    def add_records(self, buf: np.ndarray, starts: np.ndarray, base: int) -> int:
        """Index the records at ``starts`` of ``buf`` (a segment's bytes; ``base`` its offset), as
        IndexService.buildIndex does behind the append: keys, offsets and store timestamps read
        from the records themselves. Returns how many keys were put."""
        return self.service.put_records(buf, starts, base)

    @property
    def covered_end(self) -> int:
        """Where the last indexed record starts (-1: nothing indexed)."""
        return self.service.files[-1].covered_end if self.service.files else -1

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
        """Stop the thread behind the appends (what was submitted is indexed first), then flush."""
        if self._behind is not None:
            self._behind.stop()
            self._behind = None
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
