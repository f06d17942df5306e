"""One queue's compaction log, written as a RocketMQ 5 broker's CompactionLog.asyncPutMessage writes
it: each record's bytes appended to the log file with PHYSICALOFFSET set to its place there
(CompactionAppendMessageCallback), and its unit to the queue file of the same name. A record that
does not fit, or a queue file one unit from full, closes both files (the log with its blank length
and BLANK_MAGIC_CODE, the queue with putEndPositionInfo's unit) and the next pair starts one log
file further on.

The log is derived: the commit log and the consume queue hold every record it holds. So it is not
made durable batch by batch; opening it keeps the units below the consume queue's end whose records
are whole (a crash can tear the last file only: a file is synced before the next one is made), and
the store appends the rest again (store.compaction.service)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from store.errors import StoreError
from store.format.constants import BCQ_STORE_UNIT_SIZE, BLANK_MAGIC_CODE, POS_PHYSICALOFFSET, POS_QUEUEOFFSET
from store.format.layout import TOTAL_AND_MAGIC
from store.compaction.files import BCQ_UNIT_DTYPE, CompactionConfig, cq_dir, end_unit, log_dir, unit, valid_count
from store.log.segment import fsync_dir
from store.scan.record_check import check_record
from store.queue.units import file_name, list_unit_files

_I64 = struct.Struct(">q")
_ZEROS = bytes(1 << 20)


class CompactionLogError(StoreError):
    """A compaction log's files do not match each other."""


class CompactionLog:
    """The compaction log of ``topic``'s queue ``queue_id`` in the store at ``root``."""

    def __init__(self, root: Path, topic: str, queue_id: int, config: CompactionConfig) -> None:
        self.topic, self.queue_id = topic, queue_id
        self.log_dir, self.cq_dir = log_dir(root, topic, queue_id), cq_dir(root, topic, queue_id)
        self.log_file_size, self.cq_file_size = config.log_file_size, config.cq_file_size
        self._base: int | None = None        # the last file pair's name, as an offset
        self._log_fd = self._cq_fd = -1
        self._log_pos = self._cq_pos = 0
        self._dirty = False
        self.next_offset: int | None = None  # the queue offset after the last unit; None: no unit yet

    # --- opening --------------------------------------------------------------------------------
    def open(self, keep_below: int | None = None) -> None:
        """Load the files; keep only units below queue offset ``keep_below`` whose records are whole."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.cq_dir.mkdir(parents=True, exist_ok=True)
        logs, cqs = list_unit_files(self.log_dir), list_unit_files(self.cq_dir)
        if logs and cqs and logs[-1] != cqs[-1]:     # made one and not the other: the newer is empty
            self._remove_pair(max(logs[-1], cqs[-1]))
            logs, cqs = list_unit_files(self.log_dir), list_unit_files(self.cq_dir)
        if logs != cqs:
            raise CompactionLogError(f"{self.log_dir} has files {logs} but {self.cq_dir} has {cqs}: "
                                     f"every log file has its queue file of the same name")
        while logs:
            base = logs[-1]
            units = np.fromfile(self.cq_dir / file_name(base), dtype=BCQ_UNIT_DTYPE)
            nonzero = np.flatnonzero(units.view(np.uint8).reshape(len(units), BCQ_STORE_UNIT_SIZE).any(axis=1))
            written = int(nonzero[-1]) + 1 if nonzero.size else 0
            k = valid_count(units)
            if keep_below is not None:
                k = int(np.count_nonzero(units["base"][:k] < keep_below))
            k = self._whole(base, units[:k])
            if k == 0 and len(logs) > 1:
                self._remove_pair(base)
                logs.pop()
                continue
            self._open_pair(base)
            self._log_pos = int(units["phys"][k - 1]) - base + int(units["size"][k - 1]) if k else 0
            self._cq_pos = k * BCQ_STORE_UNIT_SIZE
            self.next_offset = int(units["base"][k - 1]) + int(units["batch"][k - 1]) if k else None
            self._zero(self._cq_fd, self._cq_pos, written * BCQ_STORE_UNIT_SIZE)
            self._zero(self._log_fd, self._log_pos, self._chain_end(self._log_pos))
            return

    def _whole(self, base: int, units: np.ndarray) -> int:
        """How many of the last file's units have their record whole in the log file."""
        path = self.log_dir / file_name(base)
        with open(path, "rb") as f:
            data = f.read()
        for i, u in enumerate(units):
            pos, size = int(u["phys"]) - base, int(u["size"])
            # the commit log's record check (its PHYSICALOFFSET is its place in this log), then the unit's
            checked = check_record(data, pos, pos + size, base) if 0 <= pos <= len(data) - size else None
            if checked is None or checked.kind != "message" or checked.size != size \
                    or _I64.unpack_from(data, pos + POS_QUEUEOFFSET)[0] != int(u["base"]):
                return i
        return len(units)

    def _chain_end(self, pos: int) -> int:
        """Where bytes written past ``pos`` without a unit end (records, or a file's end mark)."""
        end = pos
        while end + 8 <= self.log_file_size:
            total, magic = TOTAL_AND_MAGIC.unpack(os.pread(self._log_fd, 8, end))
            if total <= 0:
                break
            if magic == BLANK_MAGIC_CODE or end + total > self.log_file_size:
                return min(end + max(total, 8), self.log_file_size)
            end += total
        return end

    @staticmethod
    def _zero(fd: int, start: int, end: int) -> None:
        while start < end:
            n = min(end - start, len(_ZEROS))
            os.pwrite(fd, _ZEROS[:n], start)
            start += n

    def _remove_pair(self, base: int) -> None:
        for d in (self.log_dir, self.cq_dir):
            (d / file_name(base)).unlink(missing_ok=True)
            fsync_dir(d)

    def _open_pair(self, base: int) -> None:
        self._close_pair()
        made = False
        fds = []
        for d, size in ((self.log_dir, self.log_file_size), (self.cq_dir, self.cq_file_size)):
            path = d / file_name(base)
            made = made or not path.exists()
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)       # as mapping it does: the file at its full size, unwritten
            fds.append(fd)
        self._log_fd, self._cq_fd = fds
        self._base = base
        if made:
            fsync_dir(self.log_dir)
            fsync_dir(self.cq_dir)

    # --- appending ------------------------------------------------------------------------------
    def append(self, record: bytes | memoryview, queue_offset: int, tags_code: int, store_timestamp: int) -> bool:
        """Append one record (its bytes as the commit log holds them); False when the log already
        has its queue offset (CompactionLog's "fix duplicate")."""
        if self.next_offset is not None and queue_offset < self.next_offset:
            return False
        size = len(record)
        if size + 8 > self.log_file_size:
            raise CompactionLogError(f"a record of {size} bytes does not fit a compaction log file of "
                                     f"{self.log_file_size} bytes (compactionMappedFileSize)")
        if self._base is None:
            self._open_pair(0)
        elif (self._cq_pos + BCQ_STORE_UNIT_SIZE >= self.cq_file_size
              or size + 8 > self.log_file_size - self._log_pos):
            self._roll()
        assert self._base is not None
        phys = self._base + self._log_pos
        data = bytearray(record)
        _I64.pack_into(data, POS_PHYSICALOFFSET, phys)
        os.pwrite(self._log_fd, data, self._log_pos)
        os.pwrite(self._cq_fd, unit(phys, size, tags_code, store_timestamp, queue_offset), self._cq_pos)
        self._log_pos += size
        self._cq_pos += BCQ_STORE_UNIT_SIZE
        self.next_offset = queue_offset + 1
        self._dirty = True
        return True

    def _roll(self) -> None:
        assert self._base is not None
        blank = self.log_file_size - self._log_pos
        os.pwrite(self._log_fd, TOTAL_AND_MAGIC.pack(blank, BLANK_MAGIC_CODE), self._log_pos)
        if self._cq_pos + BCQ_STORE_UNIT_SIZE <= self.cq_file_size:
            os.pwrite(self._cq_fd, end_unit(), self._cq_pos)
        self._dirty = True
        self.flush()             # a full pair is durable before the next exists (open checks the last only)
        self._open_pair(self._base + self.log_file_size)
        self._log_pos = self._cq_pos = 0

    def flush(self) -> None:
        if self._dirty:
            os.fsync(self._log_fd)
            os.fsync(self._cq_fd)
            self._dirty = False

    def _close_pair(self) -> None:
        for fd in (self._log_fd, self._cq_fd):
            if fd >= 0:
                os.close(fd)
        self._log_fd = self._cq_fd = -1

    def close(self) -> None:
        if self._log_fd >= 0:
            self.flush()
        self._close_pair()
