"""A full disk is a message, not a signal: every file the store writes in place (segments,
consume-queue files, IndexFiles) has its disk blocks when it is created, so running out of space is
an error naming the file at its creation, the batch is not committed, the store closes cleanly,
and it opens and goes on once there is room again. Done on a real filesystem of a few MiB."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.faults.small_fs import BATCH, reopen_and_write, small_filesystem

pytestmark = pytest.mark.unit

WHAT = {"index": "index file", "queue": "consume-queue file", "segment": "commit-log segment"}


@pytest.mark.parametrize("kind", ["index", "queue", "segment"])
def test_a_file_that_finds_the_disk_full_is_an_error_at_its_creation_and_the_store_closes_cleanly(
        tmp_path: Path, kind: str) -> None:
    with small_filesystem(tmp_path / "fs", "4m") as fs:
        root, filler = fs / "store", fs / "filler"
        child = subprocess.run([sys.executable, "-m", "tests.helpers.faults.small_fs", kind, str(root), str(filler)],
                               capture_output=True, text=True, timeout=300)
        assert child.returncode == 0, f"the writer died with {child.returncode}: {child.stderr[-3000:]}"
        got = json.loads(child.stdout)
        assert got["error"] is not None, got
        assert got["errno"] == errno.ENOSPC, got
        assert "cannot reserve" in got["error"] and WHAT[kind] in got["error"], got["error"]
        assert "No space left on device" in got["error"], got["error"]
        assert "nothing of this batch" in got["error"] or "not committed" in got["error"], got["error"]
        assert got["closed_cleanly"] and not got["abort"], got
        filler.unlink()
        assert reopen_and_write(kind, root, got["committed"]) == got["committed"] + BATCH
        verify = subprocess.run([sys.executable, "-m", "ingest.cli", "verify", str(root)],
                                capture_output=True, text=True, timeout=300)
        assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_store_opened_on_a_full_disk_names_its_lock_file_and_the_call(tmp_path: Path) -> None:
    from store import MessageStore, StoreConfig, StoreError
    from store.format.codec import Message
    from store.index.service import IndexConfig
    from tests.helpers.faults.small_fs import fill

    config = StoreConfig(segment_size=64 << 10, consume_queue_units=200,
                         index=IndexConfig(max_hash_slot_num=50, max_index_num=200))
    with small_filesystem(tmp_path / "fs", "1m") as fs:
        root, filler = fs / "store", fs / "filler"
        with MessageStore.open(root, config) as store:
            store.append([Message("T", b"x" * 100) for _ in range(10)])
            committed = store.commit().offset
        fill(filler)                            # the closed store's lock file is empty: its pid needs a block
        with pytest.raises(StoreError) as refused:
            MessageStore.open(root, config)
        assert str(refused.value) == (f"writing the pid to the lock file {root / 'lock'} failed (pwrite): No space "
                                      f"left on device; free disk space (or raise the quota or file size limit) "
                                      f"and run again")
        assert refused.value.errno == errno.ENOSPC
        filler.unlink()
        with MessageStore.open(root, config) as store:      # the failed open held nothing
            assert store.committed_offset == committed
