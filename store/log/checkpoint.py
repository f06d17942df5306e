"""RocketMQ's StoreCheckpoint file (FORMAT §13): 4096 bytes, big-endian int64 fields; and the
checkpoint a writer keeps (CheckpointKeeper): its newest fields, written by one thread at a time."""

from __future__ import annotations

import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

from store.format.constants import CHECKPOINT_FILE_SIZE, CHECKPOINT_POS_PHYSIC_MSG_TIMESTAMP

_FIELDS = struct.Struct(">qqqqq")  # physic, logics, index timestamps, masterFlushed, confirmPhy


@dataclass
class StoreCheckpoint:
    physic_msg_timestamp: int = 0      # store timestamp of the last flushed commit-log record
    logics_msg_timestamp: int = 0      # same for the consume queues
    # the index files hold every key of the messages stored up to this time (IndexService.load keeps
    # the files that end at or before it after a crash, see CheckpointKeeper.cover_index)
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0     # flushed commit-log offset
    confirm_phy_offset: int = 0        # committed offset (our commit point)

    @property
    def min_timestamp(self) -> int:
        """RocketMQ's getMinTimestamp: where abnormal recovery may start looking."""
        ts = min(self.physic_msg_timestamp, self.logics_msg_timestamp)
        return max(ts - 3000, 0)  # RocketMQ backs off 3 s for clock skew between the two


def read_checkpoint(path: Path) -> StoreCheckpoint | None:
    """The checkpoint in ``path``, or None if there is none (or it is too short to hold one)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    if len(data) < CHECKPOINT_POS_PHYSIC_MSG_TIMESTAMP + _FIELDS.size:
        return None
    return StoreCheckpoint(*_FIELDS.unpack_from(data, CHECKPOINT_POS_PHYSIC_MSG_TIMESTAMP))


def checkpoint_damage(path: Path) -> str | None:
    """What is wrong with the checkpoint file in ``path``, if anything: one that exists but is not
    RocketMQ's 4096 bytes (cut short, say) has lost its fields, and is read as no checkpoint."""
    try:
        size = Path(path).stat().st_size
    except FileNotFoundError:
        return None
    if size == CHECKPOINT_FILE_SIZE:
        return None
    return f"the checkpoint {path} is {size} bytes, not {CHECKPOINT_FILE_SIZE} as RocketMQ's StoreCheckpoint"


def write_checkpoint(path: Path, cp: StoreCheckpoint, sync: bool = True) -> None:
    """Write the fields in place and fsync (unless ``sync`` is false: a killed process still leaves
    them in the page cache). The fields fit in one sector, and every reader tolerates an older
    checkpoint (it only picks where recovery starts), so no rename dance."""
    path = Path(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size != CHECKPOINT_FILE_SIZE:
            os.ftruncate(fd, CHECKPOINT_FILE_SIZE)
        os.pwrite(fd, _FIELDS.pack(cp.physic_msg_timestamp, cp.logics_msg_timestamp,
                                   cp.index_msg_timestamp, cp.master_flushed_offset,
                                   cp.confirm_phy_offset), CHECKPOINT_POS_PHYSIC_MSG_TIMESTAMP)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointKeeper:
    """A writer's checkpoint: the newest fields, each write holding them all (one at a time)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fields = StoreCheckpoint()
        self._lock = threading.Lock()

    def write(self, sync: bool = True) -> None:
        with self._lock:
            write_checkpoint(self.path, self.fields, sync)

    def cover_index(self, store_timestamp: int) -> None:
        """Before the index takes keys stored at ``store_timestamp``, indexMsgTimestamp covers them:
        a RocketMQ broker opening the store after a crash destroys every index file that ends past it
        (IndexService.load) and re-indexes only the segments it re-dispatches, losing the other keys.
        Our index is whole up to its last item at every moment a process can die (our own recovery
        trims what the commit point does not cover), so the broker may keep it all. Not synced: a
        killed process leaves the write in the page cache, and each commit syncs the checkpoint."""
        if store_timestamp > self.fields.index_msg_timestamp:
            self.fields.index_msg_timestamp = store_timestamp
            self.write(sync=False)

    def flushed(self, offset: int, store_timestamp: int, index_end_timestamp: int | None) -> None:
        """The fields after a flush to ``offset`` whose last record was stored at ``store_timestamp``
        (the consume queues flushed with it; the index to ``index_end_timestamp`` when it was)."""
        cp = self.fields
        if index_end_timestamp is not None:
            cp.index_msg_timestamp = max(cp.index_msg_timestamp, index_end_timestamp)
        cp.physic_msg_timestamp = cp.logics_msg_timestamp = store_timestamp
        cp.master_flushed_offset = offset
