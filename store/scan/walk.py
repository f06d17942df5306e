"""The walk of a segment from record to record: from a record start, follow TOTALSIZE while it is
plausible and the record fits, collecting the record starts; record_check.py then checks every record
found, vectorized. The walk is C (_scan_walk.c, built by setup.py; the TOTALSIZE step is
store/format/_layout.h's record_total); tests/scan_oracle.py walks the same way in Python and
tests/test_codec_scan.py holds the two equal."""

from __future__ import annotations

import numpy as np

from store.format.constants import MIN_RECORD_LENGTH
from store.scan import _scan_walk


def walk(arr: np.ndarray, mv: memoryview, pos: int, end: int, stop_at: int) -> tuple[np.ndarray, int, bool]:
    """Record starts from ``pos`` (an int64 array) while pos <= min(end - MIN_RECORD_LENGTH, stop_at),
    the position after the last, and whether the walk only paused at ``stop_at`` (or a full
    output) and should go on from there. A TOTALSIZE below MIN_RECORD_LENGTH or a record past
    ``end`` ends the walk. ``mv``: the same bytes as ``arr`` (the scan's callers hold both)."""
    out = np.empty(max(min(end - MIN_RECORD_LENGTH, stop_at) - pos, 0) // MIN_RECORD_LENGTH + 1, dtype=np.int64)
    count, pos, more = _scan_walk.walk(arr, pos, end, stop_at, MIN_RECORD_LENGTH, out)
    return out[:count], pos, more
