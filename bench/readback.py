"""How fast is a store read back, as Arrow batches and as a Spark DataFrame, against its peers?

Builds a store (256 MiB, 16 MiB in quick mode; segments of 64 MiB, 4 MiB) of the issue's messages
(10-byte topic, TAGS/KEYS/UNIQ_KEY properties) with 1 KiB bodies and with 100-byte bodies, page
cache warm, then measures in the same run:

- ``arrow``: StoreReader.record_batches over the whole store (every column built, bodies copied
  into plain binary columns, every BODYCRC checked: the default), against the raw scan of
  ``commitlog verify``: the same segments walked and checked by store.scan.record_check (BODYCRC
  included, as verify does), one thread, in this process; and ``commitlog verify STORE`` end to end
  (a subprocess: start-up, consume-queue checks and its parallel pieces included). Targets: arrow
  >= 0.5 of the raw scan. What the CRC check costs: ``arrow_unchecked`` (check_crc=False) beside it.
- ``spark``: spark.read.format("rocketmq-commitlog").load(STORE) written to Spark's ``noop`` sink
  (every column read), against spark.read.parquet of the same rows written as Parquet (snappy) by
  Spark, on a local[2] session. Target: >= 0.8 of Parquet. And the ceiling of any Python data
  source here: ``arrow_source``, a data source that only hands Spark the same Arrow batches,
  computed before timing and read from Arrow IPC files (one per partition of ours, mapped), so
  what it costs is PySpark's: the batches through the worker's socket into the JVM, and rows.
  What the CRC check costs there: ``commitlog_unchecked`` (option checkCrc=false) beside it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import records  # noqa: E402

MIB = 1 << 20
FULL = {"store_bytes": 256 * MIB, "segment_size": 64 * MIB, "bodies": [1024, 100]}
QUICK = {"store_bytes": 16 * MIB, "segment_size": 4 * MIB, "bodies": [1024, 100]}


def build_store(root: Path, segment_size: int, nbytes: int, body: int) -> tuple[int, int]:
    """Append pre-encoded batches until the store holds about ``nbytes``; (end offset, messages)."""
    from store import MessageStore, StoreConfig

    common.shutil.rmtree(root, ignore_errors=True)   # a killed run's store would be counted as 0 messages
    per = body + 200
    batch_records = max(1, min(20_000, (nbytes // per) // 8))
    batch = records.encode(records.message_table(batch_records, body))
    n = 0
    with MessageStore.open(root, StoreConfig(segment_size=segment_size, flush_mode="async")) as store:
        while store.max_offset + batch.nbytes + 8 <= nbytes:
            store.append_encoded(batch)
            n += len(batch)
        store.commit()
        return store.committed_offset, n


def arrow_read(root: Path, check_crc: bool = True) -> tuple[float, int]:
    """Seconds to read every committed message as Arrow batches; and the rows."""
    from store import StoreReader

    rows = 0
    t0 = time.perf_counter()
    with StoreReader.open(root, check_crc=check_crc) as reader:
        for batch in reader.record_batches():
            rows += batch.num_rows
    return time.perf_counter() - t0, rows


def verify_scan(root: Path) -> float:
    """Seconds of verify's raw scan of the same segments (walk, checks, BODYCRC), one thread."""
    from store import StoreReader
    from store.format.codec import CodecConfig
    from store.scan.record_check import scan_segment_fast

    t0 = time.perf_counter()
    with StoreReader.open(root) as reader:
        end = reader.committed_offset
        for path, base, size in reader.segments():
            if base >= end:
                break
            seg = reader._segments.find(base)          # the mapping the reader already holds
            scan_segment_fast(seg.view, base, min(size, end - base), CodecConfig(), columns=True)
    return time.perf_counter() - t0


def verify_command(root: Path) -> float:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ingest.cli", "verify", str(root)], capture_output=True,
                          text=True, env=common.env_for_subprocess(), timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"commitlog verify {root} exited {done.returncode}:\n{done.stdout[-2000:]}")
    return time.perf_counter() - t0


def write_arrow_files(root: Path, out: Path) -> None:
    """The store's batches as Arrow IPC files, one per partition the rocketmq-commitlog source plans."""
    import pyarrow as pa

    from store import StoreReader

    out.mkdir(parents=True, exist_ok=True)
    with StoreReader.open(root) as reader:
        for i, (lo, hi) in enumerate(reader.read_ranges()):
            with pa.OSFile(str(out / f"{i:05d}.arrow"), "wb") as f:
                writer = None
                for batch in reader.record_batches(lo, hi):
                    writer = writer or pa.ipc.new_file(f, batch.schema)
                    writer.write_batch(batch)
                if writer is not None:
                    writer.close()


def register_arrow_source(spark: object) -> None:
    """``arrow_source``: a Python data source yielding the batches of write_arrow_files' files."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from ingest.readback.source import readback_schema

    class ArrowFile(InputPartition):
        def __init__(self, path: str) -> None:
            self.path = path

    class ArrowFilesReader(DataSourceReader):
        def __init__(self, path: str) -> None:
            self.path = path

        def partitions(self) -> list[ArrowFile]:
            return [ArrowFile(str(p)) for p in sorted(Path(self.path).glob("*.arrow"))]

        def read(self, partition: ArrowFile):  # type: ignore[no-untyped-def]
            import pyarrow as pa

            with pa.memory_map(partition.path) as source:
                batches = pa.ipc.open_file(source)
                for i in range(batches.num_record_batches):
                    yield batches.get_batch(i)

    class ArrowFiles(DataSource):
        @classmethod
        def name(cls) -> str:
            return "arrow_source"

        def schema(self):  # type: ignore[no-untyped-def]
            return readback_schema()

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return ArrowFilesReader(self.options["path"])

    spark.dataSource.register(ArrowFiles)  # type: ignore[attr-defined]


def spark_read(spark: object, reader: object) -> float:
    t0 = time.perf_counter()
    reader.write.format("noop").mode("overwrite").save()  # type: ignore[attr-defined]
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    args = common.parser(__doc__.splitlines()[0]).parse_args(argv)
    runs = common.runs_of(args, quick_default=1)
    p = QUICK if args.quick else FULL
    rep = common.Report("readback", args)
    rep.params = dict(p, runs=runs)
    out = Path(args.out) / "readback"
    spark = None
    with common.work_dir(out, args.keep):
        for body in p["bodies"]:
            root = out / f"store-body{body}"
            end, n = build_store(root, p["segment_size"], p["store_bytes"], body)
            rep.params[f"body{body}.bytes"] = end
            rep.params[f"body{body}.messages"] = n
            rep.log(f"== store of {end / MIB:.0f} MiB, {n:,} messages, {body}-byte bodies")
            tag = f"body{body}"

            arrow_read(root)
            verify_scan(root)                           # warm-up: page cache, imports
            arrow, unchecked = [], []
            for _ in range(runs):                       # alternated: both see the same machine load
                arrow.append(arrow_read(root))
                unchecked.append(arrow_read(root, check_crc=False))
            assert all(rows == n for _, rows in arrow + unchecked), f"read back {arrow[0][1]} of {n} messages"
            scan = [verify_scan(root) for _ in range(runs)]
            verify_command(root)
            command = [verify_command(root) for _ in range(runs)]
            rep.add(f"{tag}.arrow.mb_per_s", [end / s / 1e6 for s, _ in arrow], "MB/s")
            rep.add(f"{tag}.arrow.msg_per_s", [n / s for s, _ in arrow], "msg/s")
            rep.add(f"{tag}.arrow_unchecked.mb_per_s", [end / s / 1e6 for s, _ in unchecked], "MB/s")
            rep.ratio(f"{tag}.ratio.arrow_crc_vs_unchecked", f"{tag}.arrow.mb_per_s", f"{tag}.arrow_unchecked.mb_per_s")
            rep.add(f"{tag}.verify_scan.mb_per_s", [end / s / 1e6 for s in scan], "MB/s")
            rep.add(f"{tag}.verify_command.mb_per_s", [end / s / 1e6 for s in command], "MB/s")
            rep.ratio(f"{tag}.ratio.arrow_vs_verify_scan", f"{tag}.arrow.mb_per_s", f"{tag}.verify_scan.mb_per_s")
            rep.ratio(f"{tag}.ratio.arrow_vs_verify_command", f"{tag}.arrow.mb_per_s",
                      f"{tag}.verify_command.mb_per_s")

            if spark is None:
                import common_stream as cs
                spark = cs.spark_session(2)
                register_arrow_source(spark)
            parquet_dir = out / f"parquet-body{body}"
            arrow_dir = out / f"arrow-body{body}"
            write_arrow_files(root, arrow_dir)
            floor = spark.read.format("arrow_source").load(str(arrow_dir))
            ours = spark.read.format("rocketmq-commitlog").load(str(root))
            ours_unchecked = spark.read.format("rocketmq-commitlog").option("checkCrc", "false").load(str(root))
            ours.write.mode("overwrite").parquet(str(parquet_dir))     # the same rows, as Parquet
            theirs = spark.read.parquet(str(parquet_dir))
            assert theirs.count() == n
            rep.params[f"{tag}.parquet_bytes"] = sum(f.stat().st_size for f in parquet_dir.rglob("*.parquet"))
            rep.params[f"{tag}.spark_partitions"] = ours.rdd.getNumPartitions()
            assert floor.count() == n
            for frame in (ours, ours_unchecked, theirs, floor):
                spark_read(spark, frame)
            mine, mine_unchecked, peer, ceiling = [], [], [], []
            for _ in range(runs):                       # alternated: all see the same machine load
                mine.append(spark_read(spark, ours))
                mine_unchecked.append(spark_read(spark, ours_unchecked))
                peer.append(spark_read(spark, theirs))
                ceiling.append(spark_read(spark, floor))
            rep.add(f"{tag}.spark.commitlog.msg_per_s", [n / s for s in mine], "msg/s")
            rep.add(f"{tag}.spark.commitlog_unchecked.msg_per_s", [n / s for s in mine_unchecked], "msg/s")
            rep.ratio(f"{tag}.ratio.spark_crc_vs_unchecked", f"{tag}.spark.commitlog.msg_per_s",
                      f"{tag}.spark.commitlog_unchecked.msg_per_s")
            rep.add(f"{tag}.spark.parquet.msg_per_s", [n / s for s in peer], "msg/s")
            rep.add(f"{tag}.spark.arrow_source.msg_per_s", [n / s for s in ceiling], "msg/s")
            rep.ratio(f"{tag}.ratio.spark_commitlog_vs_parquet", f"{tag}.spark.commitlog.msg_per_s",
                      f"{tag}.spark.parquet.msg_per_s")
            rep.ratio(f"{tag}.ratio.spark_commitlog_vs_arrow_source", f"{tag}.spark.commitlog.msg_per_s",
                      f"{tag}.spark.arrow_source.msg_per_s")
            rep.ratio(f"{tag}.ratio.spark_arrow_source_vs_parquet", f"{tag}.spark.arrow_source.msg_per_s",
                      f"{tag}.spark.parquet.msg_per_s")
            for done in (root, parquet_dir, arrow_dir):
                common.shutil.rmtree(done, ignore_errors=True)
        if spark is not None:
            spark.stop()
    rep.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
