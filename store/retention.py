"""Retention, as RocketMQ's CleanCommitLogService: delete old commit-log segments from the front,
then the consume-queue files that only point into them; refuse writes when the disk is too full.

Rules (DefaultMessageStore.CleanCommitLogService, MappedFileQueue.deleteExpiredFileByTime):
* a segment is expired when its last write (mtime) is older than ``file_reserved_time_h``;
* expired segments are deleted when the hour is one of ``delete_when`` ("04", or "04;05"), or
  at any hour once disk usage passes ``disk_max_used_space_ratio`` (75 %);
* past ``clean_immediately_ratio`` (85 %) segments are deleted whatever their age, oldest first,
  until usage is back under it;
* past ``disk_full_ratio`` (90 %) the store refuses writes (DiskFullError); they are accepted
  again once usage is back under ``clean_immediately_ratio`` (RocketMQ's hysteresis);
* deletion goes from the oldest segment and stops at the first one it may not delete (no holes);
  the newest segment, and any segment holding bytes at or past the last commit, are never deleted.

Usage ratios are estimated after each planned deletion (a segment frees its file size), so one
run deletes just enough. The clock and the disk-usage function are injectable for tests.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from store.errors import DiskFullError, StoreError
from store.format.constants import COMMITLOG_DIR
from store.queue.units import file_name, list_unit_files, read_units, valid_count
from store.read.view import list_segments, open_view

log = logging.getLogger(__name__)


@dataclass
class RetentionConfig:
    file_reserved_time_h: float = 72
    delete_when: str = "04"                    # hours of the day, ";"-separated, local time
    disk_max_used_space_ratio: float = 0.75
    clean_immediately_ratio: float = 0.85
    disk_full_ratio: float = 0.90
    interval_s: float = 10.0                   # how often the background service runs

    def __post_init__(self) -> None:
        if not 0 < self.disk_max_used_space_ratio <= self.clean_immediately_ratio <= self.disk_full_ratio <= 1:
            raise ValueError(
                "retention ratios must satisfy 0 < disk_max_used_space_ratio <= clean_immediately_ratio "
                f"<= disk_full_ratio <= 1, got {self.disk_max_used_space_ratio}, "
                f"{self.clean_immediately_ratio}, {self.disk_full_ratio}")
        self.delete_hours()   # validates

    def delete_hours(self) -> set[int]:
        hours = set()
        for part in self.delete_when.split(";"):
            part = part.strip()
            if not part.isdigit() or not 0 <= int(part) <= 23:
                raise ValueError(f"delete_when {self.delete_when!r}: {part!r} is not an hour 00..23")
            hours.add(int(part))
        return hours


class DiskUsage(NamedTuple):   # the shape of shutil.disk_usage
    total: int
    used: int
    free: int


DiskUsageFn = Callable[[Path], Any]   # returns an object with .total and .used (shutil.disk_usage)


@dataclass
class PlannedDeletion:
    path: Path
    base_offset: int
    size: int
    age_h: float
    reason: str        # "expired" or "disk over clean_immediately_ratio"


@dataclass
class CleanPlan:
    now: float
    usage_ratio: float
    usage_ratio_after: float
    time_up: bool            # the hour is one of delete_when
    space_full: bool         # over disk_max_used_space_ratio
    clean_immediately: bool  # over clean_immediately_ratio
    disk_full: bool          # over disk_full_ratio: writes refused
    committed_offset: int
    segments: list[PlannedDeletion] = field(default_factory=list)
    consume_queue_files: list[Path] = field(default_factory=list)
    min_offset_before: int = 0
    min_offset_after: int = 0
    stopped_at: str = ""     # why deletion stopped where it did

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["segments"] = [{**asdict(s), "path": str(s.path)} for s in self.segments]
        d["consume_queue_files"] = [str(p) for p in self.consume_queue_files]
        return d


def read_committed_offset(root: Path) -> int:
    """The offset nothing at or after may be deleted: the store's last commit (commitpoint.json),
    or for a RocketMQ store without one the end of its valid data."""
    return open_view(root).committed_end()


def plan_clean(root: Path, config: RetentionConfig, now: float, disk_usage: DiskUsageFn = shutil.disk_usage,
               committed_offset: int | None = None, manual: bool = False) -> CleanPlan:
    """What a clean run at ``now`` (epoch seconds) would delete; deletes nothing."""
    root = Path(root)
    if committed_offset is None:
        committed_offset = read_committed_offset(root)
    usage = disk_usage(root)
    total = max(int(usage.total), 1)
    used = int(usage.used)
    ratio = used / total
    plan = CleanPlan(
        now=now, usage_ratio=ratio, usage_ratio_after=ratio,
        time_up=time.localtime(now).tm_hour in config.delete_hours(),
        space_full=ratio > config.disk_max_used_space_ratio,
        clean_immediately=ratio > config.clean_immediately_ratio,
        disk_full=ratio > config.disk_full_ratio,
        committed_offset=committed_offset,
    )
    segments = list_segments(root / COMMITLOG_DIR)
    if not segments:
        plan.stopped_at = "no segments"
        return plan
    plan.min_offset_before = plan.min_offset_after = segments[0].base_offset
    reserved_s = config.file_reserved_time_h * 3600
    by_age = plan.time_up or plan.space_full or manual
    for seg in segments:
        if seg is segments[-1]:
            plan.stopped_at = f"{seg.path.name} is the active (newest) segment"
            break
        if seg.base_offset + seg.size > committed_offset:
            plan.stopped_at = f"{seg.path.name} holds bytes at or past the last commit ({committed_offset})"
            break
        age_s = now - seg.mtime
        if by_age and age_s >= reserved_s:
            reason = "expired"
        elif used / total > config.clean_immediately_ratio:
            reason = "disk over clean_immediately_ratio"
        else:
            plan.stopped_at = (f"{seg.path.name} is {age_s / 3600:.1f} h old (reserved "
                               f"{config.file_reserved_time_h} h)" if by_age else
                               "not the delete hour and disk usage is under disk_max_used_space_ratio")
            break
        plan.segments.append(PlannedDeletion(seg.path, seg.base_offset, seg.size, age_s / 3600, reason))
        used -= seg.size
        plan.min_offset_after = seg.base_offset + seg.size
    plan.usage_ratio_after = used / total
    plan.consume_queue_files = _consume_queue_files_below(root, plan.min_offset_after) if plan.segments else []
    return plan


def _consume_queue_files_below(root: Path, min_offset: int) -> list[Path]:
    """Consume-queue files (never a queue's last) whose last unit points below ``min_offset``."""
    out: list[Path] = []
    cq_root = root / "consumequeue"
    if not cq_root.is_dir():
        return out
    for tdir in sorted(p for p in cq_root.iterdir() if p.is_dir()):
        for qdir in sorted(p for p in tdir.iterdir() if p.is_dir()):
            starts = list_unit_files(qdir)
            for start in starts[:-1]:
                units = read_units(qdir / file_name(start))
                n = valid_count(units)
                if n and int(units["phys"][n - 1]) < min_offset:
                    out.append(qdir / file_name(start))
                else:
                    break
    return out


def execute_plan(plan: CleanPlan, consume_queues: Any = None,
                 delete_segment: Callable[[Path], None] | None = None) -> list[Path]:
    """Delete what ``plan`` lists: segments oldest first (through ``delete_segment`` when the
    writer must drop its mapping too), then consume-queue files (through the writer's
    ConsumeQueueStore.delete_below when given, so its state follows)."""
    deleted: list[Path] = []
    for seg in plan.segments:
        try:
            if delete_segment is not None:
                delete_segment(seg.path)
            else:
                seg.path.unlink()
        except FileNotFoundError:
            pass
        deleted.append(seg.path)
        log.info("retention: deleted segment %s (%s, %.1f h old)", seg.path.name, seg.reason, seg.age_h)
    if not plan.segments:
        return deleted
    if consume_queues is not None:
        deleted.extend(consume_queues.delete_below(plan.min_offset_after))
    else:
        for p in plan.consume_queue_files:
            try:
                p.unlink()
                deleted.append(p)
            except FileNotFoundError:
                pass
    return deleted


class RetentionService:
    """Runs clean passes in a background thread of the writer and tells the writer when the disk
    is too full to accept writes (check_writable)."""

    def __init__(self, root: Path, config: RetentionConfig | None = None, *,
                 committed_offset: Callable[[], int],
                 consume_queues: Any = None,
                 delete_segment: Callable[[Path], None] | None = None,
                 clock: Callable[[], float] = time.time,
                 disk_usage: DiskUsageFn = shutil.disk_usage,
                 recheck_s: float = 1.0) -> None:
        self.root = Path(root)
        self.config = config or RetentionConfig()
        self._committed_offset = committed_offset
        self._cq = consume_queues
        self._delete_segment = delete_segment
        self._clock = clock
        self._disk_usage = disk_usage
        self._recheck_s = recheck_s
        self._run_lock = threading.Lock()    # one clean pass at a time
        self._flag_lock = threading.Lock()   # the disk-full flag; never held while deleting, so a
        # writer checking it inside its put lock cannot wait on a pass that waits on that lock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._disk_full = False
        self._last_ratio = 0.0
        self._measured_at: float | None = None
        self.last_plan: CleanPlan | None = None

    # --- disk-full flag -----------------------------------------------------------------------
    def _measure(self) -> float:
        u = self._disk_usage(self.root)
        ratio = int(u.used) / max(int(u.total), 1)
        self._update_flag(ratio)
        return ratio

    def _update_flag(self, ratio: float) -> None:
        with self._flag_lock:
            self._set_flag(ratio)

    def _set_flag(self, ratio: float) -> None:
        if ratio > self.config.disk_full_ratio:
            if not self._disk_full:
                log.error("disk %.1f%% used at %s, over disk_full_ratio %.0f%%: refusing writes",
                          ratio * 100, self.root, self.config.disk_full_ratio * 100)
            self._disk_full = True
        elif ratio <= self.config.clean_immediately_ratio:
            if self._disk_full:
                log.warning("disk %.1f%% used at %s: accepting writes again", ratio * 100, self.root)
            self._disk_full = False
        self._last_ratio = ratio
        self._measured_at = self._clock()

    @property
    def disk_full(self) -> bool:
        return self._disk_full

    def check_writable(self) -> None:
        """Raise DiskFullError while the disk is past disk_full_ratio (measured at most every
        ``recheck_s`` seconds); the writer calls this before each append."""
        with self._flag_lock:
            if self._measured_at is None or self._clock() - self._measured_at >= self._recheck_s:
                u = self._disk_usage(self.root)
                self._set_flag(int(u.used) / max(int(u.total), 1))
            if self._disk_full:
                raise DiskFullError(
                    f"disk {self._last_ratio:.1%} used at {self.root}, over disk_full_ratio "
                    f"{self.config.disk_full_ratio:.0%}: writes are refused until usage is back under "
                    f"{self.config.clean_immediately_ratio:.0%}; free disk space, or lower "
                    f"file_reserved_time_h so retention deletes more old segments")

    # --- cleaning -----------------------------------------------------------------------------
    def run_once(self, manual: bool = False) -> CleanPlan:
        """One clean pass: plan, delete, then update the disk-full flag."""
        with self._run_lock:
            plan = plan_clean(self.root, self.config, self._clock(), self._disk_usage,
                              committed_offset=self._committed_offset(), manual=manual)
            self._update_flag(plan.usage_ratio)
            execute_plan(plan, self._cq, self._delete_segment)
            if plan.segments:
                self._measure()
            self.last_plan = plan
            return plan

    def _loop(self) -> None:
        while not self._stop.wait(self.config.interval_s):
            try:
                self.run_once()
            except (StoreError, OSError):
                log.exception("retention pass failed at %s; retrying in %.0f s", self.root, self.config.interval_s)

    def start(self) -> "RetentionService":
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="commitlog-retention", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
