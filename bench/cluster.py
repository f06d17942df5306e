"""The job on a Spark standalone cluster against the same job in local mode, on the same topic.

A Tansu broker holds a topic of 100-byte records (2 partitions); `commitlog run --trigger
available-now` reads it into a fresh store, SYNC, 50,000-record batches:
- ``local``: `commitlog run --master local[2]` (what BENCHMARKS.md's pipeline figures measure);
- ``cluster``: `deploy/spark-submit.sh` on a standalone cluster started here from the pyspark
  package (a Master and two Workers of one core each, on this machine), the executors getting the
  project and the C kernel from the shipped archive (COMMITLOG_SHIP=archive, the default).
The figure is the sustained rate: messages committed over the span from the first commit to the
last (the commit point polled every 0.05 s), so start-up (executors, Python workers) stays out.
Runs rotate through the kinds. Target: cluster >= 0.8 of local.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import common_stream as cs  # noqa: E402

sys.path.insert(0, str(common.REPO))
from tests.helpers.brokers.spark_cluster import daemon_env, standalone_cluster  # noqa: E402

FULL = {"messages": 1_000_000, "batch": 50_000, "partitions": 2}
QUICK = {"messages": 20_000, "batch": 5_000, "partitions": 2}
TOPIC = "bench-cluster"


def committed(store: Path) -> int:
    """Messages under the commit point: the sum of its queue offsets (no scan)."""
    try:
        doc = json.loads((store / "commitpoint.json").read_text())
    except (OSError, ValueError):
        return 0
    return sum(int(q["next"]) for q in doc.get("queue_offsets", []))


def run_one(cmd: list[str], env: dict[str, str], store: Path, n: int, log: Path) -> float:
    """Run ``cmd`` to its end, polling the commit point; the sustained msg/s."""
    samples: list[tuple[float, int]] = []
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=store.parent)
        while proc.poll() is None:
            samples.append((time.monotonic(), committed(store)))
            time.sleep(0.05)
    samples.append((time.monotonic(), committed(store)))
    if proc.returncode != 0 or samples[-1][1] != n:
        raise RuntimeError(f"{cmd[:3]} exited {proc.returncode} with {samples[-1][1]} of {n} committed:\n"
                           f"{log.read_text(errors='replace')[-4000:]}")
    first = next(i for i, (_, c) in enumerate(samples) if c > 0)
    last = next(i for i, (_, c) in enumerate(samples) if c == n)
    if last == first:
        # every batch committed between two polls: the span from the last poll that saw none is the
        # only one measured, and it holds a batch's start-up too (a lower bound, never a NaN)
        t0, c0 = samples[first - 1] if first else (samples[0][0], 0)
    else:
        t0, c0 = samples[first]
    return (n - c0) / max(samples[last][0] - t0, 1e-3)


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    args = ap.parse_args(argv)
    p = dict(QUICK if args.quick else FULL)
    runs = common.runs_of(args, quick_default=1)
    rep = common.Report("cluster", args)
    rep.params = dict(p, runs=runs, workers=2, cores_per_worker=1, flush="sync", trigger="available-now")
    out = Path(args.out) / "cluster"
    with common.work_dir(out, args.keep):
        with cs.tansu(out / "broker") as broker:
            secs = cs.prefill_topic(broker.bootstrap_servers, TOPIC, p["partitions"], p["messages"])
            rep.log(f"pre-filled {TOPIC} with {p['messages']:,} records in {secs:.1f} s")
            job = ["run", "--bootstrap-servers", broker.bootstrap_servers, "--subscribe", TOPIC,
                   "--starting-offsets", "earliest", "--trigger", "available-now", "--flush", "sync",
                   "--max-offsets-per-trigger", str(p["batch"]), "--shuffle-partitions", "2"]
            with standalone_cluster(out / "spark", cores=1, memory="2g", workers=2) as cluster:
                # --quick proves the script runs: the spool variant only in full mode
                kinds = ("local", "cluster") if args.quick else ("local", "cluster", "cluster_spool")
                rates: dict[str, list[float]] = {kind: [] for kind in kinds}
                for r in range(runs):
                    for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
                        with common.scratch(args, f"cluster/{kind}-{r}") as root:
                            store = root / "store"
                            where = ["--store", str(store), "--checkpoint", str(root / "checkpoint")]
                            if kind == "local":
                                cmd = [common.python(), "-m", "ingest.cli", *job, *where, "--master", "local[2]"]
                                env = common.env_for_subprocess()
                            else:
                                cmd = ["bash", str(common.REPO / "deploy" / "spark-submit.sh"),
                                       "--master", cluster.master_url, "--conf", "spark.driver.host=127.0.0.1",
                                       "--conf", "spark.driver.bindAddress=127.0.0.1", "--conf",
                                       "spark.ui.enabled=false", "--driver-memory", "2g",
                                       "--executor-memory", "1g", "--", *job, *where]
                                if kind == "cluster_spool":
                                    cmd += ["--spool-dir", str(root / "spool")]
                                env = daemon_env(cluster.spark_home, root)
                                env.update({"PYTHON": common.python(), "COMMITLOG_EXECUTOR_PYTHON": common.python(),
                                            "COMMITLOG_DRIVER_PYTHON": common.python(),
                                            "COMMITLOG_BUILD_DIR": str(out / "build")})   # built once
                            rate = run_one(cmd, env, store, p["messages"], root / "job.log")
                            rep.log(f"{kind} run {r}: {rate:,.0f} msg/s")
                            rates[kind].append(rate)
                for kind, values in rates.items():
                    rep.add(f"{kind}.commitlog.sync.msgs_per_s", values, "msg/s")
                rep.ratio("ratio.cluster_vs_local", "cluster.commitlog.sync.msgs_per_s", "local.commitlog.sync.msgs_per_s")
                if "cluster_spool" in rates:
                    rep.ratio("ratio.cluster_spool_vs_local", "cluster_spool.commitlog.sync.msgs_per_s",
                              "local.commitlog.sync.msgs_per_s")
    rep.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
