"""Flushing: async background flush, sync flush with group commit, failed flushes."""

from __future__ import annotations

import errno
import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from store import FlushError, Message, MessageStore, StoreConfig, StoreReadOnlyError
from store.log import segment as segment_module
from store.log.flush import FlushService
from store.log.segment import Segment
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.unit

SEG = 256 * 1024


def msgs(n: int, tag: int = 0) -> list[Message]:
    return [Message(topic="F", body=f"{tag}-{i}".encode() * 10) for i in range(n)]


def test_async_flush_catches_up_in_the_background(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=SEG, flush_interval_ms=10,
                                                       flush_least_pages=0)) as s:
        s.append(msgs(500))
        wait_until(lambda: s.flushed_offset == s.max_offset, 5, "the background flush to catch up")


def test_async_flush_waits_for_least_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rounds: list[int] = []          # the least pages of each background round of this store
    real_flush_once = FlushService._flush_once

    def counted(self: FlushService, least_pages: int) -> int:
        done = real_flush_once(self, least_pages)
        # a store another test of this worker left open (the sink keeps its stores between
        # batches) flushes through the same class; only this test's store counts
        if self.commitlog.queue.directory.is_relative_to(tmp_path):
            rounds.append(least_pages)
        return done

    monkeypatch.setattr(FlushService, "_flush_once", counted)
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=SEG, flush_interval_ms=10,
                                                       flush_least_pages=8)) as s:
        s.append(msgs(10))                  # far less than 8 pages
        wait_until(lambda: len(rounds) >= 3, 10, "three background flush rounds")
        assert set(rounds) == {8} and s.flushed_offset == 0
        assert s.flush() == s.max_offset    # an explicit flush takes everything


def test_sync_flush_returns_durable_and_shares_flushes_between_waiting_appends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_flush = Segment.flush

    def slow_flush(self: Segment, upto: int | None = None, gate: Any = None) -> int:
        time.sleep(0.005)                   # a disk that takes a while: appends pile up
        return real_flush(self, upto, gate)

    monkeypatch.setattr(Segment, "flush", slow_flush)
    threads, appends, errors = 8, 15, []
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=SEG, flush_mode="sync")) as s:
        def writer(t: int) -> None:
            for _ in range(appends):
                r = s.append(msgs(3, t))
                if s.flushed_offset < r.end_offset:
                    errors.append((r.end_offset, s.flushed_offset))

        pool = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        assert errors == []
        assert s.flushed_offset == s.max_offset
        assert sum(1 for _ in s.iter_messages()) == threads * appends * 3
        assert s.flush_count < threads * appends / 2     # group commit shared them


class CountingGate:
    """A writeback gate that counts its holds and says whether it is held."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holds = 0

    def __enter__(self) -> None:
        self.lock.acquire()
        self.holds += 1

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


@pytest.mark.parametrize("has_call", [True, False])
def test_a_flush_hands_its_pages_to_the_disk_a_step_at_a_time_under_the_gate(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, has_call: bool) -> None:
    if not has_call:                     # not Linux: the msync does it all, the gate is never taken
        monkeypatch.setattr(segment_module, "_SYNC_FILE_RANGE", None)
    step = segment_module._WRITEBACK_STEP
    seg = Segment.create(tmp_path, 0, 3 * step, warm=False)
    try:
        data = np.arange(2 * step + 4096, dtype=np.uint64).view(np.uint8)[:2 * step + 100]
        seg.buf[:len(data)] = data
        seg.wrote = len(data)
        gate = CountingGate()
        assert seg.flush(gate=gate) == len(data)
        expect = 3 if has_call and segment_module._SYNC_FILE_RANGE is not None else 0
        assert gate.holds == expect
        assert not gate.lock.locked()
        with open(seg.path, "rb") as f:
            assert f.read(len(data)) == data.tobytes()
        assert seg.flush(gate=gate) == len(data) and gate.holds == expect     # nothing left: no step
    finally:
        seg.close()


def test_the_flush_and_the_index_share_the_store_writeback_gate(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=SEG, flush_interval_ms=10_000)) as s:
        assert s._services.flusher.gate is not None
        assert s._services.index is not None and s._services.index.service.gate is s._services.flusher.gate
        with s._services.flusher.gate:             # a flush starting writeback: the index thread waits
            s.append([Message(topic="F", body=b"x", properties="KEYS\x01k1\x02")])
            time.sleep(0.05)
            assert s._services.index.service.query("F", "k1", 10) == []
        s.settle_index()
        assert s._services.index.service.query("F", "k1", 10) == [0]


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_failed_flush_is_reported_and_makes_the_store_read_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    root = tmp_path / "s"
    s = MessageStore.open(root, StoreConfig(segment_size=SEG, flush_mode=mode, flush_interval_ms=10_000))
    s.append(msgs(20))
    cp = s.commit(metadata={"ok": 1})

    real_flush = Segment.flush

    def broken(self: Segment, upto: int | None = None, gate: Any = None) -> int:
        if not self.path.is_relative_to(tmp_path):     # another test's store still open here
            return real_flush(self, upto, gate)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(Segment, "flush", broken)
    if mode == "sync":
        with pytest.raises(FlushError, match="Input/output error"):
            s.append(msgs(5, 1))
    else:
        s.append(msgs(5, 1))
        with pytest.raises(FlushError, match="Input/output error"):
            s.flush()
    with pytest.raises(StoreReadOnlyError, match="reopen"):
        s.append(msgs(1, 2))
    with pytest.raises(FlushError):
        s.commit(metadata={"ok": 2})
    with pytest.raises(FlushError):
        s.flush()                           # never a late "success" for pages the kernel dropped
    s.close()
    assert (root / "abort").exists()        # the next open re-validates
    monkeypatch.undo()
    with MessageStore.open(root, StoreConfig(segment_size=SEG)) as s2:
        assert s2.committed_offset == s2.max_offset == cp.offset
        assert s2.last_commit.metadata == {"ok": 1}
        assert sum(1 for _ in s2.iter_messages()) == 20
        s2.append(msgs(1, 3))


def test_consume_queues_are_written_behind_the_append_and_settled_before_a_read_or_commit(
        tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=SEG)) as s:
        for k in range(5):
            s.append(msgs(40, k))
        assert s.queue_range("F", 0) == (0, 200)          # a read by queue waits for the dispatch
        assert [m.body for m in s.get_by_queue("F", 0, 195, 10)] == [f"4-{i}".encode() * 10 for i in range(35, 40)]
        s.append(msgs(10, 9))
        cp = s.commit()
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=SEG)) as s:
        assert cp.queue_offsets == {("F", 0): 210} and s.queue_range("F", 0) == (0, 210)


def test_readers_settling_the_queues_from_other_threads_meanwhile_see_whole_batches(tmp_path: Path) -> None:
    seen: list[int] = []
    errors: list[BaseException] = []
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=4 * SEG)) as s:
        stop = threading.Event()

        def read() -> None:
            try:
                while not stop.is_set():
                    seen.append(s.queue_range("F", 0)[1] if s.next_queue_offsets() else 0)
            except BaseException as e:  # noqa: BLE001 - reported by the test
                errors.append(e)

        readers = [threading.Thread(target=read) for _ in range(2)]
        for t in readers:
            t.start()
        for k in range(60):
            s.append(msgs(20, k))
        stop.set()
        for t in readers:
            t.join()
        assert s.queue_range("F", 0) == (0, 1200)
    assert not errors
    assert all(n % 20 == 0 for n in seen)


def test_a_failed_dispatch_makes_the_store_read_only_and_a_reopen_rebuilds_the_units(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from store.queue.consume_queue import ConsumeQueueStore

    root = tmp_path / "s"
    s = MessageStore.open(root, StoreConfig(segment_size=SEG))
    s.append(msgs(20))
    cp = s.commit()

    def broken(self: ConsumeQueueStore, *args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ConsumeQueueStore, "dispatch", broken)
    s.append(msgs(5, 1))                    # in the commit log; its units fail behind it
    with pytest.raises(StoreReadOnlyError, match="consume queues .* No space left"):
        s.commit()
    with pytest.raises(StoreReadOnlyError, match="reopen"):
        s.append(msgs(1, 2))
    with pytest.raises(FlushError):
        s.flush()
    s.close()
    # nothing committed was touched and no flush failed: a clean close; the next open cuts the rest
    assert s.closed_cleanly and not (root / "abort").exists()
    monkeypatch.undo()
    with MessageStore.open(root, StoreConfig(segment_size=SEG)) as s2:
        assert s2.committed_offset == s2.max_offset == cp.offset
        assert s2.queue_range("F", 0) == (0, 20)
        s2.append(msgs(3, 3))
        assert s2.commit().queue_offsets == {("F", 0): 23}


def test_a_store_let_go_as_a_killed_writer_first_lets_the_units_in_flight_land(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """abandon() closes the consume-queue files: a unit still being written behind the append would
    land in whatever file took their place (a test caught one in the next store's index file)."""
    from store.queue.consume_queue import ConsumeQueueStore

    landed: list[float] = []
    dispatch = ConsumeQueueStore.dispatch

    def slow(self: ConsumeQueueStore, *args: Any, **kwargs: Any) -> None:
        time.sleep(0.2)
        dispatch(self, *args, **kwargs)
        landed.append(time.monotonic())

    monkeypatch.setattr(ConsumeQueueStore, "dispatch", slow)
    s = MessageStore.open(tmp_path / "s", StoreConfig(segment_size=SEG))
    s.append(msgs(10))
    s.abandon()
    assert landed, "abandon() returned before the units in flight were written"
    monkeypatch.undo()
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=SEG)) as again:
        assert again.committed_offset == 0


def test_a_failed_directory_fsync_after_the_commit_point_rename_says_the_new_point_may_not_be_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    s = MessageStore.open(root, StoreConfig(segment_size=SEG))
    s.append(msgs(20))
    first = s.commit(metadata={"batch": 1})
    s.append(msgs(5, 1))
    fsync_dir = segment_module.fsync_dir

    def broken(path: Path) -> None:
        if path == root:
            raise OSError(errno.EIO, "Input/output error")
        fsync_dir(path)

    monkeypatch.setattr(segment_module, "fsync_dir", broken)
    with pytest.raises(FlushError) as failed:
        s.commit(metadata={"batch": 2})
    monkeypatch.undo()
    on_disk = json.loads((root / "commitpoint.json").read_text())["offset"]
    assert on_disk == s.max_offset > first.offset
    said = str(failed.value)
    assert said.startswith(f"the commit point {on_disk} of {root} was written but may not be durable (after a power "
                           f"cut it may read {first.offset} again): "), said
    assert said.endswith(": Input/output error; the store refuses writes until reopened"), said
    with pytest.raises(StoreReadOnlyError, match="reopen"):
        s.append(msgs(1, 2))
    s.close()
    with MessageStore.open(root, StoreConfig(segment_size=SEG)) as s2:
        assert s2.committed_offset == on_disk and s2.last_commit.metadata == {"batch": 2}


def test_a_commit_point_that_could_not_be_written_stays_the_last_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    s = MessageStore.open(root, StoreConfig(segment_size=SEG))
    s.append(msgs(20))
    first = s.commit()
    s.append(msgs(5, 1))

    def broken(src: Any, dst: Any) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(segment_module.os, "replace", broken)
    with pytest.raises(FlushError, match=f"failed, the last commit point stays {first.offset}: "):
        s.commit()
    monkeypatch.undo()
    assert json.loads((root / "commitpoint.json").read_text())["offset"] == first.offset
    s.close()


def test_a_failed_consume_queue_fsync_is_never_retried_and_close_leaves_abort(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the fault: fsync of a consume-queue file returns EIO (os.fsync patched for those files only)
    import os
    root = tmp_path / "s"
    s = MessageStore.open(root, StoreConfig(segment_size=SEG))
    s.append(msgs(20))
    first = s.commit(metadata={"batch": 1})
    fsync = os.fsync
    failed_on: list[str] = []

    def broken(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if "/consumequeue/" in path:
            failed_on.append(path)
            raise OSError(errno.EIO, "Input/output error")
        fsync(fd)

    monkeypatch.setattr(os, "fsync", broken)
    s.append(msgs(5, 1))
    with pytest.raises(FlushError, match=r"flushing the consume queues or the index of .* failed: fsync on "
                                         r"\S*/consumequeue/\S* in flush\(\): Input/output error"):
        s.commit(metadata={"batch": 2})
    tries = len(failed_on)
    s.close()                               # no OSError: the dirty queues are not fsynced again
    assert len(failed_on) == tries == 1
    assert not s.closed_cleanly and (root / "abort").exists()   # the next open recovers from the disk
    monkeypatch.undo()
    with MessageStore.open(root, StoreConfig(segment_size=SEG)) as s2:
        assert s2.committed_offset == first.offset and s2.last_commit.metadata == {"batch": 1}
        assert sum(1 for _ in s2.iter_messages()) == 20
