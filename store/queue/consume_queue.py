"""The consume queues of a store: consumequeue/<topic>/<queueId>/<20-digit byte offset> files of
20-byte units (FORMAT.md §12), byte for byte as RocketMQ's ConsumeQueue writes them.

Files are created at full size (zero-filled, like RocketMQ's mapped files), so the end of a
queue is the first zero unit of its last file; sparse, their blocks reserved ahead of the units
in steps (store.space), every queue of a batch before any unit of it is written. Writes go
through pwrite into the page cache, so a reader in another process sees units as soon as they
are dispatched; flush() makes those of the queues written since the last one durable
(store.queue.sync) and is called together with the commit log's flush.
"""

from __future__ import annotations

import os

import numpy as np

from store.errors import ConsumeQueueError, ConsumeQueueGapError
from store.format.constants import CQ_STORE_UNIT_SIZE, SCHEDULE_TOPIC
from store.space import create_reserved, next_reserved, reserve
from store.queue.groups import QueueGroups, group_queues
from store.queue.files import _Queue
from store.queue.trim import ConsumeQueueTrim
from store.queue.units import (
    UNIT_DTYPE,
    blank_units,
    check_topic_name,
    file_name,
    make_units,
    schedule_tags_codes,
)


def _check_consecutive(topic: str, queue_id: int, qoffs: np.ndarray) -> None:
    steps = np.diff(qoffs)
    if len(steps) and not np.all(steps == 1):
        bad = int(np.flatnonzero(steps != 1)[0])
        raise ConsumeQueueGapError(
            f"queue {topic}/{queue_id}: queue offsets not consecutive in the batch "
            f"({int(qoffs[bad])} then {int(qoffs[bad + 1])}); nothing was written")


class ConsumeQueueStore(ConsumeQueueTrim):
    """All consume queues of one store: their files (store.queue.files), reads (store.queue.read)
    and trimming (store.queue.trim), and the writing here: dispatch, flush, close."""

    # --- writing ------------------------------------------------------------------------------
    def dispatch(self, topic_names: list[str], topic_index: np.ndarray, queue_ids: np.ndarray,
                 queue_offsets: np.ndarray, physical_offsets: np.ndarray, sizes: np.ndarray,
                 tags_codes: np.ndarray, *, delay_levels: np.ndarray | None = None,
                 store_timestamp: int | np.ndarray | None = None, groups: QueueGroups | None = None,
                 queue_bases: np.ndarray | None = None) -> None:
        """Write one unit per record (the caller passes only NOT/COMMIT records). Units a queue
        already has are skipped, so redispatching is harmless; a hole raises ConsumeQueueGapError.
        For SCHEDULE_TOPIC_XXXX records with a delay level > 0 the tagsCode is the deliver time,
        which needs ``delay_levels`` and ``store_timestamp`` (one value or one per record).
        ``groups``: these records by queue, when the caller has it (the commit log's append);
        ``queue_bases`` with it: each group's first queue offset, when the caller numbered the
        groups consecutively from there (then ``queue_offsets`` is neither gathered nor checked)."""
        if self.read_only:
            raise ConsumeQueueError("this consume-queue store is read-only")
        for t in topic_names:
            check_topic_name(t)
        n = len(queue_offsets)
        if n == 0:
            return
        topic_index = np.asarray(topic_index)
        queue_ids = np.asarray(queue_ids)
        queue_offsets = np.asarray(queue_offsets, dtype=np.int64)
        tags = np.asarray(tags_codes, dtype=np.int64)
        if SCHEDULE_TOPIC in topic_names and delay_levels is not None:
            levels = np.asarray(delay_levels, dtype=np.int64)
            sched = (topic_index == topic_names.index(SCHEDULE_TOPIC)) & (levels > 0)
            if sched.any():
                if store_timestamp is None:
                    raise ValueError("store_timestamp is needed for SCHEDULE_TOPIC_XXXX records with a delay level")
                ts = np.broadcast_to(np.asarray(store_timestamp, dtype=np.int64), (n,))
                tags = tags.copy()
                tags[sched] = schedule_tags_codes(levels[sched], ts[sched])
        if groups is None:
            groups, queue_bases = group_queues(topic_index, queue_ids), None
        numbered = queue_bases is not None
        sizes = np.asarray(sizes)
        if groups.order is not None:
            # Units in queue order, so that each queue's units are one contiguous run to write.
            o = groups.order
            physical_offsets, tags = np.asarray(physical_offsets)[o], tags[o]
            sizes = sizes[0] if n > 1 and sizes.min() == sizes.max() else sizes[o]
            if not numbered:
                queue_offsets = queue_offsets[o]
        queues = [(topic_names[int(topic_index[f])], int(queue_ids[f]), slice(int(start), int(start + count)))
                  for f, start, count in zip(groups.first, groups.starts, groups.counts)]

        firsts = queue_bases.tolist() if numbered else [int(queue_offsets[r.start]) for _, _, r in queues]
        with self._lock:
            self._ensure_loaded()
            for first, (topic, qid, rows) in zip(firsts, queues):   # every queue is checked before any is written
                if not numbered:
                    _check_consecutive(topic, qid, queue_offsets[rows])
                self._check_continues(topic, qid, first)
            for first, (topic, qid, rows) in zip(firsts, queues):   # and has its blocks
                self._reserve_for(topic, qid, first, first + rows.stop - rows.start)
            units = make_units(physical_offsets, sizes, tags, out=self._units_scratch(n))
            for first, (topic, qid, rows) in zip(firsts, queues):
                self._append(topic, qid, first, units[rows])

    def _units_scratch(self, n: int) -> np.ndarray:
        """Units are built in one array reused across batches (under the lock: pwrite copies
        them out before the next batch): a fresh 2 MB array per batch is page-faulted anew."""
        if len(self._scratch) < n:
            self._scratch = np.empty(n, dtype=UNIT_DTYPE)
        return self._scratch[:n]

    def _check_continues(self, topic: str, queue_id: int, first: int) -> None:
        q = self._queues.get((topic, queue_id))
        if q is not None and q.files and first > q.max_offset:
            raise ConsumeQueueGapError(
                f"queue {topic}/{queue_id}: next queue offset is {q.max_offset} but the unit for "
                f"{first} arrived; the commit log is missing records of this queue; nothing "
                f"was written")

    def _queue_for_write(self, topic: str, queue_id: int, first: int) -> _Queue:
        q = self._queues.get((topic, queue_id))
        if q is None:
            q = _Queue(topic, queue_id, self.dir / topic / str(queue_id))
            q.path.mkdir(parents=True, exist_ok=True)
            self._dirs_to_sync.update((q.path, q.path.parent, self.dir))
            self._queues[(topic, queue_id)] = q
            q.min_offset = q.max_offset = first
        if not q.files:
            q.min_offset = q.max_offset = first
        return q

    def _reserve_for(self, topic: str, queue_id: int, first: int, end: int) -> None:
        """Reserve the blocks the units ``first .. end`` of a queue (and the blanks before a new
        queue's first unit) go into, creating the files they need: a full disk fails here, before
        any unit of the batch is written."""
        q = self._queue_for_write(topic, queue_id, first)
        self._sync.prepare()
        if not q.files:
            q.fresh = True
        start = first - first % self.units_per_file if q.fresh else q.max_offset
        while start < end:
            file_first = start - start % self.units_per_file
            need = (min(end, file_first + self.units_per_file) - file_first) * CQ_STORE_UNIT_SIZE
            self._use_file(q, file_first * CQ_STORE_UNIT_SIZE)
            grown = next_reserved(q.reserved, need, self.file_size)
            if grown > q.reserved:
                reserve(q.fd, grown, q.path / file_name(q.fd_start), "consume-queue file", q.reserved)
                q.reserved = grown
            start = file_first + self.units_per_file

    def _append(self, topic: str, queue_id: int, first: int, units: np.ndarray) -> None:
        q = self._queue_for_write(topic, queue_id, first)
        if q.fresh:
            q.fresh = False
            q.min_offset = q.max_offset = first
            file_first = first - first % self.units_per_file
            self._use_file(q, file_first * CQ_STORE_UNIT_SIZE)
            if first > file_first:
                self._write(q, file_first, blank_units(first - file_first))
        skip = q.max_offset - first     # >= 0: checked by _check_continues
        if skip < len(units):
            self._write(q, q.max_offset, units[skip:])

    def _write(self, q: _Queue, qoff: int, units: np.ndarray) -> None:
        pos = 0
        while pos < len(units):
            file_start = (qoff - qoff % self.units_per_file) * CQ_STORE_UNIT_SIZE
            self._use_file(q, file_start)
            room = self.units_per_file - qoff % self.units_per_file
            chunk = units[pos:pos + room]
            os.pwrite(q.fd, chunk.view(np.uint8), (qoff % self.units_per_file) * CQ_STORE_UNIT_SIZE)
            q.dirty = True
            self._dirty[(q.topic, q.queue_id)] = q
            pos += len(chunk)
            qoff += len(chunk)
            q.max_offset = max(q.max_offset, qoff)

    def _use_file(self, q: _Queue, file_start: int) -> None:
        """Make the file at ``file_start`` the queue's open one (the most recently used)."""
        key = (q.topic, q.queue_id)
        if q.fd_start == file_start:
            self._open.move_to_end(key)
            return
        if q.fd is not None:
            if q.dirty and file_start > q.fd_start:
                self._filled_fds.append(q.fd)   # filled: made durable by the next flush
                self._open.pop(key, None)
                self._dirty.pop(key, None)
                q.fd, q.fd_start, q.dirty, q.reserved = None, -1, False, 0
            else:
                self._close_queue_file(q)
        self._room_for_one_more()
        path = q.path / file_name(file_start)
        if path.exists():
            # one written before (by us, a crash, or RocketMQ): its blocks up to what it holds
            # are its own; reserving goes on from there
            fd = os.open(path, os.O_RDWR)
            reserved = (q.max_offset - file_start // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE
            reserved = min(max(reserved, 0), self.file_size)
        else:
            # full length and sparse, as the broker's mapped file; its first step reserved now
            reserved = next_reserved(0, CQ_STORE_UNIT_SIZE, self.file_size)
            fd = create_reserved(path, self.file_size, "consume-queue file", reserved=reserved)
            q.files.append(file_start)
            q.files.sort()
            self._dirs_to_sync.add(q.path)
        q.fd, q.fd_start, q.reserved = fd, file_start, reserved
        self._open[key] = q

    def flush(self) -> None:
        """Make durable every queue file written since the last flush, and new directory entries:
        in one pass over the files written, whatever the number of queues (store.queue.sync)."""
        with self._lock:
            dirty = self._filled_fds + [q.fd for q in self._dirty.values() if q.fd is not None]
            self._sync.flush(dirty, self._dirs_to_sync)
            while self._filled_fds:
                os.close(self._filled_fds.pop())
            for q in self._dirty.values():
                q.dirty = False
            self._dirty.clear()
            self._dirs_to_sync.clear()

    # --- closing ------------------------------------------------------------------------------
    def abandon(self) -> None:
        """Close the files without writing what is pending, as a killed process leaves them."""
        self._close_fds()

    def close(self, flush: bool = True) -> None:
        """Flush (unless ``flush`` is false: after a failed fsync the pages are not retried as if they
        could be made durable now; the next open recovers from the disk) and close the files."""
        with self._lock:
            if flush and not self.read_only and self._loaded:
                self.flush()
            self._close_fds()
            self._queues = {}
            self._loaded = False

    def __enter__(self) -> "ConsumeQueueStore":
        self._ensure_loaded()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["ConsumeQueueStore", "check_topic_name"]
