"""Building index/ from the commit log itself: what `commitlog reindex` does for a store written
before the index existed (or by RocketMQ), segment by segment, a window of records at a time,
with the append's key finder (store.index.build). Each record keeps its own store timestamp."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from store.format.codec import CodecConfig
from store.scan.record_check import RecordCheck, scan_segment_fast
from store.index.service import IndexService
from store.log.source import SegmentFile, mapped

WINDOW_BYTES = 64 << 20        # records scanned and indexed at a time: bounded memory on 1 GiB segments


@dataclass
class RebuildResult:
    messages: int = 0
    keys: int = 0
    end_offset: int = 0                 # just past the last record read
    damage: RecordCheck | None = None   # the record the commit log could not be read past


def index_commit_log(service: IndexService, segments: Sequence[SegmentFile], to_offset: int | None = None,
                     from_offset: int = 0, progress: Callable[[int], None] | None = None) -> RebuildResult:
    """Index every message in [``from_offset``, ``to_offset``) (the commit point, or every valid
    record when None), in commit-log order. Stops at the first damaged record (``damage``)."""
    res = RebuildResult(end_offset=from_offset)
    config = CodecConfig()
    for seg in segments:
        if seg.end_offset <= from_offset:
            continue
        end = seg.size if to_offset is None else min(seg.size, to_offset - seg.base_offset)
        if end <= 0:
            break
        with mapped(seg) as mv:
            arr = np.frombuffer(mv, dtype=np.uint8)
            pos = 0
            while True:
                scan = scan_segment_fast(mv, seg.base_offset, end, config, start=pos,
                                         until=min(pos + WINDOW_BYTES, end))
                starts = scan.offsets - seg.base_offset
                keep = scan.offsets >= from_offset
                if keep.any():
                    kept = starts[keep] if not keep.all() else starts
                    res.messages += len(kept)
                    res.keys += service.put_records(arr, kept, seg.base_offset)
                res.end_offset = max(res.end_offset, scan.end_offset)
                del starts
                stop = scan.stop
                if stop.kind == "pause":
                    pos = stop.offset - seg.base_offset
                    continue
                break
            del arr
        if progress is not None:
            progress(res.end_offset)
        if stop.kind == "error":
            res.damage = stop
            break
    return res
