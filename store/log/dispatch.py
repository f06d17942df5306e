"""Work done behind the commit log, batch by batch in append order (RocketMQ's ReputMessageService):
the consume-queue units, and the index (store.index.writer), each its own service.

An append returns once its records are in the commit log; the consume-queue units are written
behind it, in append order, while the caller goes on. The work runs on the commit log's helper
thread (store.log.record_patch) when there is one: that thread is idle while the next append numbers
its queues, and then takes its share of the copy once the units (and the index's keys) are written,
so the two cores run two threads, not three (a thread of its own for the units, or for the index,
competed with both copying threads).
``drain()`` waits until every submitted batch is dispatched: the store calls it before a flush
(so before every commit) and before a read by queue. A failure is kept and raised by the next
submit or drain; the units are then missing, and only a reopen, which redispatches from the commit
log, repairs them.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

_BACKLOG = 2        # batches submitted but not dispatched yet, at most: bounds the memory held


class DispatchService:
    def __init__(self, work: Callable[..., None], name: str = "", executor: ThreadPoolExecutor | None = None) -> None:
        """``work`` is called with each batch's arguments (ConsumeQueueStore.dispatch, say), in
        order: ``executor`` must run one task at a time; without one, the service has a thread of
        its own."""
        self._work = work
        self._own = executor is None
        self._executor = executor or ThreadPoolExecutor(1, thread_name_prefix=f"dispatch-{name}")
        self._pending: deque[Future[None]] = deque()     # in submission order
        self._lock = threading.Lock()       # readers drain from their own threads
        self._failure: Exception | None = None

    @property
    def failure(self) -> Exception | None:
        return self._failure

    def submit(self, **dispatch_args: Any) -> None:
        """Queue one batch's work; raises an earlier failure instead."""
        self._raise_failure()
        while True:
            with self._lock:
                self._forget_done()
                if len(self._pending) < _BACKLOG:
                    self._pending.append(self._executor.submit(self._dispatch, dispatch_args))
                    return
                oldest = self._pending[0]
            oldest.result()

    def drain(self) -> None:
        """Wait until every batch submitted so far is dispatched; raises a failure of any of them."""
        self._wait_submitted()
        self._raise_failure()

    def stop(self) -> None:
        """Dispatch what was submitted (a failure stays in ``failure``); end an own thread."""
        self._wait_submitted()
        if self._own:
            self._executor.shutdown()

    def _wait_submitted(self) -> None:
        with self._lock:
            pending = list(self._pending)
        for job in pending:
            job.result()
        with self._lock:
            self._forget_done()

    def _forget_done(self) -> None:
        while self._pending and self._pending[0].done():
            self._pending.popleft()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _dispatch(self, job: dict[str, Any]) -> None:
        if self._failure is not None:       # after a failure, units would leave a hole
            return
        try:
            self._work(**job)
        except Exception as e:  # noqa: BLE001 - kept, and raised in the caller's thread
            self._failure = e
