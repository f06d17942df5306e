"""What a local Spark start maps instead of redoing, made once by ``make spark-archive``:

- a class-data-sharing archive for the driver JVM: the classes a local Spark driver loads at start,
  parsed and verified once and mapped by every later start, as the JDK's own archive does for its
  core classes. A job's start then spends less CPU loading Spark's classes, which is most of what a
  fresh driver does before its first batch.
- a Spark home without ``python/lib/pyspark.zip``. Spark puts ``$SPARK_HOME/python/lib/pyspark.zip``
  first on the path of every Python process it starts (each planner runner's daemon, the executors'
  workers), and from a zip Python compiles each module from its source on every import (it caches no
  bytecode there), and PySpark's worker has each zip importer read its archive's directory again before
  every task (``importlib.invalidate_caches``: a zip importer per package imported from the zip, each
  ~2,600 entries). Without the zip those processes import the same pyspark from where pip installed it,
  with the bytecode pip compiled. The home is pip's pyspark directory, linked entry by entry but for
  that one zip.

Both are only good for what they were made with: the archive's name carries the java and the Spark
jars, the home's the Python and the pyspark; a JVM that finds an archive that does not fit maps
nothing and starts as it would without (its CDS log lines are switched off: a job's output is ours),
and a home for another Python or pyspark is not used. Under spark-submit (``master=None``) the
submitter's JVM options and Spark home stand, and neither is used.

    python -m ingest.spark_archive          # make them (make spark-archive does)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ingest.jvm import JvmJarsMissing, java, lib_dir

ARCHIVE_DIR = "spark-cds"
ZIP = Path("python", "lib", "pyspark.zip")
# written last: a home without it was cut short and is made again
HOME_DONE = ".complete"
HOME_LAYOUT = "without pyspark.zip"     # in the home's name: a home of another layout is made again
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

    # the jars' paths, which the archive records, run through the Spark home the driver starts from
    home = spark_home() or os.environ.get("SPARK_HOME") or _pyspark_dir()
    tag = hashlib.sha256(f"{runtime}\0{pyspark.__version__}\0{home}".encode()).hexdigest()[:16]
    return lib_dir() / ARCHIVE_DIR / f"driver-{pyspark.__version__}-{tag}.jsa"


def driver_java_options() -> str | None:
    """The driver JVM's options that map the archive, or None when there is none for this java."""
    path = archive_path()
    if path is None or not path.is_file():
        return None
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def _pyspark_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def home_path() -> Path:
    """Where the Spark home for this Python and this pyspark lies (whether or not it exists)."""
    import pyspark

    source = _pyspark_dir()
    tag = hashlib.sha256(f"{sys.version}\0{pyspark.__version__}\0{source}\0{HOME_LAYOUT}".encode()).hexdigest()[:16]
    return lib_dir() / ARCHIVE_DIR / f"home-{pyspark.__version__}-{tag}"


def _complete(home: Path) -> bool:
    return (home / HOME_DONE).is_file()


def spark_home() -> Path | None:
    """The Spark home to launch a local driver with, or None: the user chose one (SPARK_HOME), or
    ``make spark-archive`` has made none for this Python and pyspark (Spark's own is used then)."""
    home = home_path()
    return home if "SPARK_HOME" not in os.environ and _complete(home) else None


def build_home(home: Path) -> Path:
    """Link pip's pyspark directory into ``home`` entry by entry, except ``python/lib/pyspark.zip``."""
    source = _pyspark_dir()
    partial = home.with_name(home.name + ".part")
    shutil.rmtree(partial, ignore_errors=True)
    for folder in (Path("."), ZIP.parent.parent, ZIP.parent):
        (partial / folder).mkdir(parents=True, exist_ok=True)
        for entry in (source / folder).iterdir():
            if (folder / entry.name) not in (ZIP.parent.parent, ZIP.parent, ZIP):
                (partial / folder / entry.name).symlink_to(entry)
    (partial / HOME_DONE).write_text("")
    shutil.rmtree(home, ignore_errors=True)
    partial.replace(home)
    return home


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


def _make_home() -> None:
    """Make the Spark home if it is not there."""
    home = home_path()
    if _complete(home):
        print(f"spark home: {home} is there")
        return
    for old in home.parent.glob("home-*"):
        shutil.rmtree(old, ignore_errors=True)      # made for another Python or pyspark
    try:
        build_home(home)
    except OSError as exc:
        # Spark's own home is used then: start time, not correctness
        print(f"spark home: not made ({exc}); Python workers import pyspark from its zip", file=sys.stderr)
        return
    print(f"spark home: {home} (without pyspark.zip: Python workers import pip's pyspark)")


def main() -> int:
    _make_home()
    path = archive_path()           # named for the home made just now
    if path is None:
        print("spark archive: no java on PATH and no JAVA_HOME; no class archive made", file=sys.stderr)
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
