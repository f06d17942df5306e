"""What do Spark's offset and commit logs cost a micro-batch, with Hadoop's checksummed local files
and without (the job's default since fd66829)?

Every batch Spark writes ``offsets/N`` before it runs (walCommit) and ``commits/N`` after
(commitOffsets). Hadoop's default local file system (LocalFs, a ChecksumFs) writes a ``.N.crc``
beside each entry, so each is two files created and renamed; RawLocalFs writes the entry alone. The
job sets RawLocalFs for ``file:`` (ingest.job.spark_session). Here each mode runs in a process of its
own (the setting is the SparkContext's): a librdkafka producer writes 100-byte records at a steady
rate to a 4-partition topic of Apache Kafka (embedded, on disk); our source and Spark's connector each
read it into a ``foreachBatch`` that takes the rows (trigger 100ms). Figures: the median walCommit,
commitOffsets and triggerExecution (ms) of the batches with records, per source and mode; ratios
RawLocalFs over LocalFs (the peer: Hadoop's default, in the same run).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import common_stream as cs  # noqa: E402
import latency  # noqa: E402

MODES = {"raw": "org.apache.hadoop.fs.local.RawLocalFs", "checksummed": "org.apache.hadoop.fs.local.LocalFs"}
SOURCES = ("kafka-python", "spark-kafka")
PHASES = ("walCommit", "commitOffsets", "triggerExecution")


def child(mode: str, bootstrap: str, root: Path, rate: int, seconds: float) -> int:
    """Subprocess: both sources in a session whose file: checkpoint is ``mode``; one JSON line."""
    from ingest.config import JobConfig
    from ingest.job import spark_session

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = spark_session(JobConfig(master="local[2]", spark_conf={
        "spark.hadoop.fs.AbstractFileSystem.file.impl": MODES[mode]}))
    out: dict[str, dict[str, float]] = {}
    for source in SOURCES:
        topic = f"logs-{mode}-{source}-{int(time.time() * 1000) % 10**8}"
        cs.create_topic(bootstrap, topic, latency.PARTITIONS)
        seen = [0]

        def take(df, _batch_id, seen=seen):  # noqa: ANN001
            seen[0] += df.select("timestamp").toArrow().num_rows

        fmt = {"spark-kafka": "kafka", "kafka-python": "kafka-python"}[source]
        query = spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap) \
            .option("subscribe", topic).option("startingOffsets", "earliest").load() \
            .writeStream.foreachBatch(take).trigger(processingTime="100 milliseconds") \
            .option("checkpointLocation", str(root / topic)).start()
        try:
            latency.warm_up(bootstrap, topic, "uniform", lambda seen=seen: seen[0], [])
            began = time.time()
            latency.sent_count(latency.produce(bootstrap, topic, rate, seconds, "uniform"), seconds + 120)
            batches = latency.batches_since([query], began)
        finally:
            query.stop()
        out[source] = {k: statistics.median(p["durationMs"].get(k, 0) for p in batches) if batches else float("nan")
                       for k in PHASES}
        out[source]["batches"] = len(batches)
    print(json.dumps(out), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, mode, bootstrap, root, rate, seconds = sys.argv
        return child(mode, bootstrap, Path(root), int(rate), float(seconds))
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=10_000, help="msg/s (default 10,000)")
    args = ap.parse_args(argv)
    runs = common.runs_of(args, quick_default=1)
    seconds = 6.0 if args.quick else 20.0
    rep = common.Report("spark_logs", args)
    rep.params = {"rate": args.rate, "seconds": seconds, "runs": runs, "trigger": "100ms"}
    got: dict[str, list[float]] = {}
    with common.scratch(args, "spark_logs") as root:
        with cs.embedded_broker("kafka", root / "broker") as broker:
            for r in range(runs):
                for mode in (list(MODES) if r % 2 == 0 else list(MODES)[::-1]):
                    done = subprocess.run([sys.executable, __file__, "--child", mode, broker.bootstrap_servers,
                                           str(root / f"{mode}-{r}"), str(args.rate), str(seconds)],
                                          capture_output=True, text=True, timeout=600, env=common.env_for_subprocess())
                    if done.returncode != 0:
                        raise RuntimeError(f"{mode} run failed:\n{done.stderr[-3000:]}")
                    for source, phases in json.loads(done.stdout.strip().splitlines()[-1]).items():
                        for phase in PHASES:
                            got.setdefault(f"{source}.{mode}.{phase}_ms", []).append(phases[phase])
    for name, values in sorted(got.items()):
        rep.add(name, values, "ms")
    for source in SOURCES:
        for phase in PHASES:
            rep.ratio(f"ratio.{source}.{phase}.raw_vs_checksummed", f"{source}.raw.{phase}_ms",
                      f"{source}.checksummed.{phase}_ms")
    rep.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
