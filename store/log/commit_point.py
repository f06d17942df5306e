"""``<root>/commitpoint.json``: the store's exactly-once boundary.

Everything below ``offset`` is committed; recovery never keeps a byte after it. The file is
replaced in one atomic step (write tmp, fsync, rename, fsync dir), so it is always either the
old or the new commit point, never a mix.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from store.errors import CommitPointError
from store.log.commitlog import queue_eligible
from store.log.segment import write_atomically

COMMIT_POINT_FILE = "commitpoint.json"
# Every release so far (CHANGELOG.md) writes version 1. A later version may give a field another
# meaning, so a file of any other version is refused, never read as this one.
_FORMAT_VERSION = 1


@dataclass
class CommitPoint:
    offset: int
    queue_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    timestamp: int = 0          # ms since epoch when it was written
    # Where the last committed record starts (-1: none): lets a normal recovery check the
    # committed tail without scanning a segment.
    last_record_offset: int = -1


def commit_point_path(root: Path) -> Path:
    return Path(root) / COMMIT_POINT_FILE


def _damaged(path: Path, e: Exception) -> CommitPointError:
    return CommitPointError(
        f"{path} cannot be read ({e}); it is replaced atomically by the store, so something "
        f"else damaged it: restore it from a backup, or move it away to treat the store as a "
        f"RocketMQ store whose whole valid prefix is committed")


def read_commit_point(root: Path) -> CommitPoint | None:
    """The store's commit point, or None when it has none; CommitPointError when the file is
    damaged or of a version this release does not read."""
    path = commit_point_path(root)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(raw)
        version = doc.get("version", _FORMAT_VERSION)
    except (ValueError, AttributeError) as e:
        raise _damaged(path, e) from e
    if type(version) is not int or version != _FORMAT_VERSION:
        raise CommitPointError(
            f"{path} has version {version!r}, and this release reads version {_FORMAT_VERSION} only: "
            f"the store was written by another release of commitlog-ingest; open it with that one")
    try:
        return CommitPoint(
            offset=int(doc["offset"]),
            queue_offsets={(q["topic"], int(q["queue_id"])): int(q["next"])
                           for q in doc.get("queue_offsets", [])},
            metadata=dict(doc.get("metadata") or {}),
            timestamp=int(doc.get("timestamp", 0)),
            last_record_offset=int(doc.get("last_record_offset", -1)),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise _damaged(path, e) from e


def write_commit_point(root: Path, cp: CommitPoint) -> None:
    root = Path(root)
    path = commit_point_path(root)
    doc = {
        "version": _FORMAT_VERSION,
        "offset": cp.offset,
        "timestamp": cp.timestamp,
        "last_record_offset": cp.last_record_offset,
        "queue_offsets": [{"topic": t, "queue_id": q, "next": n}
                          for (t, q), n in sorted(cp.queue_offsets.items())],
        "metadata": cp.metadata,
    }
    write_atomically(path, json.dumps(doc, sort_keys=False, separators=(",", ":")).encode())


def commit_failure(root: Path, step: str, cp: CommitPoint, last: int) -> str:
    """What is true after writing ``cp`` failed at ``step`` ("before", "writing": a directory fsync
    fails after the rename, "written": the checkpoint after it); ``last``: the point before it."""
    if step == "written":
        return f"the commit point {cp.offset} of {root} is written and durable, but writing its checkpoint failed"
    if step == "writing":
        try:
            on_disk = read_commit_point(root)
        except (CommitPointError, OSError):
            on_disk = None
        if on_disk is not None and on_disk.offset == cp.offset and on_disk.timestamp == cp.timestamp:
            return (f"the commit point {cp.offset} of {root} was written but may not be durable "
                    f"(after a power cut it may read {last} again)")
    return f"writing the commit point {cp.offset} of {root} failed, the last commit point stays {last}"


class _Reads(Protocol):
    def read(self, physical_offset: int) -> Any: ...
    def iter_messages(self, from_offset: int | None = None, to_offset: int | None = None) -> Iterator[tuple[int, Any]]: ...


def queue_offsets_before(reads: _Reads, last_commit: CommitPoint, offset: int, end: int,
                         queue_offsets: Mapping[tuple[str, int], int]) -> tuple[dict[tuple[str, int], int], int]:
    """(next queue offsets, last record offset) as they were at an earlier record boundary
    ``offset`` between ``last_commit`` and the write ``end``: the records in [offset, end) undone."""
    if not last_commit.offset <= offset <= end:
        raise ValueError(f"commit offset {offset} must lie between the last commit point "
                         f"{last_commit.offset} and the write end {end}")
    qo = dict(queue_offsets)
    if offset < end:
        reads.read(offset)  # NotARecordStartError unless a record starts there
    last = -1
    for phys, m in reads.iter_messages(last_commit.offset, end):
        if phys < offset:
            last = phys
            continue
        if queue_eligible(np.array([m.sys_flag]))[0]:
            qo[(m.topic, m.queue_id)] = min(qo[(m.topic, m.queue_id)], m.queue_offset)
    return qo, (last if last >= 0 else last_commit.last_record_offset)
