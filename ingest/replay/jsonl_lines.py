"""Where the lines of a piece of a JSON-lines file lie (a piece is a byte range, as Spark splits a
text file: a line belongs to the piece its first byte is in), where a batch may start reading one,
and the refusal of a Parquet file given as JSON lines."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ingest.replay.plan import ReplayError

PARQUET_MAGIC = b"PAR1"       # a Parquet file's first (and last) four bytes
MARK_ROWS = 8192              # lines between two places a batch may start reading a piece


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
    starts = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == ord("\n")) + 1
    lines = line_count(data, len(starts))
    if offsets is None or lines != len(offsets) or len(offsets) < 2 * every \
            or not bool(np.all(offsets[1:] > offsets[:-1])):
        return lines, []
    rows = np.arange(every, len(offsets), every)
    return lines, [(int(offsets[r]), at + int(starts[r - 1]), int(r)) for r in rows]
