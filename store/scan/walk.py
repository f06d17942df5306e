"""The walk of a segment from record to record: from a record start, follow TOTALSIZE while it is
plausible and the record fits, collecting the record starts; record_check.py then checks every record
found, vectorized. In C (_scan_walk.c, built by setup.py): each record's TOTALSIZE is read where it
is. tests/oracles/walk.py is the numpy walk tests/store/scan/test_codec_scan.py holds it to."""

from __future__ import annotations

import numpy as np

from store.format.constants import MIN_RECORD_LENGTH
from store.scan import _scan_walk


def walk(arr: np.ndarray, pos: int, end: int, stop_at: int) -> tuple[np.ndarray, int, bool]:
    """Record starts from ``pos`` (an int64 array), the position after the last, and whether the
    walk only paused at ``stop_at`` and should go on (the record there, or the bytes at ``end``,
    not reached yet). A TOTALSIZE below the smallest record or running past ``end`` ends it."""
    out = np.empty(max(min(end - MIN_RECORD_LENGTH, stop_at) - pos, 0) // MIN_RECORD_LENGTH + 1, dtype=np.int64)
    count, pos, more = _scan_walk.walk(arr, pos, end, stop_at, MIN_RECORD_LENGTH, out)
    return out[:count], pos, more
