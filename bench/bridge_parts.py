"""What bench/bridge.py runs: the Kafka-to-RocketMQ bridge (bench/jvm/KafkaRocketBridge.java) against
RocketMQ 5.3.3 brokers, ``commitlog replay`` and ``commitlog run`` as processes, each timed from launch
to exit with the CPU it and the broker it feeds used; and reading a store back by Kafka coordinates."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import common

BRIDGE_MAIN = "KafkaRocketBridge"
BRIDGE_JVM = ["-Xms512m", "-Xmx1g", "-XX:+UseG1GC", "-Drocketmq.client.logLevel=WARN",
              "-Dcom.rocketmq.sendMessageWithVIPChannel=false"]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# replay's summary: "written: N messages, ... W s (R rec/s; E s with start-up)"
REPLAY_WRITTEN = re.compile(r"written: (\d+) messages, .*?, ([\d.]+) s \([\d,]+ rec/s; ([\d.]+) s with start-up\)")


class BenchFailed(RuntimeError):
    """A side failed or stored another number of records than the topic holds."""


@dataclass
class Timed:
    """One side's run: wall seconds from launch to exit, its own clocks, CPU seconds."""
    whole_s: float
    own_s: float | None = None          # the bridge from main(), replay's own clock (verify left out)
    first_s: float | None = None        # from the first record read (replay: its write phase)
    cpu_s: float = 0.0                  # the process and its children (Spark's JVM, Python workers)
    broker_cpu_s: float | None = None   # the RocketMQ broker it sent to
    extra: dict[str, float] = field(default_factory=dict)


def bridge_classpath(classes: Path) -> str:
    """Kafka's client (4.1.1, with its codecs) and RocketMQ 5.3.3's client, in one JVM."""
    from ingest.jvm import lib_dir

    lib = lib_dir()
    kafka = [lib / "kafka" / "kafka-clients-4.1.1.jar", *sorted((lib / "kafka").glob("snappy-java-*.jar"))]
    return os.pathsep.join([str(classes), *map(str, kafka), str(lib / "rocketmq5" / "*")])


def compile_bridge(out: Path) -> Path:
    from ingest.jvm import lib_dir

    classes = out / "classes"
    if not (classes / f"{BRIDGE_MAIN}.class").exists():
        cp = os.pathsep.join([str(lib_dir() / "kafka" / "kafka-clients-4.1.1.jar"), str(lib_dir() / "rocketmq5" / "*")])
        common.compile_java(common.BENCH_DIR / "jvm" / f"{BRIDGE_MAIN}.java", classes, cp)
    return classes


def proc_cpu_s(pid: int | None) -> float:
    """utime + stime of a running process, seconds (0 when it is gone)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def tree_pids(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += common.child_pids(p)
    return out


def timed_process(argv: list[str], timeout_s: float, env: dict[str, str] | None = None,
                  interval_s: float = 0.25) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run ``argv`` to its exit: (the result, wall seconds, CPU seconds of it and every process under
    it, sampled from /proc every ``interval_s``: Spark's JVM and its Python workers are not our children,
and a process's last interval before it exits is not counted)."""
    cpu: dict[int, float] = {}
    t0 = time.perf_counter()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        out: dict[str, str] = {}
        reader = threading.Thread(target=lambda: out.update(zip(("stdout", "stderr"), proc.communicate())))
        reader.start()
        while reader.is_alive() and time.perf_counter() - t0 < timeout_s:
            for p in tree_pids(proc.pid):
                cpu[p] = max(cpu.get(p, 0.0), proc_cpu_s(p))
            reader.join(interval_s)
        if reader.is_alive():
            proc.kill()
            reader.join()
        whole = time.perf_counter() - t0
    done = subprocess.CompletedProcess(argv, proc.returncode, out.get("stdout", ""), out.get("stderr", ""))
    return done, whole, sum(cpu.values())


def bridge_argv(classes: Path, bootstrap: str, topic: str, namesrv: str, rocket_topic: str, broker_name: str,
                group: str) -> list[str]:
    from ingest.jvm import java

    return [java(), *BRIDGE_JVM, "-cp", bridge_classpath(classes), BRIDGE_MAIN, bootstrap, topic, namesrv,
            rocket_topic, broker_name, group]


def parse_bridge(stdout: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split()[1:] for line in stdout.splitlines() if line.split()}


def run_bridge(argv: list[str], expected: int, broker_pid: int | None, timeout_s: float = 1800) -> Timed:
    """The bridge once, launch to exit; every one of ``expected`` records must be SEND_OK."""
    b0 = proc_cpu_s(broker_pid)
    done, whole, cpu = timed_process(argv, timeout_s)
    bcpu = proc_cpu_s(broker_pid) - b0
    lines = parse_bridge(done.stdout)
    if done.returncode != 0 or "done" not in lines or int(lines["done"][2]) != expected:
        raise BenchFailed(f"the bridge exited {done.returncode}, expected {expected} acknowledged:\n"
                          f"{done.stdout[-1500:]}{done.stderr[-3000:]}")
    own_ms, first_ms, _, dropped, resends = map(int, lines["done"])
    return Timed(whole, own_ms / 1e3, first_ms / 1e3, cpu, bcpu, {"headers_dropped": dropped, "resends": resends})


def commitlog_argv(command: str, bootstrap: str, topic: str, store: Path, flush: str) -> list[str]:
    exe = Path(common.python()).with_name("commitlog")
    # Spark's 15 s for a Python worker to connect back is too short on a machine shared with other work
    argv = [str(exe), command, "--bootstrap-servers", bootstrap, "--store", str(store), "--flush", flush,
            "--spark-conf", "spark.python.authenticate.socketTimeout=300s"]
    if command == "replay":
        return [*argv, "--topics", topic, "--progress", "log"]
    return [*argv, "--subscribe", topic, "--checkpoint", str(store.parent / "checkpoint"),
            "--trigger", "available-now", "--starting-offsets", "earliest"]


def run_commitlog(argv: list[str], expected: int, timeout_s: float = 1800) -> Timed:
    """`commitlog replay` (its closing verify included) or `commitlog run --trigger available-now`,
    launch to exit; the store must then hold ``expected`` records."""
    done, whole, cpu = timed_process(argv, timeout_s, common.env_for_subprocess())
    if done.returncode != 0:
        raise BenchFailed(f"{' '.join(argv[:2])} exited {done.returncode}:\n{done.stdout[-1500:]}{done.stderr[-3000:]}")
    store = Path(argv[argv.index("--store") + 1])
    stored = count_store(store, argv[argv.index("--topics" if "--topics" in argv else "--subscribe") + 1])
    if stored != expected:
        raise BenchFailed(f"{' '.join(argv[:2])} stored {stored} records, expected {expected}")
    m = REPLAY_WRITTEN.search(done.stdout)
    if m:
        return Timed(whole, float(m.group(3)), float(m.group(2)), cpu)
    return Timed(whole, None, None, cpu)


def count_store(store: Path, topic: str, queues: int = 8) -> int:
    """Messages of ``topic`` in a store's consume queues (what a consumer can reach)."""
    from store import StoreReader

    with StoreReader.open(store) as reader:
        return sum(hi - lo for lo, hi in (reader.queue_range(topic, q) for q in range(queues)))


def coordinates(store: Path, topic: str) -> dict[tuple[int, int], int]:
    """(Kafka partition, offset) -> how many messages of ``topic`` carry it, in a store of ours or a
    broker's (the bridge writes KAFKA_PARTITION and KAFKA_OFFSET, as we do)."""
    from store import StoreReader

    seen: dict[tuple[int, int], int] = {}
    with StoreReader.open(store) as reader:
        for _, msg in reader.iter_messages():
            if msg.topic != topic:
                continue
            key = (int(msg.properties["KAFKA_PARTITION"]), int(msg.properties["KAFKA_OFFSET"]))
            seen[key] = seen.get(key, 0) + 1
    return seen


def duplicates_and_losses(seen: dict[tuple[int, int], int], partitions: int, per_partition: int) -> tuple[int, int]:
    dupes = sum(n - 1 for n in seen.values())
    lost = sum(1 for p in range(partitions) for o in range(per_partition) if (p, o) not in seen)
    return dupes, lost


@contextmanager
def rocketmq_brokers(root: Path, topics: dict[str, list[str]]) -> Iterator[tuple[object, dict[str, object]]]:
    """A 5.3.3 NameServer and one broker per flush type (``topics``: flush type -> the 8-queue topics
    it serves, made before it starts, as autoCreateTopicEnable is off), default 1 GiB segments."""
    from store.topics import merge_topics
    from tests.helpers.brokers.rocketmq import NameServer, RocketBroker

    # generous start-up bounds: the bench may share its 2 cores with other work
    with NameServer.start(root / "namesrv", "5", timeout_s=300) as ns:
        brokers: dict[str, object] = {}
        try:
            for flush, names in topics.items():
                store = root / f"rocketmq-{flush.lower()}"
                merge_topics(store, {t: 8 for t in names})
                brokers[flush] = RocketBroker.start(store, ns, "5", name=f"broker-{flush.lower()}",
                                                    config={"flushDiskType": flush}, timeout_s=600)
            yield ns, brokers
        finally:
            for b in brokers.values():
                b.stop()
