"""The store's one read-only view (store.read.view): the commands, retention, reindex and StoreReader
take a store's segments, its segment size and its committed end from it, so they agree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from store import StoreReader, segment_size_on_disk
from store.read.view import StoreView, list_segments, open_view
from store.retention import read_committed_offset
from tests.helpers.stores import SEG, four_segments

pytestmark = pytest.mark.unit


def test_a_cut_short_first_segment_does_not_set_the_segment_size(tmp_path: Path) -> None:
    segs = four_segments(tmp_path)
    os.truncate(segs[0], SEG // 2)
    view = open_view(tmp_path)
    assert view.segment_size == SEG == segment_size_on_disk(tmp_path / "commitlog")
    assert [(p.kind, p.offset) for p in view.layout_problems()] == [("segmentSize", 0)]


def test_reader_and_retention_end_where_the_view_does_without_a_commit_point(tmp_path: Path) -> None:
    four_segments(tmp_path)
    (tmp_path / "commitpoint.json").unlink()        # as a RocketMQ store: read to the last valid record
    end = open_view(tmp_path).committed_end()
    last = list_segments(tmp_path / "commitlog")[-1]
    assert last.base_offset < end < last.end_offset
    # an empty file after the newest segment (a creation a crash cut short) holds nothing
    (tmp_path / "commitlog" / f"{last.end_offset:020d}").touch()
    assert open_view(tmp_path).committed_end() == end == read_committed_offset(tmp_path)
    with StoreReader.open(tmp_path) as reader:
        assert reader.committed_offset == end


def test_a_reader_follows_the_segments_and_commit_point_its_view_lists_again(tmp_path: Path) -> None:
    view = StoreView.of_store(tmp_path)             # nothing there yet: a reader may start first
    assert view.segments == [] and view.committed_end() == 0
    with StoreReader.open(tmp_path) as reader:
        assert reader.segments() == [] and reader.committed_offset == 0
        four_segments(tmp_path)
        reader.refresh()
        assert len(reader.segments()) == 4
        assert reader.committed_offset == open_view(tmp_path).committed_end() > 3 * SEG
