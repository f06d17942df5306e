"""Consume-queue dispatch behind the commit log (RocketMQ's ReputMessageService).

An append returns once its records are in the commit log; a thread of its own writes their
consume-queue units, in append order, while the caller goes on (on a second core, the next
batch is copied meanwhile). ``drain()`` waits until every submitted batch is dispatched: the
store calls it before a flush (so before every commit) and before a read by queue. A failure
is kept and raised by the next submit or drain; the units are then missing, and only a reopen,
which redispatches from the commit log, repairs them.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from store.consume_queue import ConsumeQueueStore

_BACKLOG = 2        # batches submitted but not dispatched yet, at most: bounds the memory held


class DispatchService:
    def __init__(self, cq: ConsumeQueueStore, name: str = "") -> None:
        self._cq = cq
        self._jobs: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=_BACKLOG)
        self._failure: Exception | None = None
        self._thread = threading.Thread(target=self._run, name=f"dispatch-{name}", daemon=True)
        self._thread.start()

    @property
    def failure(self) -> Exception | None:
        return self._failure

    def submit(self, **dispatch_args: Any) -> None:
        """Queue one batch's ConsumeQueueStore.dispatch; raises an earlier failure instead."""
        self._raise_failure()
        self._jobs.put(dispatch_args)

    def drain(self) -> None:
        """Wait until every submitted batch is dispatched; raises a failure of any of them."""
        self._jobs.join()
        self._raise_failure()

    def stop(self) -> None:
        """Dispatch what was submitted, then end the thread (a failure stays in ``failure``)."""
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                if self._failure is None:       # after a failure, units would leave a hole
                    self._cq.dispatch(**job)
            except Exception as e:  # noqa: BLE001 - kept, and raised in the caller's thread
                self._failure = e
            finally:
                self._jobs.task_done()
