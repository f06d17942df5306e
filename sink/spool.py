"""Encoded batches handed from the read tasks to the driver through files, when they share a disk.

Through Spark, a task's packed batch (sink.packed) is compressed in the task, copied into the
executor JVM, sent to the driver JVM with the task's result, copied again into the driver's Python
by ``toArrow()`` and decompressed there: for bodies of kilobytes these copies cost more than reading
and encoding the records. When the executors run on the driver's machine (local mode), the task
instead writes its batch, uncompressed, as an Arrow IPC stream to a file in the spool directory
and sends only the file's name and MAC through Spark; the driver maps the file (no copy: the
appends read the records from the page cache) and removes its name at once.

Nothing in the directory is taken on trust (README, "How a batch reaches the driver"):
- the directory is ours and writable by no one else (``<store>/spool`` by default, made 0700 under
  the store's lock), or, when given, a sticky shared one; the driver keeps a descriptor of it and
  opens every file relative to it;
- a task creates its file with O_EXCL and O_NOFOLLOW, mode 0600, under an unpredictable name, and
  sends through Spark (not through the file system) the MAC of the name and the bytes under the
  run's secret key (BLAKE3 in its keyed mode: a pass over every byte at about 2.5x the speed of
  HMAC-SHA256 here, where both ends of the hand-over pay it), which exists only in the driver and
  in the tasks' options;
- the driver opens the file with O_NOFOLLOW and takes it only if it is a regular file of ours with
  one name and mode 0600 (resolve, on Spark's critical path: a few system calls), then, on the
  sink's writer thread before a byte is appended (check), compares the MAC and checks every record
  as recovery would (store.check_encoded). A file that fails is a failed batch; nothing of it is
  written.

Exactly once does not depend on these files: a batch is committed by the store's commit point,
never by a file; a file no collected row names (a failed or speculative task attempt, a driver
killed mid-batch) is an orphan, removed by ``sweep``.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import mmap
import os
import re
import secrets
import socket
import stat
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
from blake3 import blake3

from sink.batch import ENCODED_SCHEMA
from sink.packed import CHUNK, MAC, SPOOL, PackedBatchError, packed_row, value_buffer
from sink.trust import UntrustedPathError, check_ours_or_sticky, make_private_dir, open_dir, user_name
from store import InvalidMessageError, check_encoded

SUFFIX = ".arrow"
AUTO_DIR = "spool"          # the automatic spool directory, inside the store (its lock keeps it one job's)
_NAME = re.compile(r"([0-9a-f]{12})\.[0-9a-f]{32}\.arrow")
T = TypeVar("T")


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
    """sink.packed.pack_batches, through files: every non-empty batch as a row naming its file."""
    for batch in batches:
        if batch.num_rows:
            yield write(batch, target)


# -------------------------------------------------------------------------------------- the driver

class Spool:
    """The driver's side of one run's spool directory: a descriptor of it, the run's key."""

    def __init__(self, directory: str, tag: str, dir_fd: int, remove_at_close: bool) -> None:
        self.directory, self.tag, self.dir_fd = directory, tag, dir_fd
        self.key = secrets.token_bytes(32)
        self.remove_at_close = remove_at_close
        self._uid = os.geteuid()

    @classmethod
    def for_store(cls, store: str) -> Spool:
        """``<store>/spool``, made private (0700, ours) if new, refused if someone else's or shared.
        Call with the store's lock held: no other job uses it."""
        directory = auto_dir(store)
        spool = cls(directory, store_tag(store), _checked(make_private_dir, directory), remove_at_close=True)
        spool.sweep()       # an earlier run's orphans
        return spool

    @classmethod
    def given(cls, directory: str, store: str) -> Spool:
        """A directory the user named (``--spool-dir``): made private if it does not exist; if it
        does, ours and writable by no one else, or sticky and shared (sink.trust)."""
        directory = os.path.realpath(directory)
        if not os.path.lexists(directory):
            fd = _checked(make_private_dir, directory, what="--spool-dir")
        else:
            fd = _checked(open_dir, directory, what="--spool-dir")
            try:
                _checked(check_ours_or_sticky, os.fstat(fd), directory, what="--spool-dir")
            except SpoolError:
                os.close(fd)
                raise
        spool = cls(directory, store_tag(store), fd, remove_at_close=False)
        spool.sweep()
        return spool

    @property
    def target(self) -> SpoolTarget:
        return SpoolTarget(self.directory, self.tag, self.key)

    def resolve(self, table: pa.Table) -> pa.Table:
        """``table`` (collected PACKED_SCHEMA rows) with every spooled row's file mapped in as its
        chunk and its name removed; the rows keep their name and MAC for ``check``. In order."""
        if SPOOL not in table.column_names or table.column(SPOOL).null_count == table.num_rows:
            return table
        chunks: list[pa.Array] = []
        for chunk, path, mac in zip(_rows(table, CHUNK), table.column(SPOOL).to_pylist(),
                                    table.column(MAC).to_pylist()):
            if path is None or mac is None:     # packed, or a task's failed_row: check refuses it
                chunks.append(chunk)
                continue
            data = self._take(path)
            offsets = pa.py_buffer(np.array([0, data.size], dtype=np.int32))
            chunks.append(pa.Array.from_buffers(pa.binary(), 1, [None, offsets, data]))
        return table.set_column(table.schema.get_field_index(CHUNK), CHUNK, pa.chunked_array(chunks, pa.binary()))

    def _take(self, path: str) -> pa.Buffer:
        """The bytes of a spool file a row names, mapped, once the file is known to be one of ours
        that a task of this job made; its name removed."""
        name = os.path.basename(path)
        match = _NAME.fullmatch(name)
        if os.path.dirname(path) != self.directory or match is None or match.group(1) != self.tag:
            raise SpoolError(f"spool file {path}: not a name this job's tasks give in {self.directory}")
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.dir_fd)
        except FileNotFoundError:
            raise SpoolError(f"spool file {path} is not on the driver's machine: the executors must run on it "
                             "(local mode) or share the spool directory with it (--spool-dir)") from None
        except OSError as exc:
            why = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
            raise SpoolError(f"spool file {path} is {why}: refused, the batch is not written") from None
        try:
            st = os.fstat(fd)
            problem = self._problem(st)
            if problem:
                raise SpoolError(f"spool file {path} {problem}: refused, the batch is not written")
            mapped = mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ)
            os.unlink(name, dir_fd=self.dir_fd)    # the mapping keeps the bytes until the batch is written
        finally:
            os.close(fd)
        return pa.py_buffer(mapped)

    def _problem(self, st: os.stat_result) -> str | None:
        if not stat.S_ISREG(st.st_mode):
            return "is not a regular file"
        if st.st_uid != self._uid:
            return f"belongs to {user_name(st.st_uid)}, not to {user_name(self._uid)} whose tasks write them"
        if st.st_nlink != 1:
            return f"has {st.st_nlink} names (hard links), a task's file has one"
        if stat.S_IMODE(st.st_mode) & 0o077:
            return f"has mode {stat.S_IMODE(st.st_mode):04o}, a task's file is private (0600)"
        if st.st_size == 0:
            return "is empty"
        return None

    def check(self, table: pa.Table) -> pa.Table:
        """Before any of it is written (on the sink's writer thread): every mapped file's bytes
        against the MAC its task sent, then its records as recovery checks them. Returns ``table``
        with the names and MACs dropped, as sink.packed.unpack takes it."""
        if SPOOL not in table.column_names or table.column(SPOOL).null_count == table.num_rows:
            return table
        for chunk, path, mac in zip(_rows(table, CHUNK), table.column(SPOOL).to_pylist(),
                                    table.column(MAC).to_pylist()):
            if path is None:
                continue
            if mac is None and chunk.null_count == 0:
                why = " ".join(chunk[0].as_py().decode(errors="replace").split())[:500]
                raise SpoolError(f"spool file {path}: {why}: the batch is not written")
            data = value_buffer(chunk, 0)
            if mac is None or not hmac.compare_digest(file_mac(self.key, os.path.basename(path), data), mac):
                raise SpoolError(f"spool file {path} is not what this job's task wrote (its MAC does not match): "
                                 "refused, the batch is not written")
            try:
                reader = pa.ipc.open_stream(data)
                if not reader.schema.equals(ENCODED_SCHEMA):
                    raise SpoolError(f"spool file {path} has columns {reader.schema.names}, not the job's")
                for batch in reader:
                    check_encoded(batch)
            except (InvalidMessageError, pa.ArrowInvalid) as exc:
                raise SpoolError(f"spool file {path}: {exc}: refused, the batch is not written") from None
        n = table.num_rows
        return table.set_column(table.schema.get_field_index(SPOOL), SPOOL, pa.nulls(n, pa.string())) \
                    .set_column(table.schema.get_field_index(MAC), MAC, pa.nulls(n, pa.binary()))

    def sweep(self) -> int:
        """Remove this job's files left in the directory once a batch is collected (no task is
        running then): those of task attempts whose results were not taken. Others' files stay.
        Returns how many."""
        removed = 0
        with os.scandir(self.dir_fd) as entries:
            names = [e.name for e in entries if e.name.startswith(self.tag + ".") and e.name.endswith(SUFFIX)
                     and e.stat(follow_symlinks=False).st_uid == self._uid]
        for name in names:
            try:
                os.unlink(name, dir_fd=self.dir_fd)
                removed += 1
            except FileNotFoundError:
                pass
        return removed

    def close(self) -> None:
        """Sweep; remove the directory if it is the automatic one and nothing else is in it."""
        if self.dir_fd < 0:
            return
        try:
            self.sweep()
            if self.remove_at_close:
                same = os.stat(self.directory, follow_symlinks=False)
                mine = os.fstat(self.dir_fd)
                if (same.st_dev, same.st_ino) == (mine.st_dev, mine.st_ino):
                    os.rmdir(self.directory)
        except OSError:
            pass    # not empty (someone else's files) or already gone: leave it
        finally:
            os.close(self.dir_fd)
            self.dir_fd = -1


def _checked(call: Callable[..., T], *args: Any, what: str = "spool directory") -> T:
    """One of sink.trust's checks of the spool directory; what it refuses, as a SpoolError."""
    try:
        return call(*args, what)
    except UntrustedPathError as exc:
        raise SpoolError(str(exc)) from None


def _rows(table: pa.Table, name: str) -> list[pa.Array]:
    """Each row of a column as a one-row array (a chunk keeps its own buffers)."""
    column = table.column(name)
    return [chunk.slice(i, 1) for chunk in column.chunks for i in range(len(chunk))]
