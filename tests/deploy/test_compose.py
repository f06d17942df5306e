"""docker-compose.yml end to end, on the host's network (docker-compose.hostnet.yml): Kafka, the sample
producer, the two broker groups of the job and Prometheus, each in its container from the images
`make test` builds. Every produced record is in exactly one of the two stores (on their volumes, read
from the host with our reader), Prometheus scrapes both jobs, and `down` then `up` (which produces the
sample events again) resumes with nothing duplicated."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ingest.devtools.demo import TOPICS, committed_counts
from tests.helpers import waiting
from tests.helpers.brokers.containers import ROOT, require_images, volume_path
from tests.helpers.brokers.kafka_records import store_by_coordinates

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=3.5)]

EVENTS = 3000
PROJECT = f"commitlog-compose-{os.getpid()}"


def compose_cli() -> list[str]:
    """Compose v1 (Debian's docker-compose) where it is, else v2 (`docker compose`)."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return ["docker", "compose"]


def compose(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    cmd = [*compose_cli(), "-p", PROJECT, "-f", str(ROOT / "docker-compose.yml"),
           "-f", str(ROOT / "docker-compose.hostnet.yml"), *args]
    env = {**os.environ, "EVENTS": str(EVENTS)}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args)}: {done.stderr[-3000:]}"
    return done


def wait_until(check: Callable[[], object], timeout_s: float, what: str) -> None:
    """tests.helpers.waiting's wait, the stack's logs in its failure."""
    waiting.wait_until(check, timeout_s, what, interval_s=2,
                       error=lambda message: AssertionError(
                           f"{message}; logs:\n{compose('logs', '--tail', '15').stdout[-6000:]}"))


def kafka_total() -> int:
    """Every record the sample producer sent: the demo topics' end offsets (Kafka on 127.0.0.1)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:9092")
    try:
        parts = [TopicPartition(t, p) for t in TOPICS for p in consumer.partitions_for_topic(t) or ()]
        return sum(consumer.end_offsets(parts).values())
    finally:
        consumer.close()


def stores() -> list[Path]:
    return [volume_path(f"{PROJECT}_store-{g}") for g in ("a", "b")]


def in_stores() -> int:
    total = 0
    for store in stores():
        if (store / "commitpoint.json").exists():
            messages, dead = committed_counts(store)
            total += messages + dead
    return total


def produced() -> bool:
    """The produce service of the latest `up` has exited 0 (`down` removed the earlier one)."""
    out = compose("ps", "-a", "produce").stdout
    return "Exit 0" in out or "exited (0)" in out.lower()


def prometheus_scrapes_both() -> bool:
    try:
        with urllib.request.urlopen("http://127.0.0.1:9090/api/v1/query?query=up", timeout=5) as r:
            result = json.load(r)["data"]["result"]
    except OSError:
        return False
    up = {s["metric"]["instance"]: s["value"][1] for s in result if s["metric"].get("job") == "commitlog"}
    return up == {"commitlog-a:9464": "1", "commitlog-b:9465": "1"}


@pytest.fixture(scope="module")
def project() -> Iterator[str]:
    require_images()
    try:
        yield PROJECT
    finally:
        subprocess.run([*compose_cli(), "-p", PROJECT, "-f", str(ROOT / "docker-compose.yml"),
                        "-f", str(ROOT / "docker-compose.hostnet.yml"), "down", "-v", "--timeout", "60"],
                       cwd=ROOT, capture_output=True, timeout=300)


def assert_exactly_once(expected: int) -> None:
    seen: dict[tuple[str, int, int], int] = {}
    dead = 0
    for store in stores():
        for coordinates, copies in store_by_coordinates(str(store)).items():
            seen[coordinates] = seen.get(coordinates, 0) + len(copies)
        dead += committed_counts(store)[1]
    twice = {c: n for c, n in seen.items() if n > 1}
    assert not twice, f"stored more than once: {sorted(twice)[:5]}"
    assert len(seen) + dead == expected


def test_compose_stores_every_record_once_is_scraped_and_resumes_after_down_and_up(project: str) -> None:
    started = time.monotonic()
    compose("up", "-d", "--no-build")
    wait_until(lambda: produced(), 300, "the sample producer to finish")
    expected = kafka_total()
    assert expected == EVENTS
    wait_until(lambda: in_stores() >= expected, 420, f"both jobs to store {expected} records")
    wait_until(prometheus_scrapes_both, 120, "Prometheus to scrape both jobs")
    first_up = time.monotonic() - started

    compose("down", "--timeout", "60")          # the volumes stay
    assert_exactly_once(expected)
    compose("up", "-d", "--no-build")           # and the producer sends the sample events again
    wait_until(lambda: kafka_total() == 2 * EVENTS and produced(), 300, "the second sample to be produced")
    wait_until(lambda: in_stores() >= 2 * EVENTS, 420, "both jobs to store the second sample")
    compose("stop", "--timeout", "60")
    assert_exactly_once(2 * EVENTS)
    print(f"compose: first up to stored and scraped in {first_up:.0f} s, all in {time.monotonic() - started:.0f} s")
