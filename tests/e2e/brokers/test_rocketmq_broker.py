"""RocketMQ's own broker serves a store ``commitlog run`` wrote from a Kafka topic, and RocketMQ's own
clients read every message of it, 4.9 and 5.x alike (issue 35, part 2): each consumer gets every
message exactly once with the body, keys, tags, user properties and Kafka coordinates that were
produced to Kafka; the broker's key look-ups agree with ``commitlog get``; viewMessage finds messages
by their offset msgId; and the broker rewrites nothing of ours but ``config/`` and ``lock``.

One store per module (written once), one broker per version on a copy of it, one NameServer per
version per session (tests/conftest.py)."""

from __future__ import annotations

import hashlib
import shutil
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from ingest.config import JobConfig
from ingest.encode.restore import kafka_headers, kafka_key, kafka_value
from ingest.job import run_stream
from tests.helpers.brokers.kafka_records import Sent, create_topics, mixed_records, produce, unique_topic
from tests.helpers.brokers.rocketmq import BROKER_PORTS, Clients, RocketBroker, clients, free_port_block

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=2)]

VERSIONS = ["4", "5"]
RECORDS = 2400
IDLE_MS = 4000
# what RocketMQ's clients add to a message's properties on the way (not ours, not the producer's)
CLIENT_PROPERTIES = {"MIN_OFFSET", "MAX_OFFSET", "CONSUME_START_TIME", "CLUSTER"}
# what the broker may change of a store: its own config files and the lock; the checkpoint it rewrites
# (its flush times), abort it creates and removes; every other file of ours must keep its bytes
BROKER_OWNS = ("config/", "lock", "checkpoint", "abort")


@dataclass
class StreamStore:
    path: Path
    sent: dict[tuple[str, int, int], Sent]
    topics: list[str]
    port: int               # the store host's port: the brokers listen there, so offset msgIds reach them


@pytest.fixture(scope="module")
def stream_store(bootstrap_servers: str, spark: object, tmp_path_factory: pytest.TempPathFactory) -> StreamStore:
    topics = [unique_topic("rmq-a"), unique_topic("rmq-b")]
    create_topics(bootstrap_servers, topics)
    sent = produce(bootstrap_servers, mixed_records(topics, RECORDS))
    root = tmp_path_factory.mktemp("rocketmq-served")
    port = free_port_block(BROKER_PORTS)
    cfg = JobConfig(bootstrap_servers=bootstrap_servers, subscribe=",".join(topics), store=str(root / "store"),
                    checkpoint=str(root / "checkpoint"), segment_size=1 << 20, consume_queue_units=1000,
                    max_offsets_per_trigger=1000, master=None, flush="sync", store_host=f"127.0.0.1:{port}")
    cfg.validate()
    run_stream(cfg, stop=threading.Event(), spark=spark, available_now=True)
    return StreamStore(root / "store", {(s.topic, s.partition, s.offset): s for s in sent}, topics, port)


def file_hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@dataclass
class Served:
    version: str
    broker: RocketBroker
    namesrv: str
    clients: Clients
    before: dict[str, str]


@pytest.fixture(scope="module", params=VERSIONS, ids=[f"rocketmq{v}" for v in VERSIONS])
def served(request: pytest.FixtureRequest, stream_store: StreamStore, rocketmq_nameservers: object,
           tmp_path_factory: pytest.TempPathFactory) -> object:
    version = request.param
    store = tmp_path_factory.mktemp(f"served-{version}") / "store"
    shutil.copytree(stream_store.path, store)
    before = file_hashes(store)
    ns = rocketmq_nameservers.get(version)  # type: ignore[attr-defined]
    broker = RocketBroker.start(store, ns, version, port=stream_store.port)
    try:
        yield Served(version, broker, ns.address, clients(version), before)
    finally:
        broker.stop()


def assert_is_what_kafka_got(row: dict, sent: Sent) -> None:
    """A message as a RocketMQ client received it equals the Kafka record it came from."""
    props = {k: v for k, v in row["properties"].items() if k not in CLIENT_PROPERTIES}
    body = bytes.fromhex(row["body_hex"])
    assert body, "a message with an empty body reached the client"
    assert kafka_value(body, props) == sent.value
    assert kafka_key(props) == (sent.key or None)
    assert row["keys"] == props.get("KEYS")
    assert kafka_headers(props) == [(k, v) for k, v in sent.headers]
    assert row["tags"] == dict(sent.headers)["TAGS"].decode()
    assert (row["topic"], row["queueId"]) == (sent.topic, sent.partition)


def check_every_message_once(rows: list[dict], stream: StreamStore, via: str) -> Counter:
    import base64

    for row in rows:
        row["body_hex"] = base64.b64decode(row["body"]).hex() if row["body"] is not None else ""
    coords = Counter((r["properties"]["KAFKA_TOPIC"], int(r["properties"]["KAFKA_PARTITION"]),
                      int(r["properties"]["KAFKA_OFFSET"])) for r in rows)
    twice = {c: n for c, n in coords.items() if n > 1}
    missing = set(stream.sent) - set(coords)
    assert not twice and not missing, (f"{via}: {len(rows)} messages of {len(stream.sent)}; "
                                       f"{len(missing)} missing, {len(twice)} more than once")
    for row in rows:
        c = (row["properties"]["KAFKA_TOPIC"], int(row["properties"]["KAFKA_PARTITION"]),
             int(row["properties"]["KAFKA_OFFSET"]))
        assert_is_what_kafka_got(row, stream.sent[c])
    print(f"\n[rocketmq] {via}: {len(rows)} of {len(stream.sent)} messages, each once")
    return coords


def test_the_pull_consumer_reads_every_queue_to_its_end(served: Served, stream_store: StreamStore) -> None:
    out = served.clients.run("pull", served.namesrv, "pull-group", *stream_store.topics)
    ends = [r for r in out if "status" in r]
    assert ends and all(r["status"] == "NO_NEW_MSG" and r["next"] == r["max"] for r in ends), ends
    assert len(ends) == 8            # 2 topics x 4 queues
    check_every_message_once([r for r in out if "via" in r], stream_store, f"{served.version} pull")


def test_the_lite_pull_consumer_gets_every_message_once(served: Served, stream_store: StreamStore) -> None:
    rows = served.clients.run("lite", served.namesrv, "lite-group", str(RECORDS), str(IDLE_MS), *stream_store.topics)
    check_every_message_once(rows, stream_store, f"{served.version} lite pull")


def test_the_push_consumer_gets_every_message_once(served: Served, stream_store: StreamStore) -> None:
    rows = served.clients.run("push", served.namesrv, "push-group", str(RECORDS), str(IDLE_MS), *stream_store.topics)
    check_every_message_once(rows, stream_store, f"{served.version} push")


def test_key_lookups_agree_with_commitlog_get_and_view_finds_by_offset_msg_id(
        served: Served, stream_store: StreamStore) -> None:
    from store.tools.get import messages_by_key

    keys = sorted({(s.topic, s.key.decode()) for s in stream_store.sent.values()
                   if s.key and s.key.startswith(b"order-")})[::17]
    sample = sorted(stream_store.sent)[::53]
    uniq = {c: messages_by_key(str(stream_store.path), c[0], _uniq_key(*c), uniq=True) for c in sample}
    lines = [f"key\t{t}\t{k}" for t, k in keys] + [f"uniq\t{c[0]}\t{_uniq_key(*c)}" for c in sample]
    lines += [f"view\t{c[0]}\t{found[0].json['msgId']}" for c, found in uniq.items()]
    answers = served.clients.run("query", served.namesrv, stdin=lines)
    assert len(answers) == len(lines) and not [a for a in answers if a["error"]], \
        [a for a in answers if a["error"]][:3]
    by_key = {(a["topic"], a["key"]): a for a in answers if a["kind"] == "key"}
    for topic, key in keys:
        ours = sorted(f.offset for f in messages_by_key(str(stream_store.path), topic, key))
        theirs = sorted(m["commitLogOffset"] for m in by_key[(topic, key)]["found"])
        assert theirs == ours and ours, (topic, key)
    by_uniq = {(a["topic"], a["key"]): a for a in answers if a["kind"] == "uniq"}
    views = {a["key"]: a for a in answers if a["kind"] == "view"}
    for c, found in uniq.items():
        [ours] = found
        assert [m["commitLogOffset"] for m in by_uniq[(c[0], _uniq_key(*c))]["found"]] == [ours.offset]
        [viewed] = views[ours.json["msgId"]]["found"]
        assert (viewed["commitLogOffset"], viewed["offsetMsgId"]) == (ours.offset, ours.json["msgId"])
        assert viewed["properties"]["KAFKA_OFFSET"] == str(c[2])
    print(f"\n[rocketmq] {served.version}: {len(keys)} keys, {len(sample)} uniq keys and msgIds looked up")


def _uniq_key(topic: str, partition: int, offset: int) -> str:
    from ingest.encode.mapping import uniq_key

    return uniq_key(topic, partition, offset)


def test_the_broker_rewrites_nothing_of_ours(served: Served) -> None:
    served.broker.stop()
    assert not (served.broker.store / "abort").exists(), "the broker did not shut down cleanly"
    after = file_hashes(served.broker.store)
    changed = sorted(n for n in served.before if after.get(n) != served.before[n] and not n.startswith(BROKER_OWNS))
    assert not changed, f"the RocketMQ {served.version} broker changed or removed files of ours: {changed[:10]}"
    added = sorted(set(after) - set(served.before))
    ours = [n for n in added if n.split("/")[0] in ("commitlog", "consumequeue", "index")]
    assert not ours, f"the broker added files to our store's own directories: {ours[:10]}"


def test_a_nameserver_whose_port_is_taken_meanwhile_starts_on_another(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from tests.helpers.brokers import rocketmq

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        monkeypatch.setattr(rocketmq, "free_port_block", lambda *a: next(ports, None) or free_port_block(*a))
        server = rocketmq.NameServer.start(tmp_path / "namesrv", "4")
        try:
            assert server.port != taken.getsockname()[1]
            assert "BindException" in (tmp_path / "namesrv" / "namesrv.log").read_text(errors="replace")
        finally:
            server.stop()
