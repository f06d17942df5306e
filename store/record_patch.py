"""Writing a batch's records into a segment: the bulk copy, with the fields the store owns patched
in place (DefaultAppendMessageCallback's QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP).

Records are copied a block (~1 MiB) at a time and each block is patched while it is still in the
CPU cache: patching after one big copy would read every record's first cache line back from
memory, which costs half as much as the copy itself. Two threads take blocks from the same batch
(numpy releases the GIL while it copies): the helper thread starts as soon as the records'
positions are known, the appending thread joins once it has numbered the queues. Blocks the
helper finished before the queue offsets existed get their QUEUEOFFSET in a last pass.
"""

from __future__ import annotations

import itertools
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import numpy as np

from .codec import apply_prop_crcs
from .constants import POS_PHYSICALOFFSET, POS_QUEUEOFFSET, POS_STORETIMESTAMP_V4, POS_STORETIMESTAMP_V6

BLOCK_BYTES = 1 << 20    # copied, then patched while cached (best of 0.25-4 MiB measured)
_U8 = np.dtype("<u8")


@dataclass
class Placement:
    """A run of a batch's records bound for one segment's ``buf`` at positions ``rel``; the
    record at position ``p`` comes from ``data[p + shift]``."""
    buf: np.ndarray
    rel: np.ndarray
    sizes: np.ndarray
    fields: np.ndarray          # (m, 2) big-endian: QUEUEOFFSET, PHYSICALOFFSET
    v6: np.ndarray
    data: np.ndarray
    shift: int

    @property
    def start(self) -> int:
        return int(self.rel[0])

    @property
    def end(self) -> int:
        return int(self.rel[-1] + self.sizes[-1])


class RecordWriter:
    """Copies and patches records for one commit log; owns the helper thread."""

    def __init__(self, threads: int, prop_crc: bool, block_bytes: int = BLOCK_BYTES) -> None:
        self._helper = ThreadPoolExecutor(1, thread_name_prefix="commitlog-copy") if threads > 1 else None
        self._prop_crc = prop_crc
        self.block_bytes = block_bytes
        self._fields = np.empty((0, 2), dtype=">i8")

    def close(self) -> None:
        if self._helper is not None:
            self._helper.shutdown()

    def fields(self, n: int) -> np.ndarray:
        """An (n, 2) big-endian int64 array for QUEUEOFFSET and PHYSICALOFFSET (adjacent in a
        record: one 16-byte copy each), reused across batches: a fresh 1.6 MB array per batch
        would be page-faulted in anew every time."""
        if len(self._fields) < n:
            self._fields = np.empty((n, 2), dtype=">i8")
        return self._fields[:n]

    def start(self, place: Placement, store_timestamp: int) -> BlockWrite:
        """Begin writing ``place`` on the helper thread, without QUEUEOFFSET (not known yet):
        finish with ``BlockWrite.finish`` once ``place.fields[:, 0]`` holds it, or ``abort``."""
        return BlockWrite(place, store_timestamp, self._helper, self._prop_crc, self.block_bytes)

    def write(self, place: Placement, store_timestamp: int) -> None:
        """Copy and patch ``place`` whole (its queue offsets are known)."""
        job = BlockWrite(place, store_timestamp, self._helper, self._prop_crc, self.block_bytes, offsets_ready=True)
        job.finish()


class BlockWrite:
    """One placement written block by block by the helper thread and the caller."""

    def __init__(self, place: Placement, store_timestamp: int, helper: ThreadPoolExecutor | None,
                 prop_crc: bool, block_bytes: int, offsets_ready: bool = False) -> None:
        self.place = place
        self._prop_crc = prop_crc
        uniform = bool((place.sizes == place.sizes[0]).all()) and bool((place.v6 == place.v6[0]).all())
        # Equal-sized records are patched through strided views (one field = one strided copy),
        # others through byte scatters at each record's field position.
        self._stride = int(place.sizes[0]) if uniform else 0
        # Each field of every record, as raw bytes (views of ``fields``, nothing copied)
        self._pairs = place.fields.view("V16").reshape(-1)      # QUEUEOFFSET + PHYSICALOFFSET
        self._qo = place.fields.view("V8")[:, 0]
        self._phys = place.fields.view("V8")[:, 1]
        # STORETIMESTAMP's big-endian bytes, as the "<u8" integer that writes them out
        self._ts = np.uint64(int(np.array(store_timestamp, dtype=">i8").view("<u8")))
        self._ts_pos: int | np.ndarray = (POS_STORETIMESTAMP_V6 if place.v6[0] else POS_STORETIMESTAMP_V4) \
            if uniform else place.rel + np.where(place.v6, POS_STORETIMESTAMP_V6, POS_STORETIMESTAMP_V4)
        self._edges = block_edges(place.rel, place.sizes, block_bytes)
        self._next = itertools.count()      # next() is atomic under the GIL: each block once
        self._offsets_ready = offsets_ready
        self._without_offsets: list[int] = []
        self._stop = False
        self._future: Future[None] | None = None
        if helper is not None and len(self._edges) > 2:
            self._future = helper.submit(self._work)

    def finish(self) -> None:
        """The queue offsets are in ``place.fields``: take blocks here too, then give QUEUEOFFSET
        to the blocks written before."""
        self._offsets_ready = True
        try:
            self._work()
        finally:
            if self._future is not None:
                self._future.result()
        for b in self._without_offsets:
            a, z = self._edges[b], self._edges[b + 1]
            self._put(a, z, POS_QUEUEOFFSET, self._qo)
            if self._prop_crc:
                apply_prop_crcs(self.place.buf, self.place.rel[a:z], self.place.sizes[a:z])

    def abort(self) -> None:
        """The batch is refused: stop, and wipe what was copied (beyond the segment's write
        position, so never visible; wiped so that no stale record survives there either)."""
        self._stop = True
        if self._future is not None:
            wait([self._future])     # the refusal is what the caller raises, not a copy error
        self.place.buf[self.place.start:self.place.end] = 0

    def _work(self) -> None:
        p = self.place
        blocks = len(self._edges) - 1
        while not self._stop:
            b = next(self._next)
            if b >= blocks:
                return
            with_offsets = self._offsets_ready
            a, z = self._edges[b], self._edges[b + 1]
            start, end = int(p.rel[a]), int(p.rel[z - 1] + p.sizes[z - 1])
            p.buf[start:end] = p.data[start + p.shift:end + p.shift]
            if with_offsets:
                self._put(a, z, POS_QUEUEOFFSET, self._pairs)
            else:
                self._without_offsets.append(b)
                self._put(a, z, POS_PHYSICALOFFSET, self._phys)
            self._put(a, z, self._ts_pos, self._ts)
            if with_offsets and self._prop_crc:
                apply_prop_crcs(p.buf, p.rel[a:z], p.sizes[a:z])

    def _put(self, a: int, z: int, field: int | np.ndarray, values: np.ndarray | np.uint64) -> None:
        """Write ``values`` (raw bytes per record, or one "<u8" for all) into records a..z-1 at
        ``field`` (a position in each record, or the absolute positions when records differ)."""
        p = self.place
        many = isinstance(values, np.ndarray)
        dtype = values.dtype if many else _U8
        part = values[a:z] if many else values
        if self._stride:
            assert isinstance(field, int)
            np.ndarray((z - a,), dtype=dtype, buffer=p.buf, offset=int(p.rel[a]) + field,
                       strides=(self._stride,))[:] = part
            return
        at = field[a:z] if isinstance(field, np.ndarray) else p.rel[a:z] + field
        # element i of this view is the bytes at byte i of the segment: one scatter per field
        np.ndarray((len(p.buf) - dtype.itemsize + 1,), dtype=dtype, buffer=p.buf, strides=(1,))[at] = part


def block_edges(rel: np.ndarray, sizes: np.ndarray, block_bytes: int) -> list[int]:
    """Record indices that cut ``rel`` into blocks of about ``block_bytes`` (whole records)."""
    m = len(rel)
    first, last_end = int(rel[0]), int(rel[-1] + sizes[-1])
    if last_end - first <= block_bytes:
        return [0, m]
    cuts = np.searchsorted(rel, np.arange(first + block_bytes, last_end, block_bytes))
    return [0, *np.unique(cuts[(cuts > 0) & (cuts < m)]).tolist(), m]
