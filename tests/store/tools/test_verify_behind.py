"""Records checked behind a writer, a committed stretch at a time (store.tools.verify_behind), give the
closing verify the verdict it reaches reading everything, and spare it the segments they cover."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from store.read.view import open_view
from store.tools.verify import verify_source
from store.tools.verify_behind import VerifyBehind

pytestmark = pytest.mark.unit


def record_starts(root: Path) -> list[tuple[Path, int, int]]:
    """(segment, position, global offset) of every message, and the data's end."""
    from store.tools.dump import walk

    return [(f.segment.path, f.pos, f.offset) for f in walk(open_view(root)) if f.type == "message"]


def commits(root: Path, every: int) -> list[int]:
    """Commit points a writer could have had: every ``every`` records, and the end of the data."""
    starts = [offset for _, _, offset in record_starts(root)]
    end = open_view(root).segments[-1]
    last = verify_source(open_view(root)).data_end
    assert last <= end.base_offset + end.size
    return starts[every::every] + [last]


def verdict(report) -> tuple:
    return ([(p.offset, p.kind, p.detail) for p in report.problems], report.messages, report.message_bytes,
            report.units_checked, report.queues, report.data_end, report.blanks, report.bytes)


def checked_behind(root: Path, points: list[int]) -> dict:
    behind = VerifyBehind(root)
    for offset in points:
        behind.committed(offset)
    return behind.close()


def test_stretches_checked_behind_the_writer_give_the_verdict_of_reading_everything(
        store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = verify_source(open_view(store), jobs=1)
    checked = checked_behind(store, commits(store, every=37))   # stretches that cross segments
    segments = open_view(store).segments
    assert len(segments) > 3 and set(checked) == {s.name for s in segments}
    # a segment closed by its BLANK is checked to its end; the last one to the end of its data
    assert [c.end for c in checked.values()][:-1] == [s.size for s in segments[:-1]]

    import store.tools.verify as verify

    committed = open_view(store)
    committed.committed_offset = whole.data_end    # as a writer's store has it: the commit point at the end
    expected = verdict(verify_source(committed, jobs=1))
    monkeypatch.setattr(verify, "check_piece", lambda work: pytest.fail(f"read again: {work}"))
    assert verdict(verify_source(committed, jobs=1, checked=checked)) == expected and whole.ok


def test_a_segment_checked_to_another_end_is_read_again(store: Path) -> None:
    points = commits(store, every=50)
    checked = checked_behind(store, points[:-1])       # the last stretch was never checked
    last = open_view(store).segments[-1]
    assert last.name not in checked or \
        checked[last.name].end < verify_source(open_view(store)).data_end - last.base_offset
    assert verdict(verify_source(open_view(store), jobs=1, checked=checked)) == \
        verdict(verify_source(open_view(store), jobs=1))


@pytest.mark.parametrize("damage", ["body", "totalSize", "unit"])
def test_damage_found_behind_the_writer_is_reported_as_reading_everything_reports_it(
        store: Path, damage: str) -> None:
    segment, pos, offset = record_starts(store)[700]
    with open(segment, "r+b") as f:
        if damage == "body":                        # the record is whole: checking goes on after it
            f.seek(pos + 88 + 10)
            f.write(b"\xff")
        elif damage == "totalSize":                 # the chain breaks: the rest of the segment is not data
            f.seek(pos)
            f.write(struct.pack(">i", 5))
    if damage == "unit":                            # the consume queue points elsewhere
        qdir = sorted((store / "consumequeue").glob("*/*"))[0]
        unit_file = sorted(qdir.iterdir())[0]
        with open(unit_file, "r+b") as f:
            f.seek(20 * 3)
            f.write(struct.pack(">q", 123))
    checked = checked_behind(store, commits(store, every=41))
    assert segment.name not in checked or damage == "unit"
    behind = verify_source(open_view(store), jobs=1, checked=checked)
    assert not behind.ok and verdict(behind) == verdict(verify_source(open_view(store), jobs=1))


def test_a_stretch_that_cannot_be_read_is_left_to_the_closing_verify(store: Path) -> None:
    points = commits(store, every=60)
    first = open_view(store).segments[0]
    behind = VerifyBehind(store)
    behind.committed(points[0])
    first.path.rename(first.path.with_suffix(".gone"))          # gone while the writer went on
    for offset in points[1:]:
        behind.committed(offset)
    checked = behind.close()
    first.path.with_suffix(".gone").rename(first.path)
    assert first.name not in checked or checked[first.name].end < first.size
    assert verdict(verify_source(open_view(store), jobs=1, checked=checked)) == \
        verdict(verify_source(open_view(store), jobs=1))
