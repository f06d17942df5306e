"""Taking turns with a RocketMQ broker on one store (issue 53): ``commitlog run`` writes from Kafka; a
4.9 or 5.x broker serves the store (a producer sends through it, a consumer group reads); the broker
stops, or is SIGKILLed mid-turn; ``run`` goes on from Kafka on the same store; the broker serves
again. Every Kafka record and every message the broker took is there exactly once, queue offsets
run on without a gap per queue, ``verify`` is clean, and consumers of both turns read everything.

Before the writer told its own tail from another writer's, the second ``run`` cut the broker's
messages as if they were an unfinished batch of its own: 0 of them were left."""

from __future__ import annotations

import base64
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from store import StoreReader
from tests.helpers.brokers.kafka_records import create_topics, produce, unique_topic
from tests.helpers.brokers.rocketmq import RocketBroker, clients

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=4.0)]

ROOT = Path(__file__).resolve().parents[3]
KAFKA_RECORDS = 1000            # per turn of ours
BROKER_MESSAGES = 20
TURNS = [("4", "stop"), ("5", "stop"), ("5", "kill")]


@dataclass
class Turns:
    version: str
    end: str
    store: Path
    topic: str
    kafka: set[tuple[str, int, int]]
    broker_sent: list[dict]
    runs: list[str]                 # each run's log
    first_group: list[dict]         # what the first turn's consumer group read


def run_job(bootstrap: str, topic: str, root: Path, n: int) -> str:
    """One ``commitlog run`` over everything the topic holds now; returns its log."""
    log = root / f"run-{n}.log"
    cmd = [sys.executable, "-m", "ingest.cli", "run", "--bootstrap-servers", bootstrap, "--subscribe", topic,
           "--store", str(root / "store"), "--checkpoint", str(root / "checkpoint"), "--trigger", "available-now",
           "--master", "local[1]", "--shuffle-partitions", "1", "--segment-size", "1m",
           "--max-offsets-per-trigger", "400"]
    with open(log, "wb") as out:
        done = subprocess.run(cmd, stdout=out, stderr=out, timeout=600, cwd=ROOT, start_new_session=True)
    text = log.read_text(errors="replace")
    assert done.returncode == 0, f"run {n} failed ({done.returncode}):\n{text[-4000:]}"
    return text


def produce_turn(bootstrap: str, topic: str, turn: int) -> set[tuple[str, int, int]]:
    sent = produce(bootstrap, [(topic, i % 4, f"k{turn}-{i}".encode(), f"turn {turn} record {i} ".encode() * (1 + i % 9),
                                [("origin", b"kafka")]) for i in range(KAFKA_RECORDS)])
    return {(s.topic, s.partition, s.offset) for s in sent}


def send_line(topic: str, i: int) -> str:
    props = base64.b64encode(f"origin\x01broker\x02seq\x01{i}\x02".encode()).decode()
    body = base64.b64encode(f"through the broker {i}".encode()).decode()
    return "\t".join(["normal", topic, "fromBroker", f"broker-{i}", "0", props, body])


def read_group(version: str, namesrv: str, group: str, topic: str, expected: int) -> list[dict]:
    """What a push consumer of ``group`` reads. A consumer whose first rebalance finds no route yet
    (a broker that has just started) reads nothing before it gives up; it starts again, from the
    group's offsets, at most twice."""
    rows: list[dict] = []
    for _ in range(3):
        rows += [r for r in clients(version).run("push", namesrv, group, str(expected - len(rows)), "4000", topic)
                 if r.get("topic") == topic]
        if len(rows) >= expected:
            break
    return rows


@pytest.fixture(scope="module", params=TURNS, ids=[f"rocketmq{v}-{e}" for v, e in TURNS])
def turns(request: pytest.FixtureRequest, bootstrap_servers: str, rocketmq_nameservers: object,
          tmp_path_factory: pytest.TempPathFactory) -> Turns:
    version, end = request.param
    root = tmp_path_factory.mktemp(f"turns-{version}-{end}")
    topic = unique_topic("turns")
    create_topics(bootstrap_servers, [topic])
    kafka = produce_turn(bootstrap_servers, topic, 1)
    runs = [run_job(bootstrap_servers, topic, root, 1)]

    ns = rocketmq_nameservers.get(version)  # type: ignore[attr-defined]
    broker = RocketBroker.start(root / "store", ns, version)
    try:
        sent = clients(version).run("send", ns.address, "turns-producer",
                                    stdin=[send_line(topic, i) for i in range(BROKER_MESSAGES)])
        first_group = read_group(version, ns.address, "turns-first", topic, KAFKA_RECORDS + BROKER_MESSAGES)
    finally:
        if end == "kill":
            broker.kill()
        else:
            broker.stop()
    if end == "kill":
        assert (root / "store" / "abort").exists()

    kafka |= produce_turn(bootstrap_servers, topic, 2)
    runs.append(run_job(bootstrap_servers, topic, root, 2))
    return Turns(version, end, root / "store", topic, kafka, sent, runs, first_group)


def stored(store: Path) -> list[tuple[int, object]]:
    with StoreReader.open(store) as reader:
        return list(reader.iter_messages())


def test_every_kafka_record_and_every_message_the_broker_took_is_stored_once(turns: Turns) -> None:
    messages = stored(turns.store)
    coords = Counter((m.properties["KAFKA_TOPIC"], int(m.properties["KAFKA_PARTITION"]),
                      int(m.properties["KAFKA_OFFSET"])) for _, m in messages if "KAFKA_TOPIC" in m.properties)
    assert set(coords) == turns.kafka and max(coords.values()) == 1
    through_broker = Counter(m.properties.get("seq") for _, m in messages if m.properties.get("origin") == "broker")
    assert len(turns.broker_sent) == BROKER_MESSAGES and all(r["status"] == "SEND_OK" for r in turns.broker_sent)
    assert through_broker == Counter(str(i) for i in range(BROKER_MESSAGES)), \
        f"of {BROKER_MESSAGES} messages the broker took, {sum(through_broker.values())} are in the store"
    assert "adopted what another writer appended" in turns.runs[1]


def test_queue_offsets_run_on_without_a_gap_and_verify_is_clean(turns: Turns) -> None:
    per_queue: dict[tuple[str, int], list[int]] = {}
    for _, m in stored(turns.store):
        if m.topic == turns.topic:
            per_queue.setdefault((m.topic, m.queue_id), []).append(m.queue_offset)
    assert len(per_queue) == 4
    for key, offsets in per_queue.items():
        assert offsets == list(range(len(offsets))), f"queue {key} is not numbered 0, 1, 2, ...: {offsets[:20]}"
    done = subprocess.run([sys.executable, "-m", "ingest.cli", "verify", str(turns.store)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_the_broker_serves_everything_again_and_consumer_groups_go_on(turns: Turns, rocketmq_nameservers: object) -> None:
    ns = rocketmq_nameservers.get(turns.version)  # type: ignore[attr-defined]
    assert (turns.store / "config" / "consumerOffset.json").exists() or turns.end == "kill"
    total = len(turns.kafka) + BROKER_MESSAGES
    with RocketBroker.start(turns.store, ns, turns.version):
        fresh = clients(turns.version).run("pull", ns.address, "turns-fresh", turns.topic)
        later = read_group(turns.version, ns.address, "turns-first", turns.topic, KAFKA_RECORDS)
    got = Counter((r["queueId"], r["queueOffset"]) for r in fresh if "via" in r)
    assert len(got) == total and max(got.values()) == 1, f"a new group read {len(got)} of {total}"
    first = {(r["queueId"], r["queueOffset"]) for r in turns.first_group}
    assert len(first) == KAFKA_RECORDS + BROKER_MESSAGES, "the first turn's group did not read the first turn"
    if turns.end == "stop":
        # its offsets, kept in config/ by the broker, stayed valid through our turn: it reads only what is new
        again = {(r["queueId"], r["queueOffset"]) for r in later}
        assert again == set(got) - first, f"the first group read {len(again & first)} old, {len(again - first)} new"
    else:
        assert set(got) - first <= {(r["queueId"], r["queueOffset"]) for r in later}
    seqs = Counter(r["properties"].get("seq") for r in fresh if "via" in r and r["properties"].get("origin") == "broker")
    assert seqs == Counter(str(i) for i in range(BROKER_MESSAGES))
