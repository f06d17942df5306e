"""RocketMQ itself for the tests (and the benchmarks): a NameServer and brokers started from the jars
``make jvm`` resolves (deploy/jvm/pom.xml, sets ``rocketmq4`` and ``rocketmq5``), on loopback ports,
each broker on a store directory of ours, plus RocketMQ's own clients (tests/jvm/RocketClients.java,
compiled once per jar set) whose findings come back as JSON lines for the checks in Python.

Started as RocketMQ's scripts start them: ``NamesrvStartup -c namesrv.conf`` and ``BrokerStartup -c
broker.conf``; the startup classes set ``rocketmq.remoting.version`` themselves (a broker started any
other way registers as version 0 and the NameServer serves no route to it). Everything a server writes
besides the store (logs, the NameServer's kvConfig) goes to a home directory of its own: ``user.home``
and ``rocketmq.home.dir`` point there.

    with NameServer.start(home, "4") as ns:
        with RocketBroker.start(store, ns, "4", segment_size=1 << 20) as broker:
            rows = clients("4").run("pull", ns.address, "TopicA")
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar
from dataclasses import dataclass, field
from pathlib import Path

from ingest.devtools.broker.process import ServerProcess
from ingest.jvm import classpath, jar_set, java
from store.topics import is_system_topic, known_queue_counts
from tests.helpers.waiting import WaitTimeout, wait_until

# version -> the jar set of deploy/jvm/pom.xml
JAR_SETS = {"4": "rocketmq4", "5": "rocketmq5"}
JVM_SOURCES = Path(__file__).resolve().parents[2] / "jvm"
CLIENT_MAIN = "RocketClients"

# RocketMQ 4.9 reaches into java.nio to unmap its files; Java 17 allows it only when opened.
OPENS = ["--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
         "--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.util=ALL-UNNAMED",
         "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED", "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED"]
SERVER_HEAP = ["-Xms128m", "-Xmx512m", "-XX:MaxDirectMemorySize=512m", "-XX:+UseG1GC"]

# 4.9's startup classes configure logback from <rocketmq.home.dir>/conf (5.x logs under user.home)
LOGBACK = """<configuration>
  <appender name="file" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d{{HH:mm:ss.SSS}} %p %c{{0}} %t - %m%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="file"/></root>
</configuration>
"""

# A broker on a store of ours must never delete or clean it: no time-based deletion, no clean
# forced by a full disk (the shared machines' disks are fuller than RocketMQ's 75 % default).
KEEP_FILES = {"fileReservedTime": "876000", "diskMaxUsedSpaceRatio": "95", "cleanFileForciblyEnable": "false"}
BROKER_PORTS = (-2, 0, 1)     # the fast (VIP) channel, the broker, HA

KEEP_FILES_PROPS = ["-Drocketmq.broker.diskSpaceWarningLevelRatio=0.99",
                    "-Drocketmq.broker.diskSpaceCleanForciblyRatio=0.99"]


class RocketMQError(RuntimeError):
    """A RocketMQ server or client did not do what the test needs; the message has its log's tail."""


GET_ROUTEINFO_BY_TOPIC = 105     # RequestCode; the NameServer answers SUCCESS (0) or TOPIC_NOT_EXIST (17)


def topic_route(namesrv: str, topic: str, timeout_s: float = 5.0) -> bytes | None:
    """The NameServer's route for ``topic`` (TopicRouteData's JSON, as bytes: fastjson writes maps with
    number keys that Python's json refuses), or None while it has none. One request in RocketMQ's
    remoting frame: total length, JSON-serialized header length, the header."""
    header = json.dumps({"code": GET_ROUTEINFO_BY_TOPIC, "language": "JAVA", "version": 0, "opaque": 1,
                         "flag": 0, "serializeTypeCurrentRPC": "JSON", "extFields": {"topic": topic}}).encode()
    host, port = namesrv.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as s:
        s.sendall(struct.pack(">ii", 4 + len(header), len(header)) + header)
        frame = b""
        while len(frame) < 4 or len(frame) < 4 + struct.unpack_from(">i", frame)[0]:
            chunk = s.recv(65536)
            if not chunk:
                raise RocketMQError(f"the NameServer {namesrv} closed the connection mid-answer")
            frame += chunk
    header_len = struct.unpack_from(">i", frame, 4)[0] & 0xFFFFFF
    reply = json.loads(frame[8:8 + header_len])
    return frame[8 + header_len:] if reply["code"] == 0 else None


def wait_for_routes(namesrv: str, topics: Iterable[str], broker: str, timeout_s: float) -> None:
    """Until the NameServer routes every topic to ``broker`` (host:port). "boot success" comes before
    a broker's first registration is sure to have landed: RocketMQ 5 registers on a thread of its own,
    and a registration lost to a slow machine is repeated only after 30 s."""
    pending, named = set(topics), f'"{broker}"'.encode()

    def routed() -> bool:
        pending.difference_update({t for t in pending if named in (topic_route(namesrv, t) or b"")})
        return not pending

    wait_until(routed, timeout_s, f"the NameServer {namesrv} to route every topic to {broker}", interval_s=0.5,
               error=lambda m: RocketMQError(f"{m}; no route yet for {sorted(pending)[:5]}"))


def free_port_block(offsets: Sequence[int] = (0,)) -> int:
    """A loopback port p with p + each of ``offsets`` free (a broker listens on p, p - 2 and p + 1)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if min(offsets) + port < 1024 or max(offsets) + port > 65535:
            continue
        ok = True
        for off in offsets:
            with socket.socket() as t:
                try:
                    t.bind(("127.0.0.1", port + off))
                except OSError:
                    ok = False
                    break
        if ok:
            return port
    raise RocketMQError("no free block of loopback ports")


# A free port found by binding port 0 can be taken (by any process's outgoing connection) before the
# server binds it; starting again on other ports is what a user would do.
PORT_ATTEMPTS = 3
T = TypeVar("T")


def lost_port_race(exc: RocketMQError) -> bool:
    """Whether a server failed to start because a port it was given was taken meanwhile."""
    return "java.net.BindException: Address already in use" in str(exc)


def on_free_ports(start: Callable[[], T]) -> T:
    """``start()`` (which picks its ports), again on a lost port race, up to PORT_ATTEMPTS times."""
    for attempt in range(PORT_ATTEMPTS):
        try:
            return start()
        except RocketMQError as exc:
            if not lost_port_race(exc) or attempt == PORT_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _start(proc: ServerProcess, what: str, timeout_s: float, ready: bytes = b"boot success") -> None:
    """Start and wait until the startup class prints ``ready`` ("boot success": a broker has registered
    with its NameServer by then) in what the process logs from now on."""
    since = proc.log_path.stat().st_size if proc.log_path.exists() else 0
    proc.start()

    def started() -> bool:
        with open(proc.log_path, "rb") as f:
            f.seek(since)
            if ready in f.read():
                return True
        if not proc.alive():
            raise RocketMQError(f"{what} exited while starting; its log:\n{proc.log_tail(4000)}")
        return False

    try:
        wait_until(started, timeout_s, f"{what} to log {ready.decode()!r}", interval_s=0.2)
    except WaitTimeout as exc:
        proc.stop()
        raise RocketMQError(f"{what} did not start: {exc}; its log:\n{proc.log_tail(4000)}") from None


def _server_argv(version: str, home: Path, main: str, conf: Path, *extra: str) -> list[str]:
    return [java(), *SERVER_HEAP, *OPENS, *KEEP_FILES_PROPS, f"-Duser.home={home}",
            f"-Drocketmq.home.dir={home}", "-Drocketmq.client.logUseSlf4j=false",
            "-cp", classpath(JAR_SETS[version]), main, "-c", str(conf), *extra]


def _prepare_home(home: Path, log: Path) -> None:
    (home / "conf").mkdir(parents=True, exist_ok=True)
    for name in ("logback_namesrv.xml", "logback_broker.xml", "logback_tools.xml"):
        (home / "conf" / name).write_text(LOGBACK.format(log=log))


@dataclass
class NameServer:
    version: str
    home: Path
    port: int
    process: ServerProcess

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(cls, home: Path, version: str, timeout_s: float = 60.0) -> NameServer:
        home = Path(home)
        log = home / "namesrv.log"
        _prepare_home(home, home / "namesrv-logback.log")
        conf = home / "namesrv.conf"

        def start() -> NameServer:
            port = free_port_block()
            conf.write_text(f"listenPort={port}\nkvConfigPath={home / 'kvConfig.json'}\n")
            proc = ServerProcess(_server_argv(version, home, "org.apache.rocketmq.namesrv.NamesrvStartup", conf), log)
            _start(proc, f"the RocketMQ {version} NameServer", timeout_s)
            return cls(version, home, port, proc)

        return on_free_ports(start)

    def stop(self) -> None:
        self.process.stop()

    def __enter__(self) -> NameServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class NameServers:
    """A NameServer per version, started on first use (the session's: tests/conftest.py)."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self._running: dict[str, NameServer] = {}

    def get(self, version: str) -> NameServer:
        if version not in self._running:
            self._running[version] = NameServer.start(self.home / f"rocketmq{version}", version)
        return self._running[version]

    def stop(self) -> None:
        for server in self._running.values():
            server.stop()
        self._running.clear()


def store_geometry(store: Path) -> dict[str, str]:
    """broker.conf entries that give a broker this store's geometry (README, "A store a RocketMQ
    broker can serve"): segment size from the files, consume-queue file size, the index's settings."""
    conf: dict[str, str] = {}
    segments = sorted((store / "commitlog").glob("[0-9]" * 20))
    if segments:
        conf["mappedFileSizeCommitLog"] = str(segments[0].stat().st_size)
    cq_files = sorted(p for p in (store / "consumequeue").glob("*/*/*") if p.name.isdigit())
    if cq_files:
        conf["mappedFileSizeConsumeQueue"] = str(cq_files[0].stat().st_size)
    settings = store / "config" / "messageIndex.json"
    if settings.exists():
        index = json.loads(settings.read_text())
        conf["maxHashSlotNum"] = str(index["maxHashSlotNum"])
        conf["maxIndexNum"] = str(index["maxIndexNum"])
    return conf


@dataclass
class RocketBroker:
    version: str
    store: Path
    home: Path
    port: int
    name: str
    process: ServerProcess
    conf: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(cls, store: Path, nameserver: NameServer, version: str | None = None, *, name: str = "broker-a",
              home: Path | None = None, config: Mapping[str, str] | None = None, port: int | None = None,
              timeout_s: float = 180.0) -> RocketBroker:
        """A master broker serving ``store`` (its geometry read from the store unless ``config``
        gives it), registered with ``nameserver``, listening on ``port`` (and port - 2, port + 1),
        which should be the port of the store host the messages carry (their offset msgIds name it);
        returns once it listens."""
        version = version or nameserver.version
        store = Path(store)
        store.mkdir(parents=True, exist_ok=True)
        home = Path(home) if home else store.parent / f"{store.name}-{name}-rocketmq{version}"
        home.mkdir(parents=True, exist_ok=True)
        _prepare_home(home, home / "broker-logback.log")
        if port is None:     # ports of our choosing: another process may take one before the broker binds it
            return on_free_ports(lambda: cls.start(store, nameserver, version, name=name, home=home, config=config,
                                                   port=free_port_block(BROKER_PORTS), timeout_s=timeout_s))
        conf = {
            "brokerClusterName": "DefaultCluster", "brokerName": name, "brokerId": "0",
            "brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH",
            "listenPort": str(port), "brokerIP1": "127.0.0.1", "namesrvAddr": nameserver.address,
            "storePathRootDir": str(store), "storePathCommitLog": str(store / "commitlog"),
            "autoCreateTopicEnable": "false", "autoCreateSubscriptionGroup": "true",
            **KEEP_FILES, **store_geometry(store), **(config or {}),
        }
        path = home / "broker.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        proc = ServerProcess(_server_argv(version, home, "org.apache.rocketmq.broker.BrokerStartup", path),
                             home / "broker.log")
        _start(proc, f"the RocketMQ {version} broker on {store}", timeout_s)
        broker = cls(version, store, home, port, name, proc, conf)
        try:
            broker.wait_for_routes()
        except RocketMQError:
            proc.stop()
            raise
        return broker

    def stop(self, grace_s: float = 60.0) -> int | None:
        """SIGTERM: the broker's shutdown hook flushes, writes its checkpoint and removes ``abort``."""
        return self.process.stop(grace_s)

    def restart(self, timeout_s: float = 180.0) -> None:
        """Stop (if running) and start again on the same store, home and ports."""
        self.process.stop()
        _start(self.process, f"the RocketMQ {self.version} broker on {self.store}", timeout_s)
        self.wait_for_routes()

    def wait_for_routes(self, timeout_s: float = 90.0) -> None:
        """Until its NameServer routes every topic of the store to this broker."""
        topics = [t for t, n in known_queue_counts(self.store).items() if n > 0 and not is_system_topic(t)]
        try:
            wait_for_routes(self.conf["namesrvAddr"], topics, self.address, timeout_s)
        except RocketMQError as e:
            raise RocketMQError(f"{e}; the broker's log:\n{self.process.log_tail(4000)}") from None

    def kill(self) -> None:
        self.process.kill()

    def log_text(self) -> str:
        """Everything the broker logged (its store logger included), for the checks of recovery."""
        parts = []
        for p in sorted(self.home.rglob("*.log")):
            parts.append(p.read_text(errors="replace"))
        return "\n".join(parts)

    def __enter__(self) -> RocketBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Clients:
    """RocketMQ's own clients of one version (tests/jvm/RocketClients.java), run one command at a time."""

    def __init__(self, version: str, build_dir: Path) -> None:
        self.version = version
        self.build_dir = build_dir
        self.home = build_dir / "home"
        self.home.mkdir(parents=True, exist_ok=True)

    def run(self, command: str, *args: str, stdin: Iterable[str] = (), timeout_s: float = 300.0) -> list[dict]:
        """Run one command; its JSON lines on stdout, parsed. A non-zero exit raises with stderr."""
        argv = [java(), "-Xmx512m", *OPENS, f"-Duser.home={self.home}", "-Drocketmq.client.logLevel=WARN",
                "-Dcom.rocketmq.sendMessageWithVIPChannel=false",
                "-cp", classpath(JAR_SETS[self.version], self.build_dir), CLIENT_MAIN, command, *args]
        text = "".join(f"{line}\n" for line in stdin)
        for attempt in range(3):
            done = subprocess.run(argv, input=text, capture_output=True, text=True, timeout=timeout_s)
            rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode == 0:
                return rows
            if rows or attempt == 2:
                break
            # a client that failed before it got anything (its first route request timed out on a
            # loaded machine) is tried again; one that failed half way is a failure
            time.sleep(2)
        raise RocketMQError(f"RocketMQ {self.version} client `{command}` failed ({done.returncode}) after "
                            f"{len(rows)} lines:\n{done.stderr[-4000:]}")


def clients(version: str, build_root: Path | None = None) -> Clients:
    """RocketClients compiled against the version's jars (once per source change) under
    tests/jvm/out/<set>/ (git-ignored)."""
    jar_set(JAR_SETS[version])    # JvmJarsMissing with its hint first
    root = build_root or JVM_SOURCES / "out"
    out = root / JAR_SETS[version]
    source = JVM_SOURCES / f"{CLIENT_MAIN}.java"
    stamp = out / f"{CLIENT_MAIN}.class"
    if not stamp.exists() or stamp.stat().st_mtime < source.stat().st_mtime:
        javac = shutil.which("javac") or str(Path(java()).with_name("javac"))
        out.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".javac-"))
        done = subprocess.run([javac, "-nowarn", "-d", str(tmp), "-cp", classpath(JAR_SETS[version]), str(source)],
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RocketMQError(f"javac {source} against {JAR_SETS[version]} failed:\n{done.stderr[-4000:]}")
        for cls in tmp.glob("*.class"):
            os.replace(cls, out / cls.name)
        shutil.rmtree(tmp, ignore_errors=True)
    return Clients(version, out)
