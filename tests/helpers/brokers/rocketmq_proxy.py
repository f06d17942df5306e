"""RocketMQ 5's proxy (the gRPC clients' way in: SimpleConsumer, PushConsumer) and mqadmin, beside the
NameServer and brokers of tests/helpers/brokers/rocketmq.py, from the same jar sets."""

from __future__ import annotations

import json
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ingest.devtools.broker.process import ServerProcess
from ingest.jvm import classpath, java
from tests.helpers.brokers.rocketmq import (JAR_SETS, OPENS, SERVER_HEAP, NameServer, RocketMQError, _start,
                            free_port_block)
from tests.helpers.waiting import wait_until


PROXY_MAIN = "org.apache.rocketmq.proxy.ProxyStartup"
PROXY_READY = b"rocketmq-proxy startup successfully"     # ProxyStartup prints it once both servers listen


def port_answers(address: str, timeout_s: float = 1.0) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


@dataclass
class Proxy:
    """RocketMQ 5's proxy in cluster mode (``ProxyStartup -pm cluster -pc rmq-proxy.json``, 5.x jars
    only): a gRPC server for the 5.x clients (SimpleConsumer, PushConsumer: the pop path) and a
    remoting server, both in front of the brokers its NameServer routes to. Its logs go under a home
    of its own (``user.home``/logs/rocketmqlogs/proxy.log); what it prints to stdout to proxy.out.
    gRPC's server binds every interface (forPort: the proxy has no setting for the address); the
    clients are given 127.0.0.1. Start it once a broker of the cluster is registered: its start
    creates its system topic (DefaultHeartBeatSyncerTopic) on the cluster, and fails without one."""

    home: Path
    grpc_port: int
    remoting_port: int
    process: ServerProcess
    conf: dict[str, object] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        """What a gRPC client's ClientConfiguration takes."""
        return f"127.0.0.1:{self.grpc_port}"

    @classmethod
    def start(cls, home: Path, nameserver: NameServer, *, cluster: str = "DefaultCluster",
              timeout_s: float = 120.0) -> Proxy:
        if nameserver.version != "5":
            raise RocketMQError("the proxy is RocketMQ 5's: start it with a 5.x NameServer")
        home = Path(home)
        home.mkdir(parents=True, exist_ok=True)
        grpc_port, remoting_port = free_port_block(), free_port_block()
        while remoting_port == grpc_port:
            remoting_port = free_port_block()
        conf: dict[str, object] = {"rocketMQClusterName": cluster, "namesrvAddr": nameserver.address,
                                   "proxyMode": "cluster", "grpcServerPort": grpc_port,
                                   "remotingListenPort": remoting_port,
                                   # SIGTERM waits this long for gRPC calls in flight (30 s by default)
                                   "grpcShutdownTimeSeconds": 2}
        path = home / "rmq-proxy.json"
        path.write_text(json.dumps(conf, indent=2))
        argv = [java(), *SERVER_HEAP, *OPENS, f"-Duser.home={home}", f"-Drocketmq.home.dir={home}",
                "-Drocketmq.client.logUseSlf4j=false", "-cp", classpath(JAR_SETS["5"]), PROXY_MAIN,
                "-pm", "cluster", "-pc", str(path)]
        proc = ServerProcess(argv, home / "proxy.out")
        proxy = cls(home, grpc_port, remoting_port, proc, conf)
        _start(proc, "the RocketMQ 5 proxy", timeout_s, ready=PROXY_READY)

        def answers() -> bool:
            if not proc.alive():
                raise RocketMQError(f"the proxy exited before its gRPC port {grpc_port} answered")
            return port_answers(proxy.endpoint)

        try:
            wait_until(answers, timeout_s, f"the proxy's gRPC port {grpc_port} to answer", interval_s=0.2,
                       error=RocketMQError)
        except RocketMQError as exc:
            proc.stop()
            raise RocketMQError(f"{exc}; its log:\n{proxy.log_tail()}") from None
        return proxy

    def log_tail(self, chars: int = 4000) -> str:
        log = self.home / "logs" / "rocketmqlogs" / "proxy.log"
        text = self.process.log_tail(chars)
        if log.exists():
            text += "\n-- proxy.log --\n" + log.read_text(errors="replace")[-chars:]
        return text

    def stop(self, grace_s: float = 30.0) -> int | None:
        return self.process.stop(grace_s)

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def mqadmin(version: str, namesrv: str, command: str, *args: str, home: Path | None = None,
            timeout_s: float = 120.0) -> str:
    """One ``mqadmin`` command (rocketmq-tools' MQAdminStartup, from the version's jar set) against
    ``namesrv``; its stdout. A non-zero exit, or a printed exception, raises with what it printed."""
    home = Path(home or tempfile.gettempdir())
    argv = [java(), "-Xmx256m", *OPENS, f"-Duser.home={home}", f"-Drocketmq.home.dir={home}",
            "-Drocketmq.client.logUseSlf4j=false", "-cp", classpath(JAR_SETS[version]),
            "org.apache.rocketmq.tools.command.MQAdminStartup", command, "-n", namesrv, *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0 or "Exception" in done.stdout:
        raise RocketMQError(f"mqadmin {command} {' '.join(args)} failed ({done.returncode}):\n"
                            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout
