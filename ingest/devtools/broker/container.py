"""Apache Kafka in a container, through testcontainers' generic container: the broker the tests take
when a Docker engine answers (``ingest.devtools.broker.broker``).

The image is ours (``commitlog-ingest/kafka:4.1.1``, deploy/kafka/, built by ``make test``'s
``.ci/docker-images.sh`` from the same Apache Kafka jars ``make jvm`` resolves): testcontainers'
``KafkaContainer`` is built around Confluent's image, and no registry image can be pulled on our
machines. The container shares the host's network (the private engine has no bridge), so it listens
on free 127.0.0.1 ports chosen here and advertises them; two test workers each start their own.
"""

from __future__ import annotations

import os
import time

from ingest.devtools.broker.apache_kafka import SINGLE_NODE
from ingest.devtools.broker.base import Broker, BrokerError, free_port, wait_for_metadata

KAFKA_IMAGE = "commitlog-ingest/kafka:4.1.1"
ENV_IMAGE = "COMMITLOG_KAFKA_IMAGE"

# testcontainers reads these when it is first imported. Ryuk (its reaper) is an image of the registry
# and cannot be pulled: we stop our containers ourselves. With /.dockerenv present (a machine that is
# itself a container) testcontainers would look for the container's gateway; our containers are on
# the host's network, so the host is 127.0.0.1. A caller's own setting stands.
TESTCONTAINERS_ENV = {
    "TESTCONTAINERS_RYUK_DISABLED": "true",
    "TESTCONTAINERS_CONNECTION_MODE": "docker_host",
    "TC_HOST": "127.0.0.1",
}


def docker_available() -> bool:
    """Does a Docker engine answer (DOCKER_HOST, else the default socket)?"""
    if not os.environ.get("DOCKER_HOST") and not os.path.exists("/var/run/docker.sock"):
        return False
    try:
        import docker  # from testcontainers' dependencies

        client = docker.from_env(timeout=3)
        try:
            client.ping()
        finally:
            client.close()
        return True
    except Exception:  # noqa: BLE001 - any failure simply means "no engine here"
        return False


def container_missing(image: str | None = None) -> str | None:
    """Why the containerized broker cannot start here (no engine, or the image not built), or None."""
    image = image or os.environ.get(ENV_IMAGE, KAFKA_IMAGE)
    if not docker_available():
        return f"no Docker engine answers at DOCKER_HOST={os.environ.get('DOCKER_HOST') or '(default socket)'}"
    import docker

    client = docker.from_env(timeout=10)
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        return f"the image {image} is not built (.ci/docker-engine.sh images)"
    finally:
        client.close()
    return None


def kafka_env(port: int, controller_port: int) -> dict[str, str]:
    """The image's settings (deploy/kafka/start-kafka.sh: KAFKA_FOO_BAR is foo.bar): what our embedded
    Apache Kafka runs with, on these loopback ports."""
    env = {"KAFKA_" + key.replace("_", "__").replace(".", "_").upper(): value for key, value in SINGLE_NODE.items()}
    env.update({
        "KAFKA_LISTENERS": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{port}",
        "KAFKA_CONTROLLER_QUORUM_BOOTSTRAP_SERVERS": f"127.0.0.1:{controller_port}",
    })
    return env


def start_container(image: str | None = None, timeout_s: float = 120.0) -> Broker:
    """Start Apache Kafka from ``image`` (default $COMMITLOG_KAFKA_IMAGE, else ours) on free loopback
    ports; wait until it answers a metadata request. The broker restarts with its data (the same
    container started again)."""
    for key, value in TESTCONTAINERS_ENV.items():
        os.environ.setdefault(key, value)
    from testcontainers.core.container import DockerContainer

    image = image or os.environ.get(ENV_IMAGE, KAFKA_IMAGE)
    port, controller_port = free_port(), free_port()
    container = DockerContainer(image).with_kwargs(network_mode="host")
    for key, value in kafka_env(port, controller_port).items():
        container.with_env(key, value)
    try:
        container.start()
    except Exception as exc:  # noqa: BLE001 - docker's errors name the image; ours says what to do
        raise BrokerError(f"could not start image {image}: {exc} (build it: .ci/docker-engine.sh images)") from None
    bootstrap = f"127.0.0.1:{port}"

    def running() -> bool:
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        return wrapped.status == "running"

    def wait() -> None:
        started = time.monotonic()
        try:
            wait_for_metadata(bootstrap, timeout_s, alive=running)
        except BrokerError:
            logs = container.get_wrapped_container().logs(tail=20).decode(errors="replace")
            container.stop()
            raise BrokerError(f"Apache Kafka in {image} did not answer at {bootstrap} in {timeout_s:.0f} s "
                              f"({time.monotonic() - started:.0f} s); its last lines:\n{logs}") from None

    def restart() -> int:
        container.get_wrapped_container().restart(timeout=30)
        wait()
        return 0

    wait()
    return Broker(bootstrap, "testcontainers", _stop=container.stop, _restart=restart)
