"""Where the lines of a piece of a JSON-lines file lie (a piece is a byte range, as Spark splits a
text file: a line belongs to the piece its first byte is in), where a batch may start reading one,
and the refusal of a Parquet file given as JSON lines."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ingest.replay.plan import ReplayError

PARQUET_MAGIC = b"PAR1"       # a Parquet file's first (and last) four bytes
MARK_ROWS = 8192              # lines between two places a batch may start reading a piece
NEWLINE = ord("\n")
SEARCH_BLOCK = 1 << 16        # bytes whose newlines line_starts counts at a time


class ExportFileError(ReplayError):
    """A file of ``--from-files`` that cannot be read at all; the message names it."""


def check_not_parquet(f: Any, path: Path) -> None:
    """Refuse a Parquet file given as JSON lines (its bytes would all be dead letters); leaves ``f``
    at its start."""
    f.seek(0)
    if f.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC:
        raise ExportFileError(f"--from-files: {path} is a Parquet file (it starts with "
                              f"{PARQUET_MAGIC.decode()}), not JSON lines: give --format parquet")
    f.seek(0)


def seek_piece_start(f: Any, start: int) -> int:
    """Move ``f`` to the first line whose first byte is at or after ``start``; returns where that is."""
    if start > 0:
        f.seek(start - 1)
        f.readline()            # the rest of the line that byte start - 1 is in: an earlier piece's
    return f.tell()


def piece_lines(f: Any, start: int, stop: int | None) -> Iterator[bytes]:
    """The lines whose first byte is in [start, stop) of the open file ``f``."""
    pos = seek_piece_start(f, start)
    while stop is None or pos < stop:
        line = f.readline()
        if not line:
            return
        pos += len(line)
        yield line


def line_count(data: bytes, newlines: int | None = None) -> int:
    """How many lines ``data`` holds: its newlines (counted unless given), and a last line without one."""
    return (data.count(b"\n") if newlines is None else newlines) + (1 if data and not data.endswith(b"\n") else 0)


def line_marks(data: bytes, at: int, offsets: np.ndarray | None, every: int = MARK_ROWS
               ) -> tuple[int, list[tuple[int, int, int]]]:
    """How many lines ``data`` (a piece's lines, read from byte ``at``) holds, and where a batch may
    start or stop reading it: every ``every``-th line as (its Kafka offset, its first byte in the file,
    its line in the piece from 0). Marks only when each line is a row of one partition (``offsets``,
    one per line; None: not one partition) and the offsets rise strictly, so that the lines of an
    offset range lie between two marks."""
    per_block = newlines_per_block(data)
    lines = line_count(data, sum(per_block))
    if offsets is None or lines != len(offsets) or len(offsets) < 2 * every \
            or not bool(np.all(offsets[1:] > offsets[:-1])):
        return lines, []
    rows = list(range(every, len(offsets), every))
    return lines, [(int(offsets[r]), at + b, r) for r, b in zip(rows, line_starts(data, rows, per_block=per_block))]


def newlines_per_block(data: bytes, block: int = SEARCH_BLOCK) -> list[int]:
    """The newlines in each ``block`` bytes of ``data``, in order."""
    return [data.count(b"\n", a, a + block) for a in range(0, len(data), block)]


def line_starts(data: bytes, rows: Sequence[int], block: int = SEARCH_BLOCK,
                per_block: Sequence[int] | None = None) -> list[int]:
    """The first byte of each line of ``rows`` (numbered from 0, rising, each > 0 and < the lines of
    ``data``): newlines counted a block at a time (``per_block``: newlines_per_block(data, block)
    when already counted), and only the blocks a line of ``rows`` starts in searched byte by byte;
    a scan's piece is tens of MB and wants a few of them."""
    out: list[int] = []
    want = iter(rows)
    row = next(want, None)
    before = 0          # newlines before the block
    for k, inside in enumerate(newlines_per_block(data, block) if per_block is None else per_block):
        if row is None:
            break
        if before + inside >= row:
            a = k * block
            newlines = np.flatnonzero(np.frombuffer(data, np.uint8, min(block, len(data) - a), a) == NEWLINE)
            while row is not None and row <= before + inside:
                out.append(a + int(newlines[row - before - 1]) + 1)     # just after the row-th newline
                row = next(want, None)
        before += inside
    if row is not None:
        raise ValueError(f"line_starts: line {row} is past the last line of the data")
    return out
