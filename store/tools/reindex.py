"""``commitlog reindex``: build index/ from the commit log, as RocketMQ's IndexService would have
built it with the appends. For a store written before the index existed, with it off, or by
RocketMQ itself; also how the index's geometry (maxHashSlotNum, maxIndexNum) is changed.

The writer's lock is held throughout. The new index is built beside the old one and swapped in
by renames, so a crash leaves the old index or the new one, never a mix."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from store.errors import StoreError
from store.format.constants import CHECKPOINT_FILE, INDEX_DIR
from store.index.rebuild import RebuildResult, index_commit_log
from store.index.service import IndexConfig, IndexService
from store.index.settings import IndexSettings, write_index_settings
from store.log.checkpoint import read_checkpoint, write_checkpoint
from store.log.lock import StoreLock
from store.log.segment import fsync_dir
from store.log.source import LayoutProblem, layout_problems, open_source
from store.tools.progress import Progress

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
    src = open_source(root)
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
        return ReindexResult(result, files, time.perf_counter() - t0, layout_problems(src))
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
