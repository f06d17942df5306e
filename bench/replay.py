"""How fast does `commitlog replay` copy a pre-filled topic into a store, against a plain
kafka-python consumer reading the same records with the same parallelism?

A topic of 100-byte records (2 partitions, the embedded Tansu broker) is pre-filled. Then:
- ``replay``: ingest.replay.command.replay (what `commitlog replay --topics T --no-verify` runs), Spark
  local[2], batches of replay's default --max-offsets-per-trigger (200,000), one durable commit per
  batch (SYNC); msg/s = records / wall time of the call (planning and store creation included, JVM
  start excluded: the session is built once, before timing). The session's first replay pays the
  JVM's warm-up (JIT compilation of Spark's paths), once per job: it is reported on its own
  (``replay_first``) and the measured runs follow it, as a long replay's later batches would;
- ``plain_consumer``: 2 processes (one per partition, as Spark runs 2 tasks at once), each a
  KafkaConsumer with the source's fetch tuning (ingest.kafka.read.READ_TUNING), assign + seek to
  the start, poll until the end; msg/s = records / the slower one's time.
Target: replay >= 0.8 of the plain consumer.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import common_stream as cs  # noqa: E402

FULL = {"messages": 1_000_000, "batch": None, "partitions": 2}   # batch None: replay's default
QUICK = {"messages": 10_000, "batch": 10_000, "partitions": 2}
TOPIC = "bench-replay"


def consumer_child(bootstrap: str, topic: str, partition: int, end: int) -> int:
    """Subprocess: connect, say ready, wait for "go" on stdin, read [0, end) of one partition,
    print "done <records> <seconds>"."""
    from kafka import KafkaConsumer, TopicPartition

    from ingest.kafka.read import READ_TUNING

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", **READ_TUNING)
    tp = TopicPartition(topic, partition)
    c.assign([tp])
    c.seek(tp, 0)
    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.perf_counter()
    n = 0
    nbytes = 0
    while n < end:
        for rec in c.poll(timeout_ms=500).get(tp, ()):
            if rec.offset < end:
                n += 1
                nbytes += len(rec.value)
    elapsed = time.perf_counter() - t0
    c.close()
    print(f"done {n} {elapsed} {nbytes}", flush=True)
    return 0


def run_plain(bootstrap: str, partitions: int, per_partition: int) -> float:
    procs = [subprocess.Popen([sys.executable, __file__, "--child-consumer", bootstrap, TOPIC, str(p),
                               str(per_partition)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=common.env_for_subprocess()) for p in range(partitions)]
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a consumer child did not start")
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        secs = []
        for p in procs:
            parts = p.stdout.readline().split()
            if not parts or parts[0] != "done" or int(parts[1]) != per_partition:
                raise RuntimeError(f"a consumer child failed: {parts}")
            secs.append(float(parts[2]))
            p.wait(timeout=60)
        return max(secs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def run_replay(spark: Any, bootstrap: str, root: Path, batch: int | None, expected: int) -> float:
    from ingest.config import JobConfig
    from ingest.replay.command import ReplayOptions

    sizing = {"max_offsets_per_trigger": batch} if batch else {}
    cfg = JobConfig(bootstrap_servers=bootstrap, subscribe=TOPIC, store=str(root / "store"),
                    flush="sync", master="local[2]", shuffle_partitions=2, **sizing)
    return timed_replay(spark, cfg, ReplayOptions(topics=(TOPIC,), verify=False, progress="none"), expected)


def timed_replay(spark: Any, cfg: Any, opts: Any, expected: int) -> float:
    """Seconds of one ingest.replay.command.replay, which must write ``expected`` records."""
    from ingest.replay.command import replay

    t0 = time.perf_counter()
    summary = replay(cfg, opts, spark=spark)
    elapsed = time.perf_counter() - t0
    if not summary.complete or summary.records != expected:
        raise RuntimeError(f"replay wrote {summary.records} records (complete={summary.complete}), "
                           f"expected {expected}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child-consumer":
        _, _, bootstrap, topic, partition, end = sys.argv
        return consumer_child(bootstrap, topic, int(partition), int(end))
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=None, help="maxOffsetsPerTrigger of the replay")
    args = ap.parse_args(argv)
    runs = common.runs_of(args, quick_default=1)
    p = dict(QUICK if args.quick else FULL)
    if args.batch:
        p["batch"] = args.batch
    n, parts = p["messages"], p["partitions"]
    if not p["batch"]:
        from ingest.config import JobConfig

        p["batch"] = JobConfig().max_offsets_per_trigger
    rep = common.Report("replay", args)
    rep.params = dict(p, value_bytes=cs.VALUE_BYTES, runs=runs, master="local[2]", flush="sync")
    out = Path(args.out) / "replay"
    with common.work_dir(out, args.keep):
        with cs.tansu(out / "broker") as broker:
            secs = cs.prefill_topic(broker.bootstrap_servers, TOPIC, parts, n)
            rep.log(f"pre-filled {TOPIC} with {n:,} records in {secs:.1f} s")
            plain = [run_plain(broker.bootstrap_servers, parts, n // parts) for _ in range(runs)]
            spark = cs.spark_session(parts)
            try:
                rep_secs = []
                for _ in range(runs + (0 if args.quick else 1)):
                    with common.scratch(args, "replay/run") as root:
                        rep_secs.append(run_replay(spark, broker.bootstrap_servers, root, p["batch"], n))
            finally:
                spark.stop()
            if not args.quick:
                rep.add("replay_first.msgs_per_s", [n / rep_secs.pop(0)], "msg/s")
            rep.add("replay.msgs_per_s", [n / s for s in rep_secs], "msg/s")
            rep.add("plain_consumer.msgs_per_s", [n / s for s in plain], "msg/s")
            rep.ratio("ratio.replay_vs_plain_consumer", "replay.msgs_per_s", "plain_consumer.msgs_per_s")
    rep.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
