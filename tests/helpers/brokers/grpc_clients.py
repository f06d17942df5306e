"""RocketMQ 5's official gRPC Python client (PyPI ``rocketmq-python-client``, a dev extra) reading a
store through the proxy (tests/helpers/brokers/rocketmq.py ``Proxy``), and the store's messages as our own reader
holds them, for the comparisons.

The client's quirks, as seen with 5.1.2 against a 5.3.3 proxy:
- a new consumer group on the pop path starts at each queue's end: ``start_from_beginning`` creates
  the group (``mqadmin updateSubGroup -b <broker> -g <group>``) and resets its offsets to 0 with
  ``mqadmin resetOffsetByTime -b <broker> -g <group> -t <topic> -s 0`` (without ``-b`` the reset moved
  them to the end in a trial; on a group the broker does not know yet it silently does nothing);
- ``SimpleConsumer.receive`` right after ``startup()`` may fail with "settings is null" until the
  proxy's settings have arrived (the SimpleConsumer's startup does not wait for them, unlike the
  PushConsumer's): the receive is tried again until a deadline;
- ``SimpleConsumer.ack_async`` returns None (it drops its future): acks here are synchronous;
- the client logs to ``~/logs/rocketmq_python/`` from its import on.

Its package is named ``rocketmq``, as tests/helpers/brokers/rocketmq.py is, and pytest puts tests/ first on sys.path:
``client()`` imports the installed package past it."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.brokers.rocketmq import RocketBroker
from tests.helpers.brokers.rocketmq_proxy import mqadmin
from tests.helpers.waiting import wait_until


@dataclass(frozen=True)
class Received:
    """One message as the gRPC client handed it over."""

    topic: str
    message_id: str
    body: bytes
    tag: str | None
    keys: frozenset[str]
    properties: dict[str, str]      # the user properties
    corrupted: bool


@dataclass(frozen=True)
class Stored:
    """One message as our StoreReader reads it from the store."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str]

    @property
    def coordinates(self) -> tuple[str, int, int]:
        p = self.properties
        return p["KAFKA_TOPIC"], int(p["KAFKA_PARTITION"]), int(p["KAFKA_OFFSET"])


def stored_messages(root: str | Path) -> list[Stored]:
    """Every committed message of a store, in commit-log order, copied out of the reader's maps."""
    from store import StoreReader

    reader = StoreReader.open(str(root))
    try:
        return [Stored(m.topic, m.queue_id, bytes(m.body), dict(m.properties)) for _, m in reader.iter_messages()]
    finally:
        reader.close()


def client() -> object:
    """The installed ``rocketmq`` package (rocketmq-python-client), not tests/helpers/brokers/rocketmq.py."""
    loaded = sys.modules.get("rocketmq")
    if loaded is not None and hasattr(loaded, "SimpleConsumer"):
        return loaded
    here = Path(__file__).resolve().parents[2]
    path = [p for p in sys.path if Path(p or ".").resolve() != here]
    spec = importlib.machinery.PathFinder.find_spec("rocketmq", path)
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        raise ImportError("rocketmq-python-client is not installed (pyproject.toml's dev extra)")
    module = importlib.util.module_from_spec(spec)
    sys.modules["rocketmq"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop("rocketmq", None)
        raise
    return module


def received(message: object) -> Received:
    m = message
    return Received(m.topic, m.message_id, bytes(m.body), m.tag, frozenset(m.keys or ()),  # type: ignore[attr-defined]
                    dict(m.properties), bool(m.corrupted))  # type: ignore[attr-defined]


def start_from_beginning(broker: RocketBroker, group: str, topics: Iterable[str], home: Path) -> None:
    """Create ``group`` on ``broker`` (mqadmin updateSubGroup -b) and reset its offsets of every queue
    of ``topics`` to 0 (mqadmin resetOffsetByTime -b ... -s 0), before any consumer of it starts; each
    queue's new offset is checked in mqadmin's table. On a group the broker does not know yet,
    resetOffsetByTime -b prints nothing, exits 0 and resets nothing."""
    mqadmin("5", broker.conf["namesrvAddr"], "updateSubGroup", "-b", broker.address, "-g", group, home=home)
    for topic in topics:
        out = mqadmin("5", broker.conf["namesrvAddr"], "resetOffsetByTime", "-b", broker.address, "-g", group,
                      "-t", topic, "-s", "0", home=home)
        rows = [line.split() for line in out.splitlines() if line.startswith(broker.name)]
        if not rows or any(r[-1] != "0" for r in rows):
            raise AssertionError(f"resetOffsetByTime {group} {topic} did not set every queue to 0:\n{out}")


def _configuration(endpoint: str) -> object:
    rmq = client()
    return rmq.ClientConfiguration(endpoint, rmq.Credentials(), request_timeout=10)


@dataclass
class SimpleRun:
    messages: list[Received]          # duplicates included
    failures: list[str]               # the errors of the receives that failed (and were tried again)
    receives: int
    receive_s: float                  # time in receive calls
    ack_s: float                      # time acking


def simple_consume(endpoint: str, group: str, topics: list[str], expect: int, *, deadline_s: float = 300.0,
                   batch: int = 32, invisible_s: int = 120, await_s: int = 2, ack_threads: int = 8) -> SimpleRun:
    """A SimpleConsumer over ``topics``: receive and ack (each batch's acks on ``ack_threads`` threads,
    all done before the next receive) until ``expect`` messages are in and then a round of empty
    receives (one per topic: the proxy pops from every queue of a topic) follows."""
    rmq = client()
    consumer = rmq.SimpleConsumer(_configuration(endpoint), group, {t: rmq.FilterExpression("*") for t in topics},
                                  await_duration=await_s)
    consumer.startup()
    run = SimpleRun([], [], 0, 0.0, 0.0)
    empties = 0

    def received_all(acks: ThreadPoolExecutor) -> bool:
        """One receive (the receive is the wait), its acks; whether every message and the empty round are in."""
        nonlocal empties
        if len(run.messages) >= expect and empties >= len(topics):
            return True
        t0 = time.monotonic()
        try:
            run.receives += 1
            messages = consumer.receive(batch, invisible_s)
        except Exception as e:          # "settings is null" before the settings came: try again
            run.failures.append(f"{type(e).__name__}: {e}")
            time.sleep(0.2)
            return False
        finally:
            run.receive_s += time.monotonic() - t0
        if not messages:
            empties += 1
            return False
        empties = 0
        run.messages.extend(received(m) for m in messages)
        t0 = time.monotonic()
        for done in [acks.submit(consumer.ack, m) for m in messages]:
            done.result()
        run.ack_s += time.monotonic() - t0
        return False

    try:
        with ThreadPoolExecutor(ack_threads) as acks:
            wait_until(lambda: received_all(acks), deadline_s, f"SimpleConsumer {group} to receive {expect} messages",
                       interval_s=0, error=lambda m: TimeoutError(
                           f"{m}: {len(run.messages)} in; {len(run.failures)} receives failed, the last: "
                           f"{run.failures[-1:]}"))
    finally:
        consumer.shutdown()
    return run


def push_consume(endpoint: str, group: str, topics: list[str], expect: int, *, deadline_s: float = 300.0,
                 quiet_s: float = 3.0) -> list[Received]:
    """A PushConsumer over ``topics``: every message its listener is handed (each acked: SUCCESS) until
    ``expect`` are in and then none for ``quiet_s`` (a redelivery would show there)."""
    rmq = client()
    got: list[Received] = []
    lock = threading.Lock()

    class Collect(rmq.MessageListener):
        def consume(self, message: object) -> object:
            with lock:
                got.append(received(message))
            return rmq.ConsumeResult.SUCCESS

    consumer = rmq.PushConsumer(_configuration(endpoint), group, Collect(),
                                {t: rmq.FilterExpression("*") for t in topics})
    consumer.startup()
    seen, since = 0, time.monotonic()

    def all_in_and_quiet() -> bool:
        nonlocal seen, since
        now = time.monotonic()
        with lock:
            n = len(got)
        if n != seen:
            seen, since = n, now
            return False
        return n >= expect and now - since >= quiet_s

    try:
        wait_until(all_in_and_quiet, deadline_s, f"PushConsumer {group} to be handed {expect} messages",
                   interval_s=0.1, error=lambda m: TimeoutError(f"{m}: {seen} in"))
    finally:
        consumer.shutdown()
    with lock:
        return list(got)
