"""Reading records over a segment queue and consume queues, up to a limit: the read path
MessageStore holds over its own commit log (up to its write end) and StoreReader is (up to the
committed offset). A record is read at an offset, walked in a range, found by queue or by key."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from pathlib import Path

from store.errors import CorruptRecordError, IndexFileError, NotARecordStartError
from store.format.codec import DecodedMessage, body_crc, decode_message
from store.format.constants import (
    BLANK_MAGIC_CODE,
    MAX_MSGS_NUM_BATCH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    MIN_RECORD_LENGTH,
    POS_PHYSICALOFFSET,
)
from store.index.check import lookup_damage
from store.index.hashing import index_key_hashes
from store.index.lookup import FOREVER_MS, carries_key, carries_uniq_key, check_max_num
from store.index.service import IndexService
from store.log.segment_queue import SegmentQueue
from store.queue.consume_queue import ConsumeQueueStore
from store.format.layout import TOTAL_AND_MAGIC

# a walk checks the pages ahead of it can be read this much at a time (Segment.check_readable)
_PROBE_STEP = 4 << 20
_I64 = struct.Struct(">q")
_MESSAGE_MAGICS = (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2)


class RecordReads:
    """Read methods over a segment queue and a consume-queue store, bounded by
    :meth:`_read_limit` (the writer: its write end; a reader: the committed offset). A writer
    gives its limit, its index and the wait for its consume queues as functions; StoreReader
    overrides the methods."""

    def __init__(self, root: Path, segments: SegmentQueue, cq: ConsumeQueueStore | None, *,
                 check_crc: bool = False, read_limit: Callable[[], int] | None = None,
                 index_lookup: Callable[[], IndexService | None] | None = None,
                 settle_queues: Callable[[], None] | None = None) -> None:
        self.root = Path(root)
        self._segments = segments
        self._cq = cq
        # check each record's BODYCRC as it is read (a reader's default; a writer's own reads, recovery's
        # redispatch among them, take the records recovery kept)
        self._check_crc = check_crc
        self._limit_of = read_limit
        self._index_of = index_lookup
        self._settle_of = settle_queues

    def _read_limit(self) -> int:
        assert self._limit_of is not None, "a RecordReads needs read_limit or a _read_limit of its own"
        return self._limit_of()

    @property
    def min_offset(self) -> int:
        return self._segments.min_offset

    def read(self, physical_offset: int) -> DecodedMessage:
        """The message record starting at ``physical_offset``."""
        off = physical_offset
        limit = self._read_limit()
        seg = self._segments.find(off) if off < limit else None
        if seg is None:
            raise NotARecordStartError(
                f"offset {off} is outside the readable commit log [{self.min_offset}, {limit})")
        pos = off - seg.base_offset
        if pos + MIN_RECORD_LENGTH > seg.size:
            raise NotARecordStartError(f"offset {off} is not the start of a message record")
        seg.check_readable(pos, pos + MIN_RECORD_LENGTH)
        total, magic = TOTAL_AND_MAGIC.unpack_from(seg.view, pos)
        if (magic not in _MESSAGE_MAGICS or total < MIN_RECORD_LENGTH or pos + total > seg.size
                or off + total > limit
                or _I64.unpack_from(seg.view, pos + POS_PHYSICALOFFSET)[0] != off):
            raise NotARecordStartError(
                f"offset {off} is not the start of a message record (segment "
                f"{seg.path.name}, position {pos})")
        seg.check_readable(pos, pos + total)
        return self._checked(decode_message(seg.view, pos), off, seg.path.name)

    def _checked(self, msg: DecodedMessage, offset: int, segment: str) -> DecodedMessage:
        """``msg``, unless its body fails its CRC where the CRCs are checked (CorruptRecordError)."""
        if self._check_crc and msg.body_crc != body_crc(msg.body):
            raise CorruptRecordError(offset, "crc", f"BODYCRC {msg.body_crc} but the body's CRC is "
                                                    f"{body_crc(msg.body)}: its body is damaged", segment)
        return msg

    def _walk_bounds(self, from_offset: int | None, to_offset: int | None, limit: int) -> tuple[int, int]:
        """(first, stop) of a walk over [from_offset, to_offset) below ``limit``; the first offset
        must be a record start, a segment start or BLANK padding."""
        stop = limit if to_offset is None else min(to_offset, limit)
        pos = self.min_offset if from_offset is None else from_offset
        if pos < self.min_offset:
            raise NotARecordStartError(
                f"offset {pos} is below the commit log's first offset {self.min_offset}")
        if pos < stop and (pos - self._segments.first_base) % self._segments.segment_size \
                and not self._is_blank_at(pos):
            self.read(pos)  # raises unless a record starts there
        return pos, stop

    def iter_messages(self, from_offset: int | None = None, to_offset: int | None = None
                      ) -> Iterator[tuple[int, DecodedMessage]]:
        """(physical offset, message) of every record in [from_offset, to_offset), across
        segments; BLANK padding is skipped without being read. ``from_offset`` must be a record
        start or a segment start."""
        pos, stop = self._walk_bounds(from_offset, to_offset, self._read_limit())
        while pos < stop:
            seg = self._segments.find(pos)
            if seg is None:
                raise CorruptRecordError(pos, "missingSegment", f"no segment holds offset {pos}, below the readable "
                                                                f"end {stop}: a segment is missing")
            view, base = seg.view, seg.base_offset
            p = pos - base
            seg_stop = min(seg.size, stop - base)
            to_next_segment = False
            readable_to = p
            while p < seg_stop:
                if p + 8 > seg.size:
                    to_next_segment = True
                    break
                if p + MIN_RECORD_LENGTH > readable_to:
                    readable_to = min(seg.size, max(p + MIN_RECORD_LENGTH, min(seg_stop, p + _PROBE_STEP)))
                    seg.check_readable(p, readable_to)
                total, magic = TOTAL_AND_MAGIC.unpack_from(view, p)
                if magic == BLANK_MAGIC_CODE:
                    to_next_segment = True
                    break
                if magic not in _MESSAGE_MAGICS or total < MIN_RECORD_LENGTH:
                    # below the readable end there is no end of data: this is damage, said where
                    raise CorruptRecordError(base + p, "magic" if magic not in _MESSAGE_MAGICS else "size",
                                             f"no message record at offset {base + p} (MAGICCODE 0x{magic:08X}, "
                                             f"TOTALSIZE {total}), below the readable end {stop}",
                                             seg.path.name)
                if p + total > readable_to:
                    readable_to = min(seg.size, max(p + total, min(seg_stop, p + _PROBE_STEP)))
                    seg.check_readable(p, readable_to)
                yield base + p, self._checked(decode_message(view, p), base + p, seg.path.name)
                p += total
            pos = seg.end_offset if to_next_segment else base + p

    def _is_blank_at(self, offset: int) -> bool:
        """A BLANK record closing its segment starts at ``offset`` (a record boundary too)."""
        seg = self._segments.find(offset)
        if seg is None or offset - seg.base_offset + 8 > seg.size:
            return False
        seg.check_readable(offset - seg.base_offset, offset - seg.base_offset + 8)
        total, magic = TOTAL_AND_MAGIC.unpack_from(seg.view, offset - seg.base_offset)
        return magic == BLANK_MAGIC_CODE and offset + total == seg.end_offset

    def get_by_queue(self, topic: str, queue_id: int, queue_offset: int, max_n: int = 32
                     ) -> list[DecodedMessage]:
        """Up to ``max_n`` messages of a queue from ``queue_offset`` on (readable ones only)."""
        if self._cq is None:
            return []
        self.settle_queues()
        limit = self._read_limit()
        out = []
        for phys, _size, _tags in self._cq.find(topic, queue_id, queue_offset, max_n):
            if phys >= limit:
                break
            out.append(self.read(phys))
        return out

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int]:
        if self._cq is None:
            return (0, 0)
        self.settle_queues()
        return self._cq.queue_range(topic, queue_id)

    def topics(self) -> dict[str, list[int]]:
        if self._cq is None:
            return {}
        self.settle_queues()
        return self._cq.topics()

    # --- by key, through index/ (RocketMQ's queryMessage) ----------------------------------
    def _index_lookup(self) -> IndexService | None:
        return self._index_of() if self._index_of is not None else None

    def key_offsets(self, topic: str, key: str, max_num: int = MAX_MSGS_NUM_BATCH, begin_ms: int = 0,
                    end_ms: int = FOREVER_MS) -> list[int]:
        """The raw index lookup: offsets whose "topic#key" hash matches, in the index's chain order
        (newest first), collisions included, readable ones only."""
        index = self._index_lookup()
        if index is None:
            raise IndexFileError(f"{self.root} has no index/: build it with `commitlog reindex {self.root}`")
        if index.read_only:   # a reader's: the writer's own index is checked by verify, not per lookup
            fault = lookup_damage(index, int(index_key_hashes([topic], [key])[0]))
            if fault is not None:
                raise IndexFileError(f"index/ of {self.root} is damaged ({fault}): its answers cannot be trusted; "
                                     f"rebuild it with `commitlog reindex {self.root}`")
        limit = self._read_limit()
        return [o for o in index.query(topic, key, check_max_num(max_num), begin_ms, end_ms) if o < limit]

    def messages_by_key(self, topic: str, key: str, max_num: int = MAX_MSGS_NUM_BATCH, begin_ms: int = 0,
                        end_ms: int = FOREVER_MS, uniq: bool = False) -> list[tuple[int, DecodedMessage]]:
        """(offset, message) of the messages of ``topic`` with ``key`` among their KEYS (or, with
        ``uniq``, as their UNIQ_KEY), in offset order: mqadmin queryMsgByKey / queryMsgByUniqueKey."""
        keep = carries_uniq_key if uniq else carries_key
        out = []
        for off in sorted(set(self.key_offsets(topic, key, max_num, begin_ms, end_ms))):
            msg = self.read(off)
            if keep(msg.topic, msg.properties, topic, key):
                out.append((off, msg))
        return out

    def settle_queues(self) -> None:
        """Wait until the consume queues hold every appended record (a writer writes them
        behind its appends; reads by queue call this first)."""
        if self._settle_of is not None:
            self._settle_of()
