"""What ``make spark-archive`` makes (ingest/spark_archive.py): the driver JVM's class archive, mapped by
a local driver (compiled with C1 alone), left alone when the caller sets the driver's JVM options or when there is none; and the
Spark home without pyspark.zip, which a local driver starts from unless the user set SPARK_HOME, and
whose Python workers import pip's pyspark, with its bytecode."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ingest import spark_archive
from ingest.spark_session import DRIVER_JIT, driver_options, spark_home_environment

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.unit
def test_no_archive_for_this_java_leaves_the_jit_choice_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMMITLOG_JVM_LIB", str(tmp_path))
    assert spark_archive.driver_java_options() is None
    assert driver_options({}) == {"spark.driver.extraJavaOptions": DRIVER_JIT}


@pytest.mark.unit
def test_the_callers_driver_options_stand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMMITLOG_JVM_LIB", str(tmp_path))
    path = spark_archive.archive_path()
    assert path is not None and path.is_relative_to(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    options = driver_options({})["spark.driver.extraJavaOptions"]
    assert options.startswith(f"-XX:SharedArchiveFile={path} ") and options.endswith(f" {DRIVER_JIT}")
    assert driver_options({"spark.driver.extraJavaOptions": "-Dmine=1"}) == {}


@pytest.mark.integration
def test_the_local_driver_compiles_with_c1_alone(spark) -> None:
    jvm = spark.sparkContext._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert DRIVER_JIT in arguments


_LOADS = """
import sys
from ingest.spark_session import build_session
spark = build_session("local[1]", "archive-check", {"spark.ui.enabled": "false",
                                                    "spark.driver.extraJavaOptions": sys.argv[1]})
spark.range(10).count()
spark.stop()
"""


@pytest.mark.integration
def test_a_local_driver_loads_sparks_classes_from_the_archive(tmp_path: Path) -> None:
    options = spark_archive.driver_java_options()
    assert options, "no driver archive for this java and Spark: `make spark-archive` makes it"
    log = tmp_path / "classes.log"
    traced = options.replace(spark_archive.QUIET, "") + f" -Xlog:class+load=info:file={log}"
    done = subprocess.run([sys.executable, "-c", _LOADS, traced], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    # Spark's own classes, not the lambda classes the JVM spins at run time (Java 17 archives few)
    lines = [line for line in log.read_text().splitlines() if "org.apache.spark." in line and "$$Lambda" not in line]
    archived = [line for line in lines if "shared objects file (top)" in line]
    assert len(archived) > 0.9 * len(lines) > 1000, \
        f"{len(archived)} of {len(lines)} Spark classes came from the archive"


@pytest.mark.unit
def test_the_home_links_all_of_pips_pyspark_but_its_zip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMMITLOG_JVM_LIB", str(tmp_path))
    monkeypatch.delenv("SPARK_HOME", raising=False)
    assert spark_archive.spark_home() is None and spark_home_environment() == {}
    home = spark_archive.build_home(spark_archive.home_path())
    assert spark_archive.spark_home() == home
    assert spark_home_environment() == {"SPARK_HOME": str(home)}
    pip = spark_archive._pyspark_dir()
    assert (home / "jars").resolve() == pip / "jars" and (home / "bin" / "spark-submit").is_file()
    assert (home / "python" / "lib" / "py4j-0.10.9.9-src.zip").resolve().parent == pip / "python" / "lib"
    assert (pip / spark_archive.ZIP).is_file() and not (home / spark_archive.ZIP).exists()
    linked = {p.relative_to(home) for p in home.rglob("*") if p.is_symlink()}
    assert linked == {p.relative_to(pip) for p in pip.iterdir()} - {Path("python")} \
        | {Path("python", p.name) for p in (pip / "python").iterdir()} - {Path("python/lib")} \
        | {Path("python/lib", p.name) for p in (pip / "python" / "lib").iterdir()} - {spark_archive.ZIP}
    # the archive's name follows the home the driver starts from: its jars' paths run through it
    assert spark_archive.archive_path() != (monkeypatch.setenv("SPARK_HOME", str(pip)) or spark_archive.archive_path())
    assert spark_home_environment() == {}


_WORKERS = """
import sys
from ingest.spark_session import build_session
spark = build_session("local[1]", "home-check", {"spark.ui.enabled": "false"})
def where(_):
    import os, pyspark, pyspark.daemon
    yield (pyspark.__file__, pyspark.__spec__.cached, os.environ.get("SPARK_HOME", ""))
print(spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()[0])
spark.stop()
"""


@pytest.mark.integration
def test_a_local_drivers_python_workers_import_pips_pyspark_with_its_bytecode(tmp_path: Path) -> None:
    home = spark_archive.spark_home()
    assert home is not None, "no Spark home for this Python and pyspark: `make spark-archive` makes it"
    done = subprocess.run([sys.executable, "-c", _WORKERS], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    module, cached, spark_home = eval(done.stdout.strip().splitlines()[-1])
    assert module == str(spark_archive._pyspark_dir() / "__init__.py") and spark_home == str(home)
    assert Path(cached).is_file()           # the bytecode pip compiled, not a compile from source
