"""The small synthetic store that verify's tests damage: 1,500 records over two topics of two queues,
in 64 KiB segments (SEG), 100 units a consume-queue file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers.synth_store import write_synthetic_store

SEG = 64 * 1024


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store as written: read it, never change it."""
    root = tmp_path_factory.mktemp("pristine") / "store"
    write_synthetic_store(root, 1500, body_size=100, topics=("TopicA", "TopicB"), queues=2,
                          segment_size=SEG, units_per_file=100)
    return root


@pytest.fixture
def store(pristine: Path, tmp_path: Path) -> Path:
    """A copy of it for one test to change."""
    root = tmp_path / "store"
    shutil.copytree(pristine, root)
    return root
