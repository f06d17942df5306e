"""The consume queues of a store: consumequeue/<topic>/<queueId>/<20-digit byte offset> files of
20-byte units (FORMAT.md §12), byte for byte as RocketMQ's ConsumeQueue writes them.

Files are created at full size (zero-filled, like RocketMQ's mapped files), so the end of a
queue is the first zero unit of its last file. Writes go through pwrite into the page cache,
so a reader in another process sees units as soon as they are dispatched; flush() makes them
durable and is called together with the commit log's flush.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from store.errors import ConsumeQueueError, ConsumeQueueGapError
from store.format.constants import CQ_STORE_UNIT_SIZE, SCHEDULE_TOPIC
from store.space import create_reserved, reserve
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

    def _append(self, topic: str, queue_id: int, first: int, units: np.ndarray) -> None:
        q = self._queues.get((topic, queue_id))
        if q is None:
            q = _Queue(topic, queue_id, self.dir / topic / str(queue_id))
            q.path.mkdir(parents=True, exist_ok=True)
            self._dirs_to_sync.update((q.path, q.path.parent, self.dir))
            self._queues[(topic, queue_id)] = q
            q.min_offset = q.max_offset = first
        if not q.files:
            q.min_offset = q.max_offset = first
            file_first = first - first % self.units_per_file
            self._open_file(q, file_first * CQ_STORE_UNIT_SIZE)
            if first > file_first:
                self._write(q, file_first, blank_units(first - file_first))
        skip = q.max_offset - first     # >= 0: checked by _check_continues
        if skip < len(units):
            self._write(q, q.max_offset, units[skip:])

    def _write(self, q: _Queue, qoff: int, units: np.ndarray) -> None:
        pos = 0
        while pos < len(units):
            file_start = (qoff - qoff % self.units_per_file) * CQ_STORE_UNIT_SIZE
            if q.fd_start != file_start:
                self._open_file(q, file_start)
            room = self.units_per_file - qoff % self.units_per_file
            chunk = units[pos:pos + room]
            os.pwrite(q.fd, chunk.view(np.uint8), (qoff % self.units_per_file) * CQ_STORE_UNIT_SIZE)
            q.dirty = True
            pos += len(chunk)
            qoff += len(chunk)
            q.max_offset = max(q.max_offset, qoff)

    def _open_file(self, q: _Queue, file_start: int) -> None:
        if q.fd is not None:
            if q.dirty:
                self._filled_fds.append(q.fd)   # made durable by the next flush
                q.dirty = False
            else:
                os.close(q.fd)
        q.fd, q.fd_start = None, -1
        path = q.path / file_name(file_start)
        if path.exists():
            fd = os.open(path, os.O_RDWR)
            try:
                reserve(fd, self.file_size, path, "consume-queue file")   # one we did not create
            except BaseException:
                os.close(fd)
                raise
        else:
            # full size, zero-filled, as a mapped file; every block reserved (store.space)
            fd = create_reserved(path, self.file_size, "consume-queue file")
            q.files.append(file_start)
            q.files.sort()
            self._dirs_to_sync.add(q.path)
        q.fd, q.fd_start = fd, file_start

    def flush(self) -> None:
        """fsync every queue file written since the last flush (and new directory entries)."""
        with self._lock:
            while self._filled_fds:
                fd = self._filled_fds[0]
                os.fsync(fd)
                os.close(fd)
                self._filled_fds.pop(0)
            for q in self._queues.values():
                if q.fd is not None and q.dirty:
                    os.fsync(q.fd)
                    q.dirty = False
            for d in sorted(self._dirs_to_sync, key=lambda p: len(p.parts), reverse=True):
                _fsync_dir(d)
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


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["ConsumeQueueStore", "check_topic_name"]
