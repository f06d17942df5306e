"""Recovery of the consume queues on open (after the commit log's, store.log.recovery): units past the
recovered end dropped, missing ones redispatched from the commit log."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from store.errors import ConsumeQueueGapError
from store.format.constants import CONSUMEQUEUE_DIR
from store.queue.consume_queue import ConsumeQueueStore
from store.queue.redispatch import redispatch

log = logging.getLogger(__name__)


def remove_unfinished_queue_files(root: Path) -> None:
    """A writer killed between creating a consume-queue file and sizing it leaves it empty.
    It never held a unit (units are written after sizing) and the queues are repaired below,
    so it can go; ConsumeQueueStore.load would refuse its size."""
    for path in (Path(root) / CONSUMEQUEUE_DIR).glob("*/*/*"):
        try:
            if path.is_file() and path.stat().st_size == 0:
                log.warning("removing empty consume-queue file %s (creation cut short by a crash)", path)
                path.unlink()
        except FileNotFoundError:
            pass


def recover_queues(cq: ConsumeQueueStore, records: Callable[[int, int], Iterator],
                   min_offset: int, end: int, dispatch_from: int,
                   committed_queues: Mapping[tuple[str, int], int] | None, also_from: int | None = None) -> None:
    """Drop consume-queue units past ``end`` and add the missing ones. Units below a valid
    commit point (whose next queue offsets are ``committed_queues``; None: no valid point) were
    flushed before it was written, so normally nothing is redispatched; a queue behind the commit
    point (files lost or damaged) is rebuilt from further back. ``records(start, end)`` iterates
    (offset, message) of the commit log. ``also_from``: records from there on (adopted, another
    writer's) get their missing units too, whatever the commit point says."""
    cq.truncate_dirty(end)

    def behind() -> list[tuple[str, int]]:
        have = cq.next_queue_offsets()
        return [k for k, v in (committed_queues or {}).items()
                if have.get(k, 0) < v]

    starts = [dispatch_from] if committed_queues is None else [end if also_from is None else also_from]
    if committed_queues is not None and behind():
        starts = [dispatch_from, min_offset]
    for start in starts:
        start = max(start, min_offset)
        try:
            added = redispatch(cq, records(start, end))
        except ConsumeQueueGapError as gap:
            # a queue's first missing unit lies before ``start``: rebuild from further back
            log.warning("recovery: redispatch from %d left a gap (%s); trying further back", start, gap)
            continue
        if added:
            log.info("recovery: %d consume-queue units rebuilt from offset %d", added, start)
        if not behind():
            break
    lagging = behind()
    if lagging:
        log.error("recovery: consume queues %s stay behind the commit point: their units "
                  "point below the commit log's first offset %d", lagging, min_offset)
    cq.flush()
