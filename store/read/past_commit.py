"""The records past a store's commit point, as the read-only commands see them.

A store's commit point (commitpoint.json) ends what our writer committed. Bytes after it are
either an unfinished batch of ours or another writer's appends: a RocketMQ broker serving the
store writes its producers' messages, pop consumption's revive and timer messages, %RETRY%
topics, new segments. ``past_commit`` walks them once, with the checks recovery uses
(store.scan.record_check: magic, CRC, lengths, PHYSICALOFFSET equal to the position), from the
commit point through BLANKs into the following segments, and ends at the first zeroed or invalid
record (a torn one, say). ``stat``, ``dump`` and ``verify`` read the records it found, and only
those: one rule for all three.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from store.format.codec import CodecConfig
from store.read.view import SegmentFile, StoreView, mapped
from store.scan.fields import text_ids
from store.log.tail import walk_tail
from store.scan.record_check import RecordCheck, SegmentScan

ABOUT = ("another writer's appends (a RocketMQ broker) or an unfinished batch; "
         "the next `run` adopts or drops them")


@dataclass(frozen=True)
class Stretch:
    """The part of the records past the commit point in one segment: [start, end) of its bytes."""

    segment: SegmentFile
    start: int
    end: int
    messages: int
    message_bytes: int


@dataclass
class TopicCount:
    messages: int = 0
    bytes: int = 0


@dataclass
class PastCommit:
    """The valid records from the commit point (``start``) to ``end``, where the walk stopped
    (``stop``: zeroed space, the first invalid record, or no further segment)."""

    start: int
    end: int
    stop: RecordCheck
    stretches: list[Stretch] = field(default_factory=list)
    topics: dict[str, TopicCount] = field(default_factory=dict)

    @property
    def messages(self) -> int:
        return sum(s.messages for s in self.stretches)

    @property
    def message_bytes(self) -> int:
        return sum(s.message_bytes for s in self.stretches)

    @property
    def segments(self) -> list[str]:
        """The segments holding records past the commit point."""
        return [s.segment.name for s in self.stretches if s.messages]

    def segment_end(self, seg: SegmentFile) -> int:
        """Where reading ``seg`` stops when the records past the commit point are read too."""
        return max(0, min(seg.size, self.end - seg.base_offset))

    def holds(self, offset: int) -> bool:
        return self.start <= offset < self.end

    def stop_reason(self) -> str:
        s = self.stop
        if s.kind == "error":
            return f"an invalid record at {s.offset} ({s.error_kind}: {s.detail})"
        if s.kind == "end" and s.detail:
            return s.detail
        return f"zeroed space at {s.offset}"

    def summary(self) -> str:
        """One line: how many records, in which topics, and what they may be."""
        topics = ", ".join(f"{t} ({c.messages})" for t, c in sorted(self.topics.items()))
        return (f"{self.messages} record(s) ({self.message_bytes:,} bytes) past the commit point {self.start} "
                f"in topics {topics}, up to {self.end}: {ABOUT}")

    def to_json(self) -> dict:
        return {"offset": self.start, "end": self.end, "messages": self.messages, "bytes": self.message_bytes,
                "topics": {t: {"messages": c.messages, "bytes": c.bytes} for t, c in sorted(self.topics.items())},
                "segments": self.segments, "stop": self.stop_reason()}


def past_commit(src: StoreView, config: CodecConfig | None = None) -> PastCommit | None:
    """The records past ``src``'s commit point; None for a source without one (a RocketMQ store,
    a commit-log directory, a segment file: those are read to their last valid record anyway)."""
    if src.committed_offset is None:
        return None
    config = config or CodecConfig()
    pos = src.committed_offset
    found = PastCommit(pos, pos, RecordCheck("end", pos, 0))
    try:
        for piece in walk_tail(pos, src.segment_at, lambda seg, _rel: mapped(seg), config, columns=True):
            seg, scan = piece.segment, piece.scan
            _count_topics(found, piece.arr, scan)
            end = seg.end_offset if scan.stop.kind == "blank" else scan.end_offset   # a BLANK closes its segment
            found.stop = scan.stop
            found.stretches.append(Stretch(seg, pos - seg.base_offset, end - seg.base_offset, len(scan.offsets),
                                           int(scan.sizes.sum())))
            found.end = pos = end
    except FileNotFoundError:       # retention deleted a segment while we read
        found.stop = RecordCheck("end", pos, 0, detail=f"a segment at {pos} was deleted while reading")
        return found
    if found.stop.kind == "blank" or not found.stretches:
        found.stop = RecordCheck("end", pos, 0, detail=f"no segment holds offset {pos}")
    return found


def _count_topics(found: PastCommit, arr: np.ndarray, scan: SegmentScan) -> None:
    cols = scan.columns
    if cols is None or not len(scan.offsets):
        return
    ids, names = text_ids(arr, cols.topic_pos, cols.topic_len)
    counts = np.bincount(ids, minlength=len(names))
    sizes = np.bincount(ids, weights=scan.sizes.astype(np.float64), minlength=len(names))
    for k, name in enumerate(names):
        if counts[k]:
            c = found.topics.setdefault(name, TopicCount())
            c.messages += int(counts[k])
            c.bytes += int(sizes[k])
