"""Kafka's own read rate on this machine: the ceilings of bench/pipeline.py's Spark paths.

Two consumers that are not ours read the topic the Spark paths read, from the start, on the same
broker:
- ``kafka_consumer``: Apache Kafka's own KafkaConsumer (the ``kafka`` jar set of deploy/jvm/pom.xml),
  one consumer assigned every partition, default settings (bench/jvm/KafkaReadCeiling.java). It reads
  the topic once to warm the JIT up and once timed, in one JVM: Spark's JVM is warm when it reads.
  Kafka's ``kafka-consumer-perf-test`` (ConsumerPerformance) reads once in a fresh JVM, so at these
  topic sizes its figure is mostly that JVM warming up (its per-second report climbs from 12,000 to
  33,000 msg/s over a 100,000-record topic here), which is why it is not the ceiling.
- ``librdkafka``: a confluent-kafka Consumer in a process of its own, its partitions assigned from
  the start, ``consume()`` in batches of up to 1,000 (the Java consumer polls 500), touching every value.
Both clocks run from the first records a poll returns to the last, and count the records after that
first poll: the connection and the first fetch are left out, as Spark's sustained rate leaves out a
query's start.
Figures ``<tag>.<consumer>.msgs_per_s``; for every Spark path measured under the same tag, the
fraction of each ceiling it keeps: ``<tag>.ratio.<path>_vs_<consumer>`` (``commitlog.sync`` becomes
``commitlog_sync``).
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

CEILINGS = ("kafka_consumer", "librdkafka")
# kafka-consumer-perf-test.sh's heap and kafka-run-class.sh's collector settings
CONSUMER_JVM = ["-Xmx512M", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
                "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true"]
WARMUP_PASSES = 1
LOG4J2 = "rootLogger.level = WARN\nrootLogger.appenderRef.err.ref = err\nappender.err.type = Console\n" \
         "appender.err.name = err\nappender.err.target = SYSTEM_ERR\nappender.err.layout.type = PatternLayout\n" \
         "appender.err.layout.pattern = %p %m (%c)%n\n"


class CeilingFailed(RuntimeError):
    """A ceiling consumer failed or read another number of records than the topic holds."""


def kafka_consumer(bootstrap: str, topic: str, n: int, work: Path, timeout_s: float = 900) -> float:
    """msg/s of Kafka's KafkaConsumer reading the ``n`` records of ``topic``, its JVM warmed up."""
    from ingest.jvm import classpath, java

    classes = work / "classes"
    if not (classes / "KafkaReadCeiling.class").exists():
        common.compile_java(common.BENCH_DIR / "jvm" / "KafkaReadCeiling.java", classes, classpath("kafka"))
    log4j = work / "log4j2-consumer.properties"
    log4j.write_text(LOG4J2)
    cmd = [java(), *CONSUMER_JVM, f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath("kafka", classes),
           "KafkaReadCeiling", bootstrap, topic, str(n), str(WARMUP_PASSES + 1)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    passes = [line.split() for line in done.stdout.splitlines() if line.startswith("pass ")]
    if done.returncode != 0 or len(passes) != WARMUP_PASSES + 1:
        raise CeilingFailed(f"KafkaReadCeiling exited {done.returncode}: {done.stdout[-1500:]}{done.stderr[-1500:]}")
    return int(passes[-1][2]) / float(passes[-1][1])   # the records after the first poll, over their time


def librdkafka(bootstrap: str, topic: str, n: int, timeout_s: float = 600) -> float:
    """msg/s of a confluent-kafka consumer (in a child process) reading ``n`` records of ``topic``."""
    done = subprocess.run([sys.executable, __file__, "--child-librdkafka", bootstrap, topic, str(n)],
                          capture_output=True, text=True, timeout=timeout_s, env=common.env_for_subprocess())
    if done.returncode != 0:
        raise CeilingFailed(f"the librdkafka consumer exited {done.returncode}: {done.stderr[-1500:]}")
    secs, counted = done.stdout.split()[-2:]
    return int(counted) / float(secs)


def librdkafka_child(bootstrap: str, topic: str, n: int) -> int:
    """Subprocess: read ``n`` records of ``topic``'s partitions from the start; print the seconds
    from the first records to the last and the records after the first poll."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-ceiling-{uuid.uuid4().hex[:12]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        read, counted, value_bytes, t0, deadline = 0, 0, 0, 0.0, time.monotonic() + 300
        while read < n:
            if time.monotonic() > deadline:
                raise SystemExit(f"read {read} of {n} records of {topic} in 300 s")
            got = consumer.consume(1_000, timeout=1.0)
            for m in got:
                if m.error():
                    raise KafkaException(m.error())
                value_bytes += len(m.value())
            read += len(got)
            if t0:
                counted += len(got)
            elif read:
                t0 = time.perf_counter()
        elapsed = time.perf_counter() - t0
    finally:
        consumer.close()
    if read != n or not counted:
        raise SystemExit(f"read {read} records of {topic}, which holds {n} ({counted} after the first poll)")
    print(elapsed, counted)
    return 0


def measure(rep: common.Report, bootstrap: str, topic: str, n: int, tag: str, runs: int, work: Path) -> None:
    """Each ceiling ``runs`` times on ``topic`` (``n`` records), taking turns; then, for every Spark
    path already measured under ``tag``, the fraction of each ceiling it keeps."""
    rates: dict[str, list[float]] = {c: [] for c in CEILINGS}
    for r in range(runs):
        for c in (CEILINGS if r % 2 == 0 else CEILINGS[::-1]):
            rates[c].append(kafka_consumer(bootstrap, topic, n, work) if c == "kafka_consumer"
                            else librdkafka(bootstrap, topic, n))
    for c in CEILINGS:
        rep.add(f"{tag}.{c}.msgs_per_s", rates[c], "msg/s")
    spark_paths = sorted({k[len(tag) + 1:-len(".msgs_per_s")] for k in rep.figures
                          if k.startswith(f"{tag}.") and k.endswith(".msgs_per_s")} - set(CEILINGS))
    for path in spark_paths:
        for c in CEILINGS:
            rep.ratio(f"{tag}.ratio.{path.replace('.', '_')}_vs_{c}", f"{tag}.{path}.msgs_per_s", f"{tag}.{c}.msgs_per_s")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child-librdkafka":
        sys.exit(librdkafka_child(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    # `make bench-quick` runs the scripts it names; this one is pipeline.py's library
    print("bench/kafka_ceilings.py: Kafka's read ceilings for bench/pipeline.py; run bench/pipeline.py",
          file=sys.stderr)
