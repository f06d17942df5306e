"""deploy/spark-submit.sh against a real Spark standalone cluster on 127.0.0.1.

The executors run a Python that has the project's dependencies but not the project, and the
cluster daemons run with no PYTHONPATH in a scratch directory: an executor can import `store`
only from what spark-submit.sh shipped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.helpers.brokers.spark_cluster import SparkCluster, daemon_env, standalone_cluster

from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=1.6)]

ROOT = Path(__file__).resolve().parents[2]
SUBMIT = ROOT / "deploy" / "spark-submit.sh"


def deps_only_python(where: Path) -> Path:
    """A venv whose site-packages reach the test venv's site-packages through a plain path line
    in a .pth file: pyspark, numpy, pyarrow... import, but the project's editable-install hook
    (itself a .pth there) is not run, so `import store` fails."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    py = where / "bin" / "python"
    site_dir = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              check=True, capture_output=True, text=True).stdout.strip()
    deps = {p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()}
    Path(site_dir, "deps-from-test-venv.pth").write_text("".join(f"{p}\n" for p in sorted(deps)))
    return py


def run_python(py: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(py), "-c", code], cwd=cwd, env=env, capture_output=True, text=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster")) as c:
        yield c
    for pid in (c.master_pid, c.worker_pid):   # stopped by pid, nothing left running
        assert not Path(f"/proc/{pid}").exists(), f"Spark daemon {pid} still running after the cluster stopped"


@pytest.fixture(scope="module")
def executor_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    scratch = tmp_path_factory.mktemp("scratch")
    py = deps_only_python(tmp_path_factory.mktemp("exec-venv") / "venv")
    deps = run_python(py, "import pyspark, numpy, pyarrow, pandas, kafka; print('ok')", scratch)
    assert deps.returncode == 0, f"the executor python lacks the project's dependencies: {deps.stderr}"
    project = run_python(py, "import store", scratch)
    assert project.returncode != 0 and "No module named 'store'" in project.stderr, (
        "the executor python can import the project without shipping; the test would prove nothing")
    return py


def submit(cluster: SparkCluster, py: Path, workdir: Path, app_args: list[str],
           driver_script: Path | None = None, extra_env: dict[str, str] | None = None,
           timeout_s: float = 300) -> subprocess.CompletedProcess:
    env = daemon_env(cluster.spark_home, workdir)
    env.update({
        "PYTHON": str(py),
        "COMMITLOG_EXECUTOR_PYTHON": str(py),
        "COMMITLOG_DRIVER_PYTHON": str(py),
        "COMMITLOG_BUILD_DIR": str(workdir / "build"),
    })
    if driver_script is not None:
        env["COMMITLOG_DRIVER_SCRIPT"] = str(driver_script)
    env.update(extra_env or {})
    cmd = ["bash", str(SUBMIT), "--master", cluster.master_url,
           "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
           "--conf", "spark.executor.memory=512m", "--driver-memory", "1g",
           "--", *app_args]
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout_s)


PROBE = textwrap.dedent('''
    import json, os, sys
    from pyspark.sql import SparkSession

    def where(_rows):
        # find_spec locates a package without running its __init__; store.format.constants is really
        # imported (it imports nothing of ours).
        import importlib, importlib.util
        found = {pkg: os.path.abspath(importlib.util.find_spec(pkg).origin)
                 for pkg in ("ingest", "sink", "store")}
        found["constants"] = os.path.abspath(importlib.import_module("store.format.constants").__file__)
        yield {"pid": os.getpid(), "python": sys.executable, "cwd": os.getcwd(), **found, **kernel_share()}

    def kernel_share():
        # one fetch of 100 records as a read task gets it; one (a repeated header) is handed back
        from kafka.consumer.fetcher import Fetcher
        from kafka.record import MemoryRecords
        from kafka.record.default_records import DefaultRecordBatchBuilder
        from kafka.structs import TopicPartition
        from ingest.encode import direct_encode
        from ingest.encode.mapping import MappingConfig
        from ingest.encode.message_reader import EncodedBatches
        from ingest.kafka.fetch import fast_partition_records
        from ingest.kafka.offsets import KafkaOffsetRange
        from ingest.kafka.read import KafkaColumns
        from ingest.kafka.source import arrow_schema, kafka_schema
        from store.format.codec import CodecConfig

        builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 20)
        for i in range(100):
            headers = [("h", "\u00e9".encode())] + ([("h", b"again")] if i == 50 else [])
            builder.append(i, timestamp=1_700_000_000_000, key=b"k%d" % i, value=b"v" * 10, headers=headers)
        records = MemoryRecords(bytes(builder.build()))
        part = fast_partition_records(Fetcher.PartitionRecords)(0, TopicPartition("t", 0), records, check_crcs=False)
        (chunk,) = part.take(None)
        maker = EncodedBatches(KafkaColumns(arrow_schema(kafka_schema(True))), MappingConfig(), CodecConfig())
        rows = maker.from_chunk(chunk, KafkaOffsetRange("t", 0, 0, 100)).num_rows
        from store.scan import _properties_split, _record_columns, _scan_walk
        return {"kernel_share": maker.direct_records() / rows,
                "kernels": [m.__file__ for m in (direct_encode._kernel, _properties_split, _record_columns, _scan_walk)]}

    spark = SparkSession.builder.getOrCreate()
    sc = spark.sparkContext
    import importlib.util
    executors = sc.parallelize(range(2), 2).mapPartitions(where).collect()
    print("PROBE " + json.dumps({"driver_pid": os.getpid(), "driver_store": importlib.util.find_spec("store").origin,
                                 "master": sc.master, "argv": sys.argv[1:],
                                 "executors": executors}), flush=True)
    spark.stop()
''')


def test_submit_ships_the_project_to_standalone_executors(cluster: SparkCluster, executor_python: Path,
                                                          tmp_path: Path) -> None:
    """The executors get the code and the C passes (--archives) and encode with them."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    result = submit(cluster, executor_python, tmp_path, ["run", "--store", "/somewhere"], driver_script=probe)
    lines = [line for line in result.stdout.splitlines() if line.startswith("PROBE ")]
    assert result.returncode == 0 and lines, (
        f"spark-submit.sh failed ({result.returncode})\n{result.stdout[-3000:]}\n"
        f"{result.stderr[-5000:]}\n{cluster.logs()}")
    report = json.loads(lines[-1][len("PROBE "):])
    driver_dir = tmp_path / "build" / "driver"

    assert report["master"] == cluster.master_url
    assert report["argv"] == ["run", "--store", "/somewhere"], "arguments after -- reach the app"
    # The client-mode driver imports the same packages and kernels, unpacked for it
    assert Path(report["driver_store"]).is_relative_to(driver_dir), report["driver_store"]
    assert list(driver_dir.glob("store/log/_page_probe*.so")), "the driver's copy holds the kernels"
    assert len(report["executors"]) == 2
    for ex in report["executors"]:
        assert ex["pid"] != report["driver_pid"]
        assert ex["python"] == str(executor_python)
        assert Path(ex["cwd"]).is_relative_to(cluster.work_dir), "runs in a Worker's executor dir"
        shipped = Path(ex["cwd"]) / "commitlog_ingest"
        for pkg in ("store", "ingest", "sink", "constants"):
            # The executor fetched the archive, unpacked, into its own work dir and imports from it.
            assert Path(ex[pkg]).is_relative_to(shipped), ex
        assert ex["kernel_share"] == 0.99, ex    # all but the handed-back record
        for kernel in ex["kernels"]:            # the encode pass and the store's C passes, shipped
            assert Path(kernel).is_relative_to(shipped) and kernel.endswith(".so"), ex
    apps = cluster.state()["completedapps"]
    assert any(app["name"] == "commitlog-ingest" for app in apps), apps


def test_a_users_own_archives_are_joined_with_the_project_archive(tmp_path: Path) -> None:
    """spark-submit keeps only the last --archives: the user's must travel in the same list as ours."""
    env = fake_spark(tmp_path)
    done = subprocess.run(["bash", str(SUBMIT), "--archives", "env.tar.gz#env", "--master", "local[1]",
                           "--", "run", "--store", "/s"], env=env, capture_output=True, text=True, timeout=300)
    args = [line[4:] for line in done.stdout.splitlines() if line.startswith("ARG ")]
    assert done.returncode == 0, done.stderr[-3000:]
    assert args.count("--archives") == 1
    archives = args[args.index("--archives") + 1].split(",")
    assert archives[0] == "env.tar.gz#env" and archives[1].endswith("commitlog_ingest.tar.gz#commitlog_ingest")
    assert args[-3:] == ["run", "--store", "/s"] and "--master" in args


def fake_spark(tmp_path: Path) -> dict[str, str]:
    """An environment whose spark-submit only echoes its arguments, building in tmp_path."""
    fake = tmp_path / "spark" / "bin" / "spark-submit"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\nfor a in \"$@\"; do echo \"ARG $a\"; done\n")
    fake.chmod(0o755)
    return {**os.environ, "SPARK_HOME": str(tmp_path / "spark"), "PYTHON": sys.executable,
            "COMMITLOG_BUILD_DIR": str(tmp_path / "build")}


def test_shipping_python_alone_is_refused(tmp_path: Path) -> None:
    env = {**fake_spark(tmp_path), "COMMITLOG_SHIP": "zip"}
    done = subprocess.run(["bash", str(SUBMIT), "--", "run", "--store", "/s"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "ARG" not in done.stdout
    assert done.stderr.splitlines() == ["spark-submit.sh: COMMITLOG_SHIP=zip is no longer supported: executors "
                                        "need the compiled passes; the archive (the default) ships them"]


def test_a_kernel_that_does_not_build_stops_the_submit(tmp_path: Path) -> None:
    """No fallback to Python alone: one line naming the Python and what the compiler said."""
    env = {**fake_spark(tmp_path), "CC": "/bin/false"}
    done = subprocess.run(["bash", str(SUBMIT), "--", "run", "--store", "/s"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "ARG" not in done.stdout
    [line] = done.stderr.splitlines()
    assert line.startswith(f"spark-submit.sh: the C passes do not build for {sys.executable} ("), line
    assert "/bin/false" in line and "kernel-build.log" in line, line


def test_submit_without_commitlog_arguments_prints_usage(tmp_path: Path) -> None:
    result = subprocess.run(["bash", str(SUBMIT), "--master", "local[1]"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "usage:" in result.stderr and "-- run" in result.stderr


def driver_python_pid(submit_pid: int, timeout_s: float = 120) -> int:
    """The Python driver under the spark-submit JVM (PythonRunner starts it as a child)."""

    def found() -> int | None:
        for task in Path(f"/proc/{submit_pid}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in children:
                try:
                    cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                # A Python running driver.py (spark-class's launcher JVM also has it among its args).
                program = Path(cmdline[0].decode(errors="replace")).name
                if program.startswith("python") and any(arg.endswith(b"driver.py") for arg in cmdline[1:]):
                    return int(child)
        return None

    return wait_until(found, timeout_s, f"a Python driver under spark-submit pid {submit_pid}", interval_s=0.5)


def committed_messages(store: Path) -> int:
    from store import StoreReader

    if not (store / "commitpoint.json").exists():
        return 0
    reader = StoreReader.open(str(store))
    try:
        return sum(1 for _ in reader.iter_messages())
    finally:
        reader.close()


def test_submit_runs_the_job_on_the_cluster_exactly_once(cluster: SparkCluster, executor_python: Path,
                                                         bootstrap_servers: str, tmp_path: Path) -> None:
    from tests.helpers.brokers.kafka_records import create_topics, produce, store_by_coordinates, unique_topic

    topic = unique_topic("deploy-submit")
    create_topics(bootstrap_servers, [topic], partitions=2)
    n = 1200
    sent = produce(bootstrap_servers, [(topic, i % 2, f"k{i}".encode(), f"event-{i}".encode() * (1 + i % 5),
                                        [("seq", str(i).encode())]) for i in range(n)])
    store, checkpoint = tmp_path / "store", tmp_path / "checkpoint"
    env = daemon_env(cluster.spark_home, tmp_path)
    env.update({"PYTHON": str(executor_python), "COMMITLOG_EXECUTOR_PYTHON": str(executor_python),
                "COMMITLOG_DRIVER_PYTHON": str(executor_python), "COMMITLOG_BUILD_DIR": str(tmp_path / "build")})
    cmd = ["bash", str(SUBMIT), "--master", cluster.master_url,
           "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
           "--conf", "spark.executor.memory=512m", "--driver-memory", "1g",
           "--", "run", "--bootstrap-servers", bootstrap_servers, "--subscribe", topic,
           "--store", str(store), "--checkpoint", str(checkpoint), "--trigger", "500 milliseconds",
           "--max-offsets-per-trigger", "500", "--segment-size", "1m", "--flush", "sync",
           "--shuffle-partitions", "2"]
    log_path = tmp_path / "submit.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        def all_committed() -> bool:
            assert proc.poll() is None, (f"the job exited with {proc.returncode} early\n"
                                         f"{log_path.read_text(errors='replace')[-6000:]}")
            return committed_messages(store) >= n

        wait_until(all_committed, 240, f"{n} records committed", interval_s=1.0,
                   error=lambda message: AssertionError(
                       f"{message}: {committed_messages(store)} in\n{log_path.read_text(errors='replace')[-6000:]}"))
        # The job's graceful stop: finish the batch in progress, close the store, exit 0.
        os.kill(driver_python_pid(proc.pid), signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    output = log_path.read_text(errors="replace")
    assert proc.returncode == 0, f"spark-submit exited {proc.returncode}\n{output[-6000:]}"
    assert "closed cleanly" in output
    assert not (store / "abort").exists(), "the job left the store open"

    found = store_by_coordinates(str(store))
    dupes = {k: len(v) for k, v in found.items() if len(v) > 1}
    assert not dupes, f"duplicated: {list(dupes.items())[:5]}"
    assert set(found) == {(s.topic, s.partition, s.offset) for s in sent}
    for partition in (0, 1):
        rows = sorted((msg.queue_offset, kafka_offset) for (t, p, kafka_offset), [(_, msg)] in found.items()
                      if p == partition)
        assert [q for q, _ in rows] == list(range(len(rows))), f"queue {partition} offsets not contiguous"
        assert [o for _, o in rows] == sorted(o for _, o in rows), f"queue {partition} not in Kafka order"
    # Under spark-submit the job keeps the submitter's --name (deploy/spark-submit.sh: commitlog-ingest).
    apps = [a for a in cluster.state()["completedapps"] if a["name"] == "commitlog-ingest"]
    assert apps, "the job ran as an application of the standalone cluster"
