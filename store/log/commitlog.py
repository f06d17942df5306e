"""The commit log: appends pre-encoded records into the segment queue (RocketMQ's CommitLog +
DefaultAppendMessageCallback.doAppend, vectorised over a whole batch).

A batch is checked and its queues numbered here (QUEUEOFFSET assigned, or carried by the batch
and checked) before a byte of it is written; then its records are copied into the mapping in
blocks by two threads, each block patched with QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP
while it is in cache (store/log/record_patch.py). A batch that crosses a segment end is split by the
BLANK rule of FORMAT §8: a record fits only if 8 bytes remain after it.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from store.errors import FieldLimitError, FileSpaceError, QueueOffsetMismatchError, SegmentAllocationError
from store.failed_call import describe_failure
from store.format.codec import CodecConfig
from store.format.constants import (
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    END_FILE_MIN_BLANK_LENGTH,
    OS_PAGE_SIZE,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from store.log.record_patch import BatchLayout, Placement, RecordWriter
from store.log.segment import Segment
from store.log.segment_queue import SegmentQueue
from store.queue.groups import QueueGroups, group_queues
from store.format.layout import TOTAL_AND_MAGIC

if TYPE_CHECKING:
    from store.format.batch_codec import EncodedBatch

log = logging.getLogger(__name__)

# queue_eligible relies on it: of the transaction types, only PREPARED and ROLLBACK have bit 2
assert TRANSACTION_NOT_TYPE & TRANSACTION_PREPARED_TYPE == TRANSACTION_COMMIT_TYPE & TRANSACTION_PREPARED_TYPE == 0
assert TRANSACTION_ROLLBACK_TYPE & TRANSACTION_PREPARED_TYPE and TRANSACTION_TYPE_MASK == 0xC
QueueKey = tuple[str, int]


@dataclass
class AppendOutcome:
    physical_offsets: np.ndarray     # int64 global offset of each record
    sizes: np.ndarray                # int32 TOTALSIZE
    queue_offsets: np.ndarray        # int64 as written (0 for PREPARED/ROLLBACK)
    dispatch_mask: np.ndarray        # bool: NOT/COMMIT records, the ones that get a queue slot
    end_offset: int                  # write end after the batch
    groups: QueueGroups | None = None   # the dispatched records by queue (None: there are none)
    queue_bases: np.ndarray | None = None   # each group's first queue offset (numbered from it)


def queue_eligible(sys_flags: np.ndarray) -> np.ndarray:
    """NOT and COMMIT records get queue offsets and consume-queue units; PREPARED and
    ROLLBACK get QUEUEOFFSET 0 and no unit (FORMAT §3)."""
    # Of the four types NOT (0), PREPARED (4), COMMIT (8), ROLLBACK (12), the two that take a
    # slot are those without the PREPARED bit: one operation per record instead of four.
    return (np.asarray(sys_flags) & TRANSACTION_PREPARED_TYPE) == 0


def _sources(batch: EncodedBatch, offsets: np.ndarray, layout: BatchLayout) -> list[tuple[int, int, np.ndarray, int]]:
    """(first record, end record, buffer, where the first one starts in it) of each buffer the
    batch's records come from (one, or its pieces), checked: the records must lie back to back
    in it, as the copy takes them, and fit it."""
    out = []
    for first, end, data in batch.sources():
        src, need = int(offsets[first]), layout.before(end) - layout.before(first)
        if src < 0 or src + need > len(data):
            raise ValueError(f"batch.data has {len(data)} bytes, its records need {src + need} from {src}")
        steps = np.diff(offsets[first:end])
        if len(steps) and not (bool((steps == layout.stride).all()) if layout.stride
                               else np.array_equal(steps, layout.sizes[first:end - 1])):
            raise ValueError("batch records are not back to back in batch.data")
        out.append((first, end, data, src))
    return out


class CommitLog:

    def __init__(self, directory: Path, segment_size: int, codec: CodecConfig, *,
                 preallocate: bool = True, warm_first: bool = False, mlock: bool = False,
                 read_only: bool = False) -> None:
        self.segment_size = segment_size
        self.codec = codec
        self.queue = SegmentQueue(directory, segment_size, read_only=read_only,
                                  preallocate=preallocate, warm_first=warm_first, mlock=mlock)
        self.queue_offsets: dict[QueueKey, int] = {}   # next queue offset per (topic, queueId)
        self.last_record_offset = -1
        self.flushed_offset = 0
        self.flushed_store_timestamp = 0
        self._flush_lock = threading.Lock()
        self._ts_marks: deque[tuple[int, int]] = deque()  # (end offset, store timestamp)
        self.writer = RecordWriter(1 if read_only else min(os.cpu_count() or 1, 2), codec.enabled_append_prop_crc)

    # --- positions ---------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset

    def set_end(self, end: int) -> None:
        """Make ``end`` the write end (recovery): earlier segments count as full, later
        segments are deleted, everything up to ``end`` counts as flushed."""
        self.queue.delete_after(end)
        if not self.queue.segments:
            self.queue.create_first(end)
        for seg in self.queue.segments:
            pos = min(max(end - seg.base_offset, 0), seg.size)
            seg.wrote = seg.flushed = pos
        self.flushed_offset = end

    # --- append ------------------------------------------------------------------------------
    def append(self, batch: EncodedBatch, store_timestamp: int) -> AppendOutcome:
        """Write ``batch``; the caller serialises appends. Nothing is written if the batch is
        refused (queue offsets, record layout or size, no disk for a new segment)."""
        n = len(batch)
        if n == 0:
            return AppendOutcome(np.zeros(0, np.int64), np.zeros(0, np.int32),
                                 np.zeros(0, np.int64), np.zeros(0, bool), self.max_offset)
        sizes = np.asarray(batch.sizes)
        offsets = np.asarray(batch.offsets, dtype=np.int64)
        sys_flags = np.asarray(batch.sys_flags, dtype=np.int32)
        # Positions follow from the sizes alone (never from the offsets, which are only checked),
        # so nothing the batch says can place a byte outside the room it was given.
        layout = self._layout(sizes, sys_flags)
        total = layout.before(n)
        sources = _sources(batch, offsets, layout)
        if self.queue.last() is None:
            self.queue.create_first(0)
        first_seg_index = len(self.queue.segments) - 1
        current = self.queue.last()
        chunks, blanks, slot = self._place(layout, current.wrote)
        phys = np.empty(n, dtype=np.int64)
        fields = self.writer.fields(n)

        def placements(s_slot: int, pos: int, i: int, k: int) -> Iterator[Placement]:
            base = current.base_offset + s_slot * self.segment_size    # segments are contiguous
            buf = self.queue.segments[first_seg_index + s_slot].buf
            for first, end, data, src in sources:       # records i..k-1, a source buffer at a time
                a, b = max(i, first), min(k, end)
                if a < b:
                    at = pos + layout.before(a) - layout.before(i)
                    yield Placement(buf, base, at, a, b, layout, data,
                                    src + layout.before(a) - layout.before(first) - at, fields, phys)

        eligible = queue_eligible(sys_flags)
        queue_offsets, updates, groups, bases = self._queue_offsets(batch, eligible)
        self._allocate(slot)
        for chunk in chunks:
            for place in placements(*chunk):
                self.writer.write(place, store_timestamp, queue_offsets)
        segs = self.queue.segments[first_seg_index:first_seg_index + slot + 1]
        size = self.segment_size
        for s_slot, pos in blanks:
            TOTAL_AND_MAGIC.pack_into(segs[s_slot].view, pos, size - pos, BLANK_MAGIC_CODE)

        # Publish positions only now, oldest segment first: the flush thread must never see a
        # position covering bytes not yet copied and patched.
        for s_slot, seg in enumerate(segs):
            last_chunk = [c for c in chunks if c[0] == s_slot]
            if s_slot < slot:
                seg.wrote = size
            elif last_chunk:
                _, pos, i, k = last_chunk[-1]
                seg.wrote = pos + layout.before(k) - layout.before(i)
        self.queue_offsets.update(updates)
        self.last_record_offset = int(phys[-1])
        end = self.max_offset
        self._ts_marks.append((end, store_timestamp))
        self.queue.preallocate_next(total)
        return AppendOutcome(phys, np.asarray(sizes, dtype=np.int32), queue_offsets, eligible, end, groups, bases)

    def _layout(self, sizes: np.ndarray, sys_flags: np.ndarray) -> BatchLayout:
        if sizes.dtype.kind not in "iu":
            raise ValueError(f"batch.sizes is {sizes.dtype}, not integers")
        smin, smax = int(sizes.min()), int(sizes.max())
        limit = self.segment_size - END_FILE_MIN_BLANK_LENGTH
        if smax > limit:
            r = int(np.flatnonzero(sizes > limit)[0])
            raise FieldLimitError("record", int(sizes[r]), limit,
                                  f"row {r} cannot fit a segment of {self.segment_size} bytes "
                                  f"(a segment must keep 8 bytes for its BLANK record)")
        if smin <= 0:
            raise ValueError("batch has a record of size <= 0")
        # One bool for the batch when every born host is of the same kind (the usual case)
        any_v6 = int(np.bitwise_or.reduce(sys_flags)) & BORNHOST_V6_FLAG
        all_v6 = int(np.bitwise_and.reduce(sys_flags)) & BORNHOST_V6_FLAG
        v6: bool | np.ndarray = bool(all_v6) if any_v6 == all_v6 else (sys_flags & BORNHOST_V6_FLAG) != 0
        return BatchLayout.of(sizes, smin, smax, v6)

    def _place(self, layout: BatchLayout, wrote: int) -> tuple[list[tuple[int, int, int, int]],
                                                               list[tuple[int, int]], int]:
        """Where the records go, by the BLANK rule (a record fits only if 8 bytes remain after
        it): chunks (segment slot, position, first record, end record), BLANK positions (segment
        slot, position), and how many new segments the batch rolls into. Slot 0 is the current
        segment, which has ``wrote`` bytes."""
        n, size, w = len(layout.sizes), self.segment_size, wrote
        if layout.before(n) <= size - w - END_FILE_MIN_BLANK_LENGTH:     # the usual case
            return [(0, w, 0, n)], [], 0
        cum = layout.cumulative()       # cum[i]: the bytes of records 0..i
        chunks: list[tuple[int, int, int, int]] = []
        blanks: list[tuple[int, int]] = []
        slot, i = 0, 0
        while i < n:
            prev = int(cum[i - 1]) if i else 0
            k = int(np.searchsorted(cum, prev + (size - w) - END_FILE_MIN_BLANK_LENGTH, side="right"))
            if k > i:
                chunks.append((slot, w, i, k))
                w += int(cum[k - 1]) - prev
                i = k
            if i < n:
                if w < size:   # a segment already closed by its BLANK needs none
                    blanks.append((slot, w))
                slot, w = slot + 1, 0
        return chunks, blanks, slot

    def _allocate(self, count: int) -> list[Segment]:
        """Create the ``count`` segments a batch rolls into, before writing a byte of it."""
        made: list[Segment] = []
        try:
            for _ in range(count):
                made.append(self.queue.next_segment())
        except OSError as e:
            with self.queue.lock:
                for seg in made:
                    self.queue.segments.remove(seg)
            for seg in made:
                seg.destroy()
            remedy = ("free disk space (or raise the file size limit) and retry"
                      if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) else "check the disk and retry")
            what = e if isinstance(e, FileSpaceError) else (
                f"cannot create a commit-log segment of {self.segment_size} bytes in {self.queue.directory}: "
                f"{describe_failure(e)}; {remedy}")
            raise SegmentAllocationError(f"{what}; nothing of this batch was written") from e
        return made

    # --- queue offsets -------------------------------------------------------------------------
    def _queue_offsets(self, batch: EncodedBatch, eligible: np.ndarray
                       ) -> tuple[np.ndarray, dict[QueueKey, int], QueueGroups | None, np.ndarray | None]:
        """Assign (or, when the batch carries them, check) the queue offset of every record:
        consecutive per (topic, queueId) from the queue's next offset, NOT/COMMIT only. Also
        returns those records grouped by queue and each group's first offset, for the consume
        queues."""
        n = len(batch)
        # The usual batch has no transactional records: every row takes a slot, no gathering.
        everyone = bool(eligible.all())
        ei = slice(None) if everyone else np.flatnonzero(eligible)
        updates: dict[QueueKey, int] = {}
        if not eligible.any():
            return np.zeros(n, dtype=np.int64), updates, None, None
        tidx = np.asarray(batch.topic_index)[ei]
        qids = np.asarray(batch.queue_ids)[ei]
        groups = group_queues(tidx, qids)
        keys = [(batch.topic_names[int(tidx[f])], int(qids[f])) for f in groups.first]
        bases = np.array([self.queue_offsets.get(k, 0) for k in keys], dtype=np.int64)
        expected = groups.number(bases)
        if batch.queue_offsets is not None:
            given = np.asarray(batch.queue_offsets, dtype=np.int64)
            bad = np.flatnonzero(given[ei] != expected)
            if bad.size:
                j = int(bad[0])
                row = int(np.arange(n)[ei][j])
                t, q = keys[int(groups.inverse[j])]
                raise QueueOffsetMismatchError(t, q, int(expected[j]), int(given[row]), row)
        if everyone:
            out = expected
        else:
            out = np.zeros(n, dtype=np.int64)   # PREPARED/ROLLBACK records keep QUEUEOFFSET 0
            out[ei] = expected
        for g, k in enumerate(keys):
            updates[k] = int(bases[g] + groups.counts[g])
        return out, updates, groups, bases

    # --- flush ---------------------------------------------------------------------------------
    def dirty_bytes(self) -> int:
        return self.max_offset - self.flushed_offset

    def flush(self, least_pages: int = 0, gate: AbstractContextManager[Any] | None = None) -> int:
        """msync what was written and not flushed (if at least ``least_pages`` pages are dirty);
        ``gate``: the store's writeback gate (Segment.flush). Returns the flushed offset. OSError
        propagates (the store then goes read-only)."""
        with self._flush_lock:
            if least_pages > 0 and self.dirty_bytes() < least_pages * OS_PAGE_SIZE:
                return self.flushed_offset
            segs = self.queue.snapshot()
            targets = [(s, s.wrote) for s in segs if s.flushed < s.wrote]
            for seg, upto in targets:
                seg.flush(upto, gate)
            # The flushed offset is the end of the flushed prefix: a segment read before a
            # concurrent roll published its BLANK may still be short of its end.
            flushed = self.flushed_offset
            for seg in segs:
                if seg.end_offset <= flushed:
                    continue
                flushed = max(flushed, seg.base_offset + seg.flushed)
                if seg.flushed < seg.size:
                    break
            self.flushed_offset = flushed
            while self._ts_marks and self._ts_marks[0][0] <= flushed:
                self.flushed_store_timestamp = self._ts_marks.popleft()[1]
            return flushed

    def drop_behind(self, offset: int) -> None:
        """Hand back the page-cache pages of the flushed records below ``offset`` (Segment.drop_behind)."""
        for seg in self.queue.snapshot():
            if seg.base_offset >= offset:
                break
            seg.drop_behind(offset - seg.base_offset)      # a no-op for the pages already handed back

    def close(self) -> None:
        self.writer.close()
        self.queue.close()
