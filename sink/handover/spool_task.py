"""The task half of the spool (sink.handover.spool): a read task writes its encoded batch to a new
file of the spool directory and hands the driver only the file's name and MAC. What the spool is
and why nothing in it is taken on trust: sink.handover.spool."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from blake3 import blake3

from sink.handover.packed import PackedBatchError, packed_row
from sink.handover.trust import UntrustedPathError, check_ours_or_sticky, open_dir

SUFFIX = ".arrow"
AUTO_DIR = "spool"          # the automatic spool directory, inside the store (its lock keeps it one job's)
FILE_NAME = re.compile(r"([0-9a-f]{12})\.[0-9a-f]{32}\.arrow")


class SpoolError(PackedBatchError):
    """A spool file or directory is not what the driver or a task can trust."""


def store_tag(store: str) -> str:
    """Names the files of one store's jobs in a spool directory (a shared one may serve several)."""
    return hashlib.sha1(os.path.realpath(store).encode()).hexdigest()[:12]


def auto_dir(store: str) -> str:
    return os.path.join(os.path.realpath(store), AUTO_DIR)


@dataclass(frozen=True)
class SpoolTarget:
    """What a read task needs to hand its batches over through files (sent in the source's options)."""

    directory: str
    tag: str
    key: bytes = field(repr=False)


def file_mac(key: bytes, name: str, data: object) -> bytes:
    """The keyed BLAKE3 of a spool file's name and bytes under the run's 32-byte key: ties the bytes
    to this run and to the row that names them."""
    mac = blake3(name.encode() + b"\0", key=key)
    mac.update(data)  # type: ignore[arg-type]
    return mac.digest()


# --------------------------------------------------------------------------------------- the tasks

def write(batch: pa.RecordBatch, target: SpoolTarget) -> pa.RecordBatch:
    """One PACKED_SCHEMA row naming a new file in the spool directory that holds ``batch`` (in a task)."""
    data = _ipc_stream(batch)
    name = f"{target.tag}.{uuid.uuid4().hex}{SUFFIX}"
    path = os.path.join(target.directory, name)
    dir_fd = _task_dir(target.directory)
    call = "open"
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=dir_fd)
        try:
            call = "write"
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    except OSError as exc:      # a full disk, say: the driver refuses the batch with this line
        if call == "write":
            _unlink_quietly(name, dir_fd)
        return failed_row(path, f"{call}() failed on {socket.gethostname()}: [Errno {exc.errno}] {exc.strerror}",
                          batch)
    finally:
        os.close(dir_fd)
    return packed_row(pa.nulls(1, pa.binary()), pa.array([path]),
                      pa.array([file_mac(target.key, name, data)], pa.binary()), batch)


def failed_row(path: str, why: str, batch: pa.RecordBatch) -> pa.RecordBatch:
    """The row of a batch whose spool file could not be written: its name, no MAC, and in its chunk
    the reason. A task that raised instead would fail the whole query in Spark's words (every task
    attempt's traceback, the plan); this row fails only the batch, on the driver, in one line."""
    return packed_row(pa.array([why.encode()], pa.binary()), pa.array([path]), pa.nulls(1, pa.binary()), batch)


def _unlink_quietly(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass        # the driver's sweep removes it


def _ipc_stream(batch: pa.RecordBatch) -> pa.Buffer:
    """``batch`` as an Arrow IPC stream in one buffer of its size: counted first, then written once
    (a growing output stream copies what it holds each time it grows)."""
    size = pa.MockOutputStream()
    with pa.ipc.new_stream(size, batch.schema) as writer:
        writer.write_batch(batch)
    data = pa.allocate_buffer(size.size())
    with pa.ipc.new_stream(pa.FixedSizeBufferWriter(data), batch.schema) as writer:
        writer.write_batch(batch)
    return data


def _task_dir(directory: str) -> int:
    """The spool directory as a task finds it: the same checks as the driver's."""
    if not os.path.isdir(directory):
        raise SpoolError(f"spool directory {directory} does not exist on {socket.gethostname()}: the executors "
                         "must run on the driver's machine (local mode), or share that path with it "
                         "(--spool-dir a shared path, or off to send batches through Spark)")
    try:
        fd = open_dir(directory, "spool directory")
        try:
            check_ours_or_sticky(os.fstat(fd), directory, "spool directory")
        except BaseException:
            os.close(fd)
            raise
    except UntrustedPathError as exc:
        raise SpoolError(f"{exc} (on {socket.gethostname()})") from None
    return fd


def spool_batches(batches: Iterator[pa.RecordBatch], target: SpoolTarget) -> Iterator[pa.RecordBatch]:
    """sink.handover.packed.pack_batches, through files: every non-empty batch as a row naming its file."""
    for batch in batches:
        if batch.num_rows:
            yield write(batch, target)
