"""Encoded batches handed from the read tasks to the driver through files, when they share a disk.

Through Spark, a task's packed batch (sink.handover.packed) is compressed in the task, copied into the
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
import hmac
import mmap
import os
import secrets
import stat
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from sink.handover.packed import CHUNK, MAC, SPOOL, value_buffer
from sink.handover.schema import ENCODED_SCHEMA
from sink.handover.spool_task import (
    FILE_NAME,
    SUFFIX,
    SpoolError,
    SpoolTarget,
    auto_dir,
    file_mac,
    store_tag,
)
from sink.handover.trust import UntrustedPathError, check_ours_or_sticky, make_private_dir, open_dir, user_name
from store import InvalidMessageError, check_encoded

T = TypeVar("T")


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
        does, ours and writable by no one else, or sticky and shared (sink.handover.trust)."""
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
        match = FILE_NAME.fullmatch(name)
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
        with the names and MACs dropped, as sink.handover.packed.unpack takes it."""
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
    """One of sink.handover.trust's checks of the spool directory; what it refuses, as a SpoolError."""
    try:
        return call(*args, what)
    except UntrustedPathError as exc:
        raise SpoolError(str(exc)) from None


def _rows(table: pa.Table, name: str) -> list[pa.Array]:
    """Each row of a column as a one-row array (a chunk keeps its own buffers)."""
    column = table.column(name)
    return [chunk.slice(i, 1) for chunk in column.chunks for i in range(len(chunk))]
