"""No secret in any output of a secured run (issue 68, item 2): ``commitlog -v run`` and ``replay`` against
SCRAM-SHA-512 over TLS, with both sources, the password in a secrets file named by a ``${file:...}``
reference in the ``--kafka-config`` file. Grepped for it: stdout, stderr at ``-v`` (py4j's ``Command to
send:`` lines among it), ``ps`` while the job runs, Spark's UI (its environment and its plans, through
the REST API), the metrics page, and every file of the store, the checkpoint and Spark's local
directories."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.client_properties import FILE_PROVIDER
from tests.helpers.brokers.kafka_records import store_by_coordinates
from tests.helpers.replays import produce
from tests.helpers.brokers.secured_kafka import PASSWORDS, SecuredKafka, secured_kafka  # noqa: F401 - the module's broker fixture

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=3)]

COMMITLOG = str(Path(sys.executable).parent / "commitlog")
RECORDS = 30
PASSWORD = PASSWORDS["alice"]
SMALL = ["--master", "local[1]", "--shuffle-partitions", "1", "--segment-size", "1m", "--consume-queue-units", "1000"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def topic(secured_kafka: SecuredKafka) -> str:  # noqa: F811
    from kafka.admin import KafkaAdminClient, NewTopic

    name = f"secure-secrets-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=secured_kafka.admin_bootstrap)
    try:
        admin.create_topics([NewTopic(name, 2, 1)])
    finally:
        admin.close()
    produce(secured_kafka.admin_bootstrap, name, RECORDS, 2)
    return name


def client_files(secured: SecuredKafka, where: Path) -> tuple[str, Path]:
    """(bootstrap, the --kafka-config file): alice over SCRAM-SHA-512, her password only in a private
    secrets file that the client file refers to."""
    listener = secured.listener("SCRAM-SHA-512")
    secrets = where / "secrets.properties"
    secrets.write_text(f"password={PASSWORD}\n")
    secrets.chmod(0o600)
    settings = dict(listener.settings, **{"config.providers": "file", "config.providers.file.class": FILE_PROVIDER})
    settings["sasl.jaas.config"] = settings["sasl.jaas.config"].replace(PASSWORD, f"${{file:{secrets}:password}}")
    client = where / "client.properties"
    client.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return listener.bootstrap, client


def fetch(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"({url}: {exc})"


def spark_ui(port: int) -> Iterator[str]:
    base = f"http://127.0.0.1:{port}/api/v1/applications"
    apps = json.loads(fetch(base) or "[]")
    for app in apps if isinstance(apps, list) else []:
        for page in ("environment", "sql?details=true&planDescription=true", "streaming/statistics", "jobs", "stages"):
            yield fetch(f"{base}/{app['id']}/{page}")


def files_holding(needle: bytes, *roots: Path) -> list[str]:
    return [str(p) for root in roots if root.exists() for p in root.rglob("*")
            if p.is_file() and needle in p.read_bytes()]


def job_processes(root: int) -> str:
    """``ps`` of the job and every process under it: the rest of the machine is not the job's (another
    test's broker being formatted has its SCRAM credentials on its command line)."""
    rows = subprocess.run(["ps", "-eo", "pid=,ppid=,args=", "-ww"], capture_output=True, text=True).stdout
    table = [line.split(None, 2) for line in rows.splitlines() if line.strip()]
    children: dict[str, list[str]] = {}
    for pid, ppid, *_ in table:
        children.setdefault(ppid, []).append(pid)
    tree, todo = set(), [str(root)]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo.extend(children.get(pid, []))
    return "\n".join(" ".join(row) for row in table if row[0] in tree)


def wait_for_records(store: Path, job: subprocess.Popen, want: int, timeout_s: float = 900) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and job.poll() is None:
        try:
            if len(store_by_coordinates(str(store))) >= want:
                return
        except Exception:       # noqa: BLE001 - a store not made yet, or mid-commit: ask again
            pass
        time.sleep(2)
    raise AssertionError(f"the job stored fewer than {want} records (exit {job.poll()})")


def test_a_secured_run_and_replay_print_and_write_no_password(secured_kafka: SecuredKafka, topic: str,  # noqa: F811
                                                              source: str, tmp_path: Path) -> None:
    bootstrap, client = client_files(secured_kafka, tmp_path)
    store, checkpoint, local = tmp_path / "store", tmp_path / "checkpoint", tmp_path / "spark-local"
    ui_port, metrics_port = free_port(), free_port()
    common = ["--kafka-config", str(client), "--bootstrap-servers", bootstrap, "--source", source, *SMALL,
              "--spark-conf", f"spark.local.dir={local}"]
    out, err = tmp_path / "run.out", tmp_path / "run.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        job = subprocess.Popen([COMMITLOG, "-v", "run", "--subscribe", topic, "--store", str(store),
                                "--checkpoint", str(checkpoint), "--trigger", "1s", *common,
                                "--spark-conf", "spark.ui.enabled=true", "--spark-conf", f"spark.ui.port={ui_port}",
                                "--metrics-port", str(metrics_port)], stdout=stdout, stderr=stderr)
        try:
            wait_for_records(store, job, RECORDS)
            seen = {"ps": job_processes(job.pid),
                    "metrics": fetch(f"http://127.0.0.1:{metrics_port}/metrics"),
                    **{f"spark ui {i}": page for i, page in enumerate(spark_ui(ui_port))}}
        finally:
            job.send_signal(signal.SIGTERM)
            job.wait(timeout=300)
    assert job.returncode == 0, err.read_text()[-3000:]
    replayed = tmp_path / "replayed"
    replay = subprocess.run([COMMITLOG, "-v", "replay", "--topics", topic, "--store", str(replayed),
                             "--progress", "none", *common], capture_output=True, text=True, timeout=900, check=False)
    assert replay.returncode == 0, replay.stderr[-3000:]

    assert "Command to send" in err.read_text()          # py4j's debug lines were there, redacted
    assert "commitlog_batches" in seen["metrics"] or "commitlog_job" in seen["metrics"], seen["metrics"][:500]
    assert any("spark.redaction.regex" in page for name, page in seen.items() if name.startswith("spark ui"))
    seen.update({"run stdout": out.read_text(), "run stderr": err.read_text(), "replay stdout": replay.stdout,
                 "replay stderr": replay.stderr})
    assert "java" in seen["ps"], seen["ps"]             # the tree reached the job's JVM
    assert {name: [line for line in text.splitlines() if PASSWORD in line][:3]
            for name, text in seen.items() if PASSWORD in text} == {}
    assert files_holding(PASSWORD.encode(), store, checkpoint, local, replayed) == []
    assert len(store_by_coordinates(str(store))) == len(store_by_coordinates(str(replayed))) == RECORDS
