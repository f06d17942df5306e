"""What lies past the commit point, and whose it is (store.log.recovery decides what to do with it).

The tail is the run of valid records from the commit point on (magic, CRC, length, PHYSICALOFFSET ==
position, through BLANKs into later segments), ending at the first record that is not. Its first
records may be an unfinished batch of ours (store.log.append_intent says which); whatever follows
them was appended by another writer, a RocketMQ broker that served the store meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from store.format.codec import CodecConfig
from store.format.constants import BORNHOST_V6_FLAG, POS_STORETIMESTAMP_V4
from store.log.append_intent import AppendIntent
from store.log.segment_queue import SegmentQueue
from store.scan.fields import be_ints, record_fields
from store.scan.record_check import RecordCheck, scan_segment_fast


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
    born6 = (sys_flag & BORNHOST_V6_FLAG) != 0
    return be_ints(arr, starts + POS_STORETIMESTAMP_V4 + born6 * 12, 8)


def read_tail(q: SegmentQueue, commit_offset: int, intent: AppendIntent | None, codec: CodecConfig) -> Tail:
    """The valid records from ``commit_offset`` on, split into ours (the records ``intent`` owns,
    from the commit point on, up to the first it does not) and another writer's (the rest)."""
    tail = Tail(commit_offset, commit_offset, commit_offset)
    pos, ours_open = commit_offset, True
    seg = q.find(pos)
    while seg is not None:
        rel = pos - seg.base_offset
        with seg.read_ahead(rel, seg.size):
            scan = scan_segment_fast(seg.view, seg.base_offset, seg.size, codec, start=rel)
        if len(scan.offsets):
            arr = np.frombuffer(seg.view, dtype=np.uint8)
            starts = scan.offsets - seg.base_offset
            fields = record_fields(arr, starts, scan.sizes)
            mine = np.zeros(len(starts), dtype=bool)
            if ours_open and intent is not None and intent.from_offset == commit_offset:
                ts = _store_timestamps(arr, fields.starts, fields.sys_flag)
                mine = (ts >= intent.first_ts) & (ts <= intent.last_ts)
            # ours is a prefix: from the first record not ours on, everything is another writer's
            k = len(mine) if mine.all() else int(np.argmin(mine))
            if k:
                tail.ours_records += k
                tail.ours_end = int(scan.offsets[k - 1]) + int(scan.sizes[k - 1])
            if k < len(mine):
                ours_open = False
                ids = fields.topic_id[k:]
                counts = np.bincount(ids, minlength=len(fields.topics))
                for t, n in zip(fields.topics, counts):
                    if n:
                        tail.foreign_topics[t] = tail.foreign_topics.get(t, 0) + int(n)
                tail.foreign_records += len(mine) - k
                tail.foreign_segments.append(seg.path.name)
            tail.last_record_offset = int(scan.offsets[-1])
            tail.end = int(scan.offsets[-1]) + int(scan.sizes[-1])
            del arr, fields
        tail.stop = scan.stop
        if scan.stop.kind != "blank":
            break
        # the BLANK closes the segment: the tail goes on at the next one's start
        if ours_open and tail.ours_end == tail.end:
            tail.ours_end = seg.end_offset
        pos = tail.end = seg.end_offset
        seg = q.find(pos)
    if not tail.ours_records:
        tail.ours_end = tail.start
    return tail
