"""The compaction logs of a store's compaction topics, kept level with their consume queues as a
RocketMQ 5 broker's CommitLogDispatcherCompaction keeps them: every record of such a topic that has
KEYS is appended to its queue's compaction log after its consume-queue unit is written. One walk
does it at each dispatch and at open: from where the compaction log ends to where the consume queue
ends, each unit's record read from the commit log. So a crash, a log opened under a topic only just
made a compaction topic, and a broker's own appends in between all come out the same."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pathlib import Path

from store.compaction.compaction_log import CompactionLog
from store.compaction.files import CompactionConfig, compaction_queues
from store.format.codec import decode_message
from store.queue.consume_queue import ConsumeQueueStore

_UNITS_AT_ONCE = 4096

RecordAt = Callable[[int, int], memoryview]     # (physical offset, size) -> the record's bytes


class CompactionService:
    """The compaction logs of ``config.topics`` in the store at ``root``, fed from ``cq``."""

    def __init__(self, root: Path, config: CompactionConfig, cq: ConsumeQueueStore, record_at: RecordAt) -> None:
        self.root, self.config = root, config
        self._cq, self._record_at = cq, record_at
        self._logs: dict[tuple[str, int], CompactionLog] = {}
        self._walked: dict[tuple[str, int], int] = {}     # the consume queue's offsets walked so far

    def recover(self) -> None:
        """Open every compaction topic's logs, keeping what the (recovered) consume queues hold,
        and append what they lack."""
        ends = self._cq.next_queue_offsets()
        keys = {k for k in ends if k[0] in self.config.topics}
        keys |= {k for k in compaction_queues(self.root) if k[0] in self.config.topics}
        for key in sorted(keys):
            self._open(key, keep_below=ends.get(key, 0))
            self.catch_up(*key)

    def _open(self, key: tuple[str, int], keep_below: int | None = None) -> CompactionLog:
        log = self._logs.get(key)
        if log is None:
            log = CompactionLog(self.root, key[0], key[1], self.config)
            log.open(keep_below)
            self._logs[key] = log
        return log

    def dispatched(self, topic_names: list[str], topic_index: np.ndarray, queue_ids: np.ndarray,
                   **_units: object) -> None:
        """After a batch's consume-queue units are written: the compaction topics' queues it touched."""
        for i, topic in enumerate(topic_names):
            if topic in self.config.topics:
                for queue_id in np.unique(np.asarray(queue_ids)[np.asarray(topic_index) == i]):
                    self.catch_up(topic, int(queue_id))

    def catch_up(self, topic: str, queue_id: int) -> int:
        """Append the queue's records the compaction log lacks; returns how many."""
        key = (topic, queue_id)
        log = self._open(key)
        low, high = self._cq.queue_range(topic, queue_id)
        start = max(low, log.next_offset or 0, self._walked.get(key, 0))
        added = 0
        while start < high:
            units = self._cq.find_units(topic, queue_id, start, min(_UNITS_AT_ONCE, high - start))
            if not len(units):
                break
            for i, u in enumerate(units):
                record = self._record_at(int(u["phys"]), int(u["size"]))
                msg = decode_message(record)
                if msg.keys is not None and msg.keys.strip():     # the broker leaves a record without KEYS out
                    added += log.append(record, start + i, int(u["tags"]), msg.store_timestamp)
            start += len(units)
        self._walked[key] = start
        return added

    def close(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs.clear()
