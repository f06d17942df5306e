"""How long does an event take from its producer to a durable, committed place in the store?

A producer (librdkafka, confluent-kafka) writes 100-byte records to a 4-partition topic of Apache
Kafka (our embedded broker, on disk) at a steady rate; ``commitlog run`` (in this process, on a
shared SparkSession, with the job's defaults but for ``--flush``) stores them. A record's latency is
the moment the commit point covering it was written (BatchStats.committed_ms, taken right after
commitpoint.json was replaced) minus its producer's timestamp (the Kafka record's CreateTime, its
BORNTIMESTAMP); the query is warmed first (``WARM_RECORDS`` stored before the clock starts: its first
batch is a start-up cost, not a steady-state one) and the first ``WARMUP_S`` seconds are dropped. Figures per rate and flush mode: p50, p90,
p99, max (ms) and the batch time at steady state.

In the same run, the peers and floors:
- ``spark_kafka.source`` / ``ours.source``: Spark's own Kafka connector and ours, each into a
  ``foreachBatch`` that only timestamps its rows (the read, nothing stored): the same record latency,
  and the batch time (Spark's triggerExecution), at the same rate and trigger;
  ``ours_taskperpartition.source``: ours with one read task per partition range (minRecordsPerTask=0,
  as before the small ranges of a batch shared a task);
- ``kafka_e2e``: Apache Kafka's own ``EndToEndLatency`` tool on the same broker (a produce, then the
  consume of that record, one at a time): the physical floor of any consumer;
- ``rocketmq_send``: a RocketMQ 5.3.3 broker with SYNC_FLUSH on the same disk, its producer's send
  latency one message at a time: RocketMQ's own durable write.

Quick mode (``make bench-quick``): 10,000 msg/s, SYNC, 8 s, the source peers; full mode:
1,000, 10,000 and 50,000 msg/s and the mixed workload at 10,000, SYNC and ASYNC, 30 s, every peer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common  # noqa: E402
import common_stream as cs  # noqa: E402
import latency_plot  # noqa: E402

PARTITIONS = 4
WARMUP_S = 4.0
WARM_RECORDS = 200      # produced and stored before the clock starts (warm_up)
FULL = {"rates": [1_000, 10_000, 50_000], "mixed_rate": 10_000, "seconds": 30.0, "flushes": ["sync", "async"]}
QUICK = {"rates": [10_000], "mixed_rate": None, "seconds": 8.0, "flushes": ["sync"]}


def producer_child(bootstrap: str, topic: str, rate: int, seconds: float, workload: str) -> int:
    """Subprocess: produce ``rate`` records a second for ``seconds``; print how many."""
    from confluent_kafka import Producer

    import workloads

    failed = [0]

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed[0] += 1

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "queue.buffering.max.messages": 1_000_000,
                  "on_delivery": delivered})
    records = workloads.WORKLOADS[workload].records(int(rate * seconds) + 1, common.SEED)
    t0 = time.monotonic()
    sent = 0
    while True:
        elapsed = time.monotonic() - t0
        if elapsed >= seconds:
            break
        due = int(elapsed * rate)
        while sent < due:
            key, value, headers = next(records)
            p.produce(topic, value=value, key=key, headers=headers or None, partition=sent % PARTITIONS)
            sent += 1
        p.poll(0)
        time.sleep(0.001)
    p.flush(60)
    print(json.dumps({"sent": sent - failed[0], "failed": failed[0]}), flush=True)
    return 0


def produce(bootstrap: str, topic: str, rate: int, seconds: float, workload: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "--child-producer", bootstrap, topic, str(rate), str(seconds),
                             workload], stdout=subprocess.PIPE, text=True, env=common.env_for_subprocess())


def sent_count(proc: subprocess.Popen, timeout_s: float) -> int:
    """How many records the producer's broker acknowledged (a record it gave up on is not counted)."""
    out, _ = proc.communicate(timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"the producer failed ({proc.returncode})")
    done = json.loads(out.strip().splitlines()[-1])
    if done["failed"]:
        print(f"latency: {done['failed']} records were not acknowledged by the broker", file=sys.stderr)
    return done["sent"]


def records_in(bootstrap: str, topic: str) -> int:
    """How many records the topic holds (its partitions' end offsets): what a reader must get."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        return sum(c.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)]).values())
    finally:
        c.close()


def percentiles(ms: np.ndarray) -> dict[str, float]:
    return {"p50": float(np.percentile(ms, 50)), "p90": float(np.percentile(ms, 90)),
            "p99": float(np.percentile(ms, 99)), "max": float(ms.max())}


def wait_for_query(spark: Any, name: str, failure: list, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not any(q.name == name for q in spark.streams.active):
        if failure or time.monotonic() > deadline:
            raise RuntimeError(f"the {name} query did not start: {failure[0] if failure else 'timed out'}")
        time.sleep(0.1)


def warm_up(bootstrap: str, topic: str, workload: str, handled: Callable[[], int], failure: list) -> None:
    """A few records through the query before the clock starts: its first batch (Python workers,
    connections, code paths warmed) is a start-up figure, not a steady-state one, and at a low rate
    its backlog would otherwise fill the measured window's tail."""
    count = sent_count(produce(bootstrap, topic, WARM_RECORDS, 1.0, workload), 60)
    deadline = time.monotonic() + 180
    while handled() < count:
        if failure or time.monotonic() > deadline:
            raise RuntimeError(f"the warm-up records were not handled: {failure[0] if failure else 'timed out'}")
        time.sleep(0.05)


def run_commitlog(spark: Any, bootstrap: str, root: Path, rate: int, seconds: float, flush: str,
                  workload: str, trigger: str | None) -> tuple[np.ndarray, dict[str, list[float]], list[float]]:
    """Latencies (ms) of the records produced after the warm-up, the batches' parts (ms, phase_ms)
    and the sink's share of each batch (ms)."""
    from ingest.config import JobConfig
    from ingest.job import run_stream

    topic = f"lat-{workload}-{rate}-{flush}-{int(time.time() * 1000) % 10**8}"
    cs.create_topic(bootstrap, topic, PARTITIONS)
    kw = {"trigger": trigger} if trigger else {}
    cfg = JobConfig(bootstrap_servers=bootstrap, subscribe=topic, store=str(root / topic / "store"),
                    checkpoint=str(root / topic / "checkpoint"), starting_offsets="earliest", flush=flush,
                    master="local[2]", shuffle_partitions=2, **kw)
    stop = threading.Event()
    latencies: list[np.ndarray] = []
    store_ms: list[float] = []
    stored = [0]
    began = [0.0]

    def on_batch(stats: Any) -> None:
        if stats.born_ms is not None and len(stats.born_ms):
            keep = stats.born_ms >= began[0] * 1000 + WARMUP_S * 1000
            latencies.append((stats.committed_ms - stats.born_ms[keep]).astype(np.float64))
            if keep.any():
                store_ms.append(stats.collect_ms + stats.append_ms + stats.index_ms + stats.flush_ms + stats.commit_ms)
        stored[0] += stats.records + stats.dead_letters      # a dead letter is a record handled too

    failure: list[BaseException] = []

    def job() -> None:
        try:
            run_stream(cfg, stop=stop, spark=spark, on_batch=on_batch)
        except BaseException as exc:  # noqa: BLE001 -- handed to the bench's thread
            failure.append(exc)

    runner = threading.Thread(target=job, name="latency-run")
    runner.start()
    wait_for_query(spark, "commitlog", failure)
    warm_up(bootstrap, topic, workload, lambda: stored[0], failure)
    began[0] = time.time()
    producer = produce(bootstrap, topic, rate, seconds, workload)
    sent_count(producer, seconds + 120)
    n = records_in(bootstrap, topic)
    produced = time.monotonic()
    deadline = produced + 300
    while stored[0] < n and time.monotonic() < deadline and not failure:
        time.sleep(0.2)
    drain_s = time.monotonic() - produced
    if drain_s > 30:
        progress = [q.lastProgress for q in spark.streams.active if q.name == "commitlog"]
        sources = progress[0].get("sources") if progress and progress[0] else None
        print(f"latency: {rate} msg/s: the job took {drain_s:.0f} s after the producer's end to store the last "
              f"records ({stored[0]} of {n}); its last progress' sources: {json.dumps(sources)}", file=sys.stderr)
    phases = phase_ms([q for q in spark.streams.active if q.name == "commitlog"], began[0])
    stop.set()
    runner.join(timeout=120)
    if failure:
        raise RuntimeError(f"commitlog run failed: {failure[0]}")
    if stored[0] != n:
        raise RuntimeError(f"commitlog run stored {stored[0]} of {n} records")
    return np.concatenate(latencies) if latencies else np.zeros(0), phases, store_ms


def batches_since(queries: list[Any], since_s: float) -> list[dict[str, Any]]:
    """The progress of each batch with records that began at or after ``since_s`` (epoch seconds)."""
    from datetime import datetime

    return [p for q in queries for p in q.recentProgress if p["numInputRows"] and
            datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() >= since_s]


# Spark's parts of a batch (its progress' durationMs): asking the source for its end offsets, the
# offset log, the batch itself (read and sink), the commit log; triggerExecution is the whole
PHASES = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets", "triggerExecution")


def phase_ms(queries: list[Any], since_s: float) -> dict[str, list[float]]:
    """Spark's time for each part of each batch with records that began after the warm-up from
    ``since_s``; triggerExecution (planning, the offset log, the batch, the commit log) is the batch
    time every path is given."""
    batches = batches_since(queries, since_s + WARMUP_S)
    return {phase: [float(p["durationMs"].get(phase, 0)) for p in batches] for phase in PHASES}


def run_source(spark: Any, bootstrap: str, root: Path, source: str, rate: int, seconds: float,
               trigger: str, options: dict[str, str] | None = None) -> tuple[np.ndarray, dict[str, list[float]]]:
    """A source into a foreachBatch that only timestamps its rows: record latencies and the
    batches' parts (ms, phase_ms)."""
    topic = f"lat-src-{source}-{rate}-{int(time.time() * 1000) % 10**8}"
    cs.create_topic(bootstrap, topic, PARTITIONS)
    fmt = {"spark-kafka": "kafka", "kafka-python": "kafka-python"}[source]
    latencies: list[np.ndarray] = []
    seen = [0]
    began = [0.0]

    def stamp(df: Any, _batch_id: int) -> None:
        ts = df.select("timestamp").toArrow().column(0)
        now = time.time() * 1000
        born = ts.cast("int64").to_numpy() / 1000          # Spark's timestamps are microseconds
        seen[0] += len(born)
        keep = born >= began[0] * 1000 + WARMUP_S * 1000
        latencies.append(now - born[keep])

    df = spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic) \
        .option("startingOffsets", "earliest").options(**(options or {})).load()
    query = df.writeStream.foreachBatch(stamp).trigger(processingTime=trigger) \
        .option("checkpointLocation", str(root / topic / "checkpoint")).queryName(f"lat-{source}").start()
    try:
        warm_up(bootstrap, topic, "uniform", lambda: seen[0], [])
        began[0] = time.time()
        sent_count(produce(bootstrap, topic, rate, seconds, "uniform"), seconds + 120)
        n = records_in(bootstrap, topic)
        deadline = time.monotonic() + 120
        while seen[0] < n and time.monotonic() < deadline:
            time.sleep(0.2)
        phases = phase_ms([query], began[0])
    finally:
        query.stop()
    return np.concatenate(latencies) if latencies else np.zeros(0), phases


def kafka_e2e(bootstrap: str, n: int) -> dict[str, float]:
    """Apache Kafka's EndToEndLatency tool: a record produced (acks=all), then consumed, n times."""
    from ingest.jvm import classpath, java

    topic = f"lat-e2e-{int(time.time() * 1000) % 10**8}"
    cs.create_topic(bootstrap, topic, 1)
    done = subprocess.run([java(), "-cp", classpath("kafka"), "org.apache.kafka.tools.EndToEndLatency",
                           bootstrap, topic, str(n), "all", "100"], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"EndToEndLatency failed: {done.stderr[-2000:]}")
    out: dict[str, float] = {}
    for line in done.stdout.splitlines():
        if line.startswith("Avg latency"):
            out["avg"] = float(line.split(":")[1].split()[0])
        elif line.startswith("Percentiles"):
            for part in line.split(":", 1)[1].split(","):
                name, value = part.split("=")
                out[{"50th": "p50", "99th": "p99", "99.9th": "p999"}[name.strip()]] = float(value.split()[0])
    return out


def rocketmq_send(root: Path, n: int) -> np.ndarray:
    """A RocketMQ 5.3.3 broker with SYNC_FLUSH on this disk: each send's time (ms), one at a time."""
    import base64

    from tests.helpers.brokers.rocketmq import NameServer, RocketBroker, clients

    body = base64.b64encode(bytes(range(100))).decode()
    props = base64.b64encode(b"").decode()
    store = root / "rocketmq-store"
    from store.topics import merge_topics

    merge_topics(store, {"LatencyTopic": 4})
    with NameServer.start(root / "namesrv", "5") as ns:
        with RocketBroker.start(store, ns, "5", config={"flushDiskType": "SYNC_FLUSH",
                                                         "mappedFileSizeCommitLog": str(64 << 20)}):
            rows = clients("5").run("send", ns.address, "latency-producer",
                                    stdin=[f"normal\tLatencyTopic\t\t\t0\t{props}\t{body}" for _ in range(n)])
    sends = np.array([r["sendUs"] for r in rows if r.get("status") == "SEND_OK"], dtype=np.float64) / 1000
    return sends[len(sends) // 10:]          # the first tenth warms the JVMs up


def add_latency(rep: common.Report, name: str, ms: np.ndarray, phases: dict[str, list[float]] | None,
                store_ms: list[float] | None = None) -> None:
    if not len(ms):
        rep.note(f"{name}: no record after the warm-up")
        return
    for k, v in percentiles(ms).items():
        rep.add(f"{name}.{k}_ms", [v], "ms")
    if phases and phases["triggerExecution"]:
        rep.add(f"{name}.batch_p50_ms", [float(np.median(phases["triggerExecution"]))], "ms")
        for phase in PHASES[:-1]:
            rep.add(f"{name}.{phase}_p50_ms", [float(np.median(phases[phase]))], "ms")
    if store_ms:
        # the sink's share of a batch: collect (the Spark job), append, index, flush, commit
        rep.add(f"{name}.sink_p50_ms", [float(np.median(store_ms))], "ms")


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child-producer":
        _, _, bootstrap, topic, rate, seconds, workload = sys.argv
        return producer_child(bootstrap, topic, int(rate), float(seconds), workload)
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--trigger", default=None, help="the job's --trigger (default: the job's own default)")
    ap.add_argument("--rates", default=None, help="comma-separated rates (msg/s) instead of the mode's")
    ap.add_argument("--flushes", default=None, help="comma-separated flush modes (sync,async) instead of the mode's")
    ap.add_argument("--no-peers", action="store_true", help="only commitlog run")
    ap.add_argument("--png", default=None, help="draw the figures here (bench/latency.png in BENCHMARKS.md)")
    ap.add_argument("--plot-from", default=None, help="only plot: a JSON report of an earlier --json run")
    args = ap.parse_args(argv)
    if args.plot_from:
        latency_plot.plot(json.loads(Path(args.plot_from).read_text()), Path(args.png or "bench/latency.png"))
        return 0
    p = dict(QUICK if args.quick else FULL)
    if args.rates:
        p["rates"] = [int(r) for r in args.rates.split(",")]
    if args.flushes:
        p["flushes"] = args.flushes.split(",")
    rep = common.Report("latency", args)
    rep.params = dict(p, warmup_s=WARMUP_S, trigger=args.trigger or "the job's default")
    from ingest.config import JobConfig, spark_interval

    source_trigger = args.trigger or JobConfig().trigger
    with common.scratch(args, "latency") as root:
        with cs.embedded_broker("kafka", root / "broker") as broker:
            bootstrap = broker.bootstrap_servers
            spark = cs.spark_session()
            for flush in p["flushes"]:
                for rate in p["rates"]:
                    ms, phases, store_ms = run_commitlog(spark, bootstrap, root, rate, p["seconds"], flush, "uniform",
                                                          args.trigger)
                    add_latency(rep, f"commitlog.{flush}.rate{rate}", ms, phases, store_ms)
                if p["mixed_rate"]:
                    ms, phases, store_ms = run_commitlog(spark, bootstrap, root, p["mixed_rate"], p["seconds"], flush,
                                                          "mixed", args.trigger)
                    add_latency(rep, f"commitlog.{flush}.mixed{p['mixed_rate']}", ms, phases, store_ms)
            if not args.no_peers:
                for rate in p["rates"]:
                    for source in ("spark-kafka", "kafka-python"):
                        ms, phases = run_source(spark, bootstrap, root, source, rate, p["seconds"],
                                                 spark_interval(source_trigger))
                        name = "spark_kafka" if source == "spark-kafka" else "ours"
                        add_latency(rep, f"{name}.source.rate{rate}", ms, phases)
                    # before the small ranges of a batch shared a task: one task per partition range
                    ms, phases = run_source(spark, bootstrap, root, "kafka-python", rate, p["seconds"],
                                             spark_interval(source_trigger), {"minRecordsPerTask": "0"})
                    add_latency(rep, f"ours_taskperpartition.source.rate{rate}", ms, phases)
                    rep.ratio(f"ratio.rate{rate}.source_batch_ours_vs_spark", f"ours.source.rate{rate}.batch_p50_ms",
                              f"spark_kafka.source.rate{rate}.batch_p50_ms")
                    rep.ratio(f"ratio.rate{rate}.source_batch_taskperpartition_vs_spark",
                              f"ours_taskperpartition.source.rate{rate}.batch_p50_ms",
                              f"spark_kafka.source.rate{rate}.batch_p50_ms")
                    rep.ratio(f"ratio.rate{rate}.commitlog_p50_vs_spark_source_p50",
                              f"commitlog.sync.rate{rate}.p50_ms", f"spark_kafka.source.rate{rate}.p50_ms")
                if not args.quick:
                    e2e = kafka_e2e(bootstrap, 2_000)
                    for k, v in e2e.items():
                        rep.add(f"kafka_e2e.{k}_ms", [v], "ms")
            if not args.no_peers and not args.quick:
                add_latency(rep, "rocketmq_send.sync_flush", rocketmq_send(root, 2_000), None)
    rep.finish()
    if args.png:
        latency_plot.plot(rep.as_json(), Path(args.png))
    return 0


if __name__ == "__main__":
    sys.exit(main())
