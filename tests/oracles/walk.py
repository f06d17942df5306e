"""The test oracle of the segment walk (store/scan/_scan_walk.c, store.scan.walk.walk): numpy finds
the candidate starts (the magic codes) and follows the chain along TOTALSIZE between them, with a
plain Python walk where candidates mislead it. Same signature and results as store.scan.walk.walk."""

from __future__ import annotations

import struct
from array import array
from typing import Any

import numpy as np

from store.format.constants import MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, MIN_RECORD_LENGTH
from store.format.layout import be_ints

_I32 = struct.Struct(">i")


def walk(arr: np.ndarray, pos: int, end: int, stop_at: int) -> tuple[np.ndarray, int, bool]:
    positions, pos, more = _walk_vectorized(arr, memoryview(arr), pos, end, stop_at)
    if isinstance(positions, array):
        positions = np.frombuffer(positions, dtype=np.int64)
    return positions, pos, more


def _walk(mv: memoryview, pos: int, end: int, stop_at: int) -> tuple[array, int, bool]:
    """Follow TOTALSIZE from ``pos`` while it is plausible and the record fits; every other check
    runs vectorized afterwards over the positions found. Returns (positions, next position,
    whether the walk only paused at ``stop_at`` and should go on)."""
    positions = array("q")
    append = positions.append
    unpack = _I32.unpack_from
    last = min(end - MIN_RECORD_LENGTH, stop_at)
    while pos <= last:
        total, = unpack(mv, pos)
        if total < MIN_RECORD_LENGTH or pos + total > end:
            return positions, pos, False
        append(pos)
        pos += total
    return positions, pos, pos <= end - MIN_RECORD_LENGTH


_MAGIC_HEAD = np.frombuffer(MESSAGE_MAGIC_CODE.to_bytes(4, "big")[:3], dtype=np.uint8)
_MAGIC_LAST = (MESSAGE_MAGIC_CODE & 0xFF, MESSAGE_MAGIC_CODE_V2 & 0xFF)
_MAX_DETOURS = 16               # false magic candidates tolerated per chunk before walking in Python


def _walk_vectorized(arr: np.ndarray, mv: memoryview, pos: int, end: int, stop_at: int) -> tuple[Any, int, bool]:
    """_walk without a Python step per record: every place where a message magic code occurs
    is a candidate record start, and the chain from ``pos`` is followed along TOTALSIZE between
    candidates with array operations. Magic bytes inside a body (a false candidate) cost one
    detour; too many of them fall back to the plain walk."""
    last = min(end - MIN_RECORD_LENGTH, stop_at)
    if pos > last:
        return array("q"), pos, False
    region = arr[pos + 4:last + 8]
    cand = np.flatnonzero(region == _MAGIC_HEAD[0])
    cand = cand[cand + 3 < len(region)]
    cand = cand[(region[cand + 1] == _MAGIC_HEAD[1]) & (region[cand + 2] == _MAGIC_HEAD[2])
                & ((region[cand + 3] == _MAGIC_LAST[0]) | (region[cand + 3] == _MAGIC_LAST[1]))]
    starts = cand.astype(np.int64) + pos
    if not len(starts) or starts[0] != pos:
        return _walk(mv, pos, end, stop_at)
    totals = be_ints(arr, starts, 4)
    nxt = starts + totals
    plausible = (totals >= MIN_RECORD_LENGTH) & (nxt <= end)
    linked = np.zeros(len(starts), dtype=bool)
    linked[:-1] = starts[1:] == nxt[:-1]
    linked &= plausible
    parts: list[np.ndarray] = []
    i = 0
    for _ in range(_MAX_DETOURS):
        breaks = np.flatnonzero(~linked[i:])
        j = i + int(breaks[0]) if len(breaks) else len(starts) - 1
        if not plausible[j]:
            parts.append(starts[i:j])
            return _joined(parts), int(starts[j]), False
        parts.append(starts[i:j + 1])
        p = int(nxt[j])
        if p > last:
            return _joined(parts), p, p <= end - MIN_RECORD_LENGTH
        k = int(np.searchsorted(starts, p))
        if k == len(starts) or starts[k] != p:
            return _joined(parts), p, False       # not a message start: the record check says why
        i = k
    rest, p, more = _walk(mv, int(starts[i]), end, stop_at)
    return _joined(parts + [np.frombuffer(rest, dtype=np.int64)]), p, more


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if len(parts) > 1 else (parts[0] if parts else np.zeros(0, np.int64))
