"""RocketMQ 5's proxy and its official gRPC Python client read our stores (issue 53, part 4).

A store ``commitlog run`` wrote from Kafka and one ``commitlog replay`` wrote (both with tombstones,
0-byte values, a single 0x00, binary keys and headers: tests/helpers/brokers/kafka_records.py ``mixed_records``) are
each served by a 5.3.3 broker, registered with the session's 5.x NameServer, behind one proxy in
cluster mode (``ProxyStartup -pm cluster``); ``rocketmq-python-client`` 5.1.2 reads them on the pop
path: a SimpleConsumer and a PushConsumer over every topic, each in a new group whose offsets are
reset to 0 first (tests/helpers/brokers/grpc_clients.py). Each gets every message exactly once, with the body, tag,
keys, message id and user properties the store holds (our StoreReader), and what Kafka got back
through ingest/encode/restore.py's rule."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from ingest.config import JobConfig
from ingest.encode.restore import kafka_headers, kafka_key, kafka_value
from ingest.job import run_stream
from ingest.replay.command import ReplayOptions, replay
from tests.helpers.brokers.grpc_clients import Received, Stored, push_consume, simple_consume, start_from_beginning, stored_messages
from tests.helpers.brokers.kafka_records import Sent, create_topics, mixed_records, produce, unique_topic
from tests.helpers.brokers.rocketmq import RocketBroker
from tests.helpers.brokers.rocketmq_proxy import Proxy

# 3:45 alone on this 2-core machine (shared), its Kafka and Spark session included
pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=3.5)]

KINDS = ["run", "replay"]
RECORDS = 1200                   # per store, over two topics of four partitions
# what the proxy carries in a message's system properties (tag, keys, message id), not its user ones
SYSTEM_PROPERTIES = {"TAGS", "KEYS", "UNIQ_KEY"}


@dataclass
class Written:
    kind: str
    path: Path
    topics: list[str]
    sent: dict[tuple[str, int, int], Sent]
    stored: dict[tuple[str, int, int], Stored]


def job_config(bootstrap: str, topics: list[str], root: Path) -> JobConfig:
    cfg = JobConfig(bootstrap_servers=bootstrap, subscribe=",".join(topics), store=str(root / "store"),
                    checkpoint=str(root / "checkpoint"), segment_size=1 << 20, consume_queue_units=1000,
                    max_offsets_per_trigger=500, master=None, flush="sync")
    cfg.validate()
    return cfg


@pytest.fixture(scope="module", params=KINDS)
def written(request: pytest.FixtureRequest, bootstrap_servers: str, spark: object,
            tmp_path_factory: pytest.TempPathFactory) -> Written:
    """A store of ``RECORDS`` Kafka records, of topics of its own, written by ``run`` or by ``replay``."""
    kind = request.param
    topics = [unique_topic(f"grpc-{kind}-a"), unique_topic(f"grpc-{kind}-b")]
    create_topics(bootstrap_servers, topics)
    sent = produce(bootstrap_servers, mixed_records(topics, RECORDS))
    root = tmp_path_factory.mktemp(f"proxy-{kind}")
    cfg = job_config(bootstrap_servers, topics, root)
    if kind == "run":
        run_stream(cfg, stop=threading.Event(), spark=spark, available_now=True)
    else:
        summary = replay(cfg, ReplayOptions(topics=tuple(topics), progress="log"), spark=spark)
        assert summary.complete and summary.records == RECORDS
    stored = stored_messages(root / "store")
    by_coords = {m.coordinates: m for m in stored}
    assert len(by_coords) == len(stored) == RECORDS
    return Written(kind, root / "store", topics, {(s.topic, s.partition, s.offset): s for s in sent}, by_coords)


@dataclass
class Served:
    written: Written
    broker: RocketBroker
    proxy: Proxy
    admin_home: Path


@pytest.fixture(scope="module")
def served(written: Written, rocketmq_nameservers: object, tmp_path_factory: pytest.TempPathFactory) -> object:
    """A 5.3.3 broker on the store (a name of its own per store: one broker at a time serves), then a
    proxy: its start creates its system topic (DefaultHeartBeatSyncerTopic) on the cluster, and
    without a broker registered it exits ("create system broadcast topic ... failed")."""
    ns = rocketmq_nameservers.get("5")  # type: ignore[attr-defined]
    with RocketBroker.start(written.path, ns, "5", name=f"broker-{written.kind}") as broker:
        with Proxy.start(tmp_path_factory.mktemp(f"proxy-{written.kind}-home"), ns) as proxy:
            yield Served(written, broker, proxy, tmp_path_factory.mktemp(f"mqadmin-{written.kind}"))


def test_the_store_holds_tombstones_empty_values_and_headers(written: Written) -> None:
    props = [m.properties for m in written.stored.values()]
    counts = {"tombstones": sum("KAFKA_VALUE_NULL" in p for p in props),
              "empty values": sum("KAFKA_VALUE_EMPTY" in p for p in props),
              "KAFKA_HEADERS": sum("KAFKA_HEADERS" in p for p in props),
              "header properties": sum("seq" in p for p in props),
              "KEYS": sum("KEYS" in p for p in props), "KAFKA_KEY_BASE64": sum("KAFKA_KEY_BASE64" in p for p in props)}
    assert all(counts.values()), counts
    assert all(m.body for m in written.stored.values())


def check_every_message_once(got: list[Received], written: Written, via: str) -> None:
    """Each stored message exactly once, as the store holds it, and what Kafka got back from it."""
    assert not [r for r in got if r.corrupted], f"{via}: a body failed the client's checksum"
    coords = Counter((r.properties["KAFKA_TOPIC"], int(r.properties["KAFKA_PARTITION"]),
                      int(r.properties["KAFKA_OFFSET"])) for r in got)
    twice = {c: n for c, n in coords.items() if n > 1}
    missing = set(written.stored) - set(coords)
    per_topic = Counter(r.topic for r in got)
    print(f"\n[proxy] {written.kind} store, {via}: {len(got)} messages of {len(written.stored)} "
          f"({dict(per_topic)}), {sum(twice.values()) - len(twice)} duplicates")
    assert not twice and not missing and len(coords) == len(written.stored), \
        f"{via}: {len(missing)} missing, {len(twice)} more than once, {len(set(coords) - set(written.stored))} unknown"
    for r in got:
        c = (r.properties["KAFKA_TOPIC"], int(r.properties["KAFKA_PARTITION"]), int(r.properties["KAFKA_OFFSET"]))
        m, sent = written.stored[c], written.sent[c]
        assert r.topic == m.topic == sent.topic
        assert r.body == m.body, c
        assert r.tag == m.properties.get("TAGS"), c
        assert r.keys == frozenset(m.properties.get("KEYS", "").split()), c
        assert r.message_id == m.properties["UNIQ_KEY"], c
        assert r.properties == {k: v for k, v in m.properties.items() if k not in SYSTEM_PROPERTIES}, c
        # and so what was produced to Kafka comes back through restore.py's rule (KEYS as stored: its
        # tokens are what the client has, as a set). gRPC's user properties are a protobuf map: the
        # order of headers kept as properties of their own (unique names, by the mapping's rule) does
        # not reach the client; KAFKA_HEADERS, the record's whole list, keeps it.
        props = {**r.properties, **({"TAGS": r.tag} if r.tag else {}), **({"KEYS": m.properties["KEYS"]} if r.keys else {})}
        assert kafka_value(r.body, props) == sent.value, c
        assert kafka_key(props) == (sent.key or None), c
        if "KAFKA_HEADERS" in props:
            assert kafka_headers(props) == list(sent.headers), c
        else:
            assert sorted(kafka_headers(props)) == sorted(sent.headers), c


def test_a_simple_consumer_gets_every_message_once(served: Served) -> None:
    w = served.written
    group = f"grpc-simple-{w.kind}"
    start_from_beginning(served.broker, group, w.topics, served.admin_home)
    run = simple_consume(served.proxy.endpoint, group, w.topics, len(w.stored))
    print(f"\n[proxy] SimpleConsumer: {run.receives} receives ({run.receive_s:.1f} s), acks {run.ack_s:.1f} s; "
          f"{len(run.failures)} receives failed and were tried again: {sorted(set(run.failures))}")
    check_every_message_once(run.messages, w, "SimpleConsumer")


def test_a_push_consumer_gets_every_message_once(served: Served) -> None:
    w = served.written
    group = f"grpc-push-{w.kind}"
    start_from_beginning(served.broker, group, w.topics, served.admin_home)
    got = push_consume(served.proxy.endpoint, group, w.topics, len(w.stored))
    check_every_message_once(got, w, "PushConsumer")
