"""The writer runs retention when configured: old segments go from the front, reads follow."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import Message, MessageStore, StoreConfig
from store.retention import RetentionConfig
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.unit

SEG = 64 * 1024


def test_retention_deletes_expired_segments_behind_the_commit_point(tmp_path: Path) -> None:
    every_hour = ";".join(f"{h:02d}" for h in range(24))
    retention = RetentionConfig(file_reserved_time_h=0, delete_when=every_hour, interval_s=0.05)
    root = tmp_path / "s"
    with MessageStore.open(root, StoreConfig(segment_size=SEG, retention=retention)) as s:
        r = s.append([Message(topic="O", body=bytes(1000) + i.to_bytes(4, "big")) for i in range(300)])
        s.commit()
        committed_segment = s.committed_offset - s.committed_offset % SEG
        wait_until(lambda: s.min_offset >= committed_segment, 10, "retention to delete the old segments")
        assert s.min_offset == committed_segment > 0
        kept = [m.body.tobytes()[-4:] for _, m in s.iter_messages()]
        assert kept and int.from_bytes(kept[-1], "big") == 299
        assert int(r.physical_offsets[-1]) >= s.min_offset
        s.append([Message(topic="O", body=b"after")])
        s.commit()
    with MessageStore.open(root, StoreConfig(segment_size=SEG)) as s:
        assert s.min_offset == committed_segment
        assert [m.body.tobytes() for _, m in s.iter_messages()][-1] == b"after"
