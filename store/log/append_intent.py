"""``<root>/append.intent``: which records past the commit point are this writer's own.

A store is served in turns: our writer, then a RocketMQ broker (which appends a producer's messages
and its own revive and timer messages), then our writer again. Past the commit point an open finds
either an unfinished batch of ours (to cut: the job writes it again) or another writer's appends (to
keep: cutting them loses data), or both. The records cannot tell: a broker's look like ours.

So, before the first byte of an append reaches a segment, the writer makes durable what it is about
to own: the records past the commit point whose STORETIMESTAMP lies in [``first_ts``, ``last_ts``], the
range of this writer's appends since its open (every record of one append carries the append's
timestamp, and timestamps never go back within a writer). The range is not cut at each commit: an
append may race a commit (the commit point written after the append announced itself), and records
past a commit point are ours whichever commit they followed. Another writer appends only after ours
has let go of the store, so its records carry later timestamps; and a clean close with nothing
uncommitted clears the announcement, so after it nothing past the commit point is ours, whatever the
clocks did. One fdatasync per append whose timestamp is new, none for appends within the same
millisecond.

Two fixed slots, written in turn, each with a sequence number and a CRC: a write torn by a crash
leaves the other slot, which covers everything appended before that write began (no byte of the
append it announced was written before it was durable).
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from store.format.constants import APPEND_INTENT_FILE
from store.log.segment import fsync_dir

_SLOT = struct.Struct(">IQqqq")          # magic, seq, from_offset, first_ts, last_ts; then a CRC32
_CRC = struct.Struct(">I")
_SLOT_SIZE = 64
_MAGIC = 0x434C4149                       # "CLAI"


@dataclass(frozen=True)
class AppendIntent:
    """The records past the commit point stored at ``first_ts``..``last_ts`` (ms) are the writer's.
    ``from_offset``: the commit point when the range began (-1: cleared, nothing is the writer's)."""

    from_offset: int
    first_ts: int
    last_ts: int
    seq: int = 0

    @property
    def active(self) -> bool:
        return self.from_offset >= 0

    def owns(self, store_timestamp: int) -> bool:
        return self.active and self.first_ts <= store_timestamp <= self.last_ts

    @classmethod
    def before_intents(cls, commit_offset: int) -> AppendIntent:
        """What a store our writer committed before the intent file existed (v0.3.0 and earlier,
        CHANGELOG.md) and left by a crash says past its commit point: every record there is ours, as
        those releases' recovery cut it all. Without this an unfinished batch they left would be adopted as another
        writer's, and the job would store its Kafka records a second time."""
        return cls(commit_offset, 0, 2**63 - 1)


def _decode(raw: bytes) -> AppendIntent | None:
    if len(raw) < _SLOT.size + _CRC.size:
        return None
    body = raw[:_SLOT.size]
    if _CRC.unpack_from(raw, _SLOT.size)[0] != zlib.crc32(body):
        return None
    magic, seq, from_offset, first_ts, last_ts = _SLOT.unpack(body)
    if magic != _MAGIC:
        return None
    return AppendIntent(from_offset, first_ts, last_ts, seq)


def read_append_intent(root: Path) -> AppendIntent | None:
    """The newest whole slot of ``root``'s intent file (None: no file, or no slot survives)."""
    try:
        raw = (Path(root) / APPEND_INTENT_FILE).read_bytes()
    except FileNotFoundError:
        return None
    slots = [_decode(raw[i:i + _SLOT_SIZE]) for i in (0, _SLOT_SIZE)]
    found = [s for s in slots if s is not None]
    return max(found, key=lambda s: s.seq) if found else None


class AppendIntentLog:
    """The writer's side: announce appends, durably, before they are written."""

    def __init__(self, root: Path) -> None:
        path = Path(root) / APPEND_INTENT_FILE
        self.current = read_append_intent(root)
        existed = path.exists()
        self.existed = existed      # False: a new store, or one written before the file existed
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if not existed:
            os.ftruncate(self._fd, 2 * _SLOT_SIZE)
            os.fsync(self._fd)
            fsync_dir(path.parent)

    def _write(self, intent: AppendIntent) -> None:
        body = _SLOT.pack(_MAGIC, intent.seq, intent.from_offset, intent.first_ts, intent.last_ts)
        slot = (body + _CRC.pack(zlib.crc32(body))).ljust(_SLOT_SIZE, b"\0")
        os.pwrite(self._fd, slot, (intent.seq % 2) * _SLOT_SIZE)
        os.fdatasync(self._fd)
        self.current = intent

    def cover(self, commit_offset: int, store_timestamp: int) -> None:
        """Before appending records stored at ``store_timestamp`` (``commit_offset``: the commit point now)."""
        cur = self.current
        if cur is not None and cur.owns(store_timestamp):
            return
        seq = cur.seq + 1 if cur is not None else 1
        if cur is not None and cur.active:
            self._write(AppendIntent(cur.from_offset, min(cur.first_ts, store_timestamp),
                                     max(cur.last_ts, store_timestamp), seq))
        else:
            self._write(AppendIntent(commit_offset, store_timestamp, store_timestamp, seq))

    def clear(self) -> None:
        """Nothing past the commit point is the writer's (recovery cut or adopted the tail; a clean
        close left nothing uncommitted)."""
        cur = self.current
        if cur is not None and cur.active:
            self._write(AppendIntent(-1, 0, -1, cur.seq + 1))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
