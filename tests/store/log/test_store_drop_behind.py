"""A commit hands the commit log's page cache below it back to the kernel (drop_cache_behind): the
pages of committed records leave the page cache, the records still read back whole, and what is
not committed yet, or a store told to keep its cache, stays."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from store import Message, MessageStore, StoreConfig
from store.format.constants import COMMITLOG_DIR
from tests.helpers.stores import resident_pages

pytestmark = pytest.mark.unit

SEG = 1 << 20


def drops_clean_pages(directory: Path) -> bool:
    """Whether this filesystem lets clean pages go (tmpfs keeps every page it has)."""
    probe = directory / "probe"
    probe.write_bytes(b"x" * (4 * mmap.PAGESIZE))
    with open(probe, "rb+") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    gone = not resident_pages(probe, 4 * mmap.PAGESIZE).any()
    probe.unlink()
    return gone


def msgs(n: int, tag: int) -> list[Message]:
    return [Message(topic="D", body=bytes([tag]) * 3000, queue_id=i % 2) for i in range(n)]


@pytest.mark.parametrize("drop", [True, False])
def test_a_commit_hands_back_the_pages_it_covers_and_the_records_still_read_back(tmp_path: Path, drop: bool) -> None:
    if drop and not drops_clean_pages(tmp_path):
        # a tmpfs page is the file itself: no kernel lets it go, so there is nothing to observe
        pytest.skip("this filesystem keeps clean pages in memory (tmpfs): nothing to hand back")
    root = tmp_path / "s"
    with MessageStore.open(root, StoreConfig(segment_size=SEG, drop_cache_behind=drop)) as s:
        s.append(msgs(100, 1))
        cp = s.commit()
        s.append(msgs(20, 2))              # appended, not committed: its pages stay
        end = s.max_offset
        segment = root / COMMITLOG_DIR / f"{0:020d}"
        pages = resident_pages(segment, SEG)
        committed = cp.offset // mmap.PAGESIZE           # whole pages below the commit point
        if drop:
            assert not pages[:committed].any()
        else:
            assert pages[:committed].all()
        assert pages[-(-cp.offset // mmap.PAGESIZE):-(-end // mmap.PAGESIZE)].all()
        bodies = [bytes(m.body) for _, m in s.iter_messages()]
    assert bodies == [bytes([1]) * 3000] * 100 + [bytes([2]) * 3000] * 20
    with MessageStore.open(root, StoreConfig(segment_size=SEG)) as s:
        assert sum(1 for _ in s.iter_messages()) == 100      # the commit point, as ever


def test_a_job_setting_reaches_the_store() -> None:
    from ingest.cli import build_parser
    from ingest.job_arguments import config_from_args
    from ingest.job_settings import store_config

    def setting(*extra: str) -> bool:
        args = build_parser().parse_args(["run", "--bootstrap-servers", "h:9092", "--store", "/s", "--subscribe", "t",
                                          *extra])
        return store_config(config_from_args(args)).drop_cache_behind

    assert setting() is True
    assert setting("--drop-cache-behind", "false") is False
