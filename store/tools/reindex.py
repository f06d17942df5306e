"""``commitlog reindex``: build index/ from the commit log, as RocketMQ's IndexService would have
built it with the appends. For a store written before the index existed, with it off, or by
RocketMQ itself; also how the index's geometry (maxHashSlotNum, maxIndexNum) is changed.

The writer's lock is held throughout. The new index is built beside the old one and swapped in
by renames, so a crash leaves the old index or the new one, never a mix. The commit log is read
segment by segment, a window of records at a time, with the append's key finder (store.index.build);
each record keeps its own store timestamp."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np

from store.errors import StoreError
from store.format.codec import CodecConfig
from store.format.constants import CHECKPOINT_FILE, INDEX_DIR
from store.index.service import IndexConfig, IndexService
from store.index.settings import IndexSettings, write_index_settings
from store.log.checkpoint import read_checkpoint, write_checkpoint
from store.log.lock import StoreLock
from store.log.segment import fsync_dir
from store.read.view import LayoutProblem, SegmentFile, mapped, open_view
from store.scan.record_check import RecordCheck, scan_segment_fast
from store.tools.progress import Progress

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


_BUILDING = INDEX_DIR + ".building"
_OLD = INDEX_DIR + ".old"


@dataclass
class ReindexResult:
    rebuild: RebuildResult
    files: int
    seconds: float
    holes: list[LayoutProblem] = field(default_factory=list)   # segments missing or cut short: not indexed


def reindex(root: Path, config: IndexConfig) -> ReindexResult:
    root = Path(root)
    src = open_view(root)
    if src.kind != "store":
        raise StoreError(f"{root} is not a store directory (reindex needs the store root, with commitlog/ inside)")
    lock = StoreLock(root)
    lock.acquire()
    try:
        for leftover in (_BUILDING, _OLD):          # from a reindex that did not finish
            shutil.rmtree(root / leftover, ignore_errors=True)
        t0 = time.perf_counter()
        service = IndexService(root / _BUILDING, config)
        with Progress(src.total_bytes, "reindex") as progress:
            base = src.segments[0].base_offset if src.segments else 0
            result = index_commit_log(service, src.segments, src.committed_offset,
                                      progress=lambda off: progress.update(off - base))
            service.flush()
        # every key of the commit log is in the files: a broker recovering the store keeps them all
        files, stamp = len(service.files), service.files[-1].header.end_timestamp if service.files else 0
        service.close()
        (root / _BUILDING).mkdir(exist_ok=True)     # a store with no keys still gets an (empty) index/
        if (root / INDEX_DIR).exists():
            (root / INDEX_DIR).rename(root / _OLD)
        (root / _BUILDING).rename(root / INDEX_DIR)
        fsync_dir(root)
        shutil.rmtree(root / _OLD, ignore_errors=True)
        write_index_settings(root, IndexSettings(config.max_hash_slot_num, config.max_index_num, True))
        cp = read_checkpoint(root / CHECKPOINT_FILE)
        if cp is not None:
            cp.index_msg_timestamp = max(cp.index_msg_timestamp, stamp)
            write_checkpoint(root / CHECKPOINT_FILE, cp)
        return ReindexResult(result, files, time.perf_counter() - t0, src.layout_problems())
    finally:
        lock.release()


def print_reindex(root: Path, r: ReindexResult, config: IndexConfig, out: TextIO) -> int:
    rb = r.rebuild
    out.write(f"reindexed {root}: {rb.messages} messages, {rb.keys} keys in {r.files} index file(s) "
              f"(maxHashSlotNum {config.max_hash_slot_num}, maxIndexNum {config.max_index_num}), "
              f"up to offset {rb.end_offset}, in {r.seconds:.1f} s\n")
    for hole in r.holes:
        out.write(f"not indexed: {hole.kind} at offset {hole.offset}: {hole.detail}; the messages there are not "
                  f"in the commit log (run `commitlog verify {root}`)\n")
    if rb.damage is not None:
        out.write(f"stopped at offset {rb.damage.offset}: {rb.damage.error_kind}: {rb.damage.detail}; the "
                  f"messages after it are not indexed (run `commitlog verify {root}`)\n")
    return 1 if r.holes or rb.damage is not None else 0
