"""StoreReader, the public read API of a store (and the commands' view): it takes no lock, works
while a writer runs, and reads only up to the committed offset (commitpoint.json; for a RocketMQ
store without one, up to the last valid record). Bodies come back as zero-copy memoryviews of the
segment mapping; :meth:`StoreReader.record_batches` (store.read.reader_arrow) gives the same records
as Arrow columns::

    with StoreReader.open("/data/store") as reader:
        for batch in reader.record_batches(topics=["orders"]):   # pyarrow.RecordBatch
            ...
        df = reader.to_pandas(min_store_timestamp=1_700_000_000_000)
"""

from __future__ import annotations

from pathlib import Path

from store.format.codec import CodecConfig
from store.index.lookup import open_index
from store.index.service import IndexService
from store.log.commit_point import CommitPoint
from store.queue.consume_queue import ConsumeQueueStore
from store.read.reader_arrow import ArrowReads
from store.read.view import StoreView


class StoreReader(ArrowReads):
    """Read-only, lock-free view of a store, up to its committed offset: its segments and commit
    point come from the store's view (store.read.view)."""

    def __init__(self, view: StoreView, cq: ConsumeQueueStore | None, codec: CodecConfig,
                 check_crc: bool = True) -> None:
        super().__init__(view.path, view.segment_queue(), cq, check_crc=check_crc)
        self._view = view
        self._codec = codec
        self._commit_point: CommitPoint | None = None
        self._committed = 0
        self._index_service: IndexService | None = None
        self._settle()

    @classmethod
    def open(cls, root: str | Path, codec: CodecConfig | None = None, *, check_crc: bool = True) -> "StoreReader":
        """A reader of the store at ``root``. Every record read is checked (structure, lengths,
        PHYSICALOFFSET and, unless ``check_crc`` is False, its BODYCRC): a damaged one raises
        CorruptRecordError naming its offset and segment, it is never handed out."""
        root = Path(root)
        return cls(StoreView.of_store(root), ConsumeQueueStore(root, read_only=True), codec or CodecConfig(),
                   check_crc)

    def refresh(self) -> None:
        """Re-read the commit point and map segments created since (a running writer moves
        both on)."""
        self._view.refresh()
        if not self._segments.segments and self._view.segment_size:
            self._segments = self._view.segment_queue()
        else:
            self._view.load_into(self._segments)
        self._settle()

    def _settle(self) -> None:
        # retention may have deleted old segments: their consume-queue units no longer count
        if self._cq is not None:
            self._cq.commitlog_min_offset = self._segments.min_offset
        self._commit_point = self._view.commit_point
        self._committed = self._view.committed_end(self._codec)

    def _read_limit(self) -> int:
        return self._committed

    @property
    def committed_offset(self) -> int:
        return self._committed

    @property
    def max_offset(self) -> int:
        return self._committed

    @property
    def last_commit(self) -> CommitPoint | None:
        return self._commit_point

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int]:
        lo, hi = super().queue_range(topic, queue_id)
        if self._commit_point is not None:
            hi = min(hi, self._commit_point.queue_offsets.get((topic, queue_id), hi))
        return lo, hi

    def _index_lookup(self) -> IndexService | None:
        if self._index_service is None:
            self._index_service = open_index(self.root)
        return self._index_service

    def segments(self) -> list[tuple[Path, int, int]]:
        return [(s.path, s.base_offset, s.size) for s in self._segments.segments]

    def close(self) -> None:
        self._segments.close()
        if self._cq is not None:
            self._cq.close()
        if self._index_service is not None:
            self._index_service.close()

    def __enter__(self) -> "StoreReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
