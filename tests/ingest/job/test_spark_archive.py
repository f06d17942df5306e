"""The driver JVM's class archive (ingest/spark_archive.py): made by ``make``, mapped by a local
driver, left alone when the caller sets the driver's JVM options or when there is none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ingest import spark_archive
from ingest.spark_session import archive_options

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.unit
def test_no_archive_for_this_java_means_no_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMMITLOG_JVM_LIB", str(tmp_path))
    assert spark_archive.driver_java_options() is None
    assert archive_options({}) == {}


@pytest.mark.unit
def test_the_callers_driver_options_stand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMMITLOG_JVM_LIB", str(tmp_path))
    path = spark_archive.archive_path()
    assert path is not None and path.is_relative_to(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    assert archive_options({})["spark.driver.extraJavaOptions"].startswith(f"-XX:SharedArchiveFile={path} ")
    assert archive_options({"spark.driver.extraJavaOptions": "-Dmine=1"}) == {}


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
