"""Apache Kafka itself for the tests that need what Tansu cannot show (tests/ingest/kafka/test_apache_kafka.py,
tests/e2e/crash/test_apache_kafka_lifecycle.py): a module's own broker, topics with configs, what a plain
consumer reads, the job's command line, what the store holds."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from ingest.devtools.broker import Broker, container_missing, require_docker, start_container, start_kafka
from ingest.config import JobConfig
from tests.helpers.brokers.report import note_broker
from tests.helpers.brokers.kafka_records import store_by_coordinates, unique_topic
from tests.helpers.waiting import wait_until


def module_kafka(tmp_path_factory: pytest.TempPathFactory, module: str) -> Iterator[Broker]:
    """A module's own Apache Kafka (the session's broker may be another one): in a container where
    the session's would be one (ingest.devtools.broker: an engine answers and the image is built; always
    under CI), else from the `make jvm` jars; wrap it in a module-scoped fixture."""
    missing = container_missing()
    if missing is None:
        broker = start_container()
    elif require_docker():
        pytest.fail(f"CI=true and {missing}", pytrace=False)
    else:
        broker = start_kafka(data_dir=tmp_path_factory.mktemp("apache-kafka"))
    note_broker(module, broker)
    try:
        yield broker
    finally:
        broker.stop()

def new_topic(bootstrap: str, prefix: str, partitions: int, **config: str) -> str:
    topic = unique_topic(prefix)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                      topic_configs={k.replace("_", "."): v for k, v in config.items()})])
    finally:
        admin.close()
    return topic


def alter_topic(bootstrap: str, topic: str, **config: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                            configs={k.replace("_", "."): v for k, v in config.items()})])
    finally:
        admin.close()


def readable(bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed") -> set[tuple[str, int, int]]:
    """The (topic, partition, offset) of every record a plain consumer reads from the start to the end."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    ends = consumer.end_offsets(tps)
    out: set[tuple[str, int, int]] = set()

    def read_to_the_end() -> bool:
        if all(consumer.position(tp) >= ends[tp] for tp in tps):
            return True
        for tp, records in consumer.poll(timeout_ms=500).items():      # the poll is the wait
            out.update((topic, tp.partition, r.offset) for r in records if r.offset < ends[tp])
        return False

    try:
        wait_until(read_to_the_end, 60, f"{topic} read to its end offsets {ends}", interval_s=0)
    finally:
        consumer.close()
    return out


def job_config(bootstrap: str, topics: list[str] | None, tmp: Path, **overrides: object) -> JobConfig:
    cfg = JobConfig(bootstrap_servers=bootstrap, subscribe=",".join(topics) if topics else None,
                    store=str(tmp / "store"), checkpoint=str(tmp / "checkpoint"), segment_size=1 << 20,
                    consume_queue_units=1000, max_offsets_per_trigger=2000, master=None, flush="sync",
                    trigger="300ms")
    for k, v in overrides.items():
        setattr(cfg, k, v)
    cfg.validate()
    return cfg


def job_command(bootstrap: str, tmp: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "ingest.cli", "run", "--bootstrap-servers", bootstrap,
            "--store", str(tmp / "store"), "--checkpoint", str(tmp / "checkpoint"), "--segment-size", "1m",
            "--consume-queue-units", "1000", "--master", "local[1]", "--shuffle-partitions", "1",
            "--flush", "sync", *args]


def stored(store: Path) -> set[tuple[str, int, int]]:
    if not (store / "checkpoint").exists():
        return set()
    return set(store_by_coordinates(str(store)))



