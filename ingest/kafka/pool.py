"""Task consumers kept across micro-batches in one Python worker, as Spark's own Kafka connector keeps
its consumers per executor (KafkaDataConsumer's pool).

A new kafka-python consumer's first poll waits for the partition's metadata, which it may refresh only
``retry_backoff_ms`` after its bootstrap, and connects to the leader: 100-200 ms a task, every
micro-batch, with the broker idle. Spark reuses its Python workers (spark.python.worker.reuse, the
default), so a consumer handed back when its task ends is taken by the worker's next task of the same
client settings, whatever partition that task reads (assign and seek are local). A consumer that ended
its task in error is closed, never pooled; an idle one is closed after ``IDLE_S`` by a sweeper thread
(an idle consumer whose broker went away would otherwise go on reconnecting, and logging it).

One pool per worker process (``POOL``): the cache's whole point is to outlive a task, and a worker
runs one task at a time.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

IDLE_S = 30.0
MAX_IDLE_PER_KEY = 4


def pool_key(params: Mapping[str, Any]) -> str:
    """The client settings a consumer was made with, as one comparable value."""
    return repr(sorted((k, repr(v)) for k, v in params.items()))


class ConsumerPool:
    def __init__(self, idle_s: float = IDLE_S, max_idle: int = MAX_IDLE_PER_KEY) -> None:
        self.idle_s = idle_s
        self.max_idle = max_idle
        self._idle: dict[str, list[tuple[float, Any]]] = {}
        self._lock = threading.Lock()
        self.made = 0           # consumers created (a pooled one taken is not counted)
        self.reused = 0
        self._sweeper: threading.Thread | None = None

    def take(self, key: str, make: Callable[[], Any]) -> Any:
        """A pooled consumer of ``key``'s settings, or a new one from ``make``."""
        self._expire()
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                self.reused += 1
                return idle.pop()[1]
        consumer = make()
        self.made += 1
        return consumer

    def give_back(self, key: str, consumer: Any) -> None:
        """Keep ``consumer`` (its task read its range to the end) for the next task."""
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < self.max_idle:
                idle.append((time.monotonic(), consumer))
                if self._sweeper is None:
                    self._sweeper = threading.Thread(target=self._sweep, name="kafka-consumer-pool", daemon=True)
                    self._sweeper.start()
                return
        _close(consumer)

    def _sweep(self) -> None:
        while True:
            time.sleep(max(self.idle_s / 4, 0.05))
            self._expire()

    def _expire(self) -> None:
        now = time.monotonic()
        old = []
        with self._lock:
            for key, idle in self._idle.items():
                old += [c for t, c in idle if now - t > self.idle_s]
                idle[:] = [(t, c) for t, c in idle if now - t <= self.idle_s]
        for c in old:
            _close(c)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for entries in idle.values():
            for _, c in entries:
                _close(c)


def _close(consumer: Any) -> None:
    try:
        consumer.close(autocommit=False)
    except Exception:  # noqa: BLE001 -- a pooled consumer's socket may be long gone; closing is best effort
        pass


POOL = ConsumerPool()
atexit.register(POOL.close)
