"""Recovery on open (RocketMQ's CommitLog.recoverNormally / recoverAbnormally, plus our rules).

* The commit point (commitpoint.json) is the exactly-once boundary: no byte of ours after it
  survives an open. Dropped bytes are zeroed in their segment and later segments deleted, so a
  later scan (ours, or a RocketMQ broker's) cannot mistake stale records for live ones.
* Records past it that are not ours (store.log.tail, store.log.append_intent: a RocketMQ broker
  served the store and appended to it) are never dropped: they are adopted (the commit point moves
  past them; our Kafka progress stays as committed, since none of them came from our source), or,
  when they follow an unfinished batch of ours, the open is refused (ForeignTailError): cutting the
  batch would lose them, keeping it would store its records twice.
* Normal recovery (clean close, no ``abort`` file) trusts the commit point and checks the tail:
  the last committed record, whatever follows the commit point in its segment, and, as RocketMQ's
  recoverNormally does, every committed record of the last three segments with its CRC (a damaged
  one is reported and kept, as below). Its cost does not grow with the store.
* Abnormal recovery (``abort`` present) re-validates every record from the segment the
  checkpoint points at (magic, CRC, computed length, PHYSICALOFFSET == position). Below the
  commit point a crash tears nothing (it was durable first), so what fails there is damage:
  a record whose framing holds but whose CRC fails is reported and kept, and recovery goes on
  past it; broken framing cannot be walked past: CommittedDataCorruptError, unless the caller
  asked to truncate there.
* A store with data but no commit point is a RocketMQ store: its valid prefix is committed.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from store.errors import CommittedDataCorruptError, ForeignTailError
from store.format.codec import CodecConfig
from store.format.constants import POS_SYSFLAG
from store.format.layout import store_timestamp_pos
from store.scan.record_check import RecordCheck, check_record, scan_segment, scan_segment_fast
from store.log.append_intent import AppendIntent
from store.log.checkpoint import StoreCheckpoint
from store.log.commit_point import CommitPoint
from store.log.commitlog import CommitLog
from store.log.segment import Segment
from store.log.segment_queue import SegmentQueue, zero_range
from store.log.tail import Tail, read_tail

log = logging.getLogger(__name__)

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
# RocketMQ's recoverNormally looks at the last 3 segments of a store it cannot otherwise trust.
_NORMAL_RECOVERY_SEGMENTS = 3


@dataclass
class RecoveryResult:
    end_offset: int                         # the write end after recovery (== commit point)
    dispatch_from: int                      # consume queues may miss units from here on
    commit_point_valid: bool                # False: rebuild queue offsets, write a new point
    last_record_offset: int = -1
    dropped_bytes: int = 0
    dropped_segments: list[Path] = field(default_factory=list)
    corruption: CommittedDataCorruptError | None = None
    mode: str = "normal"
    damaged: list[int] = field(default_factory=list)   # committed records kept with a CRC failure
    adopted: Tail | None = None             # another writer's records past the commit point, kept


class _Corrupt(Exception):
    def __init__(self, check: RecordCheck, seg: Segment) -> None:
        self.check, self.seg = check, seg


def _walk(seg: Segment, pos: int, codec: CodecConfig, end: int | None = None
          ) -> Iterator[RecordCheck]:
    """Record checks of ``seg`` from ``pos`` (to ``end``, default the segment end): every
    valid message, then the check that ended the walk (blank, end or error)."""
    return scan_segment(seg.view, seg.base_offset, seg.size if end is None else end, codec,
                        start=pos)


def _segment_first_timestamp(seg: Segment, codec: CodecConfig) -> int | None:
    chk = check_record(seg.view, 0, seg.size, seg.base_offset, codec)
    if chk.kind != "message":
        return None
    sys_flag = _I32.unpack_from(seg.view, POS_SYSFLAG)[0]
    return _I64.unpack_from(seg.view, store_timestamp_pos(sys_flag))[0]


def _checkpoint_start(log_: CommitLog, checkpoint: StoreCheckpoint | None, codec: CodecConfig) -> int:
    """RocketMQ's isMappedFileMatchedRecover: from the newest segment back, the first whose
    first record is no newer than the checkpoint's min timestamp."""
    segs = log_.queue.segments if isinstance(log_, CommitLog) else log_.segments
    if checkpoint is None or checkpoint.min_timestamp <= 0:
        return segs[0].base_offset
    for seg in reversed(segs):
        ts = _segment_first_timestamp(seg, codec)
        if ts is not None and ts <= checkpoint.min_timestamp:
            return seg.base_offset
    return segs[0].base_offset


def _corruption(chk: RecordCheck, seg: Segment, commit_offset: int) -> CommittedDataCorruptError:
    kind = chk.error_kind or chk.kind
    detail = (f"{chk.detail or kind}; the record is below the commit point {commit_offset}, so "
              f"committed data is damaged. Restore the segment from a backup, or open with "
              f"truncate_on_corruption=True to keep only the data before offset {chk.offset}")
    return CommittedDataCorruptError(chk.offset, kind, detail, segment=seg.path.name)


def recover(log_: CommitLog, commit_point: CommitPoint | None, checkpoint: StoreCheckpoint | None,
            *, abnormal: bool, truncate_on_corruption: bool, codec: CodecConfig,
            intent: AppendIntent | None = None, foreign_tail: str = "adopt") -> RecoveryResult:
    """Bring the loaded commit log to its recovered end and return what happened. ``intent``: the
    records past the commit point that are ours; ``foreign_tail``: one of store.config's
    FOREIGN_TAIL_POLICIES."""
    segs = log_.queue.segments
    if not segs:
        end = commit_point.offset if commit_point else 0
        if end:
            err = CommittedDataCorruptError(end, "missing", f"commit point is {end} but the "
                                            f"commit log has no segment", segment=None)
            if not truncate_on_corruption:
                raise err
            log.error("%s; truncating to an empty store as asked", err)
        log_.set_end(end)
        return RecoveryResult(end, end, commit_point is not None and not end,
                              mode="empty")

    if commit_point is None:
        return _recover_rocketmq(log_, checkpoint, abnormal=abnormal, codec=codec)

    c = commit_point.offset
    damaged = _committed_tail_damage(log_, c, codec) \
        if not abnormal and _tail_ok(log_, commit_point, codec) and _heads_ok(log_, c, codec) else None
    if damaged is not None:
        result = _settle_tail(log_, c, codec, intent, foreign_tail, scan_tail=True)
        result.dispatch_from = c
        if result.adopted is None:
            result.last_record_offset = commit_point.last_record_offset
        result.damaged = damaged
        return result
    if not abnormal:
        log.warning("clean-close recovery: the committed tail at %d does not check out; "
                    "re-validating as after a crash", c)
    return _recover_abnormally(log_, commit_point, checkpoint, truncate_on_corruption, codec, intent, foreign_tail)


def _settle_tail(log_: CommitLog, c: int, codec: CodecConfig, intent: AppendIntent | None, policy: str,
                 *, scan_tail: bool) -> RecoveryResult:
    """Past the commit point ``c``: cut our unfinished batch, keep another writer's records."""
    tail = read_tail(log_.queue, c, intent, codec)
    if not tail.foreign_records:
        return _truncate_after(log_, c, codec, scan_tail=scan_tail)
    root = log_.queue.directory.parent
    if policy == "refuse":
        raise ForeignTailError(
            f"store {root}: past its commit point {c} another writer (a RocketMQ broker that served it) "
            f"appended {tail.describe()}; nothing was changed: open with --foreign-tail adopt (the default) "
            f"to keep them and go on after them")
    if tail.ours_records and policy != "keep-all":
        raise ForeignTailError(
            f"store {root}: past its commit point {c} an unfinished batch of ours ({tail.ours_records} records, "
            f"{tail.ours_bytes} bytes) is followed by what another writer appended, {tail.describe()}; "
            f"cutting the batch would lose those, keeping it stores its records twice (the job writes the batch "
            f"again); nothing was changed: open with --foreign-tail keep-all to keep everything (the "
            f"{tail.ours_records} records are then stored a second time)")
    result = _truncate_after(log_, tail.end, codec, scan_tail=False, what="invalid data after the adopted records")
    log.warning("recovery: adopted what another writer appended past the commit point %d: %s%s; the commit point "
                "moves to %d, queue offsets go on after them", c, tail.describe(),
                f" (and {tail.ours_records} records of an unfinished batch of ours, kept as asked)"
                if tail.ours_records else "", tail.end)
    result.adopted = tail
    result.last_record_offset = tail.last_record_offset
    return result


def _tail_ok(log_: CommitLog, cp: CommitPoint, codec: CodecConfig) -> bool:
    """The commit point lies inside the segments and the last committed record (if known)
    is valid and ends exactly there (or at its segment's BLANK)."""
    c = cp.offset
    q = log_.queue
    if c < q.first_base or c > q.segments[-1].end_offset:
        return False
    if cp.last_record_offset < 0:
        return c == q.first_base or q.find(c) is not None
    seg = q.find(cp.last_record_offset)
    if seg is None:
        return False
    chk = check_record(seg.view, cp.last_record_offset - seg.base_offset, seg.size,
                       seg.base_offset, codec)
    if chk.kind != "message":
        return False
    end = chk.offset + chk.size
    return end == c or (c == seg.end_offset)


def _heads_ok(log_: CommitLog, commit: int, codec: CodecConfig) -> bool:
    """Every committed segment starts with a whole record: one page read per segment, so a clean
    open stays cheap at any size, yet damage to a segment's framing is met now, not after the next
    crash. (Content damage is the CRCs' business: `commitlog verify`.)"""
    frame = CodecConfig(max_message_size=codec.max_message_size, check_crc_on_recover=False)
    for seg in log_.queue.segments:
        if seg.base_offset >= commit:
            break
        chk = check_record(seg.view, 0, seg.size, seg.base_offset, frame)
        if chk.kind != "message":
            log.warning("clean-close recovery: segment %s does not start with a whole record (%s at %d); "
                        "re-validating as after a crash", seg.path.name, chk.error_kind or chk.kind, chk.offset)
            return False
    return True


def _committed_tail_damage(log_: CommitLog, commit: int, codec: CodecConfig) -> list[int] | None:
    """The committed records of the last _NORMAL_RECOVERY_SEGMENTS segments, validated with their
    CRCs: the offsets of those whose content is damaged (reported, kept), or None when the records
    cannot be walked to the commit point (then recovery re-validates as after a crash)."""
    q = log_.queue
    start = max(q.segments[max(len(q.segments) - _NORMAL_RECOVERY_SEGMENTS, 0)].base_offset, q.first_base)
    if start >= commit:
        return []
    damaged: list[RecordCheck] = []
    reached, _, bad = validate_from(q, start, commit, codec, damaged)
    if bad is not None or reached != commit:
        where = bad.check.offset if bad is not None else reached
        log.warning("clean-close recovery: the committed records do not reach the commit point %d (stopped at %d); "
                    "re-validating as after a crash", commit, where)
        return None
    _report_damaged(damaged)
    return [chk.offset for chk in damaged]


def _report_damaged(damaged: list[RecordCheck]) -> None:
    for chk in damaged:
        log.error("recovery: committed record at offset %d is damaged (%s: %s); its framing holds, so it is "
                  "kept and recovery goes on past it; `commitlog verify` lists it", chk.offset, chk.error_kind,
                  chk.detail)


def _truncate_after(log_: CommitLog, end: int, codec: CodecConfig, *, scan_tail: bool,
                    what: str = "uncommitted data") -> RecoveryResult:
    """Drop everything from ``end`` on: zero the rest of its segment where not zero already,
    delete later segments, make ``end`` the write end."""
    q = log_.queue
    seg = q.find(end)
    dropped = 0
    if seg is not None:
        pos = end - seg.base_offset
        if scan_tail:
            # After a clean close the bytes after the last valid record are zero: the tail to
            # wipe ends where the records after the commit point end.
            stop = pos
            for chk in _walk(seg, pos, codec):
                if chk.kind == "message":
                    stop = chk.offset - seg.base_offset + chk.size
                elif chk.kind == "blank":
                    stop = seg.size
            zero_to = stop
        else:
            zero_to = seg.size
        dropped = zero_range(seg.fileno, pos, zero_to)
        if dropped:
            seg.fsync()
    later = [s for s in q.segments if s.base_offset > end]
    dropped_segments = q.delete_after(end)
    dropped_segments += q.delete_segment_files_after(end)
    if seg is None and (not q.segments or q.segments[-1].end_offset == end):
        q.next_segment() if q.segments else q.create_first(end)
    log_.set_end(end)
    if dropped or later:
        log.warning("recovery: dropped %s after offset %d: %d bytes truncated in its segment (offsets %d..%d), "
                    "%d later segment(s) deleted (%s)", what, end, dropped, end, end + dropped,
                    len(later), ", ".join(p.name for p in dropped_segments) or "-")
    return RecoveryResult(end, end, True, dropped_bytes=dropped, dropped_segments=dropped_segments)


_CONTENT_DAMAGE = ("crc", "propCrc")


def framing_holds(seg: Segment, chk: RecordCheck, codec: CodecConfig) -> bool:
    """The record ``chk`` failed on is whole: magic, TOTALSIZE, the lengths inside it and
    PHYSICALOFFSET all check out; only what the CRCs cover (its content) is wrong."""
    if chk.error_kind not in _CONTENT_DAMAGE or chk.size <= 0:
        return False
    frame = CodecConfig(max_message_size=codec.max_message_size, check_crc_on_recover=False)
    again = check_record(seg.view, chk.offset - seg.base_offset, seg.size, seg.base_offset, frame)
    return again.kind == "message" and again.size == chk.size


def validate_from(q: SegmentQueue, start: int, stop: int, codec: CodecConfig,
                  damaged: list[RecordCheck] | None = None) -> tuple[int, int, _Corrupt | None]:
    """Validate records from ``start`` (a segment start or record start) up to ``stop``.
    Returns (end of the valid records reached, last record offset, failure or None). Stops at
    the first record reaching or passing ``stop``. With ``damaged``, a record whose framing holds
    but whose content fails its CRC is listed there and passed over (committed data a crash
    cannot have torn: it was durable before the commit point covering it was written)."""
    pos_global = start
    last_record = -1
    seg = q.find(start)
    while seg is not None and pos_global < stop:
        pos = pos_global - seg.base_offset
        seg_end = min(seg.size, stop - seg.base_offset)  # no need to look past ``stop``
        with seg.read_ahead(pos, seg_end):
            scan = scan_segment_fast(seg.view, seg.base_offset, seg_end, codec, start=pos)
        if len(scan.offsets):
            ends = scan.offsets + scan.sizes
            k = int(np.searchsorted(ends, stop))        # the first record reaching ``stop``
            if k < len(ends):
                return int(ends[k]), int(scan.offsets[k]), None
            last_record, pos_global = int(scan.offsets[-1]), int(ends[-1])
        chk = scan.stop
        if chk.kind == "blank":
            pos_global = seg.end_offset
        elif chk.kind == "end" and chk.offset >= stop:
            return pos_global, last_record, None
        elif damaged is not None and chk.offset + chk.size <= stop and framing_holds(seg, chk, codec):
            damaged.append(chk)
            last_record, pos_global = chk.offset, chk.offset + chk.size
            if pos_global >= stop:
                return pos_global, last_record, None
        else:
            return pos_global, last_record, _Corrupt(chk, seg)
        seg = q.find(pos_global)
    return pos_global, last_record, None


def _recover_abnormally(log_: CommitLog, cp: CommitPoint, checkpoint: StoreCheckpoint | None,
                        truncate_on_corruption: bool, codec: CodecConfig, intent: AppendIntent | None,
                        foreign_tail: str) -> RecoveryResult:
    c = cp.offset
    q = log_.queue
    if c > q.segments[-1].end_offset:
        seg = q.segments[-1]
        err = CommittedDataCorruptError(
            seg.end_offset, "missing", f"the commit point is {c} but the commit log ends at "
            f"{seg.end_offset}: committed segments are missing", segment=seg.path.name)
        if not truncate_on_corruption:
            raise err
        c_effective, corruption = None, err
    else:
        c_effective, corruption = c, None
    c_seg = q.find(min(c, q.segments[-1].end_offset - 1))
    start = min(_checkpoint_start(log_, checkpoint, codec), c_seg.base_offset if c_seg else c)
    start = max(start, q.first_base)
    damaged: list[RecordCheck] = []
    reached, last_record, bad = validate_from(log_.queue, start, c, codec, damaged)
    _report_damaged(damaged)
    if bad is not None or reached != c:
        if bad is not None:
            err = _corruption(bad.check, bad.seg, c)
        else:
            seg = q.find(min(reached, q.segments[-1].end_offset - 1)) or q.segments[-1]
            err = CommittedDataCorruptError(
                reached, "boundary", f"the commit point {c} is not the end of a record (the "
                f"records reach {reached}); committed data is damaged. Open with "
                f"truncate_on_corruption=True to keep only what precedes it",
                segment=seg.path.name)
        if not truncate_on_corruption:
            raise err
        corruption = err
        c_effective = err.offset if bad is not None else min(reached, c)
    if corruption is not None:
        end = c_effective if c_effective is not None else reached
        log.error("recovery: %s -- truncating the commit log at %d as asked "
                  "(truncate_on_corruption=True); everything after it is lost", corruption, end)
        result = _truncate_after(log_, end, codec, scan_tail=False,
                                 what="data after the corruption")
        result.commit_point_valid = False
        result.corruption = corruption
    else:
        result = _settle_tail(log_, c, codec, intent, foreign_tail, scan_tail=False)
    result.dispatch_from = start
    if result.adopted is None:
        result.last_record_offset = last_record if last_record >= 0 else cp.last_record_offset
    result.mode = "abnormal"
    result.damaged = [chk.offset for chk in damaged]
    return result


def _recover_rocketmq(log_: CommitLog, checkpoint: StoreCheckpoint | None, *, abnormal: bool,
                      codec: CodecConfig) -> RecoveryResult:
    """No commit point: a store written by RocketMQ (or by us before any commit existed).
    Its valid prefix is committed; the first invalid record ends it."""
    q = log_.queue
    if abnormal:
        start = _checkpoint_start(log_, checkpoint, codec)
    else:
        start = q.segments[max(len(q.segments) - _NORMAL_RECOVERY_SEGMENTS, 0)].base_offset
    end, last_record, bad = validate_from(log_.queue, start, q.segments[-1].end_offset, codec)
    if bad is not None:
        log.info("recovery of a store without commit point: valid data ends at %d (%s)",
                 end, bad.check.error_kind or bad.check.kind)
    result = _truncate_after(log_, end, codec, scan_tail=False,
                             what="invalid data (end of the valid prefix)")
    result.commit_point_valid = False
    result.dispatch_from = start
    result.last_record_offset = last_record
    result.mode = "rocketmq-" + ("abnormal" if abnormal else "normal")
    return result
