"""A class-data-sharing archive for the driver JVM: the classes a local Spark driver loads at start,
parsed and verified once (``make spark-archive``) and mapped by every later start, as the JDK's own archive
does for its core classes. A job's start then spends less CPU loading Spark's classes, which is most
of what a fresh driver does before its first batch.

The archive is only good for the java and the Spark jars it was made with, so its name carries
both; a JVM that still finds it does not fit maps nothing and starts as it would without (its CDS
log lines are switched off: a job's output is ours). Under spark-submit (``master=None``) the
submitter's JVM options stand and no archive is used.

    python -m ingest.spark_archive          # make it (make spark-archive does)
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

from ingest.jvm import JvmJarsMissing, java, lib_dir

ARCHIVE_DIR = "spark-cds"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _java() -> str | None:
    """The java PySpark's launcher runs (ingest.jvm.java: $JAVA_HOME's, else the one on PATH)."""
    try:
        return str(Path(java()).resolve())
    except JvmJarsMissing:
        return None


def archive_path() -> Path | None:
    """Where the archive for this java and this pyspark lies (whether or not it exists); None
    without a java."""
    runtime = _java()
    if runtime is None:
        return None
    import pyspark

    tag = hashlib.sha256(f"{runtime}\0{pyspark.__version__}\0{Path(pyspark.__file__).parent}".encode()).hexdigest()[:16]
    return lib_dir() / ARCHIVE_DIR / f"driver-{pyspark.__version__}-{tag}.jsa"


def driver_java_options() -> str | None:
    """The driver JVM's options that map the archive, or None when there is none for this java."""
    path = archive_path()
    if path is None or not path.is_file():
        return None
    return f"-XX:SharedArchiveFile={path} {QUIET}"


# What the archive's JVM runs: a local session, a DataFrame through Arrow, our Python data sources
# and a foreachBatch stream, so that the classes of a job's first batches are the ones archived.
_WARM_UP = """
import sys
from ingest.spark_session import build_session
spark = build_session("local[1]", "spark-archive", {"spark.ui.enabled": "false",
                                                    "spark.driver.extraJavaOptions": sys.argv[1]})
spark.range(2000).selectExpr("id", "cast(id as string) as s").toPandas()
spark.createDataFrame([(1, "a")], "k int, v string").groupBy("v").count().collect()
q = (spark.readStream.format("rate").option("rowsPerSecond", 100).load()
     .writeStream.foreachBatch(lambda df, _id: df.toArrow()).trigger(availableNow=True)
     .option("checkpointLocation", sys.argv[2]).start())
q.awaitTermination(120)
spark.stop()
"""


def build(path: Path) -> Path:
    """Run the warm-up in a driver JVM that writes its loaded classes to ``path`` at exit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".part")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="spark-archive-") as scratch:
        opts = f"-XX:ArchiveClassesAtExit={partial} {QUIET}"
        done = subprocess.run([sys.executable, "-c", _WARM_UP, opts, str(Path(scratch) / "checkpoint")],
                              capture_output=True, text=True, timeout=600,
                              cwd=Path(__file__).resolve().parent.parent)
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"the Spark driver archive was not made (exit {done.returncode}): "
                           f"{(done.stderr or done.stdout).strip().splitlines()[-1:] or ['no output']}")
    partial.replace(path)
    return path


def main() -> int:
    path = archive_path()
    if path is None:
        print("spark archive: no java on PATH and no JAVA_HOME; nothing made", file=sys.stderr)
        return 0
    if path.is_file():
        print(f"spark archive: {path} is there")
        return 0
    for old in path.parent.glob("driver-*.jsa"):
        old.unlink()                # made for another java or Spark: never mapped again
    try:
        build(path)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        # a job starts without it as before: a missing archive costs start time, not correctness
        print(f"spark archive: {exc}; jobs start without it", file=sys.stderr)
        return 0
    print(f"spark archive: {path} ({path.stat().st_size >> 20} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
