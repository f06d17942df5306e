"""Wide Kafka: the same records over few and over thousands of partitions (issue 64).

One Apache Kafka node from the `make jvm` jars holds, for each width P, P / 12 topics of 12
partitions (``wide<P>-NNNN``; one topic of 12 for P = 12) and the same ``messages`` 100-byte
records spread evenly over them. For each width, in the same run:
- ``commitlog``: `commitlog run --subscribe-pattern 'wide<P>-.*' --trigger available-now` (a
  process of its own, Spark's start included, as a user runs it): wall time, msg/s, its batches'
  times (from its log lines), peak RSS and peak open descriptors of the job's processes (the Python
  driver, the JVM, Spark's Python workers), the store's disk use (``du``), the size of its
  commitpoint.json (the commit metadata written on every commit), and `commitlog verify` wall time;
- ``spark_kafka_noop``: Spark's own Kafka connector into the ``noop`` sink, same trigger, same
  local[2], under a time limit (``--spark-limit``): past it the query is stopped and the figure is
  the limit, noted as "did not finish in T" (the ratio against it is then a lower bound);
- ``kafka_consumer``: Apache Kafka's own KafkaConsumer reading every partition
  (bench/jvm/KafkaReadCeiling.java), the ceiling of any reader on this broker;
- the broker's own disk for the same queues: bench/wide_disk.py (issue 64 item 1) (its quick mode without the broker).
Ratios (the issue's targets): the widest width's msg/s over 12 partitions' (>= 0.5), its RSS and
verify time over 12's (<= 1.5), ours against Spark's connector and Kafka's consumer at each width.

What bounds the widest width here: one node holds each partition as a log, an offset index and a
time index (three open files, ``ulimit -n``, noted), and creating 12,000 partitions on this 2-core
machine takes minutes; the full mode's widest is ``--widest`` (6,000 by default: the issue's 500 x 12).
The machine is shared: load above 2 makes every figure low (loadavg_start in the JSON).
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import common_stream as cs  # noqa: E402
import kafka_ceilings  # noqa: E402

PER_TOPIC = 12
FULL = {"messages": 300_000, "widths": [12, 1200], "spark_limit_s": 900.0}
QUICK = {"messages": 4_000, "widths": [12, 120], "spark_limit_s": 240.0}
BATCH_LINE = re.compile(r"batch (\d+): (\d+) records, .*? (\d+) ms \(spark (\d+), append (\d+), index (\d+), "
                        r"flush (\d+), commit (\d+)\)")
MIB = 1 << 20


def topics_of(width: int) -> list[str]:
    return [f"wide{width}-{i:04d}" for i in range(max(1, width // PER_TOPIC))]


def partitions_of(width: int) -> list[tuple[str, int]]:
    """Every (topic, partition) of the width."""
    names = topics_of(width)
    return [(t, p) for t in names for p in range(width // len(names))]


def prefill(bootstrap: str, width: int, messages: int) -> float:
    """Create the width's topics and produce ``messages`` records round-robin over all partitions."""
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    names = topics_of(width)
    parts = width // len(names)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="bench-wide")
    try:
        there = set(admin.list_topics())
        if set(names) <= there:
            return 0.0          # made and filled by an earlier run on this broker (--bootstrap)
        for i in range(0, len(names), 100):   # a request of 100 topics: the controller's answer stays quick
            admin.create_topics([NewTopic(n, num_partitions=parts, replication_factor=1)
                                 for n in names[i:i + 100] if n not in there], timeout_ms=120_000)
    finally:
        admin.close()
    value = os.urandom(cs.VALUE_BYTES)
    t0 = time.perf_counter()
    # idempotent (kafka-python's default; acks=1 turns it off): a retried request must not put a
    # record in the topic twice, which the store would then rightly hold twice
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20,
                             max_request_size=8 << 20)
    try:
        for i in range(messages):
            k = i % width
            producer.send(names[k // parts], value=value, key=b"key-%d" % (i & 63), partition=k % parts)
        producer.flush(timeout=900)
    finally:
        producer.close()
    return time.perf_counter() - t0


class TreeSampler:
    """Peak RSS (sum over the process and its descendants) and peak open descriptors, sampled."""

    def __init__(self, pid: int, interval_s: float = 0.25) -> None:
        self.pid, self.interval_s = pid, interval_s
        self.rss_peak = 0
        self.fds_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "TreeSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            pids = [self.pid, *common.child_pids(self.pid)]
            rss = fds = 0
            for pid in pids:
                try:
                    rss += common.rss_bytes(pid)
                    fds += len(os.listdir(f"/proc/{pid}/fd"))
                except (OSError, ValueError):
                    continue      # the process ended between the listing and the look
            self.rss_peak = max(self.rss_peak, rss)
            self.fds_peak = max(self.fds_peak, fds)
            self._stop.wait(self.interval_s)


def records_held(bootstrap: str, width: int) -> int:
    """The records the width's topics hold (the sum of their end offsets): what a run must store."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="bench-wide-ends")
    try:
        ends = consumer.end_offsets([TopicPartition(t, p) for t, p in partitions_of(width)])
        return sum(ends.values())
    finally:
        consumer.close()


def stored_once(store: Path) -> tuple[int, int]:
    """(messages, distinct Kafka coordinates) the store holds: equal when nothing is there twice."""
    from store import StoreReader

    seen: set[tuple[str, str, str]] = set()
    count = 0
    reader = StoreReader.open(str(store))
    try:
        for _, msg in reader.iter_messages():
            props = msg.properties
            seen.add((props["KAFKA_TOPIC"], props["KAFKA_PARTITION"], props["KAFKA_OFFSET"]))
            count += 1
    finally:
        reader.close()
    return count, len(seen)


def run_commitlog(bootstrap: str, width: int, work: Path, spark_conf: list[str], run: int = 0) -> dict[str, Any]:
    from store.usage import disk_bytes      # what du counts: the blocks the files take

    store, checkpoint = work / f"store-{width}-{run}", work / f"checkpoint-{width}-{run}"
    cmd = [str(Path(sys.executable).parent / "commitlog"), "run", "--bootstrap-servers", bootstrap,
           "--subscribe-pattern", f"wide{width}-.*", "--trigger", "available-now", "--starting-offsets", "earliest",
           "--store", str(store), "--checkpoint", str(checkpoint), "--master", "local[2]",
           *[arg for kv in spark_conf for arg in ("--spark-conf", kv)]]
    log_path = work / f"run-{width}-{run}.log"
    t0 = time.perf_counter()
    with open(log_path, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=common.env_for_subprocess())
        with TreeSampler(proc.pid) as sampler:
            rc = proc.wait(timeout=3600)
    wall = time.perf_counter() - t0
    text = log_path.read_text(errors="replace")
    if rc != 0:
        raise RuntimeError(f"commitlog run over {width} partitions exited {rc}: {text[-3000:]}")
    batches = [tuple(int(g) for g in m.groups()) for m in BATCH_LINE.finditer(text)]
    t1 = time.perf_counter()
    verify = subprocess.run([str(Path(sys.executable).parent / "commitlog"), "verify", str(store)],
                            capture_output=True, text=True, timeout=1800, env=common.env_for_subprocess())
    verify_s = time.perf_counter() - t1
    if verify.returncode != 0:
        raise RuntimeError(f"commitlog verify {store} exited {verify.returncode}: {verify.stdout[-2000:]}"
                           f"{verify.stderr[-2000:]}")
    return {"wall_s": wall, "records": sum(b[1] for b in batches), "batches": batches,
            "rss_peak": sampler.rss_peak, "fds_peak": sampler.fds_peak, "disk": disk_bytes(store),
            "commit_point_bytes": (store / "commitpoint.json").stat().st_size, "verify_s": verify_s,
            "store": store}


def run_spark_noop(bootstrap: str, width: int, work: Path, limit_s: float, spark_conf: list[str]) -> float | None:
    """Wall seconds of Spark's connector into noop over the width (Spark's start included), or None
    when it did not finish within ``limit_s`` (stopped then)."""
    cmd = [sys.executable, __file__, "--spark-noop-child", bootstrap, f"wide{width}-.*", str(work / f"noop-{width}"),
           *[arg for kv in spark_conf for arg in ("--spark-conf", kv)]]
    t0 = time.perf_counter()
    with open(work / f"noop-{width}.log", "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=common.env_for_subprocess(),
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)      # its own session: the JVM and Spark's workers go with it
            proc.wait()
            return None
    if rc != 0:
        raise RuntimeError(f"Spark's connector into noop over {width} partitions exited {rc}: "
                           f"{(work / f'noop-{width}.log').read_text(errors='replace')[-3000:]}")
    return time.perf_counter() - t0


def spark_noop_child(bootstrap: str, pattern: str, checkpoint: str, spark_conf: list[str]) -> None:
    from ingest.config import JobConfig
    from ingest.lifecycle import spark_session

    # configured as `commitlog run` configures its own, as bench/common_stream.spark_session does
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = spark_session(JobConfig(master="local[2]", spark_conf=dict(kv.split("=", 1) for kv in spark_conf)))
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribePattern", pattern).option("startingOffsets", "earliest").load()
             .writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    spark.stop()


def broker_disk(rep: common.Report, work: Path, quick: bool) -> None:
    """Our store's disk against the RocketMQ broker's own for the same queues (bench/wide_disk.py,
    issue 64 item 1), once per run: its workloads are its own. The quick mode leaves the broker out."""
    import wide_disk  # type: ignore[import-not-found]

    wide_disk.measure(rep, work, quick, with_broker=not quick)


def measure(rep: common.Report, bootstrap: str, width: int, messages: int, spark_limit_s: float, work: Path,
            spark_conf: list[str], runs: int) -> None:
    tag = f"p{width}"
    rep.log(f"{tag}: {len(topics_of(width))} topics, {width} partitions, {messages} records")
    rep.add(f"{tag}.produce_s", prefill(bootstrap, width, messages), "s")
    held = records_held(bootstrap, width)
    if held != messages:
        rep.note(f"{tag}: the topics hold {held} records, {messages} were produced")
    # several runs, each a fresh store: the first after the prefill meets a broker still writing
    # its 6,000 logs out, which the later ones do not
    all_runs = []
    for run in range(runs):
        ours = run_commitlog(bootstrap, width, work, spark_conf, run)
        count, distinct = stored_once(ours["store"])
        if not ours["records"] == count == distinct == held:
            raise RuntimeError(f"{tag}: commitlog run logged {ours['records']} records and the store holds {count} "
                               f"({distinct} distinct Kafka coordinates) of the {held} the topics hold")
        shutil.rmtree(ours.pop("store"))
        all_runs.append(ours)

    def each(f: Any) -> list[float]:
        return [f(o) for o in all_runs]

    rep.add(f"{tag}.commitlog.wall_s", each(lambda o: o["wall_s"]), "s")
    rep.add(f"{tag}.commitlog.msgs_per_s", each(lambda o: messages / o["wall_s"]), "msg/s")
    rep.add(f"{tag}.commitlog.batches", each(lambda o: len(o["batches"])), "batches")
    rep.add(f"{tag}.commitlog.batch_max_ms", each(lambda o: max(b[2] for b in o["batches"])), "ms")
    for name, col in (("spark", 3), ("append", 4), ("index", 5), ("flush", 6), ("commit", 7)):
        rep.add(f"{tag}.commitlog.{name}_ms", each(lambda o, c=col: sum(b[c] for b in o["batches"])), "ms")
    rep.add(f"{tag}.commitlog.rss_peak_mib", each(lambda o: o["rss_peak"] / MIB), "MiB")
    rep.add(f"{tag}.commitlog.fds_peak", each(lambda o: o["fds_peak"]), "fds")
    rep.add(f"{tag}.store_disk_mib", each(lambda o: o["disk"] / MIB), "MiB")
    rep.add(f"{tag}.commit_point_bytes", each(lambda o: o["commit_point_bytes"]), "B")
    rep.add(f"{tag}.verify_s", each(lambda o: o["verify_s"]), "s")
    noop = run_spark_noop(bootstrap, width, work, spark_limit_s, spark_conf)
    if noop is None:
        rep.note(f"{tag}: Spark's connector into noop did not finish in {spark_limit_s:.0f} s (stopped); "
                 f"{tag}.spark_kafka_noop.wall_s is that limit, the ratio against it a lower bound")
    rep.add(f"{tag}.spark_kafka_noop.wall_s", noop if noop is not None else spark_limit_s, "s")
    rep.ratio(f"{tag}.ratio.spark_kafka_noop_wall_vs_ours", f"{tag}.spark_kafka_noop.wall_s", f"{tag}.commitlog.wall_s")
    try:
        rate = kafka_ceilings.kafka_consumer(bootstrap, ",".join(topics_of(width)), messages, work)
        rep.add(f"{tag}.kafka_consumer.msgs_per_s", rate, "msg/s")
        rep.ratio(f"{tag}.ratio.commitlog_vs_kafka_consumer", f"{tag}.commitlog.msgs_per_s",
                  f"{tag}.kafka_consumer.msgs_per_s")
    except kafka_ceilings.CeilingFailed as exc:
        rep.note(f"{tag}: Kafka's own consumer failed: {exc}")


def main() -> int:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=None, help="records per width (the same at every width)")
    p.add_argument("--widest", type=int, default=6000, help="the full mode's widest width (a multiple of 12)")
    p.add_argument("--spark-limit", type=float, default=None, help="seconds Spark's connector gets per width")
    p.add_argument("--bootstrap", default=None,
                   help="an Apache Kafka already running (its topics wide<P>-* are made if missing); "
                        "default: one started from the jars for the run")
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting for both Spark jobs of each width (as `commitlog run --spark-conf`)")
    p.add_argument("--spark-noop-child", nargs=3, metavar=("BOOTSTRAP", "PATTERN", "CHECKPOINT"),
                   help=argparse_suppress())
    args = p.parse_args()
    if args.spark_noop_child:
        spark_noop_child(*args.spark_noop_child, args.spark_conf)
        return 0
    shape = dict(QUICK if args.quick else FULL)
    if not args.quick:
        shape["widths"] = sorted({*shape["widths"], args.widest})
    messages = args.messages or shape["messages"]
    runs = common.runs_of(args, quick_default=1)
    limit = args.spark_limit or shape["spark_limit_s"]
    rep = common.Report("wide", args, params={"messages": messages, "widths": shape["widths"],
                                              "spark_conf": args.spark_conf,
                                              "per_topic": PER_TOPIC, "spark_limit_s": limit, "runs": runs,
                                              "nofile_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0]})
    with common.scratch(args, "wide") as work:
        with contextlib.ExitStack() as stack:
            bootstrap = args.bootstrap or stack.enter_context(
                cs.embedded_broker("kafka", work / "broker")).bootstrap_servers
            for width in shape["widths"]:
                measure(rep, bootstrap, width, messages, limit, work, args.spark_conf, runs)
        broker_disk(rep, work / "disk", args.quick)
    widest = f"p{max(shape['widths'])}"
    rep.ratio("ratio.rate_widest_vs_12", f"{widest}.commitlog.msgs_per_s", "p12.commitlog.msgs_per_s")
    rep.ratio("ratio.rss_widest_vs_12", f"{widest}.commitlog.rss_peak_mib", "p12.commitlog.rss_peak_mib")
    rep.ratio("ratio.verify_widest_vs_12", f"{widest}.verify_s", "p12.verify_s")
    rep.ratio("ratio.disk_widest_vs_12", f"{widest}.store_disk_mib", "p12.store_disk_mib")
    rep.ratio("ratio.commit_point_widest_vs_12", f"{widest}.commit_point_bytes", "p12.commit_point_bytes")
    rep.finish()
    return 0


def argparse_suppress() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
