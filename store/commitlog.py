"""The commit log: appends pre-encoded records into the segment queue (RocketMQ's CommitLog +
DefaultAppendMessageCallback.doAppend, vectorised over a whole batch).

A batch is copied into the mapping in bulk, one slice assignment per segment it lands in;
then QUEUEOFFSET (assigned here, or carried by the batch and checked), PHYSICALOFFSET and
STORETIMESTAMP are patched in place with numpy scatters. A batch that crosses a segment end is split by the BLANK
rule of FORMAT §8: a record fits only if 8 bytes remain after it.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .codec import CodecConfig, apply_prop_crcs
from .constants import (BLANK_MAGIC_CODE, BORNHOST_V6_FLAG, END_FILE_MIN_BLANK_LENGTH,
                        OS_PAGE_SIZE, POS_PHYSICALOFFSET, POS_QUEUEOFFSET,
                        POS_STORETIMESTAMP_V4, POS_STORETIMESTAMP_V6, TRANSACTION_COMMIT_TYPE,
                        TRANSACTION_NOT_TYPE, TRANSACTION_TYPE_MASK)
from .errors import FieldLimitError, QueueOffsetMismatchError, SegmentAllocationError
from .queue_groups import QueueGroups, group_queues
from .segment import Segment
from .segment_queue import SegmentQueue

if TYPE_CHECKING:
    from .batch_codec import EncodedBatch

log = logging.getLogger(__name__)

_BLANK = struct.Struct(">iI")
_AR16 = np.arange(16, dtype=np.int64)
_AR8 = np.arange(8, dtype=np.int64)
QueueKey = tuple[str, int]


@dataclass
class AppendOutcome:
    physical_offsets: np.ndarray     # int64 global offset of each record
    sizes: np.ndarray                # int32 TOTALSIZE
    queue_offsets: np.ndarray        # int64 as written (0 for PREPARED/ROLLBACK)
    dispatch_mask: np.ndarray        # bool: NOT/COMMIT records, the ones that get a queue slot
    end_offset: int                  # write end after the batch
    groups: QueueGroups | None = None   # the dispatched records by queue (None: there are none)


def queue_eligible(sys_flags: np.ndarray) -> np.ndarray:
    """NOT and COMMIT records get queue offsets and consume-queue units; PREPARED and
    ROLLBACK get QUEUEOFFSET 0 and no unit (FORMAT §3)."""
    tx = np.asarray(sys_flags, dtype=np.int32) & TRANSACTION_TYPE_MASK
    return (tx == TRANSACTION_NOT_TYPE) | (tx == TRANSACTION_COMMIT_TYPE)


class CommitLog:
    copy_block = 1 << 20   # bytes copied, then patched while cached (best of 0.5-4 MiB measured)

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
        refused (queue offsets, record too large for a segment, no disk for a new segment)."""
        n = len(batch)
        sizes = np.asarray(batch.sizes, dtype=np.int64)
        if n == 0:
            return AppendOutcome(np.zeros(0, np.int64), np.zeros(0, np.int32),
                                 np.zeros(0, np.int64), np.zeros(0, bool), self.max_offset)
        offsets = np.asarray(batch.offsets, dtype=np.int64)
        sys_flags = np.asarray(batch.sys_flags, dtype=np.int32)
        data = batch.data
        self._check_layout(offsets, sizes, data)

        eligible = queue_eligible(sys_flags)
        queue_offsets, updates, groups = self._queue_offsets(batch, eligible)

        # Placement: cum[i] = bytes of records 0..i; chunks of records per segment.
        cum = np.cumsum(sizes)
        starts_rel = cum - sizes
        if self.queue.last() is None:
            self.queue.create_first(0)
        first_seg_index = len(self.queue.segments) - 1
        w = self.queue.last().wrote
        size = self.segment_size
        chunks: list[tuple[int, int, int, int]] = []   # (segment slot, position, i, k)
        blanks: list[tuple[int, int]] = []              # (segment slot, position)
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

        new_segments = self._allocate(slot)
        segs = self.queue.segments[first_seg_index:first_seg_index + slot + 1]
        assert len(new_segments) == slot and len(segs) == slot + 1

        phys = np.empty(n, dtype=np.int64)
        v6 = (sys_flags & BORNHOST_V6_FLAG) != 0
        for s_slot, pos, i, k in chunks:
            seg = segs[s_slot]
            rel = starts_rel[i:k] - starts_rel[i] + pos      # record starts inside the segment
            phys[i:k] = rel + seg.base_offset
            self._copy_and_patch(seg.buf, data, int(offsets[i]) - pos, rel, sizes[i:k], phys[i:k],
                                 queue_offsets[i:k], v6[i:k], store_timestamp)
        for s_slot, pos in blanks:
            _BLANK.pack_into(segs[s_slot].view, pos, size - pos, BLANK_MAGIC_CODE)

        # Publish positions only now, oldest segment first: the flush thread must never see a
        # position covering bytes not yet copied and patched.
        for s_slot, seg in enumerate(segs):
            last_chunk = [c for c in chunks if c[0] == s_slot]
            if s_slot < slot:
                seg.wrote = size
            elif last_chunk:
                _, pos, i, k = last_chunk[-1]
                seg.wrote = pos + int(cum[k - 1] - starts_rel[i])
        self.queue_offsets.update(updates)
        self.last_record_offset = int(phys[-1])
        end = self.max_offset
        self._ts_marks.append((end, store_timestamp))
        self.queue.preallocate_next()
        return AppendOutcome(phys, sizes.astype(np.int32), queue_offsets, eligible, end, groups)

    def _check_layout(self, offsets: np.ndarray, sizes: np.ndarray, data: np.ndarray) -> None:
        limit = self.segment_size - END_FILE_MIN_BLANK_LENGTH
        big = np.flatnonzero(sizes > limit)
        if big.size:
            r = int(big[0])
            raise FieldLimitError("record", int(sizes[r]), limit,
                                  f"row {r} cannot fit a segment of {self.segment_size} bytes "
                                  f"(a segment must keep 8 bytes for its BLANK record)")
        if (sizes <= 0).any():
            raise ValueError("batch has a record of size <= 0")
        if len(offsets) > 1 and not np.array_equal(offsets[1:], offsets[:-1] + sizes[:-1]):
            raise ValueError("batch records are not back to back in batch.data")
        if int(offsets[-1] + sizes[-1]) > len(data):
            raise ValueError(f"batch.data has {len(data)} bytes, records need "
                             f"{int(offsets[-1] + sizes[-1])}")

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
            raise SegmentAllocationError(
                f"cannot create a commit-log segment of {self.segment_size} bytes in "
                f"{self.queue.directory}: {e}; free disk space (or raise the file size limit) "
                f"and retry; nothing of this batch was written") from e
        return made

    # --- queue offsets -------------------------------------------------------------------------
    def _queue_offsets(self, batch: EncodedBatch, eligible: np.ndarray
                       ) -> tuple[np.ndarray, dict[QueueKey, int], QueueGroups | None]:
        """Assign (or, when the batch carries them, check) the queue offset of every record:
        consecutive per (topic, queueId) from the queue's next offset, NOT/COMMIT only. Also
        returns those records grouped by queue, for the consume queues."""
        n = len(batch)
        out = np.zeros(n, dtype=np.int64)
        # The usual batch has no transactional records: every row takes a slot, no gathering.
        ei = slice(None) if eligible.all() else np.flatnonzero(eligible)
        updates: dict[QueueKey, int] = {}
        if not eligible.any():
            return out, updates, None
        tidx = np.asarray(batch.topic_index, dtype=np.int64)[ei]
        qids = np.asarray(batch.queue_ids, dtype=np.int64)[ei]
        groups = group_queues(tidx, qids)
        keys = [(batch.topic_names[int(tidx[f])], int(qids[f])) for f in groups.first]
        bases = np.array([self.queue_offsets.get(k, 0) for k in keys], dtype=np.int64)
        inv = groups.inverse
        expected = bases[inv] + groups.rank
        if batch.queue_offsets is not None:
            given = np.asarray(batch.queue_offsets, dtype=np.int64)
            bad = np.flatnonzero(given[ei] != expected)
            if bad.size:
                j = int(bad[0])
                row = int(np.arange(n)[ei][j])
                t, q = keys[int(inv[j])]
                raise QueueOffsetMismatchError(t, q, int(expected[j]), int(given[row]), row)
        out[ei] = expected
        for g, k in enumerate(keys):
            updates[k] = int(bases[g] + groups.counts[g])
        return out, updates, groups

    # --- patching ------------------------------------------------------------------------------
    def _copy_and_patch(self, buf: np.ndarray, data: np.ndarray, src_shift: int, rel: np.ndarray,
                        sizes: np.ndarray, phys: np.ndarray, queue_offsets: np.ndarray,
                        v6: np.ndarray, store_timestamp: int) -> None:
        """Copy records into the segment (record at segment position p comes from data[p +
        src_shift]) and patch them, block by block: patching a block while it is still in the
        CPU cache halves the memory traffic of patching after one big copy."""
        uniform = bool((sizes == sizes[0]).all()) and bool((v6 == v6[0]).all())
        m = len(rel)
        first, last_end = int(rel[0]), int(rel[-1] + sizes[-1])
        if last_end - first <= self.copy_block:
            edges = [0, m]
        else:
            cuts = np.searchsorted(rel, np.arange(first + self.copy_block, last_end, self.copy_block))
            edges = [0, *np.unique(cuts[(cuts > 0) & (cuts < m)]).tolist(), m]
        for a, b in zip(edges[:-1], edges[1:]):
            start, end = int(rel[a]), int(rel[b - 1] + sizes[b - 1])
            buf[start:end] = data[start + src_shift:end + src_shift]
            self._patch(buf, start, end - start, rel[a:b], sizes[a:b], phys[a:b],
                        queue_offsets[a:b], v6[a:b],
                        store_timestamp, uniform)
            if self.codec.enabled_append_prop_crc:
                apply_prop_crcs(buf, rel[a:b], sizes[a:b])

    @staticmethod
    def _patch(buf: np.ndarray, pos: int, nbytes: int, rel: np.ndarray, sizes: np.ndarray,
               phys: np.ndarray, queue_offsets: np.ndarray, v6: np.ndarray,
               store_timestamp: int, uniform: bool) -> None:
        """Write the big-endian fields the store owns into the records at segment positions
        ``rel``. Equal-sized records are patched through strided views (one field = one strided
        copy); otherwise through byte-stride views whose element i is the 8 (or 16) bytes at
        byte i, so a field of every record is one fancy-index scatter, not 8."""
        m = len(rel)
        if m == 0:
            return
        ts = np.array(store_timestamp, dtype=">i8")
        if uniform:
            stride = int(sizes[0])

            def column(off: int, dtype: str) -> np.ndarray:
                return np.ndarray((m,), dtype=dtype, buffer=buf, offset=pos + off, strides=(stride,))

            column(POS_PHYSICALOFFSET, ">i8")[:] = phys
            column(POS_QUEUEOFFSET, ">i8")[:] = queue_offsets
            ts_off = POS_STORETIMESTAMP_V6 if v6[0] else POS_STORETIMESTAMP_V4
            column(ts_off, ">i8")[:] = ts
            return
        # Native-order byte-stride views with pre-swapped values: numpy's fast scatter loop.
        n_bytes = len(buf)
        at8 = np.ndarray((n_bytes - 7,), dtype="<i8", buffer=buf, strides=(1,))
        # QUEUEOFFSET and PHYSICALOFFSET are adjacent: one 16-byte element per record.
        at16 = np.ndarray((n_bytes - 15,), dtype="V16", buffer=buf, strides=(1,))
        pair = np.empty((m, 2), dtype=">i8")
        pair[:, 0] = queue_offsets
        pair[:, 1] = phys
        at16[rel + POS_QUEUEOFFSET] = pair.view("V16").reshape(m)
        ts_at = rel + np.where(v6, POS_STORETIMESTAMP_V6, POS_STORETIMESTAMP_V4)
        at8[ts_at] = ts.view("<i8")

    # --- flush ---------------------------------------------------------------------------------
    def dirty_bytes(self) -> int:
        return self.max_offset - self.flushed_offset

    def flush(self, least_pages: int = 0) -> int:
        """msync what was written and not flushed (if at least ``least_pages`` pages are dirty).
        Returns the flushed offset. OSError propagates (the store then goes read-only)."""
        with self._flush_lock:
            if least_pages > 0 and self.dirty_bytes() < least_pages * OS_PAGE_SIZE:
                return self.flushed_offset
            segs = self.queue.snapshot()
            targets = [(s, s.wrote) for s in segs if s.flushed < s.wrote]
            for seg, upto in targets:
                seg.flush(upto)
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

    def close(self) -> None:
        self.queue.close()
