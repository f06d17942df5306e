"""What a store holds and how its last open went, as plain figures for whoever watches it (the job's
Prometheus metrics read them; the store itself knows nothing of Prometheus).

``measure`` is called from a thread other than the writer's (a metrics scrape): it reads only what
a concurrent append cannot leave half-made (the committed point, a copy of the segment list, file
sizes on disk), and a file retention deletes while it is looked at is simply not counted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class OpenReport:
    """What recovery found when the writer opened the store."""

    unclean: bool                   # the last writer did not close it (the ``abort`` file was there)
    mode: str                       # the recovery that ran: normal, abnormal, empty, rocketmq-...
    dropped_bytes: int              # written after the last commit point, cut from its segment (a crash's torn tail)
    dropped_segments: int           # segments wholly after the commit point, deleted
    damaged_records: int            # committed records kept although their body CRC fails (verify lists them)
    lost_committed_bytes: int       # committed bytes cut by truncate_on_corruption (0 unless asked to)
    adopted_bytes: int = 0          # another writer's records past the commit point (a broker's), kept
    adopted_records: int = 0


@dataclass(frozen=True)
class StoreUsage:
    """A store's size and position, at one moment."""

    committed_offset: int           # the commit point: commit-log bytes a reader may see
    min_offset: int                 # the first commit-log byte still held (retention moves it)
    last_commit_ms: int             # when the commit point was written (epoch ms; 0: never)
    segments: int                   # commit-log segment files
    disk_bytes: int                 # the store's files as allocated on disk (segments are preallocated)
    free_disk_bytes: int            # what the store's file system has left for an unprivileged writer
    index_files: int                # index/ files (0 with the index off)
    index_items: int                # keys in the newest index file
    index_capacity: int             # keys the newest index file holds when full (0: no index file)

    @property
    def commit_log_bytes(self) -> int:
        """Committed commit-log bytes the store holds (what retention has not deleted)."""
        return max(self.committed_offset - self.min_offset, 0)

    @property
    def index_fill(self) -> float:
        """How full the newest index file is, 0 to 1 (a new file starts when it is full)."""
        return self.index_items / self.index_capacity if self.index_capacity else 0.0


def disk_bytes(root: Path) -> int:
    """Bytes allocated to the files under ``root`` (sparse parts not counted)."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_blocks * 512
            except FileNotFoundError:      # deleted by retention while walked
                continue
    return total


def free_disk_bytes(root: Path) -> int:
    st = os.statvfs(root)
    return st.f_bavail * st.f_frsize


def index_fill(index_service: Any | None) -> tuple[int, int, int]:
    """(files, items in the newest file, its capacity) of an IndexService, or zeros."""
    files = list(getattr(index_service, "files", ()) or ())
    if not files:
        return 0, 0, 0
    last = files[-1]
    # item 0 of a file is never used: a file holds max_index_num - 1 keys
    return len(files), max(last.header.index_count - 1, 0), max(last.max_index_num - 1, 0)


def measure(root: Path, committed_offset: int, min_offset: int, last_commit_ms: int, segments: int,
            index_service: Any | None) -> StoreUsage:
    files, items, capacity = index_fill(index_service)
    return StoreUsage(committed_offset=committed_offset, min_offset=min_offset, last_commit_ms=last_commit_ms,
                      segments=segments, disk_bytes=disk_bytes(root), free_disk_bytes=free_disk_bytes(root),
                      index_files=files, index_items=items, index_capacity=capacity)


def open_report(recovery: Any, unclean: bool, commit_offset: int | None) -> OpenReport:
    """From store.log.recovery's RecoveryResult: what the open found. ``commit_offset``: the commit
    point read before recovery (None: there was none)."""
    lost = 0
    if recovery.corruption is not None and commit_offset is not None:
        lost = max(commit_offset - recovery.end_offset, 0)
    return OpenReport(unclean=unclean, mode=recovery.mode, dropped_bytes=int(recovery.dropped_bytes),
                      dropped_segments=len(recovery.dropped_segments), damaged_records=len(recovery.damaged),
                      lost_committed_bytes=lost,
                      adopted_bytes=recovery.adopted.end - recovery.adopted.start if recovery.adopted else 0,
                      adopted_records=(recovery.adopted.foreign_records + recovery.adopted.ours_records)
                      if recovery.adopted else 0)
