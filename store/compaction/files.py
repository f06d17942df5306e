"""The compaction log's files (RocketMQ 5's CompactionLog and SparseConsumeQueue): where they are,
how large the broker makes them, and the 46-byte BatchConsumeQueue unit."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from store.format.constants import (
    BCQ_INVALID_POS,
    BCQ_STORE_UNIT_SIZE,
    COMPACTION_CQ_DIR,
    COMPACTION_DIR,
    COMPACTION_LOG_DIR,
    DEFAULT_COMPACTION_CQ_MAPPED_FILE_SIZE,
    DEFAULT_COMPACTION_MAPPED_FILE_SIZE,
)

# BatchConsumeQueue.putBatchMessagePositionInfo, big-endian and packed
BCQ_UNIT_DTYPE = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8"), ("store_time", ">i8"),
                           ("base", ">i8"), ("batch", ">i2"), ("compacted", ">i4"), ("reserved", ">i4")])
assert BCQ_UNIT_DTYPE.itemsize == BCQ_STORE_UNIT_SIZE


@dataclass(frozen=True)
class CompactionConfig:
    """The store's compaction topics (written with ``cleanup.policy`` COMPACTION, each queue with a
    compaction log), and compactionMappedFileSize and compactionCqMappedFileSize as a broker.conf
    gives them: the files are the sizes the broker derives from them (CompactionLog's constructor)."""

    topics: frozenset[str] = frozenset()
    mapped_file_size: int = DEFAULT_COMPACTION_MAPPED_FILE_SIZE
    cq_mapped_file_size: int = DEFAULT_COMPACTION_CQ_MAPPED_FILE_SIZE

    def __post_init__(self) -> None:
        if self.cq_mapped_file_size < 2 * BCQ_STORE_UNIT_SIZE:
            raise ValueError(f"compactionCqMappedFileSize is {self.cq_mapped_file_size}; it must hold at "
                             f"least two {BCQ_STORE_UNIT_SIZE}-byte units")
        if self.mapped_file_size <= 0:
            raise ValueError(f"compactionMappedFileSize is {self.mapped_file_size}; it must be > 0")

    @property
    def cq_file_size(self) -> int:
        return self.cq_mapped_file_size // BCQ_STORE_UNIT_SIZE * BCQ_STORE_UNIT_SIZE

    @property
    def log_file_size(self) -> int:
        """CompactionLog.getCompactionLogSize: a multiple of the queue file's size, at least five."""
        cq = self.cq_file_size
        n, m = divmod(self.mapped_file_size, cq)
        if n < 5:
            return cq * 5
        return n * cq if 0 < m < (cq >> 1) else (n + 1) * cq


def log_dir(root: Path, topic: str, queue_id: int) -> Path:
    return root / COMPACTION_DIR / COMPACTION_LOG_DIR / topic / str(queue_id)


def cq_dir(root: Path, topic: str, queue_id: int) -> Path:
    return root / COMPACTION_DIR / COMPACTION_CQ_DIR / topic / str(queue_id)


def compaction_queues(root: Path) -> list[tuple[str, int]]:
    """(topic, queueId) of every compaction log the store holds, as CompactionStore.load finds them."""
    top = root / COMPACTION_DIR / COMPACTION_LOG_DIR
    out = []
    for topic_dir in sorted(top.iterdir()) if top.is_dir() else []:
        for queue in sorted(topic_dir.iterdir()) if topic_dir.is_dir() else []:
            if queue.is_dir() and queue.name.isdigit():
                out.append((topic_dir.name, int(queue.name)))
    return out


def unit(phys: int, size: int, tags_code: int, store_time: int, queue_offset: int) -> bytes:
    """One record's unit (batch size 1, no compacted offset)."""
    return np.array([(phys, size, tags_code, store_time, queue_offset, 1, BCQ_INVALID_POS, 0)],
                    dtype=BCQ_UNIT_DTYPE).tobytes()


def end_unit() -> bytes:
    """SparseConsumeQueue.putEndPositionInfo: the unit that closes a full queue file."""
    return np.array([(-1, 0, 0, 0, 0, 0, BCQ_INVALID_POS, 0)], dtype=BCQ_UNIT_DTYPE).tobytes()


def valid_count(units: np.ndarray) -> int:
    """How many leading units are records' (SparseConsumeQueue.recover stops at the first that is not)."""
    bad = (units["phys"] < 0) | (units["size"] <= 0) | (units["base"] < 0) | (units["batch"] <= 0)
    return int(np.argmax(bad)) if bad.any() else len(units)
