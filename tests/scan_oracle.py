"""The segment walk in Python, the oracle store/scan/_scan_walk.c is held to (tests/test_codec_scan.py):
from a record start, follow TOTALSIZE while it is plausible and the record fits."""

from __future__ import annotations

import struct

import numpy as np

from store.format.constants import MIN_RECORD_LENGTH

_I32 = struct.Struct(">i")


def walk(arr: np.ndarray, mv: memoryview, pos: int, end: int, stop_at: int) -> tuple[np.ndarray, int, bool]:
    """store.scan.walk.walk, a record at a time: (record starts, the position after the last,
    whether the walk only paused at ``stop_at`` and should go on)."""
    positions: list[int] = []
    last = min(end - MIN_RECORD_LENGTH, stop_at)
    while pos <= last:
        total, = _I32.unpack_from(mv, pos)
        if total < MIN_RECORD_LENGTH or pos + total > end:
            return np.array(positions, np.int64), pos, False
        positions.append(pos)
        pos += total
    return np.array(positions, np.int64), pos, pos <= end - MIN_RECORD_LENGTH
