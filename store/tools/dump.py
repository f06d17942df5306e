"""``commitlog dump``: every record of a store, commit-log directory or segment file, in order.

The walk follows RocketMQ's reading rules (FORMAT §11) and reports like the golden decoder
(``*.decoded.jsonl``): a CRC or PHYSICALOFFSET error is reported and the record still shown,
decoding goes on; a broken record structure ends its segment, the next segment is read.
A store with a commit point is read on past it through the valid records another writer (or an
unfinished batch) left there (store.read.past_commit); each of those is marked ("pastCommitPoint").
"""

from __future__ import annotations

import json
import sys
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from store.errors import CorruptRecordError
from store.format.codec import CodecConfig, DecodedMessage, decode_message
from store.format.constants import BLANK_MAGIC_CODE, FILE_NAME_DIGITS
from store.scan.record_check import check_record, scan_segment_fast
from store.read.past_commit import PastCommit, past_commit
from store.read.view import LayoutProblem, SegmentFile, StoreView, mapped
from store.tools.progress import Progress

_CONTINUE_AFTER = ("crc", "propCrc", "physicalOffset")


@dataclass
class Finding:
    """One thing found while walking: a message (with its decoded form), a blank, an end, an error."""

    type: str                           # "message" | "blank" | "end" | "eof" | "error"
    offset: int
    segment: SegmentFile
    pos: int
    size: int = 0
    decoded: DecodedMessage | None = None
    record: memoryview | None = None
    kind: str = ""                      # error kind
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class WalkSummary:
    files: list[str] = field(default_factory=list)
    file_bytes: int = 0
    messages: int = 0
    message_bytes: int = 0
    blanks: int = 0
    blank_bytes: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    stops_at: int | None = None
    last_offset: int = 0
    past_commit: PastCommit | None = None     # set by walk(): the records past the commit point

    def to_json(self) -> dict[str, Any]:
        return {"type": "summary", "files": self.files, "fileBytes": self.file_bytes,
                "messages": self.messages, "messageBytes": self.message_bytes, "blanks": self.blanks,
                "blankBytes": self.blank_bytes,
                "crcErrors": sum(e["kind"] in ("crc", "propCrc") for e in self.errors),
                "magicErrors": sum(e["kind"] == "magic" for e in self.errors),
                "errors": self.errors,
                "rocketmqRecoveryStopsAt": self.stops_at if self.stops_at is not None else self.last_offset,
                **({"pastCommitPoint": self.past_commit.to_json()} if self._past_commit_held() else {})}

    def _past_commit_held(self) -> bool:
        return self.past_commit is not None and self.past_commit.messages > 0


def _start_pos(mv: memoryview, seg: SegmentFile, from_offset: int, end: int, config: CodecConfig) -> int | None:
    """Where to begin inside the segment for ``--from``: that offset if a record starts there,
    else the first record after it (found by walking the segment)."""
    pos = from_offset - seg.base_offset
    rc = check_record(mv, pos, end, seg.base_offset, config)
    if rc.kind in ("message", "blank") or rc.error_kind in _CONTINUE_AFTER:
        return pos
    scan = scan_segment_fast(mv, seg.base_offset, end, config)
    later = np.flatnonzero(scan.offsets >= from_offset)
    if len(later):
        return int(scan.offsets[later[0]]) - seg.base_offset
    return scan.stop.offset - seg.base_offset if scan.stop.offset >= from_offset else None


def walk(src: StoreView, from_offset: int | None = None, config: CodecConfig | None = None,
         summary: WalkSummary | None = None, progress: Progress | None = None) -> Iterator[Finding]:
    """Every finding of ``src`` in commit-log order, up to its committed offset and on through
    the valid records past it (their findings marked ``pastCommitPoint``)."""
    config = config or CodecConfig()
    summary = summary if summary is not None else WalkSummary()
    tail = summary.past_commit = past_commit(src, config)
    done = 0
    # holes between and in the files come out where they are, as errors: never skipped in silence
    holes = [p for p in src.layout_problems() if from_offset is None or p.offset >= from_offset]
    for seg in src.segments:
        while holes and holes[0].offset <= seg.base_offset:
            yield _hole(holes.pop(0), seg, summary)
        if from_offset is not None and seg.end_offset <= from_offset:
            continue
        summary.files.append(seg.name)
        summary.file_bytes += seg.size
        end = tail.segment_end(seg) if tail is not None else src.segment_end(seg)
        try:
            with mapped(seg) as mv:
                pos: int | None = 0
                if from_offset is not None and from_offset > seg.base_offset:
                    pos = _start_pos(mv, seg, from_offset, end, config)
                if pos is not None:
                    for f in _walk_segment(mv, seg, pos, end, config, summary):
                        if tail is not None and (tail.holds(f.offset) or f.type == "end" and f.offset > tail.start):
                            f.extra["pastCommitPoint"] = True
                            if f.type == "end":
                                f.extra.pop("committed", None)
                                f.extra["stop"] = tail.stop_reason()
                        yield f
        except FileNotFoundError:
            err = {"type": "error", "offset": seg.base_offset, "kind": "missingSegment",
                   "detail": f"segment {seg.name} was deleted while reading (retention?)"}
            summary.errors.append(err)
            yield Finding("error", seg.base_offset, seg, 0, kind=err["kind"], detail=err["detail"])
        done += seg.size
        if progress is not None:
            progress.update(done)
        if end < seg.size:
            holes = [h for h in holes if h.offset < seg.base_offset + end]
            break   # the valid data ends inside this segment: the commit point, or the records past it
    for hole in holes:
        yield _hole(hole, src.segments[-1], summary)


def _hole(p: LayoutProblem, seg: SegmentFile, summary: WalkSummary) -> Finding:
    summary.errors.append({"type": "error", "offset": p.offset, "kind": p.kind, "detail": p.detail})
    if summary.stops_at is None:
        summary.stops_at = p.offset        # RocketMQ will not load a store with a hole in its files
    return Finding("error", p.offset, seg, 0, kind=p.kind, detail=p.detail)


def _walk_segment(mv: memoryview, seg: SegmentFile, pos: int, end: int, config: CodecConfig,
                  summary: WalkSummary) -> Iterator[Finding]:
    arr = np.frombuffer(mv, dtype=np.uint8) if len(mv) else np.zeros(0, np.uint8)
    base = seg.base_offset

    def error(off: int, kind: str, detail: str, at: int) -> Finding:
        if kind != "physicalOffset" and summary.stops_at is None:
            summary.stops_at = off
        summary.errors.append({"type": "error", "offset": off, "kind": kind, "detail": detail})
        return Finding("error", off, seg, at, kind=kind, detail=detail)

    report = CodecConfig(max_message_size=config.max_message_size, force_verify_prop_crc=config.force_verify_prop_crc,
                         check_crc_on_recover=True)
    while True:
        offset = base + pos
        summary.last_offset = offset
        if pos >= end:
            if end < seg.size:
                if summary.stops_at is None:
                    summary.stops_at = offset
                yield Finding("end", offset, seg, pos, extra={"bytesLeft": seg.size - pos, "committed": True})
            else:
                yield Finding("eof", offset, seg, pos)
            return
        remaining = end - pos
        header = (int.from_bytes(mv[pos:pos + 4], "big", signed=True), int.from_bytes(mv[pos + 4:pos + 8], "big")) \
            if remaining >= 8 else None
        if header is None or header == (0, 0):
            if header is None and arr[pos:end].any():
                yield error(offset, "truncated", f"{remaining} bytes left, too few for a record header", pos)
                return
            if summary.stops_at is None:
                summary.stops_at = offset
            yield Finding("end", offset, seg, pos, extra={"bytesLeft": seg.size - pos,
                                                          "restIsZero": not arr[pos:].any()})
            return
        total, magic = header
        if magic == BLANK_MAGIC_CODE:
            summary.blanks += 1
            summary.blank_bytes += total
            yield Finding("blank", offset, seg, pos, size=total,
                          extra={"reachesSegmentEnd": pos + total == seg.size,
                                 "restIsZero": not arr[pos + 8:].any()})
            return
        verdict = check_record(mv, pos, end, base, report)
        if verdict.kind == "error" and verdict.error_kind not in _CONTINUE_AFTER:
            yield error(offset, verdict.error_kind or "unknown", verdict.detail, pos)
            return
        try:
            decoded = decode_message(mv[:end], pos)
        except CorruptRecordError as exc:
            yield error(offset, exc.kind, exc.detail, pos)
            return
        if verdict.error_kind in ("crc", "propCrc"):
            yield error(offset, verdict.error_kind, verdict.detail, pos)
        if seg.check_physical_offset and decoded.physical_offset != offset:
            yield error(offset, "physicalOffset", f"PHYSICALOFFSET {decoded.physical_offset} != position {offset}", pos)
        summary.messages += 1
        summary.message_bytes += decoded.total_size
        yield Finding("message", offset, seg, pos, size=decoded.total_size, decoded=decoded,
                      record=mv[pos:pos + decoded.total_size])
        pos += total


def decode_segment_files(paths: Iterable[str | os.PathLike[str]], config: CodecConfig | None = None,
                         check_physical_offset: bool | None = None) -> Iterator[dict[str, Any]]:
    """The golden ``*.decoded.jsonl`` objects of segment files read in order, by the same walk as
    ``commitlog dump --json``: one finding per message, blank, end, eof or error, then the summary.
    Files named by a 20-digit offset start there; other files (loose ``.bin`` records) follow each
    other from 0, and their PHYSICALOFFSET is only checked if asked."""
    config = config or CodecConfig()
    summary = WalkSummary()
    base = 0
    for path in map(Path, paths):
        stem = path.name.split(".", 1)[0]
        named = int(stem) if len(stem) == FILE_NAME_DIGITS and stem.isdigit() else None
        size = path.stat().st_size
        seg = SegmentFile(path, named if named is not None else base, size,
                          named is not None if check_physical_offset is None else check_physical_offset)
        base = seg.end_offset
        summary.files.append(seg.name)
        summary.file_bytes += size
        with mapped(seg) as mv:
            for f in _walk_segment(mv, seg, 0, size, config, summary):
                yield finding_to_json(f, config)
    yield summary.to_json()


def finding_to_json(f: Finding, config: CodecConfig | None = None) -> dict[str, Any]:
    """The golden decoded.jsonl object of a finding."""
    if f.type == "message":
        from store.format.record_json import message_to_json

        out = message_to_json(f.decoded, f.offset, f.segment.name, f.pos, f.record, config)
        if f.extra.get("pastCommitPoint"):
            out["pastCommitPoint"] = True
        return out
    if f.type == "error":
        return {"type": "error", "offset": f.offset, "kind": f.kind, "detail": f.detail}
    if f.type == "blank":
        return {"type": "blank", "offset": f.offset, "segment": f.segment.name, "segmentPos": f.pos,
                "totalSize": f.size, "magicCode": f"0x{BLANK_MAGIC_CODE:08X}", **f.extra}
    if f.type == "end":
        return {"type": "end", "offset": f.offset, "segment": f.segment.name, "segmentPos": f.pos, **f.extra}
    return {"type": f.type, "offset": f.offset, "segment": f.segment.name}


def finding_to_text(f: Finding) -> str:
    past = " PAST-COMMIT-POINT" if f.extra.get("pastCommitPoint") else ""
    if f.type == "message":
        m = f.decoded
        tags = m.tags if m.tags is not None else "-"
        keys = m.keys if m.keys is not None else "-"
        return (f"{f.offset:>20} MESSAGE{past} size={m.total_size} topic={m.topic} queueId={m.queue_id} "
                f"queueOffset={m.queue_offset} sysFlag=0x{m.sys_flag & 0xFFFFFFFF:x} "
                f"storeTimestamp={m.store_timestamp} tags={tags} keys={keys} body={len(m.body)}B msgId={m.msg_id}")
    if f.type == "blank":
        return f"{f.offset:>20} BLANK{past} size={f.size} segment={f.segment.name}"
    if f.type == "error":
        return f"{f.offset:>20} ERROR {f.kind}: {f.detail}"
    if f.type == "end":
        why = "commit point" if f.extra.get("committed") else \
            f"records past the commit point end: {f.extra['stop']}" if "stop" in f.extra else "zeroed space"
        return f"{f.offset:>20} END ({why}) segment={f.segment.name} bytesLeft={f.extra.get('bytesLeft', 0)}"
    return f"{f.offset:>20} EOF segment={f.segment.name}"


def run_dump(src: StoreView, out: TextIO = sys.stdout, *, from_offset: int | None = None, topic: str | None = None,
             queue_id: int | None = None, limit: int | None = None, as_json: bool = False,
             config: CodecConfig | None = None) -> int:
    summary = WalkSummary()
    filtered = topic is not None or queue_id is not None
    shown = 0
    held: dict[str, set[int]] = {}        # topic -> queue ids met on the way
    with Progress(src.total_bytes, "dump") as progress:
        for f in walk(src, from_offset, config, summary, progress):
            if f.type == "message":
                if filtered:
                    held.setdefault(f.decoded.topic, set()).add(f.decoded.queue_id)
                if (topic is not None and f.decoded.topic != topic) or \
                        (queue_id is not None and f.decoded.queue_id != queue_id):
                    continue
                if limit is not None and shown >= limit:
                    break
                shown += 1
            elif filtered and f.type != "error":
                continue
            out.write((json.dumps(finding_to_json(f, config), ensure_ascii=False, separators=(",", ":"))
                       if as_json else finding_to_text(f)) + "\n")
    if limit is None:
        s = summary.to_json()
        out.write((json.dumps(s, ensure_ascii=False, separators=(",", ":")) if as_json else
                   f"# {s['messages']} messages, {s['blanks']} blanks, {len(s['errors'])} errors, "
                   f"valid data ends at {s['rocketmqRecoveryStopsAt']}"
                   + (f"\n# {summary.past_commit.summary()}" if "pastCommitPoint" in s else "")) + "\n")
    if summary.errors:
        kinds = sorted({e["kind"] for e in summary.errors})
        print(f"commitlog dump: {len(summary.errors)} error(s) ({', '.join(kinds)}), the first at offset "
              f"{summary.errors[0]['offset']}: not everything in {src.path} could be read (see the ERROR lines)",
              file=sys.stderr)
        return 1
    if filtered and shown == 0 and limit != 0:
        where = f" from offset {from_offset}" if from_offset is not None else ""
        if topic is not None and topic not in held:
            names = ", ".join(sorted(held)[:20]) or "none"
            print(f"commitlog dump: {src.path} holds no message of topic {topic!r}{where} (topics: {names})",
                  file=sys.stderr)
            return 1
        if queue_id is not None:
            queues = sorted(held.get(topic, set())) if topic is not None else sorted(set().union(*held.values()))
            print(f"commitlog dump: {src.path} holds no message of queue {queue_id}"
                  f"{f' of topic {topic!r}' if topic is not None else ''}{where} (queues: "
                  f"{', '.join(map(str, queues)) or 'none'})", file=sys.stderr)
            return 1
    return 0
