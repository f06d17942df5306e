"""The index/ directory, as RocketMQ's IndexService keeps it: IndexFiles in creation order, keys put
into the newest until it is full, then into a new one; lookups newest file first.

Which keys a message gives (store.index.keys) is decided before it reaches here: this module only
places (keyHash, phyOffset, storeTimestamp) items and finds them again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from store.format.constants import DEFAULT_MAX_HASH_SLOT_NUM, DEFAULT_MAX_INDEX_NUM
from store.index.build import RECORD_LEFT, decoded_keys
from store.index.file import CREATING_SUFFIX, IndexFile, IndexHeader, index_file_names
from store.index.hashing import index_key_hashes

log = logging.getLogger(__name__)
NAME_DIGITS = 17                 # yyyyMMddHHmmssSSS
GATE_KEYS = 16_384               # keys put per hold of the writeback gate: well under a millisecond


@dataclass(frozen=True)
class IndexConfig:
    """RocketMQ's messageIndexEnable, maxHashSlotNum and maxIndexNum."""

    enabled: bool = True
    max_hash_slot_num: int = DEFAULT_MAX_HASH_SLOT_NUM
    max_index_num: int = DEFAULT_MAX_INDEX_NUM

    def __post_init__(self) -> None:
        if self.max_hash_slot_num <= 0:
            raise ValueError(f"maxHashSlotNum {self.max_hash_slot_num}: must be positive")
        if self.max_index_num < 2:
            raise ValueError(f"maxIndexNum {self.max_index_num}: must be at least 2 (item 0 is never used)")


@dataclass(frozen=True)
class KeyBatch:
    """The keys of a run of messages, in commit-log order: one entry per key (a message with two
    keys has two entries with its offset and timestamp)."""

    topics: Sequence[str]
    keys: Sequence[str]
    phy_offsets: np.ndarray
    store_timestamps: np.ndarray

    def __len__(self) -> int:
        return len(self.keys)


def file_name(millis: int) -> str:
    """IndexService names a file by its creation time, local time, to the millisecond."""
    t = time.localtime(millis / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{millis % 1000:03d}"


class IndexService:
    """The IndexFiles of one store's index/ directory. A writer's puts hold ``gate`` (the store's
    writeback gate), GATE_KEYS keys at a time: the commit log's flush takes it while it hands pages
    to the disk (store.log.segment.Segment.flush), and the puts wait through that."""

    def __init__(self, directory: Path, config: IndexConfig, *, read_only: bool = False,
                 gate: AbstractContextManager[Any] | None = None, warm_first: bool = False) -> None:
        self.directory = Path(directory)
        self.gate = gate if gate is not None else nullcontext()
        self.warm_first = warm_first    # fault the items of the directory's first file in when it is made
        self.config = config
        self.read_only = read_only
        self.files: list[IndexFile] = []
        self._dirty: set[int] = set()        # positions in files written since the last flush
        self.index_msg_timestamp = 0         # the end timestamp of the newest full, flushed file
        if self.directory.is_dir():
            if not read_only:
                for left in self.directory.glob("*" + CREATING_SUFFIX):
                    log.info("index file %s: left half-created by a writer that stopped; removed", left.name)
                    left.unlink(missing_ok=True)
            for name in index_file_names(self.directory):
                self.files.append(IndexFile(self.directory / name, config.max_hash_slot_num, config.max_index_num,
                                            read_only=read_only))

    # --- writing -----------------------------------------------------------------------------
    @property
    def end_phy_offset(self) -> int:
        """The offset of the last message indexed (0 when nothing is); messages below it are not
        indexed again."""
        return self.files[-1].header.end_phy_offset if self.files else 0

    def put(self, batch: KeyBatch) -> None:
        """Index ``batch``'s keys in order, rolling to a new file whenever one is full."""
        n = len(batch)
        if n == 0:
            return
        self.put_hashes(index_key_hashes(batch.topics, batch.keys), batch.phy_offsets, batch.store_timestamps)

    def put_hashes(self, hashes: np.ndarray, phy_offsets: np.ndarray, store_timestamps: np.ndarray) -> None:
        """Index keys already hashed (store.index.hashing), in order."""
        n = len(hashes)
        phy = np.asarray(phy_offsets, dtype=np.int64)
        ts = np.asarray(store_timestamps, dtype=np.int64)
        done = 0
        while done < n:
            if not self.files or self.files[-1].is_full:
                self._new_file()
            last = self.files[-1]
            take = min(last.room, n - done, GATE_KEYS)
            with self.gate:
                last.put(hashes[done:done + take], phy[done:done + take], ts[done:done + take])
            self._dirty.add(len(self.files) - 1)
            done += take

    def put_shipped(self, key_hashes: np.ndarray, key_counts: np.ndarray, phy_offsets: np.ndarray,
                    store_timestamp: int) -> int:
        """Index keys found and hashed where their records were encoded (store.index.shipped):
        record i's ``key_counts[i]`` keys, in order in ``key_hashes``, at ``phy_offsets[i]``, all of
        one append's ``store_timestamp``; the same puts as put_records of those records. Returns
        how many keys were put."""
        counts = np.asarray(key_counts, dtype=np.int64)
        if len(counts) != len(phy_offsets) or int(counts.sum()) != len(key_hashes) or \
                (len(counts) and int(counts.min()) < 0):
            raise ValueError(f"shipped index keys do not match their records: {len(key_hashes)} keys, counts for "
                             f"{len(counts)} records adding up to {int(counts.sum())}, {len(phy_offsets)} offsets")
        if len(counts) and (not self.files or self.files[-1].is_full):
            self._new_file()        # as put_records: a batch of records has a file, keys or none
            self._dirty.add(len(self.files) - 1)
        hashes = np.ascontiguousarray(key_hashes, dtype=np.int32)
        counts32 = np.ascontiguousarray(counts, dtype=np.int32)
        phy = np.ascontiguousarray(phy_offsets, dtype=np.int64)
        at = (0, 0, 0)
        while at[2] < len(hashes):
            if self.files[-1].is_full:
                self._new_file()
            with self.gate:
                at = self.files[-1].put_shipped(hashes, counts32, phy, store_timestamp, at, GATE_KEYS)
            self._dirty.add(len(self.files) - 1)
        return len(hashes)

    def put_records(self, buf: np.ndarray, starts: np.ndarray, base: int) -> int:
        """Index the records at ``starts`` of ``buf`` (``base``: the offset of buf[0]), in order, as
        buildIndex does: keys found, hashed and put in one C pass, rolling to a new file whenever one
        is full. Returns how many keys were put."""
        starts = np.ascontiguousarray(starts, dtype=np.int64)
        put, first, skip = 0, 0, 0
        while first < len(starts):
            if not self.files or self.files[-1].is_full:
                self._new_file()
            last = self.files[-1]
            before = last.header.index_count
            with self.gate:
                status, first, skip = last.put_records(buf, starts, first, skip, base)
            self._dirty.add(len(self.files) - 1)
            put += last.header.index_count - before
            if status == RECORD_LEFT:
                hashes, ts = decoded_keys(buf, int(starts[first]))
                self.put_hashes(hashes, np.full(len(hashes), base + int(starts[first])), np.full(len(hashes), ts))
                put += len(hashes)
                first, skip = first + 1, 0
        return put

    def _new_file(self) -> IndexFile:
        self.directory.mkdir(parents=True, exist_ok=True)
        name = file_name(int(time.time() * 1000))
        last = self.files[-1].path.name if self.files else ""
        if len(last) == NAME_DIGITS and name <= last:
            # two files in one millisecond (or a clock set back): one past the last keeps the order
            name = str(int(last) + 1)
        while (self.directory / name).exists():
            name = str(int(name) + 1)
        prev = self.files[-1].header if self.files else None
        # a new file starts where the last one ended (RocketMQ passes its end offset and timestamp)
        start = IndexHeader(prev.end_timestamp, prev.end_timestamp, prev.end_phy_offset, prev.end_phy_offset) \
            if prev is not None else IndexHeader()
        f = IndexFile(self.directory / name, self.config.max_hash_slot_num, self.config.max_index_num, create=True,
                      start=start)
        if self.warm_first and not self.files:
            f.warm_items()
        self.files.append(f)
        return f

    def flush(self) -> None:
        """msync every file written since the last flush; a full one moves indexMsgTimestamp."""
        for i in sorted(self._dirty):
            f = self.files[i]
            f.flush()
            if f.is_full:
                self.index_msg_timestamp = max(self.index_msg_timestamp, f.header.end_timestamp)
        self._dirty.clear()

    # --- recovery and retention --------------------------------------------------------------
    def trim_to(self, committed_end: int, timestamp_of: Callable[[int], int],
                matches: Callable[[int, int], bool] | None = None) -> None:
        """After a crash: drop the items of records at or past ``committed_end``, which the commit
        point does not cover. What it covers is durable: the index is flushed before every commit.
        A file ends at its last counted item: a writer killed inside a batch has counted items the
        header's endPhyOffset does not show yet. With ``matches`` (IndexFile.trusted_items), so do
        counted items a power cut left zeroed or torn."""
        while self.files:
            last = self.files[-1]
            n = last.header.index_count
            if last.covered_end < committed_end and (matches is None or n <= 1
                                                      or last.trusted_items(committed_end, matches) == n - 1):
                break
            if n > 1 and last.truncate_before(committed_end, timestamp_of, matches):
                log.info("index file %s: items past the commit point (%d) dropped", last.path.name, committed_end)
                last.flush()
                break
            self.files.pop().destroy()

    def delete_below(self, min_offset: int) -> list[Path]:
        """Retention: delete the files whose every item is below ``min_offset`` (never the newest)."""
        gone = []
        while len(self.files) > 1 and self.files[0].header.end_phy_offset < min_offset:
            f = self.files.pop(0)
            gone.append(f.path)
            f.destroy()
        self._dirty = {i - len(gone) for i in self._dirty if i >= len(gone)}
        return gone

    # --- reading -----------------------------------------------------------------------------
    def query(self, topic: str, key: str, max_num: int, begin_ms: int = 0, end_ms: int = 2**63 - 1) -> list[int]:
        """Physical offsets for ``topic``/``key`` in index chain order (newest file first, then each
        chain newest first), at most ``max_num``: RocketMQ's IndexService.queryOffset. The key text
        is not compared: a key whose hash collides with an indexed one finds that one's message."""
        key_hash = int(index_key_hashes([topic], [key])[0])
        out: list[int] = []
        for f in reversed(self.files):
            if len(out) >= max_num:
                break
            h = f.read_header() if self.read_only else f.header
            if _time_matched(h, begin_ms, end_ms):
                out += f.query(key_hash, begin_ms, end_ms, max_num - len(out))
            if h.begin_timestamp < begin_ms:
                break
        return out

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []


def _time_matched(h: IndexHeader, begin: int, end: int) -> bool:
    """IndexFile.isTimeMatched."""
    return (begin < h.begin_timestamp and end > h.end_timestamp) \
        or h.begin_timestamp <= begin <= h.end_timestamp or h.begin_timestamp <= end <= h.end_timestamp
