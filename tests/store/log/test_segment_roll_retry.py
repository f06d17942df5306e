"""A directory fsync that fails while a new commit-log segment is created, then works on the retry.
Created on the append path (no preallocation): the batch that needed the segment is refused with
nothing of it written (SegmentAllocationError), the store stays writable, the same batch appended
again rolls into the segment and commits. Created ahead in the background (the default, RocketMQ's
AllocateMappedFileService): the append creates it again itself, and the batch goes in at once. Either
way a reopen serves every record once from segments whose names are durable."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from store import Message, MessageStore, SegmentAllocationError, StoreConfig, StoreReader
from store.log import segment as segment_module

pytestmark = pytest.mark.unit

SEG = 64 * 1024


def batch(tag: int, n: int = 200) -> list[Message]:
    return [Message(topic="R", body=b"%d-%d-" % (tag, i) + b"x" * 100) for i in range(n)]


class _FailsOnce:
    """fsync_dir that fails once for the commit-log directory once a second segment is in it."""

    def __init__(self, root: Path) -> None:
        self.root, self.failed, self.real = root, 0, segment_module.fsync_dir

    def __call__(self, path: Path) -> None:
        if path == self.root / "commitlog" and not self.failed and len(list(path.iterdir())) > 1:
            self.failed += 1        # the new segment's name is in the page cache only
            raise OSError(errno.EIO, "Input/output error")
        self.real(path)


def served_once(root: Path, n: int) -> None:
    segments = sorted((root / "commitlog").iterdir())
    assert len(segments) >= 2 and all(p.stat().st_size == SEG for p in segments), segments
    with StoreReader.open(root) as reader:
        bodies = [tuple(bytes(m.body).split(b"-")[:2]) for _, m in reader.iter_messages()]
    assert len(bodies) == n and len(set(bodies)) == n


def test_on_the_append_path_the_batch_is_refused_unwritten_and_its_retry_stores_it_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    fails = _FailsOnce(root)
    with MessageStore.open(root, StoreConfig(segment_size=SEG, preallocate=False)) as store:
        store.append(batch(0))
        store.commit(metadata={"batch": 0})
        monkeypatch.setattr(segment_module, "fsync_dir", fails)
        with pytest.raises(SegmentAllocationError, match=r"cannot create a commit-log segment .*Input/output "
                                                         r"error; check the disk and retry; nothing of this "
                                                         r"batch was written"):
            store.append(batch(1))
        assert fails.failed == 1
        store.append(batch(1))          # created again: its directory fsync works this time
        store.commit(metadata={"batch": 1})
    served_once(root, 400)


def test_ahead_in_the_background_the_append_creates_it_again_and_the_batch_goes_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    fails = _FailsOnce(root)
    monkeypatch.setattr(segment_module, "fsync_dir", fails)
    with MessageStore.open(root, StoreConfig(segment_size=SEG)) as store:
        for tag in range(3):            # the second segment, made ahead, fails its fsync once
            store.append(batch(tag))
            store.commit(metadata={"batch": tag})
    assert fails.failed == 1
    served_once(root, 600)
