"""What lies past the commit point, and whose it is (store.log.recovery decides what to do with it;
store.read.past_commit shows it to the read-only commands, through the same walk).

The tail is the run of valid records from the commit point on (magic, CRC, length, PHYSICALOFFSET ==
position, through BLANKs into later segments), ending at the first record that is not. Its first
records may be an unfinished batch of ours (store.log.append_intent says which); whatever follows
them was appended by another writer, a RocketMQ broker that served the store meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as ContextManager
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from store.format.codec import CodecConfig
from store.log.append_intent import AppendIntent
from store.log.segment import Segment
from store.log.segment_queue import SegmentQueue
from store.format.layout import be_ints, host_positions
from store.scan.fields import record_fields
from store.scan.record_check import RecordCheck, SegmentScan, scan_segment_fast


@dataclass
class Tail:
    start: int                          # the commit point
    end: int                            # the end of the valid records past it
    ours_end: int                       # the end of our unfinished batch's records (== start: none)
    ours_records: int = 0
    foreign_records: int = 0
    foreign_topics: dict[str, int] = field(default_factory=dict)     # records per topic
    foreign_segments: list[str] = field(default_factory=list)        # segment files they are in
    last_record_offset: int = -1        # where the tail's last record starts (-1: no record)
    stop: RecordCheck | None = None     # what ended it

    @property
    def foreign_bytes(self) -> int:
        return self.end - self.ours_end

    @property
    def ours_bytes(self) -> int:
        return self.ours_end - self.start

    def describe(self) -> str:
        """The foreign part in words, for a log line or an error."""
        topics = ", ".join(f"{t} ({n})" for t, n in sorted(self.foreign_topics.items(), key=lambda kv: -kv[1])[:8])
        more = f" and {len(self.foreign_topics) - 8} more" if len(self.foreign_topics) > 8 else ""
        segs = ", ".join(self.foreign_segments[:4]) + (", ..." if len(self.foreign_segments) > 4 else "")
        return (f"{self.foreign_bytes} bytes (offsets {self.ours_end}..{self.end}, segment(s) {segs}): "
                f"{self.foreign_records} records of topics {topics}{more}")


def _store_timestamps(arr: np.ndarray, starts: np.ndarray, sys_flag: np.ndarray) -> np.ndarray:
    return be_ints(arr, starts + host_positions(sys_flag).store_timestamp_pos, 8)


@dataclass
class TailPiece:
    """One segment's part of a tail: its valid records from where the tail enters it (``scan``)."""

    segment: Any
    arr: np.ndarray                     # the segment's bytes (valid while the walk is on this piece)
    scan: SegmentScan


def walk_tail(start: int, segment_at: Callable[[int], Any], bytes_of: Callable[[Any, int], ContextManager[Any]],
              codec: CodecConfig, columns: bool = False) -> Iterator[TailPiece]:
    """The one walk past a commit point (recovery's and the read-only commands'): from ``start``, each
    segment's valid records, checked as recovery checks them, through a BLANK into the segment that
    follows; it ends after the first piece that does not end at a BLANK, or where no segment holds
    the next offset. ``segment_at(offset)`` finds a segment (``base_offset``, ``size``, ``end_offset``),
    ``bytes_of(segment, from)`` maps its bytes for the time of the piece."""
    pos = start
    while (seg := segment_at(pos)) is not None:
        rel = pos - seg.base_offset
        with bytes_of(seg, rel) as mv:
            scan = scan_segment_fast(mv, seg.base_offset, seg.size, codec, start=rel, columns=columns)
            yield TailPiece(seg, np.frombuffer(mv, dtype=np.uint8), scan)
        if scan.stop.kind != "blank":
            return
        pos = seg.end_offset


@contextmanager
def _segment_bytes(seg: Segment, rel: int) -> Iterator[Any]:
    with seg.read_ahead(rel, seg.size):
        yield seg.view


def read_tail(q: SegmentQueue, commit_offset: int, intent: AppendIntent | None, codec: CodecConfig) -> Tail:
    """The valid records from ``commit_offset`` on, split into ours (the records ``intent`` owns,
    from the commit point on, up to the first it does not) and another writer's (the rest)."""
    tail = Tail(commit_offset, commit_offset, commit_offset)
    ours_open = True
    for piece in walk_tail(commit_offset, q.find, _segment_bytes, codec):
        seg, scan, arr = piece.segment, piece.scan, piece.arr
        if len(scan.offsets):
            starts = scan.offsets - seg.base_offset
            fields = record_fields(arr, starts, scan.sizes)
            mine = np.zeros(len(starts), dtype=bool)
            if ours_open and intent is not None and intent.active:
                ts = _store_timestamps(arr, fields.starts, fields.sys_flag)
                mine = (ts >= intent.first_ts) & (ts <= intent.last_ts)
            # ours is a prefix: from the first record not ours on, everything is another writer's
            k = len(mine) if mine.all() else int(np.argmin(mine))
            if k:
                tail.ours_records += k
                tail.ours_end = int(scan.offsets[k - 1]) + int(scan.sizes[k - 1])
            if k < len(mine):
                ours_open = False
                counts = np.bincount(fields.topic_id[k:], minlength=len(fields.topics))
                for t, n in zip(fields.topics, counts):
                    if n:
                        tail.foreign_topics[t] = tail.foreign_topics.get(t, 0) + int(n)
                tail.foreign_records += len(mine) - k
                tail.foreign_segments.append(seg.path.name)
            tail.last_record_offset = int(scan.offsets[-1])
            tail.end = int(scan.offsets[-1]) + int(scan.sizes[-1])
        tail.stop = scan.stop
        if scan.stop.kind == "blank":
            # the BLANK closes the segment: the tail goes on at the next one's start
            if ours_open and tail.ours_end == tail.end:
                tail.ours_end = seg.end_offset
            tail.end = seg.end_offset
    if not tail.ours_records:
        tail.ours_end = tail.start
    return tail
