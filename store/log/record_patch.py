"""Writing a batch's records into a segment: the bulk copy, with the fields the store owns patched
in place (DefaultAppendMessageCallback's QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP).

Records are copied a block (~1 MiB) at a time and each block is patched while it is still in the
CPU cache: patching after one big copy would read every record's first cache line back from
memory, which costs half as much as the copy itself. Two threads take blocks from the same batch
(numpy releases the GIL while it copies): the appending thread and a helper, which between
batches writes the previous batch's consume-queue units (store.log.dispatch) and joins the copy when
it is done with them. Each block's PHYSICALOFFSETs are computed by the thread that writes it,
from the record sizes alone: no whole-batch array of positions comes before the copy, and no
write can land outside the bytes the batch was given.
"""

from __future__ import annotations

import itertools
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from store.format.codec import apply_prop_crcs
from store.format.constants import POS_QUEUEOFFSET, POS_STORETIMESTAMP_V4, POS_STORETIMESTAMP_V6

BLOCK_BYTES = 1 << 20    # copied, then patched while still in cache (BENCHMARKS.md, "Store append")


@dataclass
class BatchLayout:
    """Where each record of a batch lies relative to the batch's first byte, from its sizes:
    ``stride`` when every record has that size (positions are arithmetic), else ``edges`` (n + 1
    cumulative sizes). ``v6``: born host IPv6 (the STORETIMESTAMP position), one bool for the whole
    batch or one per record."""
    sizes: np.ndarray
    stride: int
    edges: np.ndarray | None
    v6: bool | np.ndarray

    @classmethod
    def of(cls, sizes: np.ndarray, smin: int, smax: int, v6: bool | np.ndarray) -> "BatchLayout":
        if smin == smax and isinstance(v6, bool):
            return cls(sizes, smin, None, v6)
        edges = np.empty(len(sizes) + 1, dtype=np.int64)
        edges[0] = 0
        np.cumsum(sizes, out=edges[1:])
        return cls(sizes, 0, edges, v6)

    def before(self, i: int) -> int:
        """Bytes of the records before record ``i`` (0 <= i <= n)."""
        return i * self.stride if self.stride else int(self.edges[i])  # type: ignore[index]

    def starts(self, a: int, z: int) -> np.ndarray:
        """``before(i)`` for records a..z-1, int64."""
        if self.stride:
            return np.arange(a * self.stride, z * self.stride, self.stride, dtype=np.int64)
        return self.edges[a:z]  # type: ignore[index]

    def cumulative(self) -> np.ndarray:
        """``before(i + 1)`` for every record: the bytes up to each record's end."""
        if self.stride:
            return np.arange(self.stride, (len(self.sizes) + 1) * self.stride, self.stride, dtype=np.int64)
        return self.edges[1:]  # type: ignore[index]


@dataclass
class Placement:
    """Records ``first``..``stop``-1 of a batch bound for one segment's ``buf`` from position ``pos``
    on (``base``: the segment's global offset); the record at position ``p`` comes from
    ``data[p + shift]``. ``fields`` and ``physical_offsets`` are the whole batch's, filled here."""
    buf: np.ndarray
    base: int
    pos: int
    first: int
    stop: int
    layout: BatchLayout
    data: np.ndarray
    shift: int
    fields: np.ndarray              # (n, 2) big-endian scratch: QUEUEOFFSET, PHYSICALOFFSET
    physical_offsets: np.ndarray    # (n,) int64, out

    def at(self, i: int) -> int:
        """Position in ``buf`` of record ``i`` (``stop``: the end of the last one)."""
        return self.pos + self.layout.before(i) - self.layout.before(self.first)

    def rel(self, a: int, z: int) -> np.ndarray:
        """Positions in ``buf`` of records a..z-1."""
        return self.layout.starts(a, z) + (self.pos - self.layout.before(self.first))

    @property
    def start(self) -> int:
        return self.pos

    @property
    def end(self) -> int:
        return self.at(self.stop)


class RecordWriter:
    """Copies and patches records for one commit log; owns the helper thread."""

    def __init__(self, threads: int, prop_crc: bool, block_bytes: int = BLOCK_BYTES) -> None:
        self._helper = ThreadPoolExecutor(1, thread_name_prefix="commitlog-copy") if threads > 1 else None
        self._prop_crc = prop_crc
        self.block_bytes = block_bytes
        self._fields = np.empty((0, 2), dtype=">i8")

    @property
    def executor(self) -> ThreadPoolExecutor | None:
        """The helper thread (one task at a time), which others may give work between batches."""
        return self._helper

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

    def write(self, place: Placement, store_timestamp: int, queue_offsets: np.ndarray) -> None:
        """Copy and patch ``place`` whole (its queue offsets are known)."""
        BlockWrite(place, store_timestamp, queue_offsets, self._helper, self._prop_crc, self.block_bytes).run()


class BlockWrite:
    """One placement written block by block by the helper thread and the caller."""

    def __init__(self, place: Placement, store_timestamp: int, queue_offsets: np.ndarray,
                 helper: ThreadPoolExecutor | None, prop_crc: bool, block_bytes: int) -> None:
        self.place = place
        self._prop_crc = prop_crc
        self._stride = place.layout.stride      # strided views when records are equal, else scatters
        # Each field of every record, as raw bytes (views of ``fields``, nothing copied)
        self._pairs = place.fields.view("V16").reshape(-1)      # QUEUEOFFSET + PHYSICALOFFSET
        v6 = place.layout.v6
        self._ts_field = (POS_STORETIMESTAMP_V6 if v6 else POS_STORETIMESTAMP_V4) if isinstance(v6, bool) else None
        self._edges = block_edges(place, block_bytes)
        # STORETIMESTAMP's big-endian bytes, once per record of the largest block: numpy writes
        # a strided field from an array faster than from one broadcast scalar
        most = max(z - a for a, z in zip(self._edges, self._edges[1:]))
        self._ts = np.full(most, store_timestamp, dtype=">i8").view("V8")
        # equal records: each block's positions are these steps from its first record's
        self._steps = np.arange(0, most * self._stride, self._stride, dtype=np.int64) if self._stride else None
        self._next = itertools.count()      # next() is atomic under the GIL: each block once
        self._queue_offsets = queue_offsets
        self._future: Future[None] | None = None
        if helper is not None and len(self._edges) > 2:
            self._future = helper.submit(self._work)

    def run(self) -> None:
        """Take blocks here too until none is left; then wait for the helper's last one."""
        try:
            self._work()
        finally:
            # The helper may still be busy with other work (the consume queues): if its share
            # never started, every block is done and there is nothing to wait for.
            if self._future is not None and not self._future.cancel():
                self._future.result()

    def _work(self) -> None:
        p = self.place
        blocks = len(self._edges) - 1
        while (b := next(self._next)) < blocks:
            a, z = self._edges[b], self._edges[b + 1]
            start, end = p.at(a), p.at(z)
            p.buf[start:end] = p.data[start + p.shift:end + p.shift]
            phys = p.physical_offsets[a:z]
            if self._steps is not None:
                rel = None
                np.add(self._steps[:z - a], p.base + start, out=phys)
            else:
                rel = p.rel(a, z)
                np.add(rel, p.base, out=phys)
            p.fields[a:z, 1] = phys
            p.fields[a:z, 0] = self._queue_offsets[a:z]
            self._put(a, z, start, rel, POS_QUEUEOFFSET, self._pairs)
            if self._ts_field is not None:
                self._put(a, z, start, rel, self._ts_field, self._ts)
            else:
                assert rel is not None
                ts_at = rel + np.where(p.layout.v6[a:z], POS_STORETIMESTAMP_V6, POS_STORETIMESTAMP_V4)  # type: ignore[index]
                self._put(a, z, start, ts_at, 0, self._ts)
            if self._prop_crc:
                apply_prop_crcs(p.buf, p.rel(a, z) if rel is None else rel, p.layout.sizes[a:z])

    def _put(self, a: int, z: int, start: int, rel: np.ndarray | None, field: int, values: np.ndarray) -> None:
        """Write ``values`` (raw bytes per record of the batch, or ``self._ts``: the same for
        every record) at ``field`` of records a..z-1, which begin at ``start`` in the segment,
        every ``stride`` bytes, or at ``rel`` when their sizes differ."""
        p = self.place
        dtype = values.dtype
        part = values[:z - a] if values is self._ts else values[a:z]
        if rel is None:
            np.ndarray((z - a,), dtype=dtype, buffer=p.buf, offset=start + field, strides=(self._stride,))[:] = part
            return
        # element i of this view is the bytes at byte i of the segment: one scatter per field
        np.ndarray((len(p.buf) - dtype.itemsize + 1,), dtype=dtype, buffer=p.buf, strides=(1,))[rel + field] = part


def block_edges(place: Placement, block_bytes: int) -> list[int]:
    """Record indices that cut ``place``'s records into blocks of about ``block_bytes`` (whole
    records)."""
    first, stop, layout = place.first, place.stop, place.layout
    if layout.stride:
        per = max(1, block_bytes // layout.stride)
        return [*range(first, stop, per), stop]
    if place.end - place.start <= block_bytes:
        return [first, stop]
    edges = layout.edges[first:stop]  # type: ignore[index]
    base = int(edges[0])
    cuts = first + np.searchsorted(edges, np.arange(base + block_bytes, base + place.end - place.start, block_bytes))
    return [first, *np.unique(cuts[(cuts > first) & (cuts < stop)]).tolist(), stop]
