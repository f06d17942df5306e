"""A secured Apache Kafka (tests/helpers/brokers/secured_kafka.py): for each mechanism, ``run`` through both sources
and ``replay`` store every record once, as alice (Read and Describe on the topics, nothing more)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.replay.command import ReplayOptions, replay
from tests.helpers.jobs import assert_exactly_once, job_config, run_until_caught_up, sample
from tests.helpers.brokers.kafka_records import Sent, produce
from tests.helpers.replays import new_topic
from tests.helpers.brokers.secured_kafka import MECHANISMS, TOPIC_PREFIX, SecuredKafka, secured_kafka  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=3)]

PARTITIONS = 3
RECORDS = 30


@pytest.fixture(scope="module")
def records(secured_kafka: SecuredKafka) -> tuple[str, list[Sent]]:
    """One topic alice may read, a few records in it (produced as the super user)."""
    topic = new_topic(secured_kafka.admin_bootstrap, PARTITIONS, prefix=TOPIC_PREFIX)
    return topic, produce(secured_kafka.admin_bootstrap,
                          [(topic, i % PARTITIONS, *rest) for i, (_, _, *rest) in enumerate(sample([topic], RECORDS))])


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_run_stores_every_record_once(secured_kafka: SecuredKafka, records: tuple[str, list[Sent]], spark: object,
                                      source: str, mechanism: str, tmp_path: Path) -> None:
    topic, sent = records
    listener = secured_kafka.listener(mechanism)
    cfg = job_config(listener.bootstrap, [topic], tmp_path, kafka_option=dict(listener.settings), source=source)
    run_until_caught_up(cfg, spark)
    found = assert_exactly_once(cfg.store, sent)
    assert len(found) == len(sent)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_replay_stores_every_record_once(secured_kafka: SecuredKafka, records: tuple[str, list[Sent]],
                                         spark: object, mechanism: str, tmp_path: Path) -> None:
    topic, sent = records
    listener = secured_kafka.listener(mechanism)
    cfg = job_config(listener.bootstrap, [topic], tmp_path, kafka_option=dict(listener.settings))
    summary = replay(cfg, ReplayOptions(topics=(topic,)), spark=spark)
    assert summary.complete and summary.verified
    found = assert_exactly_once(cfg.store, sent)
    assert len(found) == len(sent)
