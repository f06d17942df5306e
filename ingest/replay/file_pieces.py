"""``replay --from-files`` read by the executors: the export cut into pieces as Spark's own file sources
cut it (a jsonl file in byte ranges, a line belonging to the piece its first byte is in; a parquet
file by row group), each piece read by a task, nothing of the data passing through the driver.

Two passes. The scan (``scan_export``, before anything is written) reads every piece once and brings
back only what the plan needs: per piece and partition the first and last offset and the first
offsets at the --from/--to timestamps, its line count (so that every jsonl line can be named by its
number in its file), the rows with no Kafka position (dead letters of their own, found here as
before: ingest.replay.export_rows names each by file and line, or row group and row), and a file
that cannot be read at all, which stops the replay before the first write. Then each batch
(``batch_rows``) reads again only the pieces that hold its offset ranges. A position held twice
keeps its first row (in file order), within a piece as across pieces.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.replay.export_rows import (
    ROWS_SCHEMA,
    ExportFileError,
    Unplaced,
    _read_jsonl,
    export_files,
    parquet_file,
    read_row_group,
)
from ingest.replay.fast_rows import jsonl_positions, jsonl_rows
from ingest.replay.jsonl_lines import check_not_parquet, line_count, line_marks, seek_piece_start
from ingest.replay.plan import TopicPartitionKey
from ingest.replay.positions import first_of_each_position, one_partition

PIECE_BYTES = 32 << 20      # a jsonl piece: a task's worth (Spark's default is 128 MiB for many cores)
PIECES_PER_TASK = 8         # about the most pieces a task reads in a row (task_groups)
PIECE_COLUMN, ROW_COLUMN = "_piece", "_row"
# what the scan reads of a parquet row group: the positions, the timestamps (--from / --to) and the one
# other column whose cast can fail on a value (timestampType to int32); keys, values and headers are
# left to the batches
SCAN_COLUMNS = ("topic", "partition", "offset", "timestamp", "timestampType")


@dataclass(frozen=True)
class FilePiece:
    path: str
    fmt: str
    start: int              # jsonl: the byte its lines start at; parquet: its row group
    stop: int               # jsonl: lines starting before this byte; parquet: row group + 1
    first_line: int = 1     # jsonl: the number of its first line in the file (known after the scan)


@dataclass
class PartStats:
    first: int
    last: int
    from_ts: int | None = None      # the first offset whose timestamp is >= the --from timestamp
    to_ts: int | None = None

    def within(self, bounds: tuple[int, int] | None) -> tuple[int, int] | None:
        """(first, last) of these offsets inside ``[a, b)`` (all of them when None), None if none is."""
        if bounds is None:
            return self.first, self.last
        lo, hi = max(self.first, bounds[0]), min(self.last, bounds[1] - 1)
        return (lo, hi) if lo <= hi else None

    def join(self, other: PartStats) -> None:
        self.first, self.last = min(self.first, other.first), max(self.last, other.last)
        self.from_ts = _min(self.from_ts, other.from_ts)
        self.to_ts = _min(self.to_ts, other.to_ts)


@dataclass
class PieceScan:
    lines: int = 0
    parts: dict[TopicPartitionKey, PartStats] = field(default_factory=dict)
    unplaced: list[Unplaced] = field(default_factory=list)
    unplaced_lines: list[int] = field(default_factory=list)     # jsonl: each one's line in the piece
    repeated: int = 0
    error: str | None = None
    marks: list[tuple[int, int, int]] = field(default_factory=list)    # jsonl_lines.line_marks


@dataclass
class ExportScan:
    """The export as the scan found it (see the module docstring)."""

    pieces: list[FilePiece]
    scans: list[PieceScan]
    files: int
    unplaced: list[Unplaced]
    repeated: int
    overlapping: set[TopicPartitionKey]     # partitions whose pieces' offsets interleave: deduplicated by Spark

    def partitions(self) -> dict[TopicPartitionKey, PartStats]:
        out: dict[TopicPartitionKey, PartStats] = {}
        for sc in self.scans:
            for tp, st in sc.parts.items():
                if tp in out:
                    out[tp].join(st)
                else:
                    out[tp] = replace(st)
        return out

    def pieces_for(self, ranges: Mapping[TopicPartitionKey, tuple[int, int]]) -> list[int]:
        """The pieces holding any offset of ``ranges``."""
        return [i for i, sc in enumerate(self.scans)
                if any(tp in ranges and st.within(ranges[tp]) for tp, st in sc.parts.items())]


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


# ------------------------------------------------------------------------------ the pieces

def plan_pieces(directory: str | os.PathLike[str], fmt: str, piece_bytes: int | None = None) -> list[FilePiece]:
    """The export's pieces, in file order (jsonl pieces of ``piece_bytes``, PIECE_BYTES by default).
    Parquet footers are read here, in the driver: a file that is not parquet is refused before
    Spark starts."""
    piece_bytes = piece_bytes or PIECE_BYTES
    pieces = []
    for path in export_files(directory, fmt):
        if fmt == "parquet":
            groups = parquet_file(path).num_row_groups
            pieces += [FilePiece(str(path), fmt, g, g + 1) for g in range(groups)]
            continue
        try:
            size = path.stat().st_size
            if fmt == "jsonl":
                with open(path, "rb") as f:
                    check_not_parquet(f, path)     # here, in one line, before any task reads it
        except OSError as exc:
            raise ExportFileError(f"--from-files: cannot read {path}: {exc.strerror or exc}") from None
        cuts = list(range(0, size, piece_bytes)) or [0]
        pieces += [FilePiece(str(path), fmt, a, min(a + piece_bytes, size)) for a in cuts]
    return pieces


def read_piece(piece: FilePiece) -> tuple[pa.Table, list[Unplaced], int]:
    """(rows in ROWS_SCHEMA, unplaced rows, lines) of one piece, in file order: a clean jsonl piece
    column by column (ingest.replay.fast_rows), any other line by line."""
    return _read_piece(piece, count_lines=True)


def piece_rows(piece: FilePiece) -> pa.Table:
    """read_piece's rows alone: what a batch reads (the scan took the unplaced rows and the lines)."""
    return _read_piece(piece, count_lines=False)[0]


def _read_piece(piece: FilePiece, count_lines: bool) -> tuple[pa.Table, list[Unplaced], int]:
    path = Path(piece.path)
    if piece.fmt == "jsonl":
        _, data = _piece_data(path, piece.start, piece.stop)
        rows = jsonl_rows(data)
        if rows is not None:
            return rows, [], line_count(data) if count_lines else 0
        return _read_jsonl(path, piece.start, piece.stop, piece.first_line)
    table, unplaced = read_row_group(parquet_file(path), path, piece.start)
    return table, unplaced, 0


def _piece_data(path: Path, start: int, stop: int) -> tuple[int, bytes]:
    """(where they start, the bytes) of the lines that begin in [start, stop), in one read (piece_lines' rule)."""
    try:
        with open(path, "rb") as f:
            at = seek_piece_start(f, start)
            data = f.read(stop - at) if stop > at else b""
            if data and not data.endswith(b"\n"):
                data += f.readline()
            return at, data
    except OSError as exc:
        raise ExportFileError(f"--from-files: cannot read {path}: {exc.strerror or exc}") from None


def _scan_rows(piece: FilePiece, timestamps: bool
               ) -> tuple[pa.Table, list[Unplaced], int, list[tuple[int, int, int]]]:
    """read_piece for the scan, and the piece's line marks (jsonl_lines.line_marks): of a clean jsonl
    piece only the positions are read (and the timestamps if ``timestamps``), of a parquet row group
    only SCAN_COLUMNS unless a row has no usable position; the rest is read by the batches."""
    if piece.fmt == "jsonl":
        at, data = _piece_data(Path(piece.path), piece.start, piece.stop)
        rows = jsonl_positions(data, timestamps)
        if rows is not None:
            lines, marks = line_marks(data, at, np.asarray(rows.column("offset")) if one_partition(rows) else None)
            return rows, [], lines, marks
    if piece.fmt == "parquet":
        path = Path(piece.path)
        pf = parquet_file(path)
        table, unplaced = read_row_group(pf, path, piece.start, columns=SCAN_COLUMNS)
        if not unplaced:
            return table, [], 0, []
        # a row with no usable position is a dead letter carrying its whole row: read all of it
        return (*read_row_group(pf, path, piece.start), 0, [])
    return (*read_piece(replace(piece, first_line=1)), [])


def scan_piece(piece: FilePiece, from_ms: int | None, to_ms: int | None) -> PieceScan:
    """The scan of one piece, in its task (see the module docstring)."""
    try:
        table, unplaced, lines, marks = _scan_rows(piece, timestamps=from_ms is not None or to_ms is not None)
    except ExportFileError as exc:
        return PieceScan(error=str(exc))
    table, repeated = first_of_each_position(table)
    out = PieceScan(lines, unplaced=unplaced, repeated=repeated, marks=marks)
    if piece.fmt == "jsonl":
        out.unplaced_lines = [int(u.reason[len(piece.path) + len(" line "):].split(":", 1)[0]) for u in unplaced]
    if table.num_rows:
        cols = {"topic": table.column("topic"), "partition": table.column("partition"),
                "offset": table.column("offset")}
        aggs = [("offset", "min"), ("offset", "max")]
        for name, ms in (("from_offset", from_ms), ("to_offset", to_ms)):
            if ms is not None:
                ts = pc.cast(table.column("timestamp"), pa.int64())     # microseconds
                cols[name] = pc.if_else(pc.greater_equal(ts, ms * 1000), table.column("offset"),
                                        pa.scalar(None, pa.int64()))
                aggs.append((name, "min"))
        grouped = pa.table(cols).group_by(["topic", "partition"]).aggregate(aggs).to_pylist()
        for g in grouped:
            out.parts[(g["topic"], g["partition"])] = PartStats(g["offset_min"], g["offset_max"],
                                                                g.get("from_offset_min"), g.get("to_offset_min"))
    return out


def _scan_pieces(pieces: Sequence[FilePiece], from_ms: int | None, to_ms: int | None) -> list[PieceScan]:
    return [scan_piece(p, from_ms, to_ms) for p in pieces]


# ------------------------------------------------------------------------------ in Spark

def task_groups(weights: Sequence[float], cores: int) -> list[list[int]]:
    """The indexes of ``weights`` cut into runs of about equal weight, in order: a run per core (a
    Python task costs Spark tens of milliseconds of its own, so not a task a piece), more of them
    when there are many pieces (at most about PIECES_PER_TASK a run: a large export still spreads
    over a cluster, and a retried task does little again)."""
    n = len(weights)
    cores = max(1, cores)
    tasks = cores * -(-n // (PIECES_PER_TASK * cores))      # a multiple of the cores
    if n < 2 or tasks < 2:
        return [list(range(n))] if n else []
    cum = np.cumsum(np.asarray(weights, dtype=np.float64) + 1e-9)      # a piece of weight 0 still counts
    shares = cum[-1] * np.arange(1, min(tasks, n)) / min(tasks, n)
    cuts = np.unique(np.clip(np.searchsorted(cum, shares, side="left") + 1, 1, n - 1))
    return [g.tolist() for g in np.split(np.arange(n), cuts)]


def piece_weight(piece: FilePiece) -> float:
    """How much reading ``piece`` takes, about: its bytes (jsonl), one for a row group."""
    return float(piece.stop - piece.start) if piece.fmt == "jsonl" else 1.0


def scan_export(spark: Any, pieces: Sequence[FilePiece], from_ms: int | None = None, to_ms: int | None = None
                ) -> ExportScan:
    """Every piece scanned, a run of pieces per core; raises ExportFileError (before anything is written)
    for a piece that cannot be read at all."""
    from functools import partial

    if not pieces:
        return ExportScan([], [], 0, [], 0, set())
    groups = task_groups([piece_weight(p) for p in pieces], spark.sparkContext.defaultParallelism)
    rdd = spark.sparkContext.parallelize([[pieces[i] for i in g] for g in groups], len(groups))
    scans: list[PieceScan] = rdd.flatMap(partial(_scan_pieces, from_ms=from_ms, to_ms=to_ms)).collect()
    for sc in scans:
        if sc.error is not None:
            raise ExportFileError(sc.error)
    fixed: list[FilePiece] = []
    unplaced: list[Unplaced] = []
    line = {}
    for piece, sc in zip(pieces, scans):
        first = line.get(piece.path, 1)
        line[piece.path] = first + sc.lines
        fixed.append(replace(piece, first_line=first))
        if piece.fmt == "jsonl" and first != 1:     # the scan numbered the piece's lines from 1
            sc.unplaced = [_renumbered(u, piece.path, n, first) for u, n in zip(sc.unplaced, sc.unplaced_lines)]
        unplaced += sc.unplaced
    out = ExportScan(fixed, scans, len({p.path for p in pieces}), unplaced, sum(sc.repeated for sc in scans),
                     _overlapping(scans))
    if out.overlapping:
        out.repeated += _repeated_across_pieces(spark, out)
    return out


def _renumbered(u: Unplaced, path: str, local: int, first: int) -> Unplaced:
    head = f"{path} line {local}:"
    return replace(u, reason=f"{path} line {local + first - 1}:{u.reason[len(head):]}")


def _overlapping(scans: Sequence[PieceScan]) -> set[TopicPartitionKey]:
    spans: dict[TopicPartitionKey, list[tuple[int, int]]] = {}
    for sc in scans:
        for tp, st in sc.parts.items():
            spans.setdefault(tp, []).append((st.first, st.last))
    out = set()
    for tp, s in spans.items():
        s.sort()
        if any(b[0] <= a[1] for a, b in zip(s, s[1:])):
            out.add(tp)
    return out


def batch_rows(spark: Any, scan: ExportScan, ranges: Mapping[TopicPartitionKey, tuple[int, int]] | None = None
               ) -> Any:
    """A DataFrame of the Kafka source's columns and ``problem``: the rows of ``ranges`` (every row
    when None), read by one task per piece that holds any, the first row of each position kept."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    which = list(range(len(scan.pieces))) if ranges is None else scan.pieces_for(ranges)
    df = _piece_rows(spark, scan, which, ranges)
    twice = scan.overlapping if ranges is None else {tp for tp in scan.overlapping if tp in ranges}
    if twice:
        first = Window.partitionBy("topic", "partition", "offset").orderBy(PIECE_COLUMN, ROW_COLUMN)
        df = df.withColumn("_n", F.row_number().over(first)).where("_n = 1").drop("_n")
    return df.drop(PIECE_COLUMN, ROW_COLUMN)


def _piece_rows(spark: Any, scan: ExportScan, which: Sequence[int],
                ranges: Mapping[TopicPartitionKey, tuple[int, int]] | None) -> Any:
    from functools import partial

    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from ingest.kafka.source import kafka_schema

    schema = StructType([*kafka_schema(True).fields, StructField("problem", StringType()),
                         StructField(PIECE_COLUMN, LongType()), StructField(ROW_COLUMN, LongType())])
    if not which:
        return spark.createDataFrame([], schema)
    pieces = [scan.pieces[i] for i in which]
    return spark.range(len(pieces), numPartitions=len(pieces)).mapInArrow(
        partial(_read_pieces, pieces=pieces, order=which, ranges=dict(ranges) if ranges else None), schema)


def _repeated_across_pieces(spark: Any, scan: ExportScan) -> int:
    """Rows at a position a row of an earlier piece had (partitions whose pieces interleave)."""
    from pyspark.sql import functions as F

    which = [i for i, sc in enumerate(scan.scans) if any(tp in scan.overlapping for tp in sc.parts)]
    counts = _piece_rows(spark, scan, which, None).groupBy("topic", "partition", "offset").count()
    return int(counts.where("count > 1").agg(F.sum(F.col("count") - 1)).collect()[0][0] or 0)


def _read_pieces(batches: Iterator[pa.RecordBatch], pieces: Sequence[FilePiece], order: Sequence[int],
                 ranges: Mapping[TopicPartitionKey, tuple[int, int]] | None) -> Iterator[pa.RecordBatch]:
    """mapInArrow over the piece numbers of ``spark.range``: each piece's rows (of ``ranges``)."""
    for ids in batches:
        for i in ids.column(0).to_pylist():
            table = piece_rows(pieces[i])
            table, _ = first_of_each_position(table)
            n = table.num_rows
            table = table.append_column(PIECE_COLUMN, pa.array([order[i]] * n, pa.int64())).append_column(
                ROW_COLUMN, pa.array(range(n), pa.int64()))
            if ranges is not None:
                table = table.filter(in_ranges(table, ranges))
            for batch in table.to_batches(max_chunksize=50_000):
                yield _as_source_columns(batch)


def in_ranges(table: pa.Table, ranges: Mapping[TopicPartitionKey, tuple[int, int]]) -> pa.ChunkedArray:
    keep = None
    for (t, p), (a, b) in ranges.items():
        cond = pc.and_(pc.and_(pc.equal(table.column("topic"), t), pc.equal(table.column("partition"), p)),
                       pc.and_(pc.greater_equal(table.column("offset"), a), pc.less(table.column("offset"), b)))
        keep = cond if keep is None else pc.or_(keep, cond)
    return keep if keep is not None else pa.chunked_array([pa.array([False] * table.num_rows)])


def _as_source_columns(batch: pa.RecordBatch) -> pa.RecordBatch:
    """ROWS_SCHEMA is the Kafka source's columns and ``problem``, in that order."""
    return batch.select([f.name for f in ROWS_SCHEMA] + [PIECE_COLUMN, ROW_COLUMN])
