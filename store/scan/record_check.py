"""Record checks over segment bytes: RocketMQ's checkMessageAndReturnSize (FORMAT §11) plus our
own rule that PHYSICALOFFSET equals the record's real position. check_record checks one record and
says why it fails; the scan used by recovery and ``commitlog verify`` and the checks of records at
known positions (first_bad) are the C pass's (_record_check.c), which says only where."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from store.format.codec import CodecConfig, parse_prop_crc
from store.format.constants import (
    BLANK_MAGIC_CODE,
    CRC32_RESERVED_LEN,
    END_FILE_MIN_BLANK_LENGTH,
    MIN_RECORD_LENGTH,
    POS_BODYCRC,
    POS_PHYSICALOFFSET,
    PROPERTY_CRC32,
)
from store.format.crc import crc32
from store.format.layout import (
    FAULT_BODY,
    FAULT_HOSTS,
    TOTAL_AND_MAGIC,
    message_version,
    record_spans,
)
from store.format.properties import java_string, string_to_properties
from store.scan import _record_check
from store.scan.fields import ScanColumns

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_MASK = 0x7FFFFFFF
_SCAN_CHUNK_BYTES = 4 << 20    # bytes walked and checked by one call of the C scan


@dataclass(slots=True)
class RecordCheck:
    """Verdict on the bytes at one position. kind: "message" | "blank" (end-of-segment filler,
    size = its TOTALSIZE) | "end" (zeroed space: the normal end of the newest segment) | "error"
    | "pause" (a scan with ``until`` stopped at this record start, not checked yet)."""

    kind: str
    offset: int
    size: int
    error_kind: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.kind != "error"


def _as_bytes_view(buf: Any) -> memoryview:
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")


def _error(offset: int, kind: str, detail: str, size: int = 0) -> RecordCheck:
    return RecordCheck("error", offset, size, kind, detail)


def check_record(buf: Any, pos: int, end: int, base_offset: int, config: CodecConfig | None = None) -> RecordCheck:
    """Check the record at ``pos`` of one segment's bytes (``end`` = limit of valid bytes,
    ``base_offset`` = the segment's start offset), in checkMessageAndReturnSize's order."""
    config = config or CodecConfig()
    mv = _as_bytes_view(buf)
    offset = base_offset + pos
    remaining = end - pos
    if remaining <= 0:
        return RecordCheck("end", offset, 0)
    if remaining < 8:
        if not any(mv[pos:end]):
            return RecordCheck("end", offset, 0)
        return _error(offset, "truncated", f"{remaining} bytes left, too few for a record header")
    total, magic = TOTAL_AND_MAGIC.unpack_from(mv, pos)
    if total == 0 and magic == 0:
        return RecordCheck("end", offset, 0)
    if magic == BLANK_MAGIC_CODE:
        if total < END_FILE_MIN_BLANK_LENGTH or total > remaining:
            return _error(offset, "size", f"BLANK TOTALSIZE {total} outside 8..{remaining} (bytes left)")
        return RecordCheck("blank", offset, total)
    version = message_version(magic)
    if not version:
        return _error(offset, "magic", f"MAGICCODE 0x{magic:08X} is neither a message nor a BLANK magic code")
    if total < MIN_RECORD_LENGTH:
        return _error(offset, "size", f"TOTALSIZE {total} is below the smallest record ({MIN_RECORD_LENGTH})")
    if total > remaining:
        return _error(offset, "truncated", f"TOTALSIZE {total} but only {remaining} bytes left")
    s = record_spans(mv, pos, total, version)
    if s.fault in (FAULT_HOSTS, FAULT_BODY):
        return _error(offset, "size", s.detail, total)
    # checkMessageAndReturnSize's order: the body's CRC is checked before the topic is read
    if config.check_crc_on_recover and not config.force_verify_prop_crc and s.body_length > 0:
        stored = _I32.unpack_from(mv, pos + POS_BODYCRC)[0]
        computed = crc32(mv[pos + s.body_pos:pos + s.body_pos + s.body_length]) & _MASK
        if stored != computed:
            return _error(offset, "crc", f"BODYCRC {stored} != crc32(body) {computed}", total)
    if s.fault is not None:
        return _error(offset, "size", s.detail, total)
    if config.check_crc_on_recover and config.force_verify_prop_crc:
        props = string_to_properties(java_string(mv[pos + s.properties_pos:pos + s.properties_end])) \
            if s.properties_length > 0 else {}
        expected = parse_prop_crc(props.get(PROPERTY_CRC32))
        if expected <= 0:
            return _error(offset, "propCrc", f"no {PROPERTY_CRC32} property to verify (forceVerifyPropCRC)", total)
        computed = crc32(mv[pos:pos + total - CRC32_RESERVED_LEN]) & _MASK
        if computed != expected:
            return _error(offset, "propCrc", f"{PROPERTY_CRC32} {expected} != crc32(record) {computed}", total)
    if s.computed_length != total:
        return _error(offset, "size", f"TOTALSIZE {total} != {s.computed_length} computed from the field lengths",
                      total)
    physical = _I64.unpack_from(mv, pos + POS_PHYSICALOFFSET)[0]
    if physical != offset:
        return _error(offset, "physicalOffset", f"PHYSICALOFFSET {physical} != position {offset}", total)
    return RecordCheck("message", offset, total)


@dataclass
class SegmentScan:
    """Result of scanning one segment: the valid messages (global offsets and TOTALSIZEs, in
    order) and the check that ended the scan (blank, end or the first error)."""

    offsets: np.ndarray
    sizes: np.ndarray
    stop: RecordCheck
    columns: ScanColumns | None = None      # with columns=True: fields of every valid message

    @property
    def end_offset(self) -> int:
        """Global offset just past the last valid message (where recovery truncates)."""
        return int(self.offsets[-1] + self.sizes[-1]) if len(self.offsets) else self.stop.offset


def first_bad(arr: np.ndarray, mv: memoryview, starts: np.ndarray, sizes: np.ndarray, base_offset: int,
              config: CodecConfig, placed: bool = True) -> tuple[int, ScanColumns]:
    """The checks of records at known positions (consume-queue units, records not yet appended):
    the index of the first record failing checkMessageAndReturnSize or our PHYSICALOFFSET rule, or
    len(starts), and the fields of the records before it. The C check (_record_check.check), then
    under forceVerifyPropCRC the whole-record CRC of each record it passed. ``placed=False``:
    records not yet appended (no PHYSICALOFFSET to check)."""
    n = len(starts)
    out = np.empty((_CHECK_COLUMNS, n), dtype=np.int64)
    body_crc = config.check_crc_on_recover and not config.force_verify_prop_crc
    first = _record_check.check(arr, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(sizes, np.int64),
                                base_offset, placed, body_crc, out)
    if config.check_crc_on_recover and config.force_verify_prop_crc:
        first = _first_prop_crc_failure(mv, starts[:first], sizes[:first], first)
    queue_id, queue_offset, sys_flag, topic_pos, topic_len, props_len = out[:, :first]
    return first, ScanColumns(queue_id, queue_offset, sys_flag, topic_pos, topic_len, props_len)


_CHECK_COLUMNS = 6      # the rows of _record_check.check's output


def _first_prop_crc_failure(mv: memoryview, starts: np.ndarray, sizes: np.ndarray, default: int) -> int:
    config = CodecConfig(force_verify_prop_crc=True)
    for i, (s, n) in enumerate(zip(starts.tolist(), sizes.tolist())):
        if check_record(mv, s, s + n, 0, config).error_kind == "propCrc":
            return i
    return default


def scan_segment_fast(buf: Any, base_offset: int, end: int | None = None, config: CodecConfig | None = None,
                      start: int = 0, until: int | None = None, columns: bool = False) -> SegmentScan:
    """Check every record of one segment from ``start`` up to ``end``; stops at the first BLANK,
    zeroed space or failure. The hot path of recovery and verify: the walk and every check of a
    record in one C pass (_record_check.scan).

    With ``until``, the scan also pauses at the first record start at or past it (a stop of
    kind "pause" there), so a segment can be checked in pieces (verify's parallel pieces).
    With ``columns``, the fields read on the way come back too (SegmentScan.columns)."""
    config = config or CodecConfig()
    mv = _as_bytes_view(buf)
    end = len(mv) if end is None else end
    scan = _scan_c(np.frombuffer(mv, dtype=np.uint8), mv, base_offset, end, config, start, until, columns)
    if config.check_crc_on_recover and config.force_verify_prop_crc:       # the C pass reads no __CRC32#
        starts = scan.offsets - base_offset
        first = _first_prop_crc_failure(mv, starts, scan.sizes, len(starts))
        if first < len(starts):
            return SegmentScan(scan.offsets[:first], scan.sizes[:first],
                               _stopped(check_record(mv, int(starts[first]), end, base_offset, config)),
                               scan.columns.head(first) if scan.columns is not None else None)
    return scan


def _where_it_ended(mv: memoryview, next_pos: int, end: int, base_offset: int, config: CodecConfig, more: bool,
                    until: int | None) -> RecordCheck | None:
    """After a chunk walked up to ``next_pos``: the check of the record there when the walk could
    not go on, a pause when a piece's ``until`` is reached, else None (the scan goes on)."""
    if not more:
        return _stopped(check_record(mv, next_pos, end, base_offset, config))
    if until is not None and next_pos >= until:
        return RecordCheck("pause", base_offset + next_pos, 0)
    return None


def _stopped(stop: RecordCheck) -> RecordCheck:
    if stop.kind == "message":     # cannot happen: a scan stops only where a check fails
        raise AssertionError(f"scan stopped on a valid record at {stop.offset}")
    return stop


def _scan_c(arr: np.ndarray, mv: memoryview, base_offset: int, end: int, config: CodecConfig, start: int,
            until: int | None, columns: bool) -> SegmentScan:
    """The walk and every check of a record but the whole-record CRC in one C pass
    (_record_check.scan), which also reads the PROPERTIES for verify's tagsCode."""
    parts: list[np.ndarray] = []
    topics = np.zeros(1 + 2 * _MOST_TOPICS, dtype=np.int64)      # see topic_id in _record_check.c
    pos = start
    while True:
        stop_at = pos + _SCAN_CHUNK_BYTES if until is None else min(pos + _SCAN_CHUNK_BYTES, until - 1)
        cap = max(min(end - MIN_RECORD_LENGTH, stop_at) - pos, 0) // MIN_RECORD_LENGTH + 1
        out = np.empty((_SCAN_COLUMNS, cap), dtype=np.int64)
        count, next_pos, more, bad = _record_check.scan(
            arr, pos, end, stop_at, base_offset, config.check_crc_on_recover and not config.force_verify_prop_crc,
            columns, out, topics)
        if count:
            parts.append(out[:, :count])
        ended = _where_it_ended(mv, next_pos, end, base_offset, config, more and not bad, until)
        if ended is not None:
            stop = ended
            break
        pos = next_pos
    got = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0] if parts else \
        np.zeros((_SCAN_COLUMNS, 0), dtype=np.int64)
    starts, queue_id, queue_offset, sys_flag, topic_pos, topic_len, props_len, tags_code, marks, topic_id = got
    sizes = np.diff(starts, append=next_pos)       # the records lie back to back up to where it stopped
    cols = None
    if columns:
        cols = ScanColumns(queue_id, queue_offset, sys_flag, topic_pos, topic_len, props_len, tags_code, marks)
        if not (topic_id < 0).any():       # else more topics than the table holds: the caller groups them
            pairs = topics[1:1 + 2 * int(topics[0])].reshape(-1, 2).tolist()
            cols.topic_id, cols.topics = topic_id, [java_string(bytes(mv[p:p + n])) for p, n in pairs]
    return SegmentScan(starts + base_offset, sizes.astype(np.int32), stop, cols)


_SCAN_COLUMNS = 10      # the rows of _record_check.scan's output
_MOST_TOPICS = 64       # distinct topics the C scan numbers in one call


def scan_segment(buf: Any, base_offset: int, end: int | None = None, config: CodecConfig | None = None,
                 start: int = 0) -> Iterator[RecordCheck]:
    """Every valid message of the segment as a RecordCheck, then the check that ended it."""
    result = scan_segment_fast(buf, base_offset, end, config, start)
    for off, size in zip(result.offsets.tolist(), result.sizes.tolist()):
        yield RecordCheck("message", off, size)
    yield result.stop

