"""Nothing of the directory the job is started from runs as ours (issue 68, item 4): ``run``, ``replay``
and the store read back through Spark, started from a directory holding ``ingest/`` (with an
``__init__.py`` that fails loudly), ``sink/`` and the store itself, named ``store``. Spark starts its
Python workers with ``python -m`` there, which would put that directory first on their import path
(ingest.spark_session, SAFE_PATH)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.brokers.kafka_records import store_by_coordinates
from tests.helpers.replays import new_topic, produce

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=1.5)]

COMMITLOG = str(Path(sys.executable).parent / "commitlog")
RECORDS = 40
SMALL = ["--master", "local[1]", "--shuffle-partitions", "1", "--segment-size", "1m", "--consume-queue-units", "1000"]

READ_BACK = """
from ingest.spark_session import build_session
spark = build_session(master="local[1]", app_name="read-back", extra_conf={"spark.ui.enabled": "false"})
print("rows", spark.read.format("rocketmq-commitlog").load("store").count())
spark.stop()
"""


def planted(where: Path, marker: Path) -> Path:
    """A directory as a user may start the job from: packages named like ours, one of them hostile."""
    work = where / "work"
    (work / "ingest").mkdir(parents=True)
    (work / "ingest" / "__init__.py").write_text(
        f"open({str(marker)!r}, 'a').write(__file__ + '\\n')\n"
        "raise SystemExit('the working directory was imported as the ingest package')\n")
    (work / "sink").mkdir()
    (work / "sink" / "writer.py").write_text("raise SystemExit('the working directory was imported as sink')\n")
    (work / "store").mkdir()        # the store itself, a namespace package to an unsafe import path
    return work


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=900, check=False)


def test_run_replay_and_read_back_import_only_the_installed_packages(bootstrap_servers: str, tmp_path: Path) -> None:
    marker = tmp_path / "planted-code-ran"
    work = planted(tmp_path, marker)
    streamed, replayed = new_topic(bootstrap_servers, 2, "cwd-run"), new_topic(bootstrap_servers, 2, "cwd-replay")
    produce(bootstrap_servers, streamed, RECORDS, 2)
    produce(bootstrap_servers, replayed, RECORDS, 2)

    ran = _run([COMMITLOG, "run", "--bootstrap-servers", bootstrap_servers, "--subscribe", streamed,
                "--store", "store", "--checkpoint", "ck", "--trigger", "available-now", *SMALL], work)
    assert ran.returncode == 0, ran.stderr[-3000:]
    replay = _run([COMMITLOG, "replay", "--topics", replayed, "--bootstrap-servers", bootstrap_servers,
                   "--store", "store", "--progress", "none", *SMALL], work)
    assert replay.returncode == 0, replay.stderr[-3000:]
    script = tmp_path / "elsewhere" / "read_back.py"      # run as a file: its own folder is first, not work/
    script.parent.mkdir()
    script.write_text(READ_BACK)
    read = _run([sys.executable, str(script)], work)

    assert read.returncode == 0, read.stderr[-3000:]
    assert f"rows {2 * RECORDS}" in read.stdout
    assert not marker.exists(), marker.read_text()
    found = store_by_coordinates(str(work / "store"))
    assert sorted(found) == sorted((t, p, o) for t in (streamed, replayed) for p in (0, 1) for o in range(RECORDS // 2))
