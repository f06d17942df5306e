"""MessageStore life cycle: open/append/flush/commit/read/close, reopen, StoreReader."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from store import (
    InvalidTopicError,
    Message,
    MessageStore,
    NotARecordStartError,
    StoreConfig,
    StoreLockedError,
    StoreReader,
)

pytestmark = pytest.mark.unit

SEG = 64 * 1024


def msgs(n: int, start: int = 0, topic: str = "T") -> list[Message]:
    return [Message(topic=topic, queue_id=i % 2, body=f"body-{i}".encode() * 20,
                    properties=f"TAGS\x01t{i % 3}\x02") for i in range(start, start + n)]


def open_store(root: Path, **kw) -> MessageStore:
    return MessageStore.open(root, StoreConfig(segment_size=SEG, **kw))


def test_a_new_store_is_committed_at_0_and_holds_lock_and_abort_while_open(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with open_store(root) as s:
        assert json.loads((root / "commitpoint.json").read_text())["offset"] == 0
        assert (root / "abort").exists()
        assert (root / "lock").read_text().strip() == str(os.getpid())
        assert (s.min_offset, s.max_offset, s.committed_offset) == (0, 0, 0)
        with pytest.raises(StoreLockedError, match=f"process {os.getpid()}"):
            MessageStore.open(root)
    assert not (root / "abort").exists()


def test_append_flush_commit_read_and_reopen(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with open_store(root) as s:
        r = s.append(msgs(600))
        assert r.end_offset == s.max_offset > 2 * SEG            # rolled twice at least
        assert s.flush() == s.max_offset == s.flushed_offset
        cp = s.commit(metadata={"batchId": 7})
        assert (cp.offset, cp.metadata, s.committed_offset) == (s.max_offset, {"batchId": 7}, cp.offset)
        assert cp.queue_offsets == {("T", 0): 300, ("T", 1): 300} == s.next_queue_offsets()
        m = s.read(int(r.physical_offsets[123]))
        assert (m.body.tobytes(), m.queue_offset, m.tags) == (b"body-123" * 20, 61, "t0")
        assert isinstance(m.body, memoryview)                     # zero-copy view of the segment
        s.append(msgs(5, 600))                                    # never committed
    with open_store(root) as s:
        assert s.max_offset == s.committed_offset == cp.offset    # uncommitted tail dropped
        assert s.last_commit.metadata == {"batchId": 7}
        assert s.next_queue_offsets() == {("T", 0): 300, ("T", 1): 300}
        got = [(off, m.body.tobytes()) for off, m in s.iter_messages()]
        assert [b for _, b in got] == [f"body-{i}".encode() * 20 for i in range(600)]
        assert [o for o, _ in got] == r.physical_offsets.tolist()
        assert [m.queue_offset for m in s.get_by_queue("T", 1, 298, 32)] == [298, 299]
        assert s.queue_range("T", 0) == (0, 300) and s.topics() == {"T": [0, 1]}
        r2 = s.append(msgs(3, 600))
        assert r2.queue_offsets.tolist() == [300, 300, 301]


def test_reading_where_no_record_starts_is_refused(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as s:
        r = s.append(msgs(3))
        with pytest.raises(NotARecordStartError):
            s.read(int(r.physical_offsets[1]) + 1)
        with pytest.raises(NotARecordStartError):
            s.read(s.max_offset)
        with pytest.raises(NotARecordStartError):
            list(s.iter_messages(from_offset=5))
        assert [o for o, _ in s.iter_messages(from_offset=int(r.physical_offsets[1]))] == \
            r.physical_offsets[1:].tolist()


def test_a_bad_topic_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as s:
        s.append(msgs(2))
        end = s.max_offset
        with pytest.raises(InvalidTopicError):
            s.append([Message(topic="ok", body=b"1"), Message(topic="../x", body=b"2")])
        assert s.max_offset == end and s.next_queue_offsets() == {("T", 0): 1, ("T", 1): 1}


def test_reader_sees_committed_data_only_while_the_writer_runs(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with open_store(root) as s:
        s.append(msgs(100))
        s.commit()
        s.append(msgs(50, 100))
        with StoreReader.open(root) as reader:
            assert reader.committed_offset == s.committed_offset
            assert sum(1 for _ in reader.iter_messages()) == 100
            assert reader.queue_range("T", 0) == (0, 50)
            s.append(msgs(600, 150))                            # into segments the reader has not seen
            s.commit()
            reader.refresh()
            assert sum(1 for _ in reader.iter_messages()) == 750
            assert [m.queue_offset for m in reader.get_by_queue("T", 0, 373, 5)] == [373, 374]
            assert [p.name for p, _, _ in reader.segments()][0] == "0".zfill(20)


def test_commit_at_an_earlier_record_boundary_keeps_the_queue_offsets_of_that_point(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with open_store(root) as s:
        r = s.append(msgs(10))
        cp = s.commit(int(r.physical_offsets[6]))
        assert cp.queue_offsets == {("T", 0): 3, ("T", 1): 3}
    with open_store(root) as s:
        assert s.max_offset == int(r.physical_offsets[6])
        assert s.next_queue_offsets() == {("T", 0): 3, ("T", 1): 3}
        assert s.append(msgs(1, 6)).queue_offsets.tolist() == [3]


def test_a_store_keeps_its_segment_size_whatever_is_asked(tmp_path) -> None:
    from store import Message, MessageStore, StoreConfig

    with MessageStore.open(tmp_path, StoreConfig(segment_size=64 * 1024, preallocate=False)) as s:
        s.append([Message("T", b"x" * 100)])
        s.commit()
    with MessageStore.open(tmp_path, StoreConfig(segment_size=1 << 20, preallocate=False)) as s:
        assert s.commit_log.queue.segment_size == 64 * 1024
        s.append([Message("T", b"y" * 100)])
        s.commit()
        assert len(list(s.iter_messages())) == 2


def test_a_store_that_cannot_be_written_raises_store_read_only(tmp_path, monkeypatch) -> None:
    """The file system refuses (a read-only mount, permissions): our error, not a bare OSError.
    The refusal is made here by the lock file's open, as a read-only mount would refuse it."""
    import errno
    import os

    import pytest

    import store.log.lock as lock
    from store import MessageStore, StoreReadOnlyError

    def refuse(path, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(lock.os, "open", refuse)
    with pytest.raises(StoreReadOnlyError, match="cannot be written"):
        MessageStore.open(tmp_path / "store")
