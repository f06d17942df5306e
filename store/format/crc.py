"""UtilAll.crc32 (zlib CRC-32 masked with 0x7FFFFFFF) over many slices of one buffer.

The CRC-32 itself is ISA-L's (the ``isal`` package: PCLMUL, 3x zlib's speed on a 100-byte body,
5x on 1 KiB) when it is installed, zlib's otherwise; the two give the same numbers. There is no
vectorized CRC-32 for many slices, so each slice is one call; what can be saved is the Python
work around the calls, and ``map``/``starmap`` leave none per row. Slices of equal length are cut
by ``struct.iter_unpack`` from a contiguous block (gathered in one numpy copy when they are
scattered), which is cheaper than slicing a memoryview per row.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from itertools import starmap

import numpy as np

try:
    from isal.isal_zlib import crc32 as _fast_crc32
except ImportError:         # the same function, slower
    _fast_crc32 = zlib.crc32

crc32: Callable[..., int] = _fast_crc32
"""zlib.crc32's signature and results (unmasked), at ISA-L's speed where available."""

CRC_MASK = 0x7FFFFFFF
ROWS_PER_LENGTH_GROUP = 16      # group slices by length when a length has this many rows on average


def crc32_many(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Masked CRC32 of ``buf[starts[i]:starts[i] + lengths[i]]`` for every i (int64; 0 for empty)."""
    n = len(starts)
    out = np.zeros(n, dtype=np.int64)
    if n == 0:
        return out
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    if np.all(lengths == lengths[0]):
        width = int(lengths[0])
        contiguous = n == 1 or np.all(np.diff(starts) == width)
        block = buf[starts[0]:starts[0] + n * width] if contiguous else _gather(buf, starts, width)
        out[:] = _equal_length(block, width, n)
        return out
    order = np.argsort(lengths, kind="stable")
    sorted_lengths = lengths[order]
    bounds = np.flatnonzero(np.diff(sorted_lengths)) + 1
    if len(bounds) + 1 <= n // ROWS_PER_LENGTH_GROUP:
        for a, b in zip(np.concatenate([[0], bounds]).tolist(), np.concatenate([bounds, [n]]).tolist()):
            rows = order[a:b]
            width = int(sorted_lengths[a])
            out[rows] = _equal_length(_gather(buf, starts[rows], width), width, len(rows))
        return out
    pieces = map(memoryview(buf).__getitem__, map(slice, starts.tolist(), (starts + lengths).tolist()))
    out[:] = np.fromiter(map(crc32, pieces), dtype=np.int64, count=n)
    return out & CRC_MASK


def _gather(buf: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each start, back to back (one memcpy per row inside numpy)."""
    if width == 0:
        return np.zeros(0, dtype=np.uint8)
    items = np.ndarray((len(buf) - width + 1,), dtype=f"V{width}", buffer=buf, strides=(1,))
    return items[starts].view(np.uint8)


def _equal_length(block: np.ndarray, width: int, n: int) -> np.ndarray:
    if width == 0:
        return np.zeros(n, dtype=np.int64)
    # starmap: one C call per slice, no Python frame per row
    rows = struct.Struct(f"{width}s").iter_unpack(memoryview(block).cast("B"))
    return np.fromiter(starmap(crc32, rows), dtype=np.int64, count=n) & CRC_MASK
