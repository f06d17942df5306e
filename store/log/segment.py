"""One commit-log segment file, memory-mapped (RocketMQ's DefaultMappedFile).

A segment has a fixed size, is named by the 20-digit global offset of its first byte and is
written through its mapping. It tracks three positions, all relative to its start:
``wrote`` (bytes appended), ``committed`` (equal to ``wrote``: we write straight into the
mapping, there is no transient pool) and ``flushed`` (bytes made durable by msync).
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from store.errors import UnreadablePageError
from store.format.constants import FILE_NAME_DIGITS, OS_PAGE_SIZE
from store.log._page_probe import probe as _probe
from store.space import create_reserved, data_extents, reserve

log = logging.getLogger(__name__)

# Linux 5.14+: fault every page in writable, without writing a byte ourselves.
_MADV_POPULATE_WRITE = 23
_MADV_DONTNEED = 4
_MS_SYNC = 4
# Bytes per readahead request: the kernel clamps each POSIX_FADV_WILLNEED to a few readahead
# windows, so asking for a whole GiB at once reads only its first MiBs.
_READ_AHEAD_STEP = 2 << 20


def _load_libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


# msync and madvise through ctypes, which releases the GIL for the call: mmap.flush() and
# mmap.madvise() hold it, so a background flush or pre-touch of a segment (hundreds of ms per
# GiB) would stall the appending thread for as long (bench/roll.py).
_LIBC = _load_libc()
_SYNC_FILE_RANGE = getattr(_LIBC, "sync_file_range", None)   # Linux only
_SYNC_FILE_RANGE_WRITE = 2
_WRITEBACK_STEP = 8 << 20     # bytes handed to the disk per hold of the writeback gate


def hand_back(fd: int, start: int, end: int) -> None:
    """Ask the kernel to drop what the page cache holds of bytes ``[start, end)`` of ``fd``
    (POSIX_FADV_DONTNEED; whole pages, none still mapped). Advice only: a refusal raises OSError."""
    if hasattr(os, "posix_fadvise") and end > start:
        os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)


@contextmanager
def read_ahead(fd: int, start: int, end: int, name: str = "") -> Iterator[None]:
    """While the body runs, a background thread asks the kernel to read bytes ``[start, end)``
    of ``fd`` ahead (POSIX_FADV_WILLNEED, a step at a time), so a scan of a file that is not in
    the page cache overlaps the disk's reading with its own work instead of waiting on one
    page fault or read after another."""
    if end - start <= _READ_AHEAD_STEP or not hasattr(os, "posix_fadvise"):
        yield
        return
    stop = threading.Event()

    def run() -> None:
        for pos in range(start, end, _READ_AHEAD_STEP):
            if stop.is_set():
                return
            try:
                os.posix_fadvise(fd, pos, min(_READ_AHEAD_STEP, end - pos), os.POSIX_FADV_WILLNEED)
            except OSError:
                return          # only a hint: the reader reads the pages anyway

    worker = threading.Thread(target=run, name=f"read-ahead-{name}", daemon=True)
    worker.start()
    try:
        yield
    finally:
        stop.set()
        worker.join()


def segment_name(base_offset: int) -> str:
    """UtilAll.offset2FileName: the offset in decimal, zero-padded to 20 digits."""
    return str(base_offset).zfill(FILE_NAME_DIGITS)


def parse_segment_name(name: str) -> int | None:
    """The base offset a file name stands for, or None if it is not a segment name."""
    if len(name) == FILE_NAME_DIGITS and name.isdigit():
        return int(name)
    return None


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (created, renamed, deleted files) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old file or the new one, never a
    part: write a sibling, fsync it, rename it over, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def first_unreadable(mm: mmap.mmap, start: int, end: int) -> int:
    """The first offset in [start, end) of ``mm`` whose page cannot be read (SIGBUS caught), or -1."""
    return _probe(mm, start, end) if end > start else -1


def first_unreadable_data(mm: mmap.mmap, path: Path, start: int, end: int) -> int:
    """first_unreadable over the parts of [start, end) that hold data on disk. Only a page backed by
    blocks can fail to be read (EIO); a hole, or blocks reserved and never written, read as zeros
    without touching the disk, and faulting them in would only fill memory with zero pages (the 1 GiB
    file behind a few MB of records)."""
    extents = data_extents(path, start, end)
    if extents is None:
        return first_unreadable(mm, start, end)
    actual = os.stat(path).st_size
    if actual < end:                     # cut under the mapping: its pages past the end are not data
        extents.append((max(start, actual), end))
    for lo, hi in extents:
        bad = first_unreadable(mm, lo, hi)
        if bad >= 0:
            return bad
    return -1


def _mapping_address(mm: mmap.mmap) -> int:
    """Where ``mm`` is mapped. The ctypes view exports the buffer, so it is dropped at once (an
    exported mmap refuses to close); the address stays valid until the mapping is closed."""
    try:
        view = ctypes.c_char.from_buffer(mm)
    except (TypeError, ValueError):
        return 0
    address = ctypes.addressof(view)
    del view
    return address


class Segment:
    """A mapped segment. Not thread-safe by itself: the commit log serialises writers, and the
    flush service only calls :meth:`flush`, which msyncs pages and touches nothing else."""

    def __init__(self, path: Path, base_offset: int, size: int, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.size = size
        self.read_only = read_only
        self.wrote = 0
        self.flushed = 0
        self.dropped = 0        # bytes from the start whose pages were handed back (drop_behind)
        flags = os.O_RDONLY if read_only else os.O_RDWR
        self._fd = os.open(self.path, flags)
        try:
            actual = os.fstat(self._fd).st_size
            if actual != size:
                raise ValueError(f"segment {self.path} is {actual} bytes, expected {size}")
            access = mmap.ACCESS_READ if read_only else mmap.ACCESS_WRITE
            self._mm = mmap.mmap(self._fd, size, access=access)
        except BaseException:
            os.close(self._fd)
            raise
        # One numpy view for bulk copies and scatters; memoryview for zero-copy decoding.
        self.buf: np.ndarray = np.frombuffer(self._mm, dtype=np.uint8)
        self.view = memoryview(self._mm)
        self._locked = False
        self._address = 0 if read_only else _mapping_address(self._mm)

    def check_readable(self, start: int, end: int) -> None:
        """Raise UnreadablePageError unless every page of [start, end) can be read: a page of the
        mapping beyond the file's end (truncated under us) or one the disk cannot give (EIO) would
        otherwise arrive as SIGBUS and end the process. Readers call this before they parse bytes."""
        start, end = max(start, 0), min(end, self.size)
        if end <= start:
            return
        actual = os.fstat(self._fd).st_size
        if actual < end:
            raise UnreadablePageError(self.base_offset + max(start, actual), self.path.name, actual)
        bad = first_unreadable(self._mm, start, end)
        if bad >= 0:
            raise UnreadablePageError(self.base_offset + bad, self.path.name)

    # --- creation ------------------------------------------------------------------------
    @classmethod
    def create(cls, directory: Path, base_offset: int, size: int, *, warm: bool = True,
               mlock: bool = False) -> "Segment":
        """Create a new zero-filled segment file with its disk blocks reserved (store.space:
        a full disk is an OSError here, not SIGBUS on a store into the mapping). The file gets its
        final name only once it has its full size, so a crash never leaves a short segment."""
        directory = Path(directory)
        final = directory / segment_name(base_offset)
        tmp = directory / (final.name + ".tmp")
        tmp.unlink(missing_ok=True)
        fd = create_reserved(tmp, size, "commit-log segment", named=final)
        os.close(fd)
        os.rename(tmp, final)
        fsync_dir(directory)
        seg = cls(final, base_offset, size)
        if warm:
            seg.warm()
        if mlock:
            seg.lock_in_memory()
        return seg

    def reserve(self) -> None:
        """Reserve the disk blocks of a segment this writer did not create (store.space)."""
        reserve(self._fd, self.size, self.path, "commit-log segment")

    def warm(self, cancel: threading.Event | None = None, step: int = 32 << 20, until: int | None = None) -> bool:
        """Fault the pages of ``[0, until)`` (all by default) in now (RocketMQ's warmMappedFile) so
        the first appends into the segment do not pay 0.3-3.7 s/GiB of page faults. Only for fresh,
        all-zero segments nobody writes yet. In ``step``-byte pieces, so that a writer closing
        meanwhile (``cancel``) need not wait for a whole GiB it will never use. False if cancelled."""
        end = self.size if until is None else min(until, self.size)
        for start in range(0, end, step):
            if cancel is not None and cancel.is_set():
                return False
            length = min(step, end - start)
            if not self.warm_range(start, start + length):
                self.buf[start:start + length:OS_PAGE_SIZE] = 0  # older kernels: one zero per page
        return True

    def warm_range(self, start: int, end: int) -> bool:
        """Fault ``[start, end)`` in without touching its bytes (MADV_POPULATE_WRITE), so it is safe
        while a writer fills the segment. False where the kernel cannot (before Linux 5.14)."""
        return self._libc_call("madvise", start, end - start, _MADV_POPULATE_WRITE)

    def read_ahead(self, start: int, end: int) -> AbstractContextManager[None]:
        """Bytes ``[start, end)`` of this segment read ahead while the body runs (read_ahead)."""
        return read_ahead(self._fd, start, end, self.path.name)

    def lock_in_memory(self) -> None:
        """mlock the mapping where the OS allows (RLIMIT_MEMLOCK); a refusal is only logged."""
        if self._libc_call("mlock", 0, self.size):
            self._locked = True
        else:
            log.info("mlock of %s refused or not available: %s", self.path, os.strerror(ctypes.get_errno()))

    # --- positions -------------------------------------------------------------------------
    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size

    @property
    def committed(self) -> int:
        return self.wrote

    @property
    def remaining(self) -> int:
        return self.size - self.wrote

    # --- durability ------------------------------------------------------------------------
    def flush(self, upto: int | None = None, gate: AbstractContextManager[Any] | None = None) -> int:
        """msync the written bytes not yet flushed, up to position ``upto`` (default: all
        written). Returns the new flushed position. An OSError (EIO, ENOSPC) propagates: the
        caller must treat the store as failed, since a retried msync can report success for
        pages the kernel already dropped. With a ``gate`` (the store's writeback gate), the
        pages are first handed to the disk under it (_start_writeback); the msync then waits."""
        end = self.wrote if upto is None else min(upto, self.wrote)
        if end <= self.flushed:
            return self.flushed
        start = self.flushed - self.flushed % mmap.PAGESIZE
        if gate is not None:
            self._start_writeback(start, end, gate)
        if _LIBC is None or not self._address:
            self._mm.flush(start, end - start)
        elif _LIBC.msync(ctypes.c_void_p(self._address + start), ctypes.c_size_t(end - start), _MS_SYNC) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"msync of {self.path} [{start}, {end}): {os.strerror(err)}")
        self.flushed = end
        return end

    def drop_behind(self, upto: int) -> None:
        """Hand the page-cache pages of the flushed bytes below ``upto`` back to the kernel (whole
        pages; never a locked segment's). The writer never reads them again, and the pages it takes
        next for the bytes ahead then come from these instead of memory the system has not used
        yet, which costs several times more on a VM (BENCHMARKS.md, "The machine"). A reader finds
        the bytes on disk. Advice only: a refusal changes nothing."""
        end = min(upto, self.flushed)
        end -= end % mmap.PAGESIZE
        if end <= self.dropped or self._locked or self.read_only:
            return
        start = self.dropped
        # the mapping lets go of the pages first: the page cache keeps a page that is still mapped
        self._libc_call("madvise", start, end - start, _MADV_DONTNEED)
        try:
            hand_back(self._fd, start, end)
        except OSError as e:
            log.debug("dropping the pages of %s behind the writer refused: %s", self.path, e)
        self.dropped = end

    def _start_writeback(self, start: int, end: int, gate: AbstractContextManager[Any]) -> None:
        """Start the writeback of ``[start, end)`` a step at a time, each step with ``gate`` held.
        Cleaning a page write-protects it, and every CPU then running a thread of this process takes
        an interrupt for it to drop its copy of the mapping (a TLB shootdown; on a VM each one is a
        VM exit): the store's background threads (the index's puts) hold the gate while they work,
        so they sleep through these steps and take none. The msync that follows writes back
        whatever is still dirty and waits for the disk, as without a gate. Where the call is
        missing or refused, the msync does it all."""
        if _SYNC_FILE_RANGE is None:
            return
        for a in range(start, end, _WRITEBACK_STEP):
            with gate:
                rc = _SYNC_FILE_RANGE(self._fd, ctypes.c_int64(a), ctypes.c_int64(min(_WRITEBACK_STEP, end - a)),
                                      _SYNC_FILE_RANGE_WRITE)
            if rc != 0:
                return

    def _libc_call(self, name: str, start: int, length: int, *args: int) -> bool:
        """``name(address + start, length, *args)`` with the GIL released; False if it failed."""
        if _LIBC is None or not self._address:
            return False
        return getattr(_LIBC, name)(ctypes.c_void_p(self._address + start), ctypes.c_size_t(length), *args) == 0

    def fsync(self) -> None:
        os.fsync(self._fd)

    @property
    def fileno(self) -> int:
        return self._fd

    # --- life cycle ------------------------------------------------------------------------
    def close(self) -> None:
        """Unmap and close. Bodies handed out as zero-copy memoryviews keep the mapping alive
        (mmap refuses to close then); it is unmapped when the last of them goes away."""
        if self._fd < 0:
            return
        self.buf = np.empty(0, dtype=np.uint8)
        try:
            self.view.release()
        except BufferError:
            pass
        try:
            self._mm.close()
        except BufferError:
            log.debug("segment %s still referenced by readers; unmapped when released", self.path)
        os.close(self._fd)
        self._fd = -1

    def destroy(self) -> None:
        """Close and delete the file (truncation past this segment, retention)."""
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return (f"Segment({self.path.name}, wrote={self.wrote}, flushed={self.flushed}, "
                f"size={self.size})")
