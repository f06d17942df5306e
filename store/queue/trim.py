"""The trimming side of ConsumeQueueStore: units past the commit log's end dropped after a crash
(ConsumeQueue.truncateDirtyLogicFiles), files wholly below its first offset deleted by retention and
each queue's min offset moved (ConsumeQueue.deleteExpiredFile, correctMinOffset)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from store.errors import ConsumeQueueError
from store.format.constants import CQ_STORE_UNIT_SIZE
from store.queue.files import _Queue
from store.queue.read import ConsumeQueueReads
from store.queue.units import blank_mask, file_name, read_units, written_count


class ConsumeQueueTrim(ConsumeQueueReads):
    """The consume queues' trimming, over the files and state of ConsumeQueueFiles."""

    def truncate_dirty(self, phys_end: int) -> None:
        """Drop every unit pointing at or past ``phys_end`` (ConsumeQueue.truncateDirtyLogicFiles):
        whole files from the end, then the tail of the last kept file is zeroed."""
        if self.read_only:
            raise ConsumeQueueError("this consume-queue store is read-only")
        with self._lock:
            self._ensure_loaded()
            for key in list(self._queues):
                self._truncate_queue(self._queues[key], phys_end)

    def _truncate_queue(self, q: _Queue, phys_end: int) -> None:
        while q.files:
            start = q.files[-1]
            path = q.path / file_name(start)
            n = written_count(path)
            units = read_units(path, 0, n)
            dirty = units["phys"][:n] >= phys_end
            if n and dirty[0] or n == 0:
                # A file whose first unit is dirty goes entirely (the blanks have offset 0).
                if q.fd_start == start:
                    self._drop_queue_file(q)
                path.unlink()
                q.files.pop()
                self._dirs_to_sync.add(q.path)
                continue
            keep = int(np.argmax(dirty)) if dirty.any() else n
            if keep < n:
                with open(path, "r+b") as f:
                    f.seek(keep * CQ_STORE_UNIT_SIZE)
                    f.write(bytes((n - keep) * CQ_STORE_UNIT_SIZE))
                    f.flush()
                    os.fsync(f.fileno())
            q.max_offset = start // CQ_STORE_UNIT_SIZE + keep
            q.min_offset = min(q.min_offset, q.max_offset)
            return
        self._forget(q)

    def _forget(self, q: _Queue) -> None:
        """A queue left with no file: drop it and its empty directories."""
        self._drop_queue_file(q)
        del self._queues[(q.topic, q.queue_id)]
        for d in (q.path, q.path.parent):
            try:
                d.rmdir()
            except OSError:
                break
        self._dirs_to_sync.discard(q.path)

    def delete_below(self, commitlog_min_offset: int) -> list[Path]:
        """Delete the files whose units all point below the commit log's first offset (never a
        queue's last file) and move each queue's min offset to its first surviving record."""
        if self.read_only:
            raise ConsumeQueueError("this consume-queue store is read-only")
        deleted: list[Path] = []
        with self._lock:
            self._ensure_loaded()
            for q in self._queues.values():
                while len(q.files) > 1:
                    path = q.path / file_name(q.files[0])
                    last = read_units(path, self.units_per_file - 1, 1)
                    if len(last) and int(last["phys"][0]) < commitlog_min_offset:
                        path.unlink()
                        deleted.append(path)
                        q.files.pop(0)
                        self._dirs_to_sync.add(q.path)
                    else:
                        break
                self._correct_min(q, commitlog_min_offset)
        return deleted

    def _correct_min(self, q: _Queue, commitlog_min_offset: int) -> None:
        """ConsumeQueue.correctMinOffset: the first unit of the first file that is a real unit
        and points at or past the commit log's first offset."""
        path = q.path / file_name(q.files[0])
        n = written_count(path)
        units = read_units(path, 0, n)
        ok = (~blank_mask(units[:n])) & (units["phys"][:n] >= commitlog_min_offset)
        base = q.files[0] // CQ_STORE_UNIT_SIZE
        q.min_offset = base + (int(np.argmax(ok)) if ok.any() else n)
        q.min_offset = min(max(q.min_offset, base), q.max_offset)

