"""Keeping the pages just ahead of the writer faulted in, from a background thread.

The first store into a page of a fresh segment costs a page fault (the kernel zeroes and maps it;
BENCHMARKS.md, "Segment roll"). Faulting a whole 1 GiB segment in up front moves that cost off
the append path but spends it on pages a short run never writes, on the same 2 cores the writer
and Spark need. So only a window ahead of the write position is kept faulted in (RocketMQ warms
whole files, when warmMappedFileEnable is set): the appends find their pages ready, and a writer
that stops leaves at most ``window`` bytes faulted in for nothing. MADV_POPULATE_WRITE faults pages
without touching their bytes, so it runs safely beside the writer; where the kernel lacks it
(before Linux 5.14) the thread stops and appends fault their own pages, as without it.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from store.format.constants import OS_PAGE_SIZE
from store.log.segment import Segment

log = logging.getLogger(__name__)

WARM_WINDOW = 128 << 20   # bytes kept faulted in ahead of the write position, at least ...
BATCHES_AHEAD = 2         # ... and this many of the last batch: the next one finds its pages ready
WARM_STEP = 8 << 20       # one madvise call; the thread re-reads the write position between steps


class WarmTarget(Protocol):
    """What the thread warms: the queue's last segment (SegmentQueue)."""

    def last(self) -> Segment | None: ...


class WarmAhead:
    """The thread behind ``SegmentQueue.preallocate_next``; started on the first nudge."""

    def __init__(self, queue: WarmTarget, window: int = WARM_WINDOW, step: int = WARM_STEP) -> None:
        self.queue = queue
        self.least_window = window
        self.window = window
        self.step = step
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._base = -1          # the segment warmed so far ...
        self._done = 0           # ... and how far into it

    @property
    def warmed_to(self) -> int:
        """How far into the current segment the pages are faulted in."""
        return self._done

    @property
    def running(self) -> bool:
        return self._thread is not None

    def nudge(self, batch_bytes: int = 0) -> None:
        """The writer moved on (by a batch of ``batch_bytes``): warm up to ``window`` past its new
        position, the window sized to the batches (a mixed workload's 50,000 records are ~200 MB)."""
        self.window = max(self.least_window, BATCHES_AHEAD * batch_bytes)
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._run, name="segment-warm-ahead", daemon=True)
            self._thread.start()
        self._wake.set()

    def close(self) -> None:
        """Stop and wait for the thread: it must never fault pages of an unmapped segment."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            if not self._step():
                self._wake.wait(1.0)

    def _step(self) -> bool:
        """Warm one step if the window is not full; False when there is nothing to do."""
        seg = self.queue.last()
        if seg is None:
            return False
        if seg.base_offset != self._base:
            self._base, self._done = seg.base_offset, 0
        wrote = seg.wrote
        start = max(self._done, wrote - wrote % OS_PAGE_SIZE)
        end = min(seg.size, wrote + self.window, start + self.step)
        if start >= end or self._stop.is_set():
            return False
        # madvise takes a page-aligned start: the window's end (where the last step stopped) is not
        # one; EINVAL there stopped the thread for good, as if the kernel could not do it
        if not seg.warm_range(start - start % OS_PAGE_SIZE, end):
            log.info("this kernel cannot pre-fault pages beside a writer (MADV_POPULATE_WRITE); "
                     "appends fault their own pages")
            self._stop.set()
            return False
        self._done = end
        return True
