"""Compacted Kafka topics as RocketMQ 5 compaction topics (issue 66, part 2), with the real things: a
Kafka topic with ``cleanup.policy=compact`` (updates and deletes of the same keys) stored by ``run``;
then a RocketMQ 5.3.3 broker with compaction on (its files small and its schedule short, the store
written with the same sizes) compacts the store's compaction log and serves a consumer the newest
value of each key, and 4.9.7 serves every message of the same store as an ordinary topic."""

from __future__ import annotations

import base64
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.devtools.broker import Broker
from ingest.job import run_stream
from store.compaction.files import CompactionConfig
from store.topics import read_topics
from tests.helpers.brokers.apache_kafka import job_config, module_kafka, new_topic, stored
from tests.helpers.brokers.kafka_records import produce
from tests.helpers.brokers.rocketmq import RocketBroker, clients
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=3)]

PARTITIONS, KEYS, ROUNDS = 2, 20, 30
DELETED, DELETED_THEN_SET = range(0, 4), range(4, 8)      # key numbers
SIZES = CompactionConfig(mapped_file_size=5 * 4600, cq_mapped_file_size=4600)   # 99 records a file
BROKER_COMPACTION = {"enableCompaction": "true", "compactionScheduleInternal": "3000",
                     "compactionMappedFileSize": str(SIZES.mapped_file_size),
                     "compactionCqMappedFileSize": str(SIZES.cq_mapped_file_size)}
# the same broker compacting only an hour after it starts: a pull sees the log as the store wrote it
BROKER_NOT_YET = {**BROKER_COMPACTION, "compactionScheduleInternal": "3600000"}


@pytest.fixture(scope="module")
def kafka(kafka_broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    if kafka_broker.kind in ("apache-kafka", "testcontainers", "external"):
        yield kafka_broker
    else:
        yield from module_kafka(tmp_path_factory, __name__)


def table_changes(topic: str) -> list[tuple[str, int, bytes, bytes | None, list]]:
    """Every key set ROUNDS times in each partition; some deleted at the end, some deleted half way
    and set again."""
    out = []
    for r in range(ROUNDS):
        for p in range(PARTITIONS):
            for k in range(KEYS):
                value: bytes | None = f"p{p}-k{k}-r{r}".encode()
                if (k in DELETED and r == ROUNDS - 1) or (k in DELETED_THEN_SET and r == ROUNDS // 2):
                    value = None
                out.append((topic, p, f"k{k}".encode(), value, []))
    return out


def newest(rows: list[tuple[int, str, bytes | None]]) -> dict[tuple[int, str], bytes | None]:
    """(queue, key) -> the newest value, None for a deleted key, from rows in queue-offset order."""
    table: dict[tuple[int, str], bytes | None] = {}
    for queue, key, value in rows:
        table[(queue, key)] = value
    return table


def served_rows(served: list[dict]) -> list[tuple[int, str, bytes | None]]:
    ordered = sorted(served, key=lambda m: (m["queueId"], m["queueOffset"]))
    return [(m["queueId"], m["keys"], None if m["properties"].get("KAFKA_VALUE_NULL") == "true"
             else base64.b64decode(m["body"])) for m in ordered]


def pull(version: str, nameserver: object, topic: str, name: str) -> list[dict]:
    return [r for r in clients(version).run("pull", nameserver.address, name, topic)  # type: ignore[attr-defined]
            if "via" in r]


def test_a_compacted_kafka_topic_is_served_compacted_by_rocketmq5_and_whole_by_4(
        kafka: Broker, spark: object, rocketmq_nameservers: object, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = new_topic(bootstrap, "table", PARTITIONS, cleanup_policy="compact")
    changes = table_changes(topic)
    produce(bootstrap, changes)
    cfg = job_config(bootstrap, [topic], tmp_path, trigger="200ms", compaction_file_size=SIZES.mapped_file_size,
                     compaction_queue_file_size=SIZES.cq_mapped_file_size)
    store = Path(cfg.store)
    stop = threading.Event()
    job = threading.Thread(target=run_stream, kwargs=dict(cfg=cfg, stop=stop, spark=spark))
    job.start()
    try:
        wait_until(lambda: not job.is_alive() or len(stored(store)) == len(changes), 300, "the job stored the topic")
        assert job.is_alive(), "the job ended early (its error is in the log)"
    finally:
        stop.set()
        job.join(120)
    assert not job.is_alive()
    assert read_topics(store)["topicConfigTable"][topic]["attributes"] == {"cleanup.policy": "COMPACTION"}
    produced = newest([(p, key.decode(), value) for _, p, key, value, _ in changes])
    whole = tmp_path / "store-for-4"
    shutil.copytree(store, whole)

    ns5 = rocketmq_nameservers.get("5")  # type: ignore[attr-defined]
    with RocketBroker.start(store, ns5, "5", config=BROKER_NOT_YET):
        before = pull("5", ns5, topic, "before")
    assert len(before) == len(changes)                # the compaction log holds every record
    with RocketBroker.start(store, ns5, "5", config=BROKER_COMPACTION):
        served: list[dict] = []
        pulls: list[list[tuple[int, int]]] = []

        def compacted() -> bool:
            served[:] = pull("5", ns5, topic, f"after-{len(pulls)}")
            pulls.append(sorted((m["queueId"], m["queueOffset"]) for m in served))
            per_queue = [sum(m["queueId"] == q for m in served) for q in range(PARTITIONS)]
            # a pull that overlaps a compaction reads the old files and then the new ones: only two pulls
            # that see the same compacted log show what the broker compacted
            return all(n < len(changes) // PARTITIONS for n in per_queue) and pulls[-2:-1] == pulls[-1:]

        wait_until(compacted, 120, "the broker's compaction", interval_s=3)
    assert newest(served_rows(served)) == produced
    # what the broker compacted holds each key once: the files but the last (never compacted)
    last_file = {q: max(m["commitLogOffset"] for m in served if m["queueId"] == q) // SIZES.log_file_size
                 for q in range(PARTITIONS)}
    older = [(m["queueId"], m["keys"]) for m in served if m["commitLogOffset"] // SIZES.log_file_size < last_file[m["queueId"]]]
    assert older and len(older) == len(set(older))
    print(f"\n[RocketMQ 5.3.3 served {len(served)} of {len(changes)} messages after compaction; "
          f"{sum(v is None for v in newest(served_rows(served)).values())} keys deleted]")
    table = newest(served_rows(served))
    for q in range(PARTITIONS):      # the keys as served, for a reader of the run
        print(f"[queue {q}: " + ", ".join(f"{k}={'(deleted)' if v is None else v.decode()}"
                                          for (qq, k), v in sorted(table.items(), key=lambda i: int(i[0][1][1:]))
                                          if qq == q) + "]")

    ns4 = rocketmq_nameservers.get("4")  # type: ignore[attr-defined]
    with RocketBroker.start(whole, ns4, "4"):
        every = pull("4", ns4, topic, "every")
    assert sorted((m["queueId"], m["queueOffset"]) for m in every) == \
        sorted((p, o) for p in range(PARTITIONS) for o in range(len(changes) // PARTITIONS))
