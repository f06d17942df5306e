"""The job's metrics as an operator sees them: a real Prometheus server (Debian's package, started
here on a loopback port with a scratch data directory) scrapes a running ``run``; asked through its
HTTP API (PromQL), it has every produced record stored, the dead letters by reason, and no lag left.
Every query of the Grafana dashboard finds data there; Spark's own progress carries the same counts
(observedMetrics), and promtool accepts the exposition."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ingest.devtools.broker.base import free_port
from ingest.job import run_stream
from ingest.metrics import LATENCY_BUCKETS, OBSERVED
from store import read_commit_point
from tests.helpers.jobs import job_config
from tests.helpers.brokers.kafka_records import create_topics, produce, unique_topic
from tests.helpers.monitoring import dashboard_exprs
from tests.helpers.waiting import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("prometheus") is None or shutil.which("promtool") is None,
                       reason="prometheus/promtool not installed: `make test` installs Debian's prometheus package "
                              "where apt-get runs as root (.ci/install-tools.sh)"),
]

RECORDS, TOO_LARGE, PARTITIONS = 600, 3, 4


def get(url: str, timeout: float = 10) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, Callable[[int], None]]]:
    """A Prometheus server of our own; yields its URL and a function that points it at a port."""
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text("global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs: []\n")
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle", "--log.level=warn"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def scrape(target: int) -> None:
        config.write_text("global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n"
                          f"  - job_name: commitlog\n    static_configs: [{{targets: ['127.0.0.1:{target}']}}]\n")
        request = urllib.request.Request(f"{url}/-/reload", method="POST")
        urllib.request.urlopen(request, timeout=10).read()

    try:
        wait_until(lambda: proc.poll() is None and get(f"{url}/-/ready"), 60, "prometheus to be ready", interval_s=0.5, retry_on=(OSError,))
        yield url, scrape
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def promql(url: str, query: str) -> list[dict]:
    body = json.loads(get(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": query})))
    assert body["status"] == "success", body
    return body["data"]["result"]


def scalar(url: str, query: str) -> float | None:
    result = promql(url, query)
    return float(result[0]["value"][1]) if result else None


def test_prometheus_scrapes_the_stored_total_the_dead_letters_and_no_lag(
        bootstrap_servers: str, spark: object, tmp_path: Path, prometheus: tuple[str, Callable[[int], None]]) -> None:
    url, scrape = prometheus
    topic = unique_topic("metrics")
    create_topics(bootstrap_servers, [topic], partitions=PARTITIONS)
    metrics_port = free_port()
    cfg = job_config(bootstrap_servers, [topic], tmp_path, trigger="500ms", max_message_size=4096,
                     metrics_port=metrics_port)
    stop = threading.Event()
    failure: list[BaseException] = []

    def job() -> None:
        try:
            run_stream(cfg, stop=stop, spark=spark)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            failure.append(exc)

    runner = threading.Thread(target=job, name="commitlog-run")
    runner.start()
    try:
        wait_until(lambda: get(f"http://127.0.0.1:{metrics_port}/metrics"), 120, "the job's metrics endpoint", interval_s=0.5, retry_on=(OSError,))
        scrape(metrics_port)
        wait_until(lambda: scalar(url, 'up{job="commitlog"}') == 1, 180, "prometheus to scrape the job", interval_s=0.5, retry_on=(OSError,))
        records = [(topic, i % PARTITIONS, b"k%d" % i, b"v" * (i % 50), []) for i in range(RECORDS)]
        records += [(topic, i % PARTITIONS, None, b"x" * 5000, []) for i in range(TOO_LARGE)]
        produced_at = time.time()
        produce(bootstrap_servers, records)

        wait_until(lambda: scalar(url, "sum(commitlog_stored_records_total)") == RECORDS, 180,
                   "every record stored, as Prometheus has it", interval_s=0.5, retry_on=(OSError,))
        wait_until(lambda: scalar(url, "count(commitlog_kafka_lag_records)") == PARTITIONS
                   and scalar(url, "sum(commitlog_kafka_lag_records)") == 0, 180, "no lag left on any partition", interval_s=0.5, retry_on=(OSError,))
        assert scalar(url, 'sum(commitlog_dead_letters_total{reason="body_too_large"})') == TOO_LARGE
        assert scalar(url, "sum(commitlog_stored_records_total)") == RECORDS, "no record counted twice"
        assert scalar(url, 'commitlog_batch_phase_seconds_count{phase="commit"}') >= 1
        # every stored record's latency, from its Kafka timestamp to its commit: counted once, each under
        # the time since it was produced
        wait_until(lambda: scalar(url, "commitlog_end_to_end_latency_seconds_count") == RECORDS, 180,
                   "every record's latency counted", interval_s=0.5, retry_on=(OSError,))
        elapsed = time.time() - produced_at
        mean = scalar(url, "commitlog_end_to_end_latency_seconds_sum / commitlog_end_to_end_latency_seconds_count")
        assert mean is not None and 0 < mean <= elapsed
        # histogram_quantile interpolates inside a bucket: the p99 stays at or below the upper edge of
        # the bucket that holds the time since the records were produced, never above it
        p99 = scalar(url, "histogram_quantile(0.99, commitlog_end_to_end_latency_seconds_bucket)")
        assert p99 is not None and 0 < p99 <= min((le for le in LATENCY_BUCKETS if le >= elapsed), default=float("inf"))
        wait_until(lambda: scalar(url, "commitlog_uncommitted_age_seconds") == 0, 180, "nothing left uncommitted", interval_s=0.5, retry_on=(OSError,))
        assert scalar(url, "commitlog_store_segments") >= 1
        committed = scalar(url, "commitlog_store_committed_offset_bytes")
        assert committed == scalar(url, "sum(commitlog_stored_bytes_total)")   # one store, one run: all of it

        for expr in dashboard_exprs():        # every panel of the dashboard has data to show
            live = expr.replace("$instance", ".*").replace("$__rate_interval", "1m").replace("$__range", "10m")
            # a rate needs two scrapes of its series: on a busy machine the second may still be to come
            wait_until(lambda: promql(url, live), 60, f"the dashboard's query to find data: {expr}", interval_s=0.5, retry_on=(OSError,))

        exposition = get(f"http://127.0.0.1:{metrics_port}/metrics")
        check = subprocess.run(["promtool", "check", "metrics"], input=exposition, capture_output=True, timeout=60)
        assert check.returncode == 0, (check.stdout + check.stderr).decode()

        (query,) = [q for q in spark.streams.active if q.name == "commitlog"]  # type: ignore[attr-defined]
        observed = [p["observedMetrics"][OBSERVED] for p in query.recentProgress
                    if p.get("observedMetrics", {}).get(OBSERVED)]
        assert sum(o["records"] for o in observed) == RECORDS
        assert sum(o["dead_letters"] for o in observed) == TOO_LARGE
        assert sum(o["record_bytes"] for o in observed) == committed
    finally:
        stop.set()
        runner.join(timeout=120)
    assert not failure, failure
    assert read_commit_point(Path(cfg.store)).offset == committed
