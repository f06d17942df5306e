"""What every broker launcher shares: the Broker handle, its error, a free loopback port and the
wait for a broker to answer."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


class BrokerError(RuntimeError):
    """The broker could not be found or started."""


@dataclass
class Broker:
    """A running (or external) Kafka broker."""

    bootstrap_servers: str
    kind: str  # "external" | "testcontainers" | "apache-kafka" | "tansu"
    pid: int | None = None
    log_path: Path | None = None
    data_dir: Path | None = None
    listeners: dict[str, str] = field(default_factory=dict)   # more listeners than bootstrap_servers': name -> host:port
    _stop: Callable[[], None] | None = field(default=None, repr=False)
    _restart: Callable[[], int] | None = field(default=None, repr=False)

    def describe(self) -> str:
        extra = f", pid {self.pid}, log {self.log_path}" if self.pid else ""
        return f"{self.kind} broker at {self.bootstrap_servers}{extra}"

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None

    def restart(self) -> None:
        """Stop the broker and start it again on the same ports and data (brokers that keep their
        data on disk only)."""
        if self._restart is None:
            raise BrokerError(f"a {self.kind} broker cannot be restarted by us")
        self.pid = self._restart()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_for_metadata(bootstrap: str, timeout_s: float = 30.0, alive: Callable[[], bool] | None = None) -> None:
    """Block until a metadata request to ``bootstrap`` succeeds (or ``alive()`` says the process died)."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise BrokerError(f"the broker for {bootstrap} exited while starting")
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000,
                                     client_id="commitlog-broker-probe")
            try:
                admin.list_topics()
                return
            finally:
                admin.close()
        except (KafkaError, OSError) as exc:
            last = exc
            time.sleep(0.2)
    raise BrokerError(f"broker at {bootstrap} did not answer a metadata request in {timeout_s:.0f} s: {last}")
