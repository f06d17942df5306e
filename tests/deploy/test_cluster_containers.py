"""A Spark standalone cluster in containers, as docs/deploying.md's cluster section runs one: a Master
and two Workers from the job image's pyspark, and the job submitted with deploy/spark-submit.sh from a
container of the same image (client mode: the driver, and so the store, is in that container, on a
volume). All on the host's network (the test engine has no bridge), on free 127.0.0.1 ports. The
records of a topic end in the store exactly once, and the executors ran on both Workers."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator

import pytest

from ingest.devtools.broker import free_port
from ingest.devtools.demo import committed_counts
from tests.helpers import waiting
from tests.helpers.brokers.containers import ROOT, docker_cli, require_images, volume_path
from tests.helpers.brokers.kafka_records import create_topics, produce, store_by_coordinates, unique_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=2.5)]

IMAGE = "commitlog-ingest:0.1.0"
RECORDS = 2000
NAME = f"commitlog-cluster-{os.getpid()}"
SPARK_CLASS = ('exec "$(python -c \'import os, pyspark; print(os.path.dirname(pyspark.__file__))\')'
               '/bin/spark-class" "$@"')


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([docker_cli(), *args], capture_output=True, text=True, timeout=300)
    assert not check or done.returncode == 0, f"docker {' '.join(args[:3])}: {done.stderr[-2000:]}"
    return done


def spark_daemon(name: str, *args: str) -> None:
    """A Master or a Worker (spark-class in the foreground) in a container of the job image."""
    docker("run", "-d", "--name", name, "--network", "host", "-e", "SPARK_LOCAL_IP=127.0.0.1",
           "--entrypoint", "bash", IMAGE, "-c", SPARK_CLASS, "spark-class", *args)


def logs(*names: str) -> str:
    return "\n".join(f"--- {n} ---\n{docker('logs', '--tail', '20', n, check=False).stderr[-3000:]}" for n in names)


def wait_until(check: Callable[[], bool], timeout_s: float, what: str, names: tuple[str, ...]) -> None:
    """tests.helpers.waiting's wait, a server not answering yet counted as not yet, the containers' logs in its failure."""
    waiting.wait_until(check, timeout_s, what, interval_s=1, retry_on=(OSError,),
                       error=lambda message: AssertionError(f"{message}\n{logs(*names)}"))


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[str, str, list[str]]]:
    """(master URL, master web URL, container names); removed with their volumes afterwards."""
    require_images(IMAGE)
    port, web = free_port(), free_port()
    names = [f"{NAME}-master", f"{NAME}-worker-1", f"{NAME}-worker-2"]
    try:
        spark_daemon(names[0], "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(port), "--webui-port", str(web))
        for worker in names[1:]:
            spark_daemon(worker, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                         "--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", "0",
                         "--work-dir", "/tmp/spark/work")
        yield f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web}", names
    finally:
        for name in [*names, f"{NAME}-submit"]:
            docker("rm", "-f", "-v", name, check=False)
        docker("volume", "rm", f"{NAME}-store", f"{NAME}-checkpoint", check=False)


def master_state(web: str) -> dict:
    with urllib.request.urlopen(f"{web}/json/", timeout=5) as r:
        return json.load(r)


def test_job_submitted_from_a_container_to_a_containerized_cluster_stores_every_record_once(
        cluster: tuple[str, str, list[str]], bootstrap_servers: str) -> None:
    started = time.monotonic()
    master, web, names = cluster
    wait_until(lambda: sum(w["state"] == "ALIVE" for w in master_state(web)["workers"]) == 2, 180,
               "two Workers registered with the Master", tuple(names))
    topic = unique_topic("cluster")
    create_topics(bootstrap_servers, [topic], partitions=4)
    produce(bootstrap_servers, [(topic, i % 4, f"k{i}".encode(), f"value-{i}".encode(), []) for i in range(RECORDS)])

    submit = f"{NAME}-submit"
    # the checkout read-only: spark-submit.sh ships its ingest/, sink/, store/ (built into the
    # container's /tmp); the executors' Python is the image's, which has the dependencies
    docker("run", "-d", "--name", submit, "--network", "host",
           "-e", "SPARK_LOCAL_IP=127.0.0.1", "-e", "PYTHON=python", "-e", "COMMITLOG_BUILD_DIR=/tmp/build",
           "-e", "COMMITLOG_EXECUTOR_PYTHON=/opt/commitlog/venv/bin/python",
           "-v", f"{ROOT}:/src:ro", "-v", f"{NAME}-store:/data/store", "-v", f"{NAME}-checkpoint:/data/checkpoint",
           "--entrypoint", "/usr/bin/tini", IMAGE, "--", "/src/deploy/spark-submit.sh",
           "--master", master, "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.executor.memory=512m",
           "--conf", "spark.executor.cores=1", "--conf", "spark.cores.max=2", "--driver-memory", "1g",
           "--", "run", "--bootstrap-servers", bootstrap_servers, "--subscribe", topic,
           "--store", "/data/store", "--checkpoint", "/data/checkpoint", "--trigger", "1 second")
    store = volume_path(f"{NAME}-store")

    def stored() -> bool:
        running = docker("inspect", "--format", "{{.State.Running}}", submit).stdout.strip()
        assert running == "true", f"the submitted job exited\n{logs(submit)}"
        return (store / "commitpoint.json").exists() and sum(committed_counts(store)) >= RECORDS

    wait_until(stored, 300, f"{RECORDS} records in the store", (submit, *names))
    apps = master_state(web)["activeapps"]
    docker("stop", "--time", "60", submit)       # SIGTERM through tini: the batch commits, the store closes
    found = store_by_coordinates(str(store))
    twice = [c for c, copies in found.items() if len(copies) > 1]
    assert not twice, f"stored more than once: {twice[:5]}"
    assert sorted(found) == [(topic, p, o) for p in range(4) for o in range(RECORDS // 4)]
    assert apps and apps[0]["cores"] == 2, f"the job's executors on both Workers: {apps}"
    print(f"cluster: two Workers up, {RECORDS} records stored once, in {time.monotonic() - started:.0f} s")
