"""Building index/ from the commit log itself: what `commitlog reindex` does for a store written
before the index existed (or by RocketMQ), segment by segment, a window of records at a time,
with the append's vectorized key finder. Each record keeps its own store timestamp."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from store.format.codec import CodecConfig
from store.format.constants import BORNHOST_V6_FLAG
from store.format.fields import be_ints, fields_from_scan
from store.format.scan import RecordCheck, scan_segment_fast
from store.index.batch_keys import batch_keys
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
                                         until=min(pos + WINDOW_BYTES, end), columns=True)
                starts = scan.offsets - seg.base_offset
                keep = scan.offsets >= from_offset
                if keep.any():
                    _index_window(service, arr, starts, scan, keep, seg.base_offset, res)
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


def _index_window(service: IndexService, arr: np.ndarray, starts: np.ndarray, scan, keep: np.ndarray,
                  base: int, res: RebuildResult) -> None:
    sizes = scan.sizes.astype(np.int64)
    fields = fields_from_scan(arr, starts, sizes, scan.columns)
    if not keep.all():
        fields = fields.rows(int(np.argmax(keep)), len(keep))
    keys = batch_keys(arr, fields)
    res.messages += len(fields.starts)
    if len(keys):
        at = fields.starts[keys.record]
        born6 = (fields.sys_flag[keys.record] & BORNHOST_V6_FLAG) != 0
        store_ts = be_ints(arr, at + 56 + born6 * 12, 8)
        service.put_hashes(keys.key_hash, at + base, store_ts)
        res.keys += len(keys)
