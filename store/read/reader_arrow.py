"""StoreReader's Arrow side: the committed messages as pyarrow record batches (columns
store.scan.record_batch.READBACK_SCHEMA), whole, by queue, at given offsets, or in ranges for a
parallel read. Built on store.read.records.RecordReads, below store.read.reader.StoreReader."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from store.errors import CorruptRecordError, NotARecordStartError
from store.format.codec import CodecConfig
from store.read.records import RecordReads

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa


class ArrowReads(RecordReads):
    """The record reads as Arrow: over RecordReads' segments and consume queues, up to its read limit
    (a StoreReader's: the committed offset)."""

    def record_batches(self, from_offset: int | None = None, to_offset: int | None = None,
                       topics: Iterable[str] | None = None, batch_size: int = 65_536, *,
                       queue_ids: Iterable[int] | None = None, min_store_timestamp: int | None = None,
                       max_store_timestamp: int | None = None, zero_copy: bool = False,
                       check_crc: bool | None = None) -> Iterator[pa.RecordBatch]:
        """The committed messages as Arrow record batches of at most ``batch_size`` rows, columns
        store.scan.record_batch.READBACK_SCHEMA, in commit-log order: those starting in
        [from_offset, to_offset) (a record or segment start; default: everything readable), of
        ``topics`` and ``queue_ids``, stored within the inclusive timestamp bounds (all when None).

        Work and memory are bounded by a scan window, not by the store. ``zero_copy`` gives bodies
        as binary_view values pointing into the segment mapping (valid while they live, even
        after close). Every BODYCRC is checked as recovery does unless ``check_crc`` is False
        (default: the reader's, StoreReader.open; structure, lengths and PHYSICALOFFSET are always
        checked). Zeroed or damaged bytes below the commit point, or a missing segment, raise
        CorruptRecordError naming the offset and segment."""
        from store.scan.record_batch import RecordFilter, segment_record_batches

        rf = RecordFilter.of(topics, queue_ids, min_store_timestamp, max_store_timestamp)
        config = CodecConfig(check_crc_on_recover=self._check_crc if check_crc is None else check_crc)
        for seg, start, end, until in self._segment_ranges(from_offset, to_offset):
            seg.check_readable(start, end if until is None else min(end, until))
            yield from segment_record_batches(seg.view, seg.base_offset, start, end, until=until,
                                              batch_size=batch_size, record_filter=rf, config=config,
                                              zero_copy=zero_copy, segment_name=seg.path.name)

    def queue_records(self, topics: Iterable[str], queue_ids: Iterable[int] | None = None
                      ) -> tuple[np.ndarray, np.ndarray] | None:
        """(physical offsets, sizes), ascending, of the committed records of these topics' queues
        (of ``queue_ids`` only, if given), from the consume queues; None when the queues do not
        hold every committed record yet (a writer dispatches them behind its appends)."""
        if self._cq is None:
            return None
        wanted = set(queue_ids) if queue_ids is not None else None
        known = self.topics()
        parts, sizes = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        for topic in topics:
            for queue_id in known.get(topic, []):
                if wanted is not None and queue_id not in wanted:
                    continue
                lo, hi = self.queue_range(topic, queue_id)
                units = self._cq.find_units(topic, queue_id, lo, hi - lo)
                if len(units) < hi - lo:
                    return None
                parts.append(units["phys"].astype(np.int64))
                sizes.append(units["size"].astype(np.int64))
        phys, size = np.concatenate(parts), np.concatenate(sizes)
        keep = (phys >= self.min_offset) & (phys < self._read_limit())
        order = np.argsort(phys[keep], kind="stable")
        return phys[keep][order], size[keep][order]

    def record_batches_at(self, offsets: np.ndarray, sizes: np.ndarray, batch_size: int = 65_536, *,
                          topics: Iterable[str] | None = None, queue_ids: Iterable[int] | None = None,
                          min_store_timestamp: int | None = None, max_store_timestamp: int | None = None,
                          zero_copy: bool = False, check_crc: bool | None = None) -> Iterator[pa.RecordBatch]:
        """record_batches, for the records at ``offsets`` (ascending, with their sizes: what
        queue_records gives) and no others: each is read and checked where it is, no walk."""
        from store.scan.record_batch import RecordFilter, record_batches_at

        rf = RecordFilter.of(topics, queue_ids, min_store_timestamp, max_store_timestamp)
        offsets = np.asarray(offsets, dtype=np.int64)
        sizes = np.asarray(sizes, dtype=np.int64)
        limit = self._read_limit()
        i = 0
        while i < len(offsets):
            off = int(offsets[i])
            seg = self._segments.find(off) if off < limit else None
            if seg is None:
                raise NotARecordStartError(
                    f"offset {off} is outside the readable commit log [{self.min_offset}, {limit})")
            j = int(np.searchsorted(offsets, min(seg.end_offset, limit)))
            # the span from the first record to the end of the last: the pages between are touched too
            seg.check_readable(off - seg.base_offset, int((offsets[i:j] + sizes[i:j]).max()) - seg.base_offset)
            yield from record_batches_at(seg.view, seg.base_offset, offsets[i:j] - seg.base_offset, sizes[i:j],
                                         batch_size=batch_size, record_filter=rf,
                                         config=CodecConfig(check_crc_on_recover=self._check_crc if check_crc is None
                                                            else check_crc), zero_copy=zero_copy,
                                         segment_name=seg.path.name)
            i = j

    def to_table(self, *args: Any, **kwargs: Any) -> pa.Table:
        """record_batches(...) as one pyarrow Table."""
        import pyarrow as pa

        from store.scan.record_batch import READBACK_SCHEMA

        batches = list(self.record_batches(*args, **kwargs))
        return pa.Table.from_batches(batches, batches[0].schema if batches else READBACK_SCHEMA)

    def to_pandas(self, *args: Any, **kwargs: Any) -> pd.DataFrame:
        """record_batches(...) as a pandas DataFrame (properties as lists of (name, value))."""
        return self.to_table(*args, **kwargs).to_pandas()

    def read_ranges(self, max_bytes: int = 128 << 20, from_offset: int | None = None,
                    to_offset: int | None = None) -> list[tuple[int, int]]:
        """[start, end) offset ranges covering what is readable now in [from_offset, to_offset)
        (a record or segment start, and a record boundary), each within one segment and about
        ``max_bytes`` long, each starting at a record start: the units of a parallel read
        (record_batches(start, end) each). Cuts inside a segment are placed at record starts the
        consume queues point at, so no walk is needed to find them."""
        out: list[tuple[int, int]] = []
        for seg, start, end, until in self._segment_ranges(from_offset, to_offset):
            lo, hi = seg.base_offset + start, seg.base_offset + (end if until is None else min(end, until))
            cuts = [lo]
            at = lo + max_bytes
            while at < hi and self._cq is not None:
                found = self._cq.record_start_at_or_after(at)
                if found is None or found >= hi:
                    break
                if found > cuts[-1]:
                    cuts.append(found)
                at = max(found, at) + max_bytes
            cuts.append(hi)
            out.extend(zip(cuts[:-1], cuts[1:]))
        return out

    def _segment_ranges(self, from_offset: int | None, to_offset: int | None
                        ) -> Iterator[tuple[Any, int, int, int | None]]:
        """(segment, first position, readable end, pause position or None) of each segment
        holding readable records in [from_offset, to_offset)."""
        limit = self._read_limit()
        pos, stop = self._walk_bounds(from_offset, to_offset, limit)
        while pos < stop:
            seg = self._segments.find(pos)
            if seg is None:
                raise CorruptRecordError(pos, "missingSegment", f"no segment holds offset {pos}, below the readable "
                                                                f"end {limit}: a segment is missing")
            base = seg.base_offset
            yield seg, pos - base, min(seg.size, limit - base), (stop - base if stop < seg.end_offset else None)
            pos = seg.end_offset

