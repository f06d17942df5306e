"""verify's check of one segment, whole or in pieces.

A segment is checked by one scan along its records (store.scan.record_check) and the queue checks of the
records found (store.tools.queues). A big segment is cut into pieces that processes check
side by side: each piece starts at a guessed record start (a chain of records found near the
cut, find_record_start) and pauses at the first record start at or past the next
piece's. The guess is only trusted when the piece before really pauses there; otherwise the
rest of the segment is checked again from where that piece paused, so a wrong guess costs time,
never a wrong verdict.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from store.format.codec import CodecConfig
from store.format.constants import MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, MIN_RECORD_LENGTH
from store.scan.record_check import ScanColumns, scan_segment_fast
from store.log.segment import read_ahead
from store.read.view import SegmentFile, mapped
from store.scan.fields import fields_from_scan, record_fields
from store.scan.prop_crc import prop_crc_mismatches
from store.tools.queues import Problem, QueueSpan, QueueUnits, check_queues, join_spans
from store.format.layout import TOTAL_AND_MAGIC

_CONTINUE_AFTER = ("crc", "propCrc", "physicalOffset")
_MAGIC_FIRST_BYTE = MESSAGE_MAGIC_CODE >> 24  # the same in both message magic codes
WINDOW_BYTES = 64 << 20     # scanned, then queue-checked, at a time (BENCHMARKS.md, "Verify")


@dataclass
class SegmentResult:
    messages: int = 0
    message_bytes: int = 0
    blanks: int = 0
    units_checked: int = 0
    data_end: int = 0               # global offset where this segment's valid data ends
    broken: bool = False            # scanning stopped at a structural error
    problems: list[Problem] = field(default_factory=list)
    queues: dict[tuple[str, int], QueueSpan] = field(default_factory=dict)
    paused_at: int | None = None    # a piece: the record start (in the segment) where it paused


@dataclass
class SegmentTask:
    seg: SegmentFile
    end: int                        # check up to here (the commit point, or the segment's size)
    expected_size: int
    is_last: bool
    units: QueueUnits
    config: CodecConfig


@dataclass
class Piece:
    task: int                       # index of its SegmentTask
    start: int                      # a record start in the segment (a guess but for the first)
    until: int | None               # pause at the first record start at or past this


def verify_segment(t: SegmentTask, start: int = 0, until: int | None = None,
                   probe_only_range: bool = False) -> SegmentResult:
    """Check the records of ``t.seg`` from ``start`` (up to ``until`` for a piece), a window
    of WINDOW_BYTES at a time: the scan of a window, then the queue checks of its records
    with the fields the scan read, while they are still in cache. ``probe_only_range``: the
    pages probed for read errors first are those of [start, t.end) only, for a caller that
    checks a segment a stretch at a time (store.tools.verify_behind) and would otherwise read
    the stretches before again."""
    seg, end = t.seg, t.end
    res = SegmentResult(data_end=seg.base_offset + start)
    with open(seg.path, "rb") as f, mapped(seg, (start, end) if probe_only_range else None) as mv:
        arr = np.frombuffer(mv, dtype=np.uint8) if len(mv) else np.zeros(0, np.uint8)
        with read_ahead(f.fileno(), start, end if until is None else until, seg.name):
            _scan_and_check(res, arr, mv, t, start, until)
    return res


def _scan_and_check(res: SegmentResult, arr: np.ndarray, mv: memoryview, t: SegmentTask, start: int,
                    until: int | None) -> None:
    """verify_segment's loop: scan a window, check its records, go on or say why it ended."""
    seg, end, config = t.seg, t.end, t.config
    pos = start
    while True:
        window_end = pos + WINDOW_BYTES if until is None else min(pos + WINDOW_BYTES, until)
        scan = scan_segment_fast(mv, seg.base_offset, end, config, start=pos, until=window_end, columns=True)
        starts = scan.offsets - seg.base_offset
        _check_records(res, arr, t, starts, scan.sizes.astype(np.int64), scan.columns)
        stop = scan.stop
        res.data_end = scan.end_offset
        if stop.kind == "pause":
            pos = stop.offset - seg.base_offset
            if until is not None and pos >= until:
                res.paused_at = pos
                break
            continue
        if stop.kind == "error":
            if end < seg.size and stop.error_kind == "truncated":
                res.problems.append(Problem(stop.offset, "commitPoint",
                                            f"the commit point {seg.base_offset + end} is inside the record at "
                                            f"{stop.offset}: {stop.detail}"))
                break
            res.problems.append(Problem(stop.offset, stop.error_kind or "unknown", stop.detail))
            if stop.error_kind in _CONTINUE_AFTER and stop.size > 0:
                # the record is whole, only its body or offset is wrong: count it, go on
                pos = stop.offset - seg.base_offset
                _check_records(res, arr, t, np.array([pos]), np.array([stop.size]), None)
                pos += stop.size
                res.data_end = seg.base_offset + pos
                if until is not None and pos >= until:
                    res.paused_at = pos
                    break
                continue
            res.broken = True
        elif stop.kind == "blank":
            res.blanks += 1
            res.data_end = seg.base_offset + seg.size
            if stop.offset + stop.size != seg.base_offset + seg.size:
                res.problems.append(Problem(stop.offset, "blank",
                                            f"BLANK TOTALSIZE {stop.size} but {seg.end_offset - stop.offset} "
                                            f"bytes are left in segment {seg.name}"))
        elif stop.kind == "end" and not t.is_last and end == seg.size:
            res.problems.append(Problem(stop.offset, "segmentNotClosed",
                                        f"data of segment {seg.name} ends at {stop.offset} without a BLANK, "
                                        f"but later segments exist"))
        break


def _check_records(res: SegmentResult, arr: np.ndarray, t: SegmentTask, starts: np.ndarray, sizes: np.ndarray,
                   columns: ScanColumns | None) -> None:
    """Count the records at ``starts`` (in order, after those counted so far) and check their
    queues; ``columns``: their fields as the scan read them, if it did."""
    if not len(starts):
        return
    res.messages += len(starts)
    res.message_bytes += int(sizes.sum())
    fields = fields_from_scan(arr, starts, sizes, columns) if columns is not None else \
        record_fields(arr, starts.astype(np.int64), sizes.astype(np.int64))
    for i, detail in prop_crc_mismatches(arr, fields):
        res.problems.append(Problem(t.seg.base_offset + int(starts[i]), "propCrc", detail))
    qc = check_queues(arr, t.seg.base_offset, starts, sizes, t.units, fields)
    res.problems.extend(qc.problems)
    res.units_checked += qc.units_checked
    join_spans(res.queues, qc.spans, res.problems)


def find_record_start(buf: Any, near: int, end: int, chain: int = 8, window: int = 1 << 16) -> int | None:
    """A position at or after ``near`` (within ``window`` bytes) where a chain of ``chain``
    records starts: each has a message magic code and a TOTALSIZE that lands on the next one's.
    A guess where to start a piece of a segment without walking to it; the piece before it
    confirms it (its scan must pause exactly there) or the guess is dropped."""
    mv = memoryview(buf).cast("B")
    arr = np.frombuffer(mv, dtype=np.uint8)
    hi = min(near + window, end - MIN_RECORD_LENGTH)
    if hi <= near:
        return None
    region = arr[near + 4:hi + 8]
    cand = np.flatnonzero(region == _MAGIC_FIRST_BYTE)
    for c in cand.tolist():
        p = near + c
        for _ in range(chain):
            if p + 8 > end:
                break
            total, magic = TOTAL_AND_MAGIC.unpack_from(mv, p)
            if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2) or total < MIN_RECORD_LENGTH \
                    or p + total > end:
                break
            p += total
        else:
            return near + c
    return None


def plan_pieces(tasks: list[SegmentTask], piece_bytes: int, jobs: int = 1) -> list[Piece]:
    """Every segment as pieces of at most about ``piece_bytes`` (one piece when it is smaller),
    a multiple of ``jobs`` of them so that no process is left alone with the last one."""
    pieces: list[Piece] = []
    for i, t in enumerate(tasks):
        cuts = [0]
        n = jobs * -(-t.end // (piece_bytes * jobs)) if piece_bytes > 0 and t.end > piece_bytes else 1
        if n > 1:
            with mapped(t.seg) as mv:
                for k in range(1, n):
                    guess = find_record_start(mv, k * t.end // n, t.end)
                    if guess is not None and guess > cuts[-1]:
                        cuts.append(guess)
        pieces += [Piece(i, a, b) for a, b in zip(cuts, cuts[1:] + [None])]
    return pieces


def check_piece(args: tuple[SegmentTask, Piece]) -> SegmentResult:
    t, p = args
    try:
        return verify_segment(t, p.start, p.until)
    except FileNotFoundError:
        res = SegmentResult(data_end=t.seg.base_offset, broken=True)
        res.problems.append(Problem(t.seg.base_offset, "missingSegment",
                                    f"segment {t.seg.name} vanished while reading"))
        return res


def join_pieces(tasks: list[SegmentTask], pieces: list[Piece], results: Iterable[SegmentResult]
                ) -> Iterator[SegmentResult]:
    """One result per task, in order, from its pieces' results: a piece counts only if the
    piece before paused exactly at its start; else the rest is checked again from there."""
    current: SegmentResult | None = None
    current_task = -1
    for p, res in zip(pieces, results):
        if p.task != current_task:
            if current is not None:
                yield current
            current, current_task = res, p.task
            continue
        assert current is not None
        if current.paused_at is None:
            continue                    # the segment's data ended in an earlier piece
        if current.paused_at != p.start:
            res = check_piece((tasks[p.task], Piece(p.task, current.paused_at, None)))
        append_result(current, res)
    if current is not None:
        yield current


def append_result(into: SegmentResult, later: SegmentResult) -> None:
    """``into`` goes on with the result of the records that follow it in the same segment."""
    into.messages += later.messages
    into.message_bytes += later.message_bytes
    into.blanks += later.blanks
    into.units_checked += later.units_checked
    into.problems.extend(later.problems)
    join_spans(into.queues, later.queues, into.problems)
    into.data_end, into.broken, into.paused_at = later.data_end, later.broken, later.paused_at
