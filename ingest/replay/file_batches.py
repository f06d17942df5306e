"""A batch of ``replay --from-files`` read, mapped, encoded and packed by the tasks that read its pieces.

The general way (ingest.replay.file_pieces.batch_rows) hands Spark the pieces' rows as Kafka columns;
ingest.encode.prepare then sorts them into source order (a shuffle) and encodes them in a second
pass of Python workers, every row converted into the JVM's rows and back on the way. When the
export's pieces can be put in source order as wholes (each piece's rows of the batch lie between
the previous piece's and the next one's in (topic, partition, offset) order, which holds for an
export written as Spark or ``export_records`` write one, a file per partition or a range of one),
nothing needs the shuffle: each task reads a piece, sorts its own rows into source order, maps,
encodes and packs them as the job's own Kafka source does (the spool included), and the tasks'
order is the batch's. Otherwise the batch takes the general way; both give the same records in the
same order (tests/ingest/replay/test_replay_file_batches.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import pyarrow as pa

from ingest.encode.mapping import MappingConfig
from ingest.encode.prepare import hand_over, map_and_encode_batches
from ingest.replay.file_pieces import (
    ExportScan,
    FilePiece,
    PieceScan,
    batch_rows,
    in_ranges,
    piece_rows,
    task_groups,
)
from ingest.replay.plan import TopicPartitionKey
from ingest.replay.positions import source_order
from sink.handover.packed import packed_spark_schema
from sink.handover.spool_task import SpoolTarget
from store.format import CodecConfig

Ranges = Mapping[TopicPartitionKey, tuple[int, int]]
ENCODE_ROWS = 100_000       # rows mapped and encoded at a time (a jsonl piece of 100-byte values is ~110,000)


def file_batch(spark: Any, scan: ExportScan, ranges: Ranges | None, mapping: MappingConfig, codec: CodecConfig,
               spool: SpoolTarget | None = None, index_keys: bool = False) -> Any:
    """The batch of ``ranges`` (every row when None) as a DataFrame ingest.encode.prepare.collect_packed
    takes: packed and in source order from the reading tasks when its pieces allow (module docstring),
    with each record's index keys when ``index_keys``, else the pieces' Kafka columns."""
    task = batch_task(scan, ranges, mapping, codec, spool, spark.sparkContext.defaultParallelism, index_keys)
    if task is None:
        return batch_rows(spark, scan, ranges)
    function, tasks = task
    if not tasks:
        return spark.createDataFrame([], packed_spark_schema())
    return spark.range(tasks, numPartitions=tasks).mapInArrow(function, packed_spark_schema())


def batch_task(scan: ExportScan, ranges: Ranges | None, mapping: MappingConfig, codec: CodecConfig,
               spool: SpoolTarget | None, cores: int, index_keys: bool = False
               ) -> tuple[Callable[..., Iterator[pa.RecordBatch]], int] | None:
    """(the mapInArrow function over task numbers, how many tasks) of the batch of ``ranges``, or None
    when its pieces interleave (the general way)."""
    which = list(range(len(scan.pieces))) if ranges is None else scan.pieces_for(ranges)
    order = piece_order(scan, which, ranges)
    if order is None:
        return None
    groups = task_groups([_rows_in(scan.scans[i], ranges) for i in order], cores)
    task = partial(encode_pieces, groups=[[(narrowed(scan, order[k], ranges), _kept(scan.scans[order[k]], ranges))
                                           for k in g] for g in groups],
                   mapping=mapping, codec=codec, spool=spool, index_keys=index_keys)
    return task, len(groups)


def narrowed(scan: ExportScan, i: int, ranges: Ranges | None) -> FilePiece:
    """Piece ``i``, or only the lines of it that hold its partition's range, between two of its marks."""
    piece, marks = scan.pieces[i], scan.scans[i].marks
    if not marks or ranges is None:
        return piece
    (tp,) = scan.scans[i].parts
    if tp not in ranges:
        return piece
    a, b = ranges[tp]
    start = max((m for m in marks if m[0] <= a), default=None)      # the last mark at or before the range
    stop = min((m for m in marks if m[0] >= b), default=None)       # the first mark at or after its end
    return replace(piece, start=piece.start if start is None else start[1],
                   stop=piece.stop if stop is None else stop[1],
                   first_line=piece.first_line + (0 if start is None else start[2]))


def _kept(scan: PieceScan, ranges: Ranges | None) -> dict[TopicPartitionKey, tuple[int, int]] | None:
    """The ranges a piece's rows are filtered by: only its own partitions', none when all of them are in."""
    if ranges is None or all(st.within(ranges.get(tp, (0, 0))) == (st.first, st.last)
                             for tp, st in scan.parts.items()):
        return None
    return {tp: ranges[tp] for tp in scan.parts if tp in ranges}


def _rows_in(scan: PieceScan, ranges: Ranges | None) -> float:
    """About how many of the piece's rows ``ranges`` take (the span of each partition's offsets in it)."""
    spans = [st.within(None if ranges is None else ranges.get(tp, (0, 0))) for tp, st in scan.parts.items()]
    return float(sum(hi - lo + 1 for lo, hi in filter(None, spans)))


def piece_order(scan: ExportScan, which: Sequence[int], ranges: Ranges | None) -> list[int] | None:
    """``which`` pieces ordered so that each one's rows of ``ranges`` come after the previous one's in
    (topic, partition, offset) order, or None when their spans interleave (a piece holding two
    partitions another piece holds too, or one position in two pieces)."""
    spans = []
    for i in which:
        ends = []
        for (topic, partition), st in scan.scans[i].parts.items():
            span = st.within(None if ranges is None else ranges.get((topic, partition), (0, 0)))
            if span is not None:
                ends += [(topic, partition, span[0]), (topic, partition, span[1])]
        if ends:
            spans.append((min(ends), max(ends), i))
    spans.sort()
    if any(nxt[0] <= prev[1] for prev, nxt in zip(spans, spans[1:])):
        return None
    return [i for _, _, i in spans]


def encode_pieces(ids: Iterator[pa.RecordBatch], groups: Sequence[Sequence[tuple[FilePiece, Ranges | None]]],
                  mapping: MappingConfig, codec: CodecConfig, spool: SpoolTarget | None,
                  index_keys: bool = False) -> Iterator[pa.RecordBatch]:
    """mapInArrow over the group numbers of ``spark.range``: each piece of the group, in order, its rows
    of its ranges (all of them when None) in source order, mapped, encoded (with each record's index
    keys when ``index_keys``) and packed (or spooled)."""
    for batch in ids:
        for i in batch.column(0).to_pylist():
            for piece, ranges in groups[i]:
                table = piece_rows(piece)
                rows = source_order(table if ranges is None else table.filter(in_ranges(table, ranges)))
                encoded = map_and_encode_batches(iter(rows.to_batches(max_chunksize=ENCODE_ROWS)), mapping, codec)
                yield from hand_over(encoded, spool, index_keys)
