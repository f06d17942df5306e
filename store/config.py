"""The store's settings (a subset of RocketMQ's MessageStoreConfig, same defaults)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from store.compaction.files import CompactionConfig
from store.format.codec import CodecConfig
from store.index.service import IndexConfig
from store.queue.files import DEFAULT_MAX_OPEN_QUEUE_FILES
from store.format.constants import (
    DEFAULT_COMMITLOG_FILE_SIZE,
    DEFAULT_CONSUME_QUEUE_UNITS,
    FLUSH_COMMITLOG_LEAST_PAGES,
    FLUSH_COMMITLOG_THOROUGH_INTERVAL_MS,
    FLUSH_INTERVAL_COMMITLOG_MS,
    OS_PAGE_SIZE,
)

if TYPE_CHECKING:  # defined by the retention module; only a type here
    from store.retention import RetentionConfig  # noqa: F401

FLUSH_MODES = ("async", "sync")
# What an open does with records another writer (a RocketMQ broker) appended past the commit point
# (store.log.recovery): adopt them (refusing when they follow an unfinished batch of ours), refuse
# them, or keep everything past it, an unfinished batch of ours included.
FOREIGN_TAIL_POLICIES = ("adopt", "refuse", "keep-all")


@dataclass
class StoreConfig:
    segment_size: int = DEFAULT_COMMITLOG_FILE_SIZE     # mappedFileSizeCommitLog, multiple of 4096
    flush_mode: str = "async"                            # flushDiskType: "async" | "sync"
    flush_interval_ms: int = FLUSH_INTERVAL_COMMITLOG_MS
    flush_least_pages: int = FLUSH_COMMITLOG_LEAST_PAGES
    flush_thorough_interval_ms: int = FLUSH_COMMITLOG_THOROUGH_INTERVAL_MS
    consume_queue_units: int = DEFAULT_CONSUME_QUEUE_UNITS
    max_open_queue_files: int = DEFAULT_MAX_OPEN_QUEUE_FILES   # the writer's open consume-queue files at most
    preallocate: bool = True                             # create + pre-fault the next segment early
    warm_first_segment: bool = False                     # pre-fault a new store's first segment (at open)
                                                         # and first IndexFile's items (when it is made)
    codec: CodecConfig = field(default_factory=CodecConfig)
    retention: "RetentionConfig | Any | None" = None
    mlock: bool = False                                  # mlock segments where RLIMIT_MEMLOCK allows
    drop_cache_behind: bool = True                       # a commit hands the page cache it covers back
    index: IndexConfig = field(default_factory=IndexConfig)   # messageIndexEnable, maxHashSlotNum, maxIndexNum
    foreign_tail: str = "adopt"                          # one of FOREIGN_TAIL_POLICIES
    compaction: CompactionConfig = field(default_factory=CompactionConfig)   # RocketMQ 5's compaction topics

    def __post_init__(self) -> None:
        if self.segment_size <= 0 or self.segment_size % OS_PAGE_SIZE != 0:
            raise ValueError(f"segment_size is {self.segment_size}; it must be a positive "
                             f"multiple of {OS_PAGE_SIZE}")
        if self.flush_mode not in FLUSH_MODES:
            raise ValueError(f"flush_mode is {self.flush_mode!r}; use one of {FLUSH_MODES}")
        for name in ("flush_interval_ms", "flush_thorough_interval_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} is {getattr(self, name)}; it must be > 0")
        if self.foreign_tail not in FOREIGN_TAIL_POLICIES:
            raise ValueError(f"foreign_tail is {self.foreign_tail!r}; use one of {FOREIGN_TAIL_POLICIES}")
        if self.max_open_queue_files < 1:
            raise ValueError(f"max_open_queue_files is {self.max_open_queue_files}; it must be >= 1")
        if self.flush_least_pages < 0:
            raise ValueError(f"flush_least_pages is {self.flush_least_pages}; it must be >= 0")
