"""How fast does `commitlog replay --from-files` copy an export into a store, against Spark reading
the same files?

An export of 100-byte records over 2 partitions (8 files each, in the form `export_records` writes:
jsonl with base64 bodies, and parquet) is written first. Then, per format:
- ``replay``: ingest.replay.command.replay with ``from_files`` (what `commitlog replay --from-files DIR
  --format F --no-verify` runs), Spark local[2], SYNC, the executors reading the files in pieces
  (ingest.replay.file_pieces): the scan, then each batch, encoded by the tasks that read it
  (ingest.replay.file_batches); msg/s = records / wall time of the call
  (JVM start excluded, the session built once before timing; the first run, the JVM's warm-up, is
  not counted);
- ``spark_count``: ``spark.read.json(DIR).count()`` / ``spark.read.parquet(DIR).count()`` on the same
  files, as the issue names it (JSON: Spark infers the schema, a pass of its own, then counts;
  Parquet: Spark counts from the footers without reading a value);
- ``spark_read``: the same reader with every value read (``sum(length(value))``), the work a copy
  cannot skip.
Also ``task_closure_bytes``: the largest pickled function a batch task carries (its pieces), which
stays small however large the export: nothing of the data goes through the driver.
Target: replay >= 0.8 of ``spark_count``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import common_stream as cs  # noqa: E402
from replay import timed_replay  # noqa: E402

FULL = {"messages": 1_000_000, "files_per_partition": 8, "partitions": 2}
QUICK = {"messages": 4_000, "files_per_partition": 1, "partitions": 2}
TOPIC = "bench-files"


def write_export(directory: Path, fmt: str, n: int, partitions: int, files: int) -> None:
    """``n`` records round-robin over ``partitions``, each partition's offsets cut into ``files`` files."""
    import numpy as np
    import pyarrow as pa

    from ingest.replay.files import EXPORT_SCHEMA, write_records

    directory.mkdir(parents=True, exist_ok=True)
    per = n // partitions
    rng = np.random.default_rng(common.SEED)
    for p in range(partitions):
        for f in range(files):
            a, b = per * f // files, per * (f + 1) // files
            m = b - a
            values = rng.integers(0, 256, size=m * cs.VALUE_BYTES, dtype=np.uint8)
            table = pa.table({
                "key": pa.array([b"key-%d" % (i & 63) for i in range(a, b)], pa.binary()),
                "value": pa.Array.from_buffers(pa.binary(), m, [None, pa.py_buffer(
                    np.arange(0, (m + 1) * cs.VALUE_BYTES, cs.VALUE_BYTES, dtype=np.int32)), pa.py_buffer(values)]),
                "topic": pa.array([TOPIC] * m), "partition": pa.array([p] * m, pa.int32()),
                "offset": pa.array(range(a, b), pa.int64()),
                "timestamp": pa.array([1_700_000_000_000_000 + 1000 * i for i in range(a, b)],
                                      pa.timestamp("us", tz="UTC")),
                "timestampType": pa.array([0] * m, pa.int32()),
                "headers": pa.array([[]] * m, EXPORT_SCHEMA.field("headers").type)}, schema=EXPORT_SCHEMA)
            write_records(table, directory / f"part-{p}-{f}.{fmt}", fmt)


def run_replay(spark: Any, export: Path, fmt: str, root: Path, expected: int) -> float:
    from ingest.config import JobConfig
    from ingest.replay.command import ReplayOptions

    cfg = JobConfig(bootstrap_servers="(unused)", subscribe="*", store=str(root / "store"), flush="sync",
                    master="local[2]", shuffle_partitions=2)
    return timed_replay(spark, cfg, ReplayOptions(from_files=str(export), file_format=fmt, verify=False,
                                                  progress="none"), expected)


def run_spark(spark: Any, export: Path, fmt: str, expected: int, read_values: bool) -> float:
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    df = spark.read.json(str(export)) if fmt == "jsonl" else spark.read.parquet(str(export))
    if read_values:
        got = df.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("b")).collect()[0]["n"]
    else:
        got = df.count()
    elapsed = time.perf_counter() - t0
    if got != expected:
        raise RuntimeError(f"Spark counted {got} rows in {export}, expected {expected}")
    return elapsed


def task_closure_bytes(spark: Any, export: Path, fmt: str) -> int:
    """The pickled mapInArrow function of a batch over the whole export (the largest a task carries),
    the pieces encoded where they are read or the general way, whichever is larger."""
    from functools import partial

    from pyspark import cloudpickle

    from ingest.config import JobConfig
    from ingest.job_settings import codec_config, mapping_config
    from ingest.replay.file_batches import batch_task
    from ingest.replay.file_pieces import _read_pieces, plan_pieces, scan_export

    scan = scan_export(spark, plan_pieces(export, fmt))
    everything = list(range(len(scan.pieces)))
    cfg = JobConfig(bootstrap_servers="(unused)", subscribe="*", store=str(export))
    fused = batch_task(scan, None, mapping_config(cfg), codec_config(cfg), None, 1)
    general = partial(_read_pieces, pieces=scan.pieces, order=everything, ranges=None)
    return max(0 if fused is None else len(cloudpickle.dumps(fused[0])), len(cloudpickle.dumps(general)))


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--files-per-partition", type=int, default=None,
                    help="files each partition's records are cut into (default 8; 1 writes one parquet row "
                         "group per partition, larger than a batch)")
    args = ap.parse_args(argv)
    runs = common.runs_of(args, quick_default=1)
    p = dict(QUICK if args.quick else FULL)
    if args.files_per_partition:
        p["files_per_partition"] = args.files_per_partition
    n = p["messages"]
    rep = common.Report("replay_files", args)
    rep.params = dict(p, value_bytes=cs.VALUE_BYTES, runs=runs, master="local[2]", flush="sync")
    out = Path(args.out) / "replay_files"
    with common.work_dir(out, args.keep):
        spark = cs.spark_session(2)
        try:
            for fmt in ("jsonl", "parquet"):
                export = out / fmt
                write_export(export, fmt, n, p["partitions"], p["files_per_partition"])
                rep.params[f"{fmt}.bytes"] = sum(f.stat().st_size for f in export.iterdir())
                if not args.quick:
                    with common.scratch(args, f"replay_files/warm-{fmt}") as root:
                        run_replay(spark, export, fmt, root, n)     # the JVM's warm-up of these paths
                secs, count, read = [], [], []
                for _ in range(runs):
                    with common.scratch(args, f"replay_files/run-{fmt}") as root:
                        secs.append(run_replay(spark, export, fmt, root, n))
                    count.append(run_spark(spark, export, fmt, n, False))
                    read.append(run_spark(spark, export, fmt, n, True))
                rep.add(f"{fmt}.replay.msgs_per_s", [n / s for s in secs], "msg/s")
                rep.add(f"{fmt}.spark_count.msgs_per_s", [n / s for s in count], "msg/s")
                rep.add(f"{fmt}.spark_read.msgs_per_s", [n / s for s in read], "msg/s")
                rep.add(f"{fmt}.task_closure_bytes", [task_closure_bytes(spark, export, fmt)], "bytes")
                rep.ratio(f"{fmt}.ratio.replay_vs_spark_count", f"{fmt}.replay.msgs_per_s",
                          f"{fmt}.spark_count.msgs_per_s")
                rep.ratio(f"{fmt}.ratio.replay_vs_spark_read", f"{fmt}.replay.msgs_per_s",
                          f"{fmt}.spark_read.msgs_per_s")
        finally:
            spark.stop()
    rep.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
