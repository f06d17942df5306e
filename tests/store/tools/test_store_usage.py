"""What a store tells whoever watches it: its size and position (``usage()``), and what recovery
found when it was opened (``open_report``), the figures the job's metrics serve."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from store import IndexConfig, Message, MessageStore, StoreConfig
from store.format.constants import INDEX_DIR
from tests.helpers.stores import SEG, committed_store, crash, flip, msgs, open_store

pytestmark = pytest.mark.unit


def test_usage_follows_the_commit_point_segments_disk_and_index(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with open_store(root) as s:
        empty = s.usage()
        assert (empty.committed_offset, empty.commit_log_bytes) == (0, 0)
        assert empty.segments == len(list((root / "commitlog").iterdir()))   # the first, made at open
        r = s.append(msgs(900))
        assert s.usage().committed_offset == 0, "appended is not committed"
        s.commit()
        u = s.usage()
        assert u.committed_offset == r.end_offset == u.commit_log_bytes
        assert u.segments == len(list((root / "commitlog").iterdir())) == -(-r.end_offset // SEG)
        files = [p for p in root.rglob("*") if p.is_file()]
        assert u.disk_bytes == sum(os.stat(p).st_blocks * 512 for p in files) > 0
        st = os.statvfs(root)
        assert abs(u.free_disk_bytes - st.f_bavail * st.f_frsize) < 64 << 20   # the disk is shared: near
        assert u.last_commit_ms == s.last_commit.timestamp > 0
        # every message has a UNIQ_KEY-free body here: nothing to index, and an empty index reads 0
        assert 0.0 <= u.index_fill < 1e-3


def test_index_fill_counts_the_keys_of_the_newest_index_file(tmp_path: Path) -> None:
    cfg = StoreConfig(segment_size=SEG, preallocate=False, index=IndexConfig(True, 64, 11))   # 10 keys a file
    with MessageStore.open(tmp_path / "s", cfg) as s:
        s.append([Message(topic="T", queue_id=0, body=b"b", properties=f"KEYS\x01k{i}\x02") for i in range(4)])
        s.commit()
        u = s.usage()
        assert (u.index_files, u.index_items, u.index_capacity) == (1, 4, 10)
        assert u.index_fill == pytest.approx(0.4)
        s.append([Message(topic="T", queue_id=0, body=b"b", properties=f"KEYS\x01k{i}\x02") for i in range(8)])
        s.commit()
        u = s.usage()
        assert (u.index_files, u.index_items) == (2, 2)
        assert len(list((tmp_path / "s" / INDEX_DIR).iterdir())) == 2


def test_a_clean_open_reports_nothing_found(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s, _ = committed_store(root)
    s.close()
    with open_store(root) as s2:
        o = s2.open_report
        assert (o.unclean, o.dropped_bytes, o.damaged_records, o.lost_committed_bytes) == (False, 0, 0, 0)


def test_a_crash_reports_the_uncommitted_tail_it_cut(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s, _ = committed_store(root)
    committed = s.committed_offset
    tail = s.append(msgs(3, 900)).end_offset - committed        # in the same segment
    s.flush()
    crash(s)
    with open_store(root) as s2:
        o = s2.open_report
        assert o.unclean and o.mode == "abnormal"
        # the wiped span, up to the last byte that was not zero already
        assert tail - 8 < o.dropped_bytes <= tail and o.dropped_segments == 0
        assert o.damaged_records == 0 and o.lost_committed_bytes == 0
        s2.append(msgs(30, 903))                                    # into the next segment
        s2.flush()
        crash(s2)
    with open_store(root) as s3:
        assert s3.open_report.dropped_segments == 1 and s3.open_report.dropped_bytes > 0


def test_damaged_and_truncated_committed_data_is_reported(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s, offs = committed_store(root)
    crash(s)
    flip(root, offs[100] + 95)              # a body byte: kept, reported as damaged
    with open_store(root) as s2:
        assert s2.open_report.damaged_records == 1 and s2.open_report.lost_committed_bytes == 0
        end = s2.committed_offset
        crash(s2)
    flip(root, offs[-20] + 4)               # a MAGICCODE: framing lost, cut when asked to
    with open_store(root, truncate_on_corruption=True) as s3:
        assert s3.open_report.lost_committed_bytes == end - offs[-20]


def test_usage_can_be_read_while_the_writer_appends(tmp_path: Path) -> None:
    root = tmp_path / "s"
    seen: list[int] = []
    with open_store(root) as s:
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                seen.append(s.usage().committed_offset)

        watcher = threading.Thread(target=watch)
        watcher.start()
        for i in range(20):
            s.append(msgs(50, i * 50))
            s.commit()
        done.set()
        watcher.join()
        assert seen == sorted(seen) and seen[-1] <= s.committed_offset
