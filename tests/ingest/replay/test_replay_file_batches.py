"""A batch of ``replay --from-files`` encoded by the tasks that read its pieces (ingest.replay.file_batches)
holds what the general way (the pieces' Kafka columns, sorted and encoded by Spark) holds, in the same
order, whether its pieces are whole files, lines between two marks of one, or out of order inside."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ingest.config import JobConfig
from ingest.encode.prepare import collect_packed
from ingest.job_settings import codec_config, mapping_config
from ingest.replay.file_batches import file_batch, narrowed, piece_order
from ingest.replay.positions import source_order
from ingest.replay.file_pieces import (
    PIECES_PER_TASK,
    batch_rows,
    plan_pieces,
    read_piece,
    scan_export,
    task_groups,
)
from ingest.replay.jsonl_lines import MARK_ROWS, line_marks, line_starts
from sink.batch import prepare
from sink.handover.spool import Spool
from tests.helpers.export import TOPIC, good, write_jsonl

CFG = JobConfig(bootstrap_servers="(unused)", subscribe="*", store="(unused)")


def _row(partition: int, offset: int, value: bytes | None = None) -> str:
    row = good(partition, offset)
    if value is not None:
        row["value"] = base64.b64encode(value).decode()
    return json.dumps(row)


def _live_and_dead(collected: pa.Table) -> tuple[list, list]:
    """The live records in order, and the dead letters (by position, with their reasons) as a set:
    each way puts a chunk's dead letters after its live rows, and the chunks differ."""
    table = prepare(collected, {})
    rows = table.select(["record", "kafka_partition", "kafka_offset", "dead_reason"]).to_pylist()
    live = [(r["kafka_partition"], r["kafka_offset"], r["record"]) for r in rows if r["dead_reason"] is None]
    dead = sorted((r["kafka_partition"], r["kafka_offset"], r["dead_reason"]) for r in rows if r["dead_reason"])
    return live, dead


@pytest.mark.unit
def test_a_piece_of_one_partition_is_marked_every_so_many_lines_at_the_first_byte_of_each() -> None:
    lines = [_row(0, 10 + 2 * o).encode() + b"\n" for o in range(50)]
    data = b"".join(lines)
    count, marks = line_marks(data, 1000, np.arange(10, 110, 2), every=8)
    assert count == 50 and [m[2] for m in marks] == [8, 16, 24, 32, 40, 48]
    for offset, byte, line in marks:
        assert offset == 10 + 2 * line and data[byte - 1000:].startswith(lines[line])
    assert line_marks(data, 0, np.arange(49), every=8) == (50, [])                     # rows != lines
    assert line_marks(data, 0, np.array([*range(10, 59), 40]), every=8) == (50, [])    # an offset falls back
    assert line_marks(data, 0, np.arange(50), every=32) == (50, [])                    # too few lines
    assert line_marks(data, 0, None, every=8) == (50, [])                              # more than one partition
    assert line_marks(data[:-1], 0, None) == (50, [])                                  # a last line without "\n"


@pytest.mark.unit
@pytest.mark.parametrize("block", [1, 7, 64, 1 << 16])
def test_a_line_is_found_at_the_byte_after_the_newline_before_it_whatever_blocks_the_newlines_are_counted_in(
        block: int) -> None:
    rng = random.Random(block)
    lines = [b"x" * rng.choice([0, 1, 5, 90, 300]) + b"\n" for _ in range(400)]
    data = b"".join(lines) + b"a last line without a newline"
    every_start = np.concatenate([[0], np.cumsum([len(line) for line in lines])])
    rows = sorted(rng.sample(range(1, 401), 40)) + [400]
    assert line_starts(data, rows, block) == [int(every_start[r]) for r in rows]
    assert line_starts(data, [1, 2, 3], block) == [int(b) for b in every_start[1:4]]
    with pytest.raises(ValueError, match="line 401 is past the last line"):
        line_starts(data, [5, 401], block)


@pytest.mark.unit
def test_rows_out_of_order_are_put_in_source_order_keeping_the_first_of_a_position() -> None:
    rng = random.Random(7)
    rows = [(t, p, o, f"{t}{p}{o}") for t in ("a", "b") for p in (1, 0) for o in range(30)]
    rows += [("a", 0, 5, "later"), ("b", 1, 29, "later")]
    rng.shuffle(rows)
    rows.sort(key=lambda r: r[3] == "later")        # the repeats come after the first of their position
    table = pa.table({"topic": [r[0] for r in rows], "partition": pa.array([r[1] for r in rows], pa.int32()),
                      "offset": pa.array([r[2] for r in rows], pa.int64()), "v": [r[3] for r in rows]})
    got = source_order(table).to_pylist()
    assert [(r["topic"], r["partition"], r["offset"]) for r in got] == \
        sorted({(t, p, o) for t, p, o, _ in rows})
    assert "later" not in {r["v"] for r in got}
    one = pa.table({"topic": ["a"] * 3, "partition": pa.array([0] * 3, pa.int32()), "offset": [4, 7, 9]})
    assert source_order(one) is one             # a piece already in order is taken as it is


@pytest.mark.unit
def test_pieces_are_cut_into_runs_of_about_equal_weight_one_per_core_in_order() -> None:
    for weights, tasks in (([1.0] * 16, 2), ([5, 1, 1, 1], 2), ([1.0], 4), ([0, 0, 0], 2), ([3, 1, 4, 1, 5, 9, 2], 3)):
        groups = task_groups(weights, tasks)
        assert [i for g in groups for i in g] == list(range(len(weights)))
        assert 1 <= len(groups) <= tasks and all(groups)
    assert task_groups([1.0] * 16, 2) == [list(range(8)), list(range(8, 16))]
    assert task_groups([], 2) == []
    many = task_groups([1.0] * 100, 2)          # a large export still spreads: runs of at most about 8
    assert len(many) % 2 == 0 and max(map(len, many)) <= PIECES_PER_TASK
    assert [i for g in many for i in g] == list(range(100))


@pytest.mark.integration
def test_a_batch_encoded_where_its_pieces_are_read_is_the_batch_the_general_way_gives(spark: object,
                                                                                     tmp_path: Path) -> None:
    # partition 0 in two files (the second with a row that is no base64 in its middle), partition 1 in
    # one file whose rows are out of order and repeat one position; the batches cut the files mid-way
    n = 3 * MARK_ROWS
    export = tmp_path / "export"
    write_jsonl(export / "p0-a.jsonl", [_row(0, o) for o in range(n)])
    second = [_row(0, o) for o in range(n, 2 * n)]
    second[n // 2 + 7] = json.dumps(dict(good(0, n + n // 2 + 7), value="not base64!"))
    write_jsonl(export / "p0-b.jsonl", second)
    shuffled = [_row(1, o) for o in range(400)] + [_row(1, 17, b"later")]
    random.Random(3).shuffle(shuffled[:400])
    write_jsonl(export / "p1.jsonl", shuffled)
    scan = scan_export(spark, plan_pieces(export, "jsonl"))
    assert sum(bool(sc.marks) for sc in scan.scans) == 2
    mapping, codec = mapping_config(CFG), codec_config(CFG)
    for ranges in ({(TOPIC, 0): (n - 100, n + n // 2 + 100), (TOPIC, 1): (10, 300)},
                   {(TOPIC, 0): (MARK_ROWS + 3, 2 * MARK_ROWS - 3)},
                   {(TOPIC, 0): (0, 2 * n), (TOPIC, 1): (0, 400)}):
        which = scan.pieces_for(ranges)
        assert piece_order(scan, which, ranges) is not None
        fused = collect_packed(file_batch(spark, scan, ranges, mapping, codec), mapping, codec)
        general = collect_packed(batch_rows(spark, scan, ranges), mapping, codec)
        live, dead = _live_and_dead(fused)
        assert (live, dead) == _live_and_dead(general), ranges
        assert len(live) + len(dead) == sum(b - a for a, b in ranges.values())
    line = n // 2 + 7 + 1
    assert any(f"p0-b.jsonl line {line}:" in reason for *_, reason in dead)


@pytest.mark.unit
def test_a_range_of_a_marked_piece_is_read_from_the_mark_before_it_to_the_mark_after_it(tmp_path: Path) -> None:
    from ingest.replay.file_pieces import scan_piece

    n = 4 * MARK_ROWS
    lines = [_row(0, o) for o in range(n)]
    lines[2 * MARK_ROWS + 5] = json.dumps(dict(good(0, 2 * MARK_ROWS + 5), value="not base64!"))
    write_jsonl(tmp_path / "p0.jsonl", lines)
    (piece,) = plan_pieces(tmp_path, "jsonl")
    sc = scan_piece(piece, None, None)
    assert [m[0] for m in sc.marks] == [MARK_ROWS, 2 * MARK_ROWS, 3 * MARK_ROWS]

    class _Scan:
        pieces, scans = [piece], [sc]

    part = narrowed(_Scan(), 0, {(TOPIC, 0): (2 * MARK_ROWS + 1, 3 * MARK_ROWS)})   # type: ignore[arg-type]
    assert (part.start, part.stop, part.first_line) == (sc.marks[1][1], sc.marks[2][1], 2 * MARK_ROWS + 1)
    table, _, count = read_piece(part)
    offsets = table.column("offset").to_pylist()
    assert offsets == list(range(2 * MARK_ROWS, 3 * MARK_ROWS)) and count == MARK_ROWS
    assert [r for r in table.column("problem").to_pylist() if r] == \
        [r for r in read_piece(piece)[0].column("problem").to_pylist() if r]          # named by its line in the file
    assert narrowed(_Scan(), 0, {(TOPIC, 0): (0, n)}) == piece                         # type: ignore[arg-type]


@pytest.mark.integration
def test_pieces_that_hold_the_same_partitions_take_the_general_way(spark: object, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [_row(p, o) for o in range(0, 10) for p in (0, 1)])
    write_jsonl(tmp_path / "b.jsonl", [_row(p, o) for o in range(10, 20) for p in (0, 1)])
    scan = scan_export(spark, plan_pieces(tmp_path, "jsonl"))
    ranges = {(TOPIC, 0): (0, 20), (TOPIC, 1): (0, 20)}
    assert piece_order(scan, scan.pieces_for(ranges), ranges) is None       # a then b would put 1:9 before 0:10
    assert piece_order(scan, scan.pieces_for({(TOPIC, 0): (0, 20)}), {(TOPIC, 0): (0, 20)}) == [0, 1]
    mapping, codec = mapping_config(CFG), codec_config(CFG)
    live, dead = _live_and_dead(collect_packed(file_batch(spark, scan, ranges, mapping, codec), mapping, codec))
    assert [(p, o) for p, o, _ in live] == [(p, o) for p in (0, 1) for o in range(20)] and not dead


@pytest.mark.integration
def test_a_batch_of_files_comes_through_the_spool_as_through_spark(spark: object, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "export" / "p0.jsonl", [_row(0, o) for o in range(300)])
    write_jsonl(tmp_path / "export" / "p1.jsonl", [_row(1, o) for o in range(200)])
    scan = scan_export(spark, plan_pieces(tmp_path / "export", "jsonl"))
    mapping, codec = mapping_config(CFG), codec_config(CFG)
    ranges = {(TOPIC, 0): (50, 250), (TOPIC, 1): (0, 200)}
    (tmp_path / "store").mkdir()
    spool = Spool.for_store(str(tmp_path / "store"))
    try:
        spooled = collect_packed(file_batch(spark, scan, ranges, mapping, codec, spool.target), mapping, codec, spool)
        assert spooled.column("spool").null_count == 0
        spooled = spool.check(spooled)
        assert _live_and_dead(spooled) == _live_and_dead(
            collect_packed(file_batch(spark, scan, ranges, mapping, codec), mapping, codec))
    finally:
        spool.close()

