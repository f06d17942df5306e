"""``commitlog stat``: segments and their fill, the store's offsets, topics and queues, checkpoint,
and the records past the commit point (store.read.past_commit), per topic."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

import numpy as np

from store.format.codec import CodecConfig
from store.scan.record_check import scan_segment_fast
from store.read.past_commit import ABOUT, past_commit
from store.read.view import StoreView, mapped


@dataclass
class SegmentStat:
    name: str
    base_offset: int
    size: int
    used: int                # bytes of records (messages and the closing BLANK) from the start
    messages: int | None     # None: not scanned (see collect_stat)
    closed: bool             # ends with a BLANK

    @property
    def fill(self) -> float:
        return self.used / self.size if self.size else 0.0


@dataclass
class QueueStat:
    topic: str
    queue_id: int
    min_offset: int
    max_offset: int

    @property
    def depth(self) -> int:
        return self.max_offset - self.min_offset


@dataclass
class StoreStat:
    path: str
    kind: str
    segments: list[SegmentStat] = field(default_factory=list)
    min_offset: int = 0
    committed_offset: int | None = None
    flushed_offset: int | None = None
    max_offset: int = 0       # end of the valid data (past the commit point too)
    queues: list[QueueStat] = field(default_factory=list)
    checkpoint: dict[str, int] | None = None
    commit_point: dict[str, Any] | None = None
    problems: list[dict[str, Any]] = field(default_factory=list)   # holes in the files, unreadable data
    past_commit: dict[str, Any] | None = None   # the records past the commit point (PastCommit.to_json)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for s, o in zip(d["segments"], self.segments):
            s["fill"] = round(o.fill, 6)
        for q, o in zip(d["queues"], self.queues):
            q["depth"] = o.depth
        return d


def collect_stat(src: StoreView, config: CodecConfig | None = None, full: bool = False) -> StoreStat:
    """The store's shape. Only the newest segments are scanned (older ones are closed by their
    BLANK, so full, as RocketMQ counts them) unless ``full``: then every segment is scanned for
    its message count too. Segments are read up to the end of the valid records past the commit
    point (store.read.past_commit), which are counted per topic besides."""
    config = config or CodecConfig()
    tail = past_commit(src, config)
    st = StoreStat(str(src.path), src.kind, committed_offset=src.committed_offset)
    st.problems = [{"offset": p.offset, "kind": p.kind, "detail": p.detail} for p in src.layout_problems()]
    st.min_offset = src.segments[0].base_offset if src.segments else 0
    st.max_offset = st.min_offset
    ended = False
    active = _active_index(src)
    for i, seg in enumerate(src.segments):
        if not full and i < active:
            st.segments.append(SegmentStat(seg.name, seg.base_offset, seg.size, seg.size, None, True))
            st.max_offset = seg.end_offset
            continue
        end = tail.segment_end(seg) if tail is not None else src.segment_end(seg)
        with mapped(seg) as mv:
            scan = scan_segment_fast(mv, seg.base_offset, end, config)
        closed = scan.stop.kind == "blank"
        if scan.stop.kind == "error":
            st.problems.append({"offset": scan.stop.offset, "kind": scan.stop.error_kind or "unknown",
                                "detail": f"{scan.stop.detail}; the rest of segment {seg.name} is not counted"})
        used = (scan.stop.offset + scan.stop.size if closed else scan.end_offset) - seg.base_offset
        st.segments.append(SegmentStat(seg.name, seg.base_offset, seg.size, used, len(scan.offsets), closed))
        if not ended:
            st.max_offset = seg.base_offset + used if closed else scan.end_offset
            ended = not closed
    st.past_commit = tail.to_json() if tail is not None and tail.messages else None
    ck = src.checkpoint
    if ck is not None:
        st.checkpoint = {"physicMsgTimestamp": ck.physic_msg_timestamp, "logicsMsgTimestamp": ck.logics_msg_timestamp,
                         "indexMsgTimestamp": ck.index_msg_timestamp, "masterFlushedOffset": ck.master_flushed_offset,
                         "confirmPhyOffset": ck.confirm_phy_offset}
        st.flushed_offset = ck.master_flushed_offset or None
    cp = src.commit_point
    if cp is not None:
        st.commit_point = {"offset": cp.offset, "timestamp": cp.timestamp, "metadata": cp.metadata,
                           "queueOffsets": {f"{t}/{q}": n for (t, q), n in sorted(cp.queue_offsets.items())}}
    cq = src.consume_queues()
    if cq is not None:
        for topic, qids in cq.topics().items():
            for qid in qids:
                lo, hi = cq.queue_range(topic, qid)
                if src.committed_offset is not None:
                    hi = _committed_queue_end(cq, topic, qid, lo, hi, src.committed_offset)
                st.queues.append(QueueStat(topic, qid, lo, hi))
    return st


def _active_index(src: StoreView) -> int:
    """Index of the segment holding the end of the data: the one with the commit point, else
    the newest (a writer's preallocated, empty, newest segment makes it the one before)."""
    segs = src.segments
    if src.committed_offset is not None:
        for i, seg in enumerate(segs):
            if seg.base_offset <= src.committed_offset < seg.end_offset:
                return max(i - 1, 0)
    return max(len(segs) - 2, 0)


# Past this many units a queue's committed end is found by binary search, a unit read at a time
# (each a rescan of the queue's files); below, its units are read once and searched in memory.
_READ_WHOLE = 65_536


def _committed_queue_end(cq: Any, topic: str, qid: int, lo: int, hi: int, committed: int) -> int:
    """The first queue offset whose record is not committed (units point at ascending offsets)."""
    while hi - lo > _READ_WHOLE:
        mid = (lo + hi) // 2
        unit = cq.find(topic, qid, mid, 1)
        if unit and unit[0][0] < committed:
            lo = mid + 1
        else:
            hi = mid
    units = cq.find_units(topic, qid, lo, hi - lo)
    return lo + int(np.searchsorted(units["phys"].astype(np.int64), committed, side="left"))


def print_stat(st: StoreStat, out: TextIO, as_json: bool = False) -> None:
    if as_json:
        out.write(json.dumps(st.to_json(), ensure_ascii=False) + "\n")
        return
    out.write(f"{st.path} ({st.kind})\n")
    out.write(f"  offsets: min {st.min_offset}  max {st.max_offset}"
              + (f"  committed {st.committed_offset}" if st.committed_offset is not None else "")
              + (f"  flushed {st.flushed_offset}" if st.flushed_offset is not None else "") + "\n")
    out.write(f"  {'segment':<22}{'size':>14}{'used':>14}{'fill':>8}{'messages':>10}  closed\n")
    for s in st.segments:
        count = f"{s.messages:,}" if s.messages is not None else "-"
        out.write(f"  {s.name:<22}{s.size:>14,}{s.used:>14,}{s.fill:>8.1%}{count:>10}  "
                  f"{'yes' if s.closed else 'no'}\n")
    if st.queues:
        out.write(f"  {'topic':<30}{'queue':>6}{'min':>14}{'max':>14}{'depth':>14}\n")
        for q in st.queues:
            out.write(f"  {q.topic:<30}{q.queue_id:>6}{q.min_offset:>14,}{q.max_offset:>14,}{q.depth:>14,}\n")
    if st.checkpoint:
        out.write("  checkpoint: " + "  ".join(f"{k} {v}" for k, v in st.checkpoint.items()) + "\n")
    for p in st.problems:
        out.write(f"  PROBLEM at {p['offset']}: {p['kind']}: {p['detail']}\n")
    if st.past_commit:
        _print_past_commit(st.past_commit, out)
    if st.commit_point:
        out.write(f"  commit point: offset {st.commit_point['offset']}  timestamp {st.commit_point['timestamp']}"
                  f"  metadata {json.dumps(st.commit_point['metadata'], ensure_ascii=False)}\n")


def _print_past_commit(tail: dict[str, Any], out: TextIO) -> None:
    out.write(f"  past the commit point: {tail['messages']:,} messages ({tail['bytes']:,} bytes), offsets "
              f"{tail['offset']}..{tail['end']} in segment(s) {', '.join(tail['segments'])}; they end at "
              f"{tail['stop']}\n")
    out.write(f"    {'topic':<40}{'messages':>12}{'bytes':>16}\n")
    for topic, c in tail["topics"].items():
        out.write(f"    {topic:<40}{c['messages']:>12,}{c['bytes']:>16,}\n")
    out.write(f"    ({ABOUT})\n")
