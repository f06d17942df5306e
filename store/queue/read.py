"""The reading side of ConsumeQueueStore: queue ranges, units by queue offset, topics. A
read-only store (a reader beside a running writer) looks at the files again on each call."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from store.format.constants import CQ_STORE_UNIT_SIZE
from store.queue.files import ConsumeQueueFiles, _Queue
from store.queue.units import UNIT_DTYPE, file_name, first_at_or_after, list_unit_files, read_units, valid_count


class ConsumeQueueReads(ConsumeQueueFiles):
    """The consume queues' reads, over the files and state of ConsumeQueueFiles."""

    def next_queue_offsets(self) -> dict[tuple[str, int], int]:
        with self._lock:
            self._ensure_loaded()
            if self.read_only:
                self.load()
            return {k: q.max_offset for k, q in self._queues.items()}

    def _queue(self, topic: str, queue_id: int) -> _Queue | None:
        self._ensure_loaded()
        key = (topic, queue_id)
        if self.read_only:   # the writer may have moved on: look again
            q = self._queues.get(key) or _Queue(topic, queue_id, self.dir / topic / str(queue_id))
            try:
                self._scan(q)
            except FileNotFoundError:
                self._scan(q)   # retention removed a file between listing and reading
            if not q.files:
                self._queues.pop(key, None)
                return None
            self._queues[key] = q
        return self._queues.get(key)

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min, max) queue offsets: the first readable one and the next one to be written."""
        with self._lock:
            q = self._queue(topic, queue_id)
            return (0, 0) if q is None else (q.min_offset, q.max_offset)

    def find(self, topic: str, queue_id: int, queue_offset: int, max_n: int) -> list[tuple[int, int, int]]:
        """Up to ``max_n`` units (commitLogOffset, size, tagsCode) from ``queue_offset`` on;
        offsets below the queue's min are not returned (their records are gone)."""
        return self.find_units(topic, queue_id, queue_offset, max_n).tolist()

    def find_units(self, topic: str, queue_id: int, queue_offset: int, max_n: int) -> np.ndarray:
        """As find, as a structured array (UNIT_DTYPE)."""
        with self._lock:
            q = self._queue(topic, queue_id)
            if q is None or max_n <= 0:
                return np.empty(0, dtype=UNIT_DTYPE)
            qoff = max(queue_offset, q.min_offset)
            end = min(q.max_offset, qoff + max_n)
            parts = []
            while qoff < end:
                fstart = qoff - qoff % self.units_per_file
                n = min(end, fstart + self.units_per_file) - qoff
                path = q.path / file_name(fstart * CQ_STORE_UNIT_SIZE)
                try:
                    units = read_units(path, qoff - fstart, n)
                except FileNotFoundError:
                    break
                k = valid_count(units)
                parts.append(units[:k])
                if k < n:
                    break
                qoff += n
            return np.concatenate(parts) if parts else np.empty(0, dtype=UNIT_DTYPE)

    def record_start_at_or_after(self, phys: int) -> int | None:
        """The smallest commitLogOffset >= ``phys`` any queue points at (a record start found
        without walking the commit log), or None."""
        best: int | None = None
        for topic, queue_ids in self.topics().items():
            for queue_id in queue_ids:
                for path in self.queue_files(topic, queue_id):
                    try:
                        found = first_at_or_after(path, phys)
                    except FileNotFoundError:       # retention removed it meanwhile
                        continue
                    if found is not None:
                        best = found if best is None else min(best, found)
                        break
        return best

    def topics(self) -> dict[str, list[int]]:
        with self._lock:
            self._ensure_loaded()
            keys = sorted(self._queues) if not self.read_only else \
                [(t, q) for t, q, d in self._queue_dirs() if list_unit_files(d)]
            out: dict[str, list[int]] = {}
            for topic, qid in keys:
                out.setdefault(topic, []).append(qid)
            return out

    def queue_files(self, topic: str, queue_id: int) -> list[Path]:
        with self._lock:
            q = self._queue(topic, queue_id)
            return [] if q is None else [q.path / file_name(s) for s in q.files]
