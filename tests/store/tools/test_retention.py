"""Retention deletes old segments as RocketMQ's CleanCommitLogService does, and no more."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from store.errors import DiskFullError
from store.queue.consume_queue import ConsumeQueueStore
from store.retention import DiskUsage, RetentionConfig, RetentionService, plan_clean
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.unit

SEG = 4096
HOUR = 3600.0


def local(hour: int, minute: int = 30) -> float:
    """An epoch time whose local hour is ``hour`` (delete_when is in local time, as in RocketMQ)."""
    return time.mktime((2026, 11, 21, hour, minute, 0, 0, 0, -1))


NOON = local(12)
FOUR = local(4)


class Disk:
    """A disk of 100 segments' worth whose usage counts the store's segments still present."""

    def __init__(self, root: Path, other_used_segments: float) -> None:
        self.root, self.other = root, other_used_segments

    def __call__(self, path: Path) -> DiskUsage:
        total = 100 * SEG
        used = int(self.other * SEG) + sum(p.stat().st_size for p in (self.root / "commitlog").iterdir())
        return DiskUsage(total, used, total - used)


def make_store(root: Path, ages_h: list[float], now: float) -> list[Path]:
    cdir = root / "commitlog"
    cdir.mkdir(parents=True)
    paths = []
    for i, age in enumerate(ages_h):
        p = cdir / str(i * SEG).zfill(20)
        p.write_bytes(b"\x01" * SEG)
        os.utime(p, (now - age * HOUR, now - age * HOUR))
        paths.append(p)
    return paths


def remaining(root: Path) -> list[int]:
    return sorted(int(p.name) // SEG for p in (root / "commitlog").iterdir())


def service(root: Path, now: float, disk: Disk, committed: int = 10**12, **cfg: float) -> RetentionService:
    return RetentionService(root, RetentionConfig(**cfg), committed_offset=lambda: committed,
                            clock=lambda: now, disk_usage=disk)


def test_expired_segments_wait_for_the_delete_hour_when_the_disk_is_not_full(tmp_path: Path) -> None:
    make_store(tmp_path, [100, 90, 80, 10, 1], NOON)
    disk = Disk(tmp_path, 40)                       # 45 % used
    plan = service(tmp_path, NOON, disk).run_once()
    assert not plan.time_up and not plan.space_full
    assert remaining(tmp_path) == [0, 1, 2, 3, 4]
    plan = service(tmp_path, FOUR, disk).run_once()
    assert plan.time_up
    assert [s.reason for s in plan.segments] == ["expired"] * 3
    assert remaining(tmp_path) == [3, 4]


def test_delete_when_accepts_several_hours(tmp_path: Path) -> None:
    make_store(tmp_path, [100, 1], local(5))
    service(tmp_path, local(5), Disk(tmp_path, 0), delete_when="04;05").run_once()
    assert remaining(tmp_path) == [1]


def test_reserved_time_is_measured_from_the_last_write(tmp_path: Path) -> None:
    make_store(tmp_path, [72.01, 71.9, 100, 1], FOUR)
    service(tmp_path, FOUR, Disk(tmp_path, 0)).run_once()
    # the 71.9 h old segment is not expired, and an older one behind it is not deleted (no holes)
    assert remaining(tmp_path) == [1, 2, 3]
    service(tmp_path, FOUR, Disk(tmp_path, 0), file_reserved_time_h=1).run_once()
    assert remaining(tmp_path) == [3]


def test_over_75_percent_expired_segments_go_at_any_hour(tmp_path: Path) -> None:
    make_store(tmp_path, [100, 80, 10, 5, 1], NOON)
    disk = Disk(tmp_path, 72)                       # 77 % used
    plan = service(tmp_path, NOON, disk).run_once()
    assert plan.space_full and not plan.clean_immediately and not plan.time_up
    assert remaining(tmp_path) == [2, 3, 4]         # the young ones stay even though we are over 75 %


def test_over_85_percent_segments_go_whatever_their_age_until_under(tmp_path: Path) -> None:
    make_store(tmp_path, [5, 4, 3, 2, 1, 0.5], NOON)
    disk = Disk(tmp_path, 82)                       # 88 % used
    plan = service(tmp_path, NOON, disk).run_once()
    assert plan.clean_immediately and not plan.disk_full
    assert [s.reason for s in plan.segments] == ["disk over clean_immediately_ratio"] * 3
    assert remaining(tmp_path) == [3, 4, 5]         # 85 % exactly is not over
    assert disk(tmp_path).used / disk(tmp_path).total == pytest.approx(0.85)
    assert plan.usage_ratio_after == pytest.approx(0.85)


def test_over_90_percent_writes_are_refused_until_space_is_back(tmp_path: Path) -> None:
    make_store(tmp_path, [7, 6, 5, 4, 3, 2, 1], NOON)
    disk = Disk(tmp_path, 84)                       # 91 % used
    committed = [3 * SEG]
    svc = RetentionService(tmp_path, RetentionConfig(), committed_offset=lambda: committed[0],
                           clock=lambda: NOON, disk_usage=disk)
    with pytest.raises(DiskFullError, match=r"91\.0% used.*disk_full_ratio 90%"):
        svc.check_writable()
    plan = svc.run_once()
    assert plan.disk_full
    # only segments wholly below the commit may go (0..2): 88 % is still over 85 %, still refused
    assert remaining(tmp_path) == [3, 4, 5, 6]
    with pytest.raises(DiskFullError):
        svc.check_writable()
    committed[0] = 7 * SEG                          # the writer commits the rest
    svc.run_once()
    assert remaining(tmp_path) == [6]               # down to 85 %
    svc.check_writable()
    assert not svc.disk_full


def test_the_disk_full_flag_clears_only_under_85_percent(tmp_path: Path) -> None:
    make_store(tmp_path, [1], NOON)
    disk = Disk(tmp_path, 90)                       # 91 %
    now = [NOON]
    svc = RetentionService(tmp_path, RetentionConfig(), committed_offset=lambda: 0, clock=lambda: now[0],
                           disk_usage=disk, recheck_s=1.0)
    with pytest.raises(DiskFullError):
        svc.check_writable()
    disk.other = 87                                 # 88 %: between the two limits, still refused
    now[0] += 1                                     # the next check measures again
    with pytest.raises(DiskFullError):
        svc.check_writable()
    disk.other = 83                                 # 84 %
    now[0] += 1
    svc.check_writable()


def test_the_active_segment_and_data_past_the_commit_are_never_deleted(tmp_path: Path) -> None:
    make_store(tmp_path, [500, 400, 300, 200], FOUR)
    disk = Disk(tmp_path, 95)                       # 99 %: delete everything that may go
    plan = plan_clean(tmp_path, RetentionConfig(), FOUR, disk, committed_offset=2 * SEG + 10)
    assert [s.base_offset for s in plan.segments] == [0, SEG]
    assert "past the last commit" in plan.stopped_at
    plan = plan_clean(tmp_path, RetentionConfig(), FOUR, disk, committed_offset=4 * SEG)
    assert [s.base_offset for s in plan.segments] == [0, SEG, 2 * SEG]
    assert "active" in plan.stopped_at
    plan = plan_clean(tmp_path, RetentionConfig(), FOUR, disk, committed_offset=0)
    assert plan.segments == []
    assert remaining(tmp_path) == [0, 1, 2, 3]      # planning deletes nothing


def test_consume_queue_files_pointing_only_into_deleted_segments_go_too(tmp_path: Path) -> None:
    make_store(tmp_path, [100, 100, 1, 1], FOUR)
    cq = ConsumeQueueStore(tmp_path, units_per_file=2)
    phys = np.array([0, 100, 4000, SEG + 10, 2 * SEG, 2 * SEG + 5, 3 * SEG])
    n = len(phys)
    cq.dispatch(["T"], np.zeros(n), np.zeros(n), np.arange(n), phys, np.full(n, 50), np.zeros(n))
    cq.dispatch(["U"], np.zeros(1), np.zeros(1), np.zeros(1), np.array([10]), np.full(1, 50), np.zeros(1))
    svc = RetentionService(tmp_path, RetentionConfig(), committed_offset=lambda: 4 * SEG, consume_queues=cq,
                           clock=lambda: FOUR, disk_usage=Disk(tmp_path, 0))
    plan = svc.run_once()
    assert remaining(tmp_path) == [2, 3]
    # files 0 and 40 point only below 2*SEG; file 80 starts at 2*SEG; U/0's only file stays
    assert [p.name for p in plan.consume_queue_files] == ["00000000000000000000", "00000000000000000040"]
    assert [p.name for p in cq.queue_files("T", 0)] == ["00000000000000000080", "00000000000000000120"]
    assert [p.name for p in cq.queue_files("U", 0)] == ["00000000000000000000"]   # a queue's last file stays
    assert cq.queue_range("T", 0) == (4, 7)
    assert cq.queue_range("U", 0) == (1, 1)   # its one record is gone


def test_the_background_service_runs_passes_until_stopped(tmp_path: Path) -> None:
    make_store(tmp_path, [100, 1], FOUR)
    svc = RetentionService(tmp_path, RetentionConfig(interval_s=0.01), committed_offset=lambda: 2 * SEG,
                           clock=lambda: FOUR, disk_usage=Disk(tmp_path, 0)).start()
    try:
        wait_until(lambda: remaining(tmp_path) == [1], 5, "a pass to delete the expired segment")
    finally:
        svc.stop()
    assert remaining(tmp_path) == [1]


@pytest.mark.parametrize("kw", [dict(delete_when="25"), dict(delete_when="4am"),
                                dict(disk_max_used_space_ratio=0.9, clean_immediately_ratio=0.85),
                                dict(disk_full_ratio=1.5)])
def test_a_config_that_cannot_work_is_refused(kw: dict) -> None:
    with pytest.raises(ValueError):
        RetentionConfig(**kw)


def test_a_writer_checking_the_disk_inside_its_lock_never_deadlocks_with_a_clean_pass(tmp_path: Path) -> None:
    import threading

    make_store(tmp_path, [100, 100, 1], FOUR)
    put_lock = threading.Lock()
    in_pass = threading.Event()

    def delete_segment(path: Path) -> None:   # as the engine does: under its put lock
        in_pass.set()
        with put_lock:
            path.unlink()

    svc = RetentionService(tmp_path, RetentionConfig(), committed_offset=lambda: 3 * SEG,
                           delete_segment=delete_segment, clock=lambda: FOUR, disk_usage=Disk(tmp_path, 0),
                           recheck_s=0)

    def writer() -> None:
        with put_lock:
            in_pass.wait(5)
            svc.check_writable()

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    cleaner = threading.Thread(target=svc.run_once, daemon=True)
    cleaner.start()
    t.join(5)
    cleaner.join(5)
    assert not t.is_alive() and not cleaner.is_alive()
    assert remaining(tmp_path) == [2]


def test_a_running_store_deletes_its_old_segments_and_stays_verifiable(tmp_path: Path) -> None:
    from ingest.cli import main
    from store import MessageStore
    from store.config import StoreConfig
    from store.format.codec import Message

    h = time.localtime().tm_hour
    hour = f"{h:02d};{(h + 1) % 24:02d}"                   # still the delete hour if the hour turns
    cfg = StoreConfig(segment_size=SEG, consume_queue_units=20,
                      retention=RetentionConfig(file_reserved_time_h=0, delete_when=hour, interval_s=0.02))
    root = tmp_path / "store"
    with MessageStore.open(root, cfg) as store:
        store.append([Message(topic="T", body=b"x" * 300, queue_id=i % 2) for i in range(60)])
        store.commit()
        # segments go first, then queue files
        wait_until(lambda: store.queue_range("T", 0)[0] > 0, 10, "retention to delete the queue's head")
        assert store.min_offset > 0                        # old segments went
        lo, hi = store.queue_range("T", 0)
        assert 0 < lo < hi == 30                           # the queue's head follows the log
        store.append([Message(topic="T", body=b"y" * 300, queue_id=0)])
        store.commit()
    assert main(["verify", str(root)]) == 0
    files = sorted(p.name for p in (root / "consumequeue" / "T" / "0").iterdir())
    assert files[0] != "0".zfill(20)                       # and its first consume-queue files too
