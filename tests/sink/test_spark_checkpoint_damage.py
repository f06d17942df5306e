"""A Spark checkpoint as a power cut leaves it (Spark never syncs its entries) is set aside before the
query starts, so the job continues from the store's Kafka offsets instead of stopping on every run
("Incomplete log file", "Concurrent update to the log"); a sound one is left alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sink.spark_checkpoint import damage, rewind_to_store
from sink.state import SinkState

pytestmark = pytest.mark.unit

META = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}})


def checkpoint(root: Path, batches: int) -> Path:
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text(json.dumps({"id": "q1"}))
    for b in range(batches):
        (root / "offsets" / str(b)).write_text(f'v1\n{META}\n{{"t": {{"0": {100 * (b + 1)}}}}}')
        (root / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return root


@pytest.mark.parametrize("cut", [
    ("offsets/2", b""), ("offsets/2", b"v1\n{\"batchWatermarkMs\":0,"), ("offsets/2", b"v1\n" + META.encode()),
    ("commits/2", b""), ("commits/1", None), ("offsets/2", None), ("metadata", b"{\"id\": \"q"),
], ids=["offsets-empty", "offsets-torn-json", "offsets-torn-at-a-line", "commits-empty", "commits-gap",
        "offsets-missing-under-a-commit", "metadata-torn"])
def test_a_checkpoint_a_power_cut_left_unreadable_is_set_aside_for_a_new_query(
        tmp_path: Path, cut: tuple[str, bytes | None]) -> None:
    root = checkpoint(tmp_path / "checkpoint", 3)
    entry, data = cut
    if data is None:
        (root / entry).unlink()
    else:
        (root / entry).write_bytes(data)
    assert damage(root, 2) is not None
    assert rewind_to_store(str(root), SinkState(batch_id=2, query_id="q1")) is None
    (aside,) = root.glob("damaged-*")
    assert not (root / "offsets").exists() and not (root / "metadata").exists()
    assert (aside / "offsets").is_dir() and (aside / "metadata").is_file()


def test_a_sound_checkpoint_is_left_to_the_rewind(tmp_path: Path) -> None:
    root = checkpoint(tmp_path / "checkpoint", 3)
    assert damage(root) is None
    rewound = rewind_to_store(str(root), SinkState(batch_id=1, query_id="q1"))
    assert rewound is not None and rewound.rerun == 2 and rewound.commits == [2]
    assert not list(root.glob("damaged-*"))
