"""End to end: Kafka to CommitLog through `commitlog run`, against Spark's own sinks on the
same source and the same topic.

A topic of 100-byte records (2 partitions, on ``--broker``: Apache Kafka from its jars when `make jvm`
has resolved them, else the in-memory Tansu) is pre-filled, then read
from the start with trigger available-now, for several maxOffsetsPerTrigger values; the topic holds
at least 10 batches of each size (``messages`` records, or 10x the batch size when that is more), so
that the first batch of a query (planning, a fresh store's first pages) is not a third of the
figure:
- ``commitlog.sync`` / ``commitlog.async``: ingest.job.run_stream (what `commitlog run` runs), one
  durable commit per batch; flush SYNC or ASYNC; ``commitlog.sync_noindex``: SYNC with the index
  off (``--message-index false``), so the index's cost shows in the same run (target >= 0.9);
  ``commitlog.sync_nospool``: SYNC with the batches crossing Spark (``--spool-dir off``, what a
  cluster does) instead of the local-mode spool files (sink.handover.spool);
- peers on the same source options: Spark's ``parquet`` file sink and the ``noop`` sink (the
  source's ceiling);
- ``spark_kafka.commitlog.sync`` / ``spark_kafka.noop``: the same through Spark's own Kafka source
  (``--source spark-kafka``, spark-sql-kafka from `make jvm`) instead of ours, the sources compared
  in the same run (``ratio.*_ours_vs_spark_kafka``);
- ceilings: Apache Kafka's own consumer (KafkaConsumer, bench/jvm/KafkaReadCeiling.java) and librdkafka
  reading the same topic on the same broker (bench/kafka_ceilings.py), and the fraction of each that
  every Spark path keeps.
Each batch size is measured in rounds: every kind runs once per round, in a rotating order, so a
change in the shared machine's speed during the script falls on every kind alike; the full mode
first runs one unrecorded round (JIT and Python worker warm-up). Figures per run: sustained msg/s
(rows over the span of the data batches), p50/p99 batch latency (Spark's triggerExecution), peak
RSS of the Python driver and of the driver JVM. Ratios: commitlog SYNC over noop (target >= 0.8)
and over parquet (target >= 1.0).
``--soak SECONDS`` adds a run of that length against a live producer, sampling the driver's RSS
(it must not grow with the store).
``--workloads`` names the topics (bench/workloads.py: ``uniform``, the default, ``mixed``,
``uniform_dlq``, ``lz4``, ``zstd``); a workload other than ``uniform`` runs SYNC commitlog (spooled
and not) and the noop sink only, on ``--workload-messages`` records, and reports the share of its records the read
tasks' C pass encodes (``<workload>.direct_share``).
"""

from __future__ import annotations

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
import pipeline_plot  # noqa: E402
import workloads as wl  # noqa: E402

MIB = 1 << 20
FULL = {"messages": 300_000, "batches": [10_000, 30_000, 50_000, 100_000], "partitions": 2}
QUICK = {"messages": 10_000, "batches": [10_000], "partitions": 2}
TOPIC = "bench-pipeline"


MIN_BATCHES = 10


def topic_for(messages: int, workload: str = "uniform") -> str:
    return f"{TOPIC}-{messages}" if workload == "uniform" else f"{TOPIC}-{workload}-{messages}"


def job_config(bootstrap: str, root: Path, batch: int, flush: str, trigger: str = "available-now",
               topic: str = TOPIC) -> Any:
    from ingest.config import JobConfig

    return JobConfig(bootstrap_servers=bootstrap, subscribe=topic, store=str(root / "store"),
                     checkpoint=str(root / "checkpoint"), trigger=trigger, max_offsets_per_trigger=batch,
                     starting_offsets="earliest", flush=flush, master="local[2]", shuffle_partitions=2)


def run_commitlog(spark: Any, events: list, cfg: Any, expected: int) -> tuple[cs.RunProgress, cs.RssSampler]:
    from ingest.job import run_stream

    since = len(events)
    written: dict[int, int] = {}   # batch id -> records + dead letters the sink wrote
    committed: dict[int, float] = {}   # batch id -> when the store committed it (epoch seconds)

    def count(stats: Any) -> None:
        written[stats.batch_id] = stats.records + stats.dead_letters
        committed[stats.batch_id] = time.time()

    with cs.RssSampler() as rss:
        run_stream(cfg, spark=spark, available_now=True, on_batch=count)
    prog = cs.collect(events, since, expected, records=written, committed=committed)
    if prog.rows != expected:
        raise RuntimeError(f"commitlog run read {prog.rows} rows, expected {expected}")
    return prog, rss


def run_peer(spark: Any, events: list, cfg: Any, sink: str, root: Path, expected: int
             ) -> tuple[cs.RunProgress, cs.RssSampler]:
    from ingest.reader_options import kafka_reader_options

    from ingest.kafka.source import source_format

    since = len(events)
    opts = kafka_reader_options(cfg, "earliest")
    with cs.RssSampler() as rss:
        df = spark.readStream.format(source_format(cfg.source)).options(**opts).load()
        w = (df.writeStream.trigger(availableNow=True).queryName(f"bench-{sink}")
             .option("checkpointLocation", str(root / f"checkpoint-{sink}")))
        w = w.format("parquet").option("path", str(root / "parquet")) if sink == "parquet" else w.format("noop")
        q = w.start()
        q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(f"the {sink} query failed: {q.exception()}")
    prog = cs.collect(events, since, expected)
    if prog.rows != expected:
        raise RuntimeError(f"the {sink} query read {prog.rows} rows, expected {expected}")
    return prog, rss


# sync_noindex: SYNC with the index off (--message-index false), the index's cost in the same run;
# sync_nospool: SYNC with the batches through Spark (--spool-dir off), as on a cluster;
# sync_taskperpartition: SYNC with one read task per partition range (--min-records-per-task 0), as
# before small ranges shared a task: the grouping's effect on throughput in the same run;
# spark_kafka.*: the same through Spark's own Kafka source (--source spark-kafka) instead of ours
KINDS = ("commitlog.sync", "commitlog.sync_noindex", "commitlog.sync_nospool", "commitlog.sync_taskperpartition",
         "commitlog.async", "noop", "parquet", "spark_kafka.commitlog.sync", "spark_kafka.noop")
# a run's figures: name in the report, unit
FIGURES = {"msgs_per_s": "msg/s", "batch_p50_ms": "ms", "batch_p99_ms": "ms", "driver_python_rss_peak_mib": "MiB",
           "driver_python_anon_peak_mib": "MiB", "driver_jvm_rss_peak_mib": "MiB"}


def measure(args: Any, spark: Any, events: list, bootstrap: str, tag: str, what: str, batch: int,
            n: int, workload: str = "uniform") -> dict[str, float]:
    """One run of one kind over the pre-filled topic of ``n`` records: its FIGURES, and its number
    of data batches."""
    with common.scratch(args, f"pipeline/{tag}") as root:
        source, kind = ("spark-kafka", what[len("spark_kafka."):]) if what.startswith("spark_kafka.") \
            else ("kafka-python", what)
        flush = kind.split(".")[1].split("_")[0] if kind.startswith("commitlog") else "sync"
        cfg = job_config(bootstrap, root, batch, flush, topic=topic_for(n, workload))
        cfg.source = source
        cfg.message_index = not kind.endswith("_noindex")
        cfg.spool_dir = "off" if kind.endswith("_nospool") else "auto"
        if kind.endswith("_taskperpartition"):
            cfg.min_records_per_task = 0
        if kind.startswith("commitlog"):
            prog, rss = run_commitlog(spark, events, cfg, n)
        else:
            prog, rss = run_peer(spark, events, cfg, kind, root, n)
    return {"msgs_per_s": prog.sustained_rate(), "batch_p50_ms": prog.latency_ms(50),
            "batch_p99_ms": prog.latency_ms(99), "driver_python_rss_peak_mib": rss.python_peak / MIB,
            "driver_python_anon_peak_mib": rss.python_anon_peak / MIB,
            "driver_jvm_rss_peak_mib": rss.jvm_peak / MIB, "batches": len(prog.data_batches)}


# sync_nospool: batches through Spark (--spool-dir off), as on a cluster, the spool's gain in the same run
WORKLOAD_KINDS = ("commitlog.sync", "commitlog.sync_nospool", "noop")


def ratio_if_measured(rep: common.Report, name: str, numerator: str, denominator: str) -> None:
    """rep.ratio, unless a kind of it was left out (--kinds)."""
    if numerator in rep.figures and denominator in rep.figures:
        rep.ratio(name, numerator, denominator)


def run_workload(args: Any, rep: common.Report, spark: Any, events: list, bootstrap: str, workload: str, n: int,
                 batches: list[int], runs: int, partitions: int) -> None:
    """SYNC commitlog and the noop sink on one workload's topic, in rotating rounds per batch size,
    and the share of its records the C pass encodes."""
    for batch in batches:
        tag = f"{workload}.batch{batch}"
        res: dict[str, dict[str, list[float]]] = {what: {k: [] for k in [*FIGURES, "batches"]}
                                                  for what in WORKLOAD_KINDS}
        for r in range(runs):
            turn = r % len(WORKLOAD_KINDS)
            for what in WORKLOAD_KINDS[turn:] + WORKLOAD_KINDS[:turn]:
                for k, v in measure(args, spark, events, bootstrap, tag, what, batch, n, workload).items():
                    res[what][k].append(v)
        for what in WORKLOAD_KINDS:
            for figure, unit in FIGURES.items():
                rep.add(f"{tag}.{what}.{figure}", res[what][figure], unit)
            rep.params[f"{tag}.{what}.batches"] = res[what]["batches"]
        rep.ratio(f"{tag}.ratio.commitlog_sync_vs_noop", f"{tag}.commitlog.sync.msgs_per_s", f"{tag}.noop.msgs_per_s")
        rep.ratio(f"{tag}.ratio.commitlog_sync_nospool_vs_noop", f"{tag}.commitlog.sync_nospool.msgs_per_s",
                  f"{tag}.noop.msgs_per_s")
        uniform = f"batch{batch}.commitlog.sync.msgs_per_s"
        if uniform in rep.figures:
            rep.ratio(f"{tag}.ratio.commitlog_sync_vs_uniform_sync", f"{tag}.commitlog.sync.msgs_per_s", uniform)
    with common.scratch(args, f"pipeline/{workload}-share") as root:
        share, reasons = wl.direct_share(bootstrap, topic_for(n, workload), partitions, n,
                                         job_config(bootstrap, root, batches[0], "sync"))
    rep.add(f"{workload}.direct_share", [share], "share")
    rep.params[f"{workload}.general_way_records"] = reasons


def soak(args: Any, rep: common.Report, spark: Any, bootstrap: str, seconds: float, rate: int) -> None:
    """`commitlog run` (trigger 1s, SYNC) against a producer writing ``rate`` msg/s for ``seconds``;
    samples the Python driver's anonymous RSS (heap: what batches cost; the mapped segments are
    file pages the kernel can drop) every 5 s."""
    from ingest.job import run_stream

    topic = "bench-soak"
    cs.prefill_topic(bootstrap, topic, 2, 1)
    producer = subprocess.Popen([sys.executable, __file__, "--child-producer", bootstrap, topic, str(rate),
                                 str(seconds)], env=common.env_for_subprocess())
    stop = threading.Event()
    try:
        with common.scratch(args, "pipeline/soak") as root:
            cfg = job_config(bootstrap, root, 100_000, "sync", trigger="1s")
            cfg.subscribe = topic
            samples: list[tuple[float, int]] = []

            def sample() -> None:
                t0 = time.monotonic()
                while not stop.wait(5.0):
                    samples.append((time.monotonic() - t0, common.rss_bytes(kind="RssAnon")))
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            timer = threading.Timer(seconds, stop.set)
            timer.start()
            run_stream(cfg, stop=stop, spark=spark)
            timer.cancel()
            sampler.join()
    finally:
        producer.kill()
        producer.wait()
    if len(samples) >= 4:
        q = max(1, len(samples) // 4)
        first = [s[1] / MIB for s in samples[:q]]
        last = [s[1] / MIB for s in samples[-q:]]
        rep.add("soak.anon_rss_first_quarter_mib", first, "MiB")
        rep.add("soak.anon_rss_last_quarter_mib", last, "MiB")
        rep.ratio("soak.ratio.anon_rss_last_vs_first_quarter", "soak.anon_rss_last_quarter_mib",
                  "soak.anon_rss_first_quarter_mib")
    rep.params["soak"] = {"seconds": seconds, "rate": rate,
                          "rss_mib": [(round(t), round(r / MIB)) for t, r in samples]}


def producer_child(bootstrap: str, topic: str, rate: int, seconds: float) -> int:
    """Subprocess: produce ``rate`` 100-byte records per second for ``seconds``."""
    from kafka import KafkaProducer

    value = bytes(range(100))
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20, batch_size=1 << 20)
    t0 = time.monotonic()
    sent = 0
    while time.monotonic() - t0 < seconds:
        due = int((time.monotonic() - t0) * rate)
        while sent < due:
            p.send(topic, value=value, partition=sent & 1)
            sent += 1
        time.sleep(0.01)
    p.flush()
    p.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child-producer":
        _, _, bootstrap, topic, rate, seconds = sys.argv
        return producer_child(bootstrap, topic, int(rate), float(seconds))
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--soak", type=float, default=0.0, help="seconds of the RSS soak run (0: none)")
    ap.add_argument("--soak-rate", type=int, default=20_000, help="msg/s the soak producer writes")
    ap.add_argument("--soak-only", action="store_true", help="only the soak run (with --soak SECONDS)")
    ap.add_argument("--batches", default=None, help="maxOffsetsPerTrigger values, comma separated")
    ap.add_argument("--workloads", default="uniform",
                    help=f"topics to read, comma separated: {', '.join(wl.WORKLOADS)} (bench/workloads.py)")
    ap.add_argument("--workload-messages", type=int, default=None,
                    help="records of each workload other than uniform (default: 200,000 or 10 of the largest "
                         "batch, if more; quick 10,000)")
    ap.add_argument("--broker", choices=("kafka", "tansu"), default=None,
                    help="the embedded broker: kafka (Apache Kafka, the default when `make jvm` resolved its jars) "
                         "or tansu (in memory)")
    ap.add_argument("--no-ceilings", action="store_true", help="leave out Kafka's own consumers (the read ceilings)")
    ap.add_argument("--kinds", default=None,
                    help=f"the uniform topic's runs, comma separated (default: all of {', '.join(KINDS)}); "
                         f"ratios between kinds left out are not taken")
    ap.add_argument("--png", default=None, help="also plot throughput and latency against batch size here")
    ap.add_argument("--plot-from", default=None, help="only plot: a JSON report of an earlier --json run")
    args = ap.parse_args(argv)
    if args.plot_from:
        import json

        pipeline_plot.plot(json.loads(Path(args.plot_from).read_text()), Path(args.png or "bench/pipeline.png"))
        return 0
    runs = common.runs_of(args, quick_default=1)
    p = dict(QUICK if args.quick else FULL)
    if args.batches:
        p["batches"] = [int(x) for x in args.batches.split(",")]
    min_batches = 1 if args.quick else MIN_BATCHES   # --quick only proves the script runs
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip()) if args.kinds else KINDS
    if set(kinds) - set(KINDS):
        ap.error(f"--kinds: {', '.join(sorted(set(kinds) - set(KINDS)))} unknown; use {', '.join(KINDS)}")
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in names if w not in wl.WORKLOADS]
    if unknown:
        ap.error(f"--workloads: {', '.join(unknown)} unknown; use {', '.join(wl.WORKLOADS)}")
    others = [w for w in names if w != "uniform"]
    if "uniform" not in names:
        p["batches"] = []
    other_batches = [int(x) for x in args.batches.split(",")] if args.batches else (
        [10_000] if args.quick else [50_000, 100_000])
    # like uniform's, a workload's topic holds at least MIN_BATCHES of the largest batch, so that a
    # query's first batch does not weigh more in one workload's figure than in another's
    other_n = args.workload_messages or (10_000 if args.quick else max(200_000, min_batches * max(other_batches)))
    sizes = {batch: max(p["messages"], min_batches * batch) for batch in p["batches"]}
    rep = common.Report("pipeline", args)
    from ingest.devtools.broker import embedded_default

    broker_kind = args.broker or embedded_default()
    rep.params = dict(p, value_bytes=cs.VALUE_BYTES, runs=runs, trigger="available-now", master="local[2]",
                      broker=broker_kind)
    out = Path(args.out) / "pipeline"
    with common.work_dir(out, args.keep):
        with cs.embedded_broker(broker_kind, out / "broker") as broker:
            for n in ([] if args.soak_only else sorted(set(sizes.values()))):
                secs = cs.prefill_topic(broker.bootstrap_servers, topic_for(n), p["partitions"], n)
                rep.log(f"pre-filled {topic_for(n)} with {n:,} records in {secs:.1f} s")
                rep.params[f"topic.{topic_for(n)}.messages"] = n
            for w in ([] if args.soak_only else others):
                secs = wl.prefill(broker.bootstrap_servers, topic_for(other_n, w), p["partitions"], other_n,
                                  wl.WORKLOADS[w], common.SEED)
                rep.log(f"pre-filled {topic_for(other_n, w)} with {other_n:,} records in {secs:.1f} s")
                rep.params[f"topic.{topic_for(other_n, w)}.messages"] = other_n
            # a batch of 100,000 mixed records is ~400 MB collected in the driver JVM: past its
            # default 1 GiB heap (what `--spark-conf spark.driver.memory=4g` gives a user)
            spark = cs.spark_session(2, "4g" if "mixed" in others else None)
            try:
                _, events = cs.progress_listener(spark)
                batches = [] if args.soak_only else p["batches"]
                if batches and not args.quick:
                    # one unrecorded round first: the JVM's JIT and the Python workers warm up on it,
                    # not on whichever kind happens to be measured first
                    for what in kinds:
                        measure(args, spark, events, broker.bootstrap_servers, "warm-up", what, batches[0],
                                sizes[batches[0]])
                for batch in batches:
                    tag = f"batch{batch}"
                    res = {what: {k: [] for k in [*FIGURES, "batches"]} for what in kinds}
                    for r in range(runs):
                        # the kinds take turns within each round, in a rotating order, so a drift in
                        # the shared machine's speed falls on all of them alike
                        for what in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
                            run = measure(args, spark, events, broker.bootstrap_servers, tag, what, batch,
                                          sizes[batch])
                            for k, v in run.items():
                                res[what][k].append(v)
                    for what in kinds:
                        name = f"{tag}.{what}"
                        for figure, unit in FIGURES.items():
                            rep.add(f"{name}.{figure}", res[what][figure], unit)
                        rep.params[f"{name}.batches"] = res[what]["batches"]
                    for name, num, den in (
                            ("commitlog_sync_index_on_vs_off", "commitlog.sync", "commitlog.sync_noindex"),
                            ("commitlog_sync_nospool_vs_noop", "commitlog.sync_nospool", "noop"),
                            # small ranges read together (the default) against one task per range (before)
                            ("commitlog_sync_grouped_vs_taskperpartition", "commitlog.sync",
                             "commitlog.sync_taskperpartition"),
                            # ours against Spark's own Kafka source: `run`'s default source is the faster one
                            ("commitlog_sync_ours_vs_spark_kafka", "commitlog.sync", "spark_kafka.commitlog.sync"),
                            ("noop_ours_vs_spark_kafka", "noop", "spark_kafka.noop"),
                            ("spark_kafka_commitlog_sync_vs_noop", "spark_kafka.commitlog.sync", "spark_kafka.noop")):
                        ratio_if_measured(rep, f"{tag}.ratio.{name}", f"{tag}.{num}.msgs_per_s",
                                          f"{tag}.{den}.msgs_per_s")
                    for flush in ("sync", "async"):
                        for peer in ("noop", "parquet"):
                            ratio_if_measured(rep, f"{tag}.ratio.commitlog_{flush}_vs_{peer}",
                                              f"{tag}.commitlog.{flush}.msgs_per_s", f"{tag}.{peer}.msgs_per_s")
                    if not args.no_ceilings:   # Kafka's own consumers on the same topic, right after
                        kafka_ceilings.measure(rep, broker.bootstrap_servers, topic_for(sizes[batch]), sizes[batch],
                                               tag, runs, out / "ceilings")
                for w in ([] if args.soak_only else others):
                    run_workload(args, rep, spark, events, broker.bootstrap_servers, w, other_n, other_batches,
                                 runs, p["partitions"])
                if batches and "uniform" in names and not args.soak_only:
                    share, reasons = wl.direct_share(broker.bootstrap_servers, topic_for(sizes[batches[0]]),
                                                     p["partitions"], sizes[batches[0]],
                                                     job_config(broker.bootstrap_servers, out, batches[0], "sync"))
                    rep.add("uniform.direct_share", [share], "share")
                    rep.params["uniform.general_way_records"] = reasons
                if args.soak > 0:
                    soak(args, rep, spark, broker.bootstrap_servers, args.soak, args.soak_rate)
            finally:
                spark.stop()
        rep.add("driver_python_vmhwm_mib", common.peak_rss_bytes() / MIB, "MiB")
    rep.finish()
    if args.png:
        pipeline_plot.plot(rep.as_json(), Path(args.png))
    return 0


if __name__ == "__main__":
    sys.exit(main())
