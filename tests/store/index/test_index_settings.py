"""The index geometry of a store RocketMQ's broker wrote (it keeps no config/messageIndex.json) is read
from the IndexFiles themselves, so that verify, get --key and the readers open them as they are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from store.index.service import IndexConfig, IndexService
from store.index.settings import IndexSettings, infer_index_settings, read_index_settings

pytestmark = pytest.mark.unit


def index_with(directory: Path, slots: int, items: int, keys: int, first_offset: int = 0) -> None:
    service = IndexService(directory, IndexConfig(True, slots, items))
    rng = np.random.default_rng(keys)
    hashes = rng.integers(0, 2**31 - 1, keys)
    phy = first_offset + np.repeat(np.arange(keys // 2 + 1) * 300, 2)[:keys]     # two keys a message
    service.put_hashes(hashes, phy, 1_700_000_000_000 + np.arange(keys))
    service.flush()
    service.close()


@pytest.mark.parametrize("slots, items, keys", [(500, 2000, 4321), (500, 2000, 777), (7, 5, 3), (64, 256, 256)],
                         ids=["full-files-and-one-part-full", "one-part-full", "tiny", "one-just-full"])
def test_the_geometry_is_read_from_the_files(tmp_path: Path, slots: int, items: int, keys: int) -> None:
    index_with(tmp_path / "index", slots, items, keys, first_offset=12_288)
    assert infer_index_settings(tmp_path / "index") == IndexSettings(slots, items)
    assert read_index_settings(tmp_path) == IndexSettings(slots, items)      # no config/messageIndex.json


def test_the_geometry_of_an_index_at_offset_zero_is_found_too(tmp_path: Path) -> None:
    index_with(tmp_path / "index", 1000, 3000, 10)
    assert infer_index_settings(tmp_path / "index") == IndexSettings(1000, 3000)


def test_no_index_or_an_empty_file_tells_nothing(tmp_path: Path) -> None:
    assert infer_index_settings(tmp_path / "index") is None
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "20260101000000000").write_bytes(bytes(40 + 4 * 10 + 20 * 10))
    assert infer_index_settings(tmp_path / "index") is None
