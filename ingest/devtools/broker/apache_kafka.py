"""Apache Kafka itself, one KRaft node (broker and controller in one JVM) on 127.0.0.1, its log on
disk, from the jars ``make jvm`` resolves (deploy/jvm/pom.xml, set ``kafka``).

Started as Kafka's own scripts start it: ``kafka.tools.StorageTool format`` once, then ``kafka.Kafka``
with a server.properties of ours. Unlike Tansu it honours aborted transactions, compacts, deletes by
retention and restarts with its data (``Broker.restart``), which the tests of those behaviours need.
"""

from __future__ import annotations

import base64
import secrets
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from ingest.devtools.broker.base import Broker, BrokerError, free_port, wait_for_metadata
from ingest.devtools.broker.process import ServerProcess
from ingest.jvm import JvmJarsMissing, classpath, java

# A single node: every internal topic has one replica and one partition (fifty partitions of
# __consumer_offsets and of __transaction_state would cost seconds at the first group or transaction).
# The cleaner and the retention check run often, so compaction and deletion show within a test; only a
# topic's own retention.ms deletes by age (tests produce records with timestamps of years ago, which
# the broker's default of 7 days would delete at once).
SINGLE_NODE = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "log.retention.ms": "-1",
    "log.retention.check.interval.ms": "1000",
    "log.cleaner.backoff.ms": "500",
    "log.segment.delete.delay.ms": "0",
    "file.delete.delay.ms": "0",
    "auto.create.topics.enable": "true",
}

LOG4J2 = """\
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = out
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
"""

JVM_OPTIONS = ["-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
               "-Djava.awt.headless=true"]


def cluster_id() -> str:
    """A Kafka Uuid as StorageTool's random-uuid prints it: 16 random bytes, URL-safe base64, unpadded,
    never starting with '-' (a command line would read it as an option; Kafka's Uuid avoids it too)."""
    while True:
        text = base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def server_properties(port: int, controller_port: int, log_dirs: Path,
                      overrides: Mapping[str, str] | None = None,
                      listeners: Mapping[str, tuple[str, int]] | None = None) -> str:
    """``listeners``: more listeners beside the PLAINTEXT one (which the controller's and the
    brokers' own traffic keep), each name -> (security protocol, port); overrides add their settings
    (``listener.name.<name>.*``)."""
    extra = dict(listeners or {})
    bound = "".join(f",{name}://127.0.0.1:{p}" for name, (_, p) in extra.items())
    protocols = "".join(f",{name}:{protocol}" for name, (protocol, _) in extra.items())
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}{bound}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}{bound}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT{protocols}",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dirs),
        **SINGLE_NODE,
        **(overrides or {}),
    }
    return "".join(f"{k}={v}\n" for k, v in settings.items())


def start_kafka(data_dir: Path | None = None, port: int | None = None,
                config: Mapping[str, str] | None = None, timeout_s: float = 90.0,
                listeners: Mapping[str, str] | None = None, scram: Sequence[str] = ()) -> Broker:
    """Format (unless ``data_dir`` already holds a formatted node) and start Apache Kafka; wait
    until it answers a metadata request on its PLAINTEXT listener. ``config`` overrides
    server.properties entries; ``listeners`` adds listeners, name -> security protocol, each on a
    free port (``Broker.listeners`` says where); ``scram`` are SCRAM credentials made at format time,
    as StorageTool's --add-scram takes them (``SCRAM-SHA-512=[name=alice,password=...]``)."""
    try:
        cp = classpath("kafka")
        java_bin = java()
    except JvmJarsMissing as exc:
        raise BrokerError(str(exc)) from None
    own_home = data_dir is None
    home = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="apache-kafka-"))
    home.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    controller_port = free_port()
    logs = home / "kraft-logs"
    props = home / "server.properties"
    extra = {name: (protocol, free_port()) for name, protocol in (listeners or {}).items()}
    props.write_text(server_properties(port, controller_port, logs, config, extra))
    log4j = home / "log4j2.properties"
    log4j.write_text(LOG4J2)
    jvm = [java_bin, *JVM_OPTIONS, f"-Dlog4j2.configurationFile={log4j}", "-cp", cp]
    log_path = home / "kafka.log"
    if not (logs / "meta.properties").exists():
        fmt = ServerProcess([*jvm, "kafka.tools.StorageTool", "format", "--standalone",
                             "--cluster-id", cluster_id(), "--config", str(props),
                             *(arg for credential in scram for arg in ("--add-scram", credential))], log_path)
        fmt.start()
        if fmt.wait(timeout_s) != 0:
            raise BrokerError(f"formatting Kafka's storage in {logs} failed; its log: {log_path}\n{fmt.log_tail()}")
    bootstrap = f"127.0.0.1:{port}"
    server = ServerProcess([*jvm, "kafka.Kafka", str(props)], log_path)

    def start() -> int:
        pid = server.start()
        try:
            wait_for_metadata(bootstrap, timeout_s, alive=server.alive)
        except BrokerError:
            server.stop()
            raise BrokerError(f"Apache Kafka did not start; its log: {log_path}\n{server.log_tail()}") from None
        return pid

    def restart() -> int:
        server.stop()
        return start()

    def stop() -> None:
        server.stop()
        if own_home:   # a broker of a moment: its data goes with it
            shutil.rmtree(home, ignore_errors=True)

    pid = start()
    return Broker(bootstrap, "apache-kafka", pid=pid, log_path=log_path, data_dir=home,
                  listeners={name: f"127.0.0.1:{p}" for name, (_, p) in extra.items()},
                  _stop=stop, _restart=restart)
