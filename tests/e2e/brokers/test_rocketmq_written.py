"""The other way round: a store RocketMQ's own broker wrote, read by our tools (issue 35, part 3).

A RocketMQ producer sends a few thousand messages through the broker (keys, tags, user properties,
bodies over compressMsgBodyOverHowmuch so the producer compresses them, one with a delay level, one
transactional half message committed and one rolled back) into small segments, consume-queue files
and index files, so that each rolls over; the broker is stopped; then ``commitlog verify`` is clean,
``commitlog dump --json`` holds what was sent, StoreReader and the Spark source return every message,
and ``commitlog reindex`` writes index files byte for byte the broker's. 4.9 and 5.x."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from store.topics import merge_topics
from tests.helpers.brokers.rocketmq import RocketBroker, clients
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=1.1)]

ROOT = Path(__file__).resolve().parents[3]
VERSIONS = ["4", "5"]
TOPIC = "BrokerWritten"
MESSAGES = 2500
SEGMENT = 512 * 1024
CQ_UNITS = 300
HASH_SLOTS, INDEX_ITEMS = 500, 2000
COMPRESS_OVER = 4096                 # the producer's compressMsgBodyOverHowmuch default
# the broker's own topics a producer's sends reach besides ours (delay levels, transactions)
SCHEDULE_TOPIC, HALF_TOPIC, OP_TOPIC = "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"


@dataclass(frozen=True)
class ToSend:
    kind: str                  # normal | commit | rollback
    tags: str
    keys: str
    delay_level: int
    properties: dict[str, str]
    body: bytes

    def line(self) -> str:
        props = "".join(f"{k}\x01{v}\x02" for k, v in self.properties.items())
        return "\t".join([self.kind, TOPIC, self.tags, self.keys, str(self.delay_level),
                          base64.b64encode(props.encode()).decode(), base64.b64encode(self.body).decode()])


def messages() -> list[ToSend]:
    out = []
    for i in range(MESSAGES):
        body = (f"message {i} ".encode() * (1 + i % 40)) if i % 10 else bytes(range(256)) * (20 + i % 7)
        kind = {1000: "commit", 1001: "rollback"}.get(i, "normal")
        out.append(ToSend(kind, f"tag{i % 5}", f"k{i} shared-{i % 50}", 1 if i == 500 else 0,
                          {"seq": str(i), "note": f"ü-{i % 13}"}, body))
    return out


@dataclass
class Written:
    version: str
    store: Path
    sent: list[ToSend]
    results: list[dict]          # the producer's SendResults, in order


@pytest.fixture(scope="module", params=VERSIONS, ids=[f"rocketmq{v}" for v in VERSIONS])
def written(request: pytest.FixtureRequest, rocketmq_nameservers: object,
            tmp_path_factory: pytest.TempPathFactory) -> Written:
    version = request.param
    store = tmp_path_factory.mktemp(f"broker-written-{version}") / "store"
    merge_topics(store, {TOPIC: 4})
    ns = rocketmq_nameservers.get(version)  # type: ignore[attr-defined]
    geometry = {"mappedFileSizeCommitLog": str(SEGMENT), "mappedFileSizeConsumeQueue": str(CQ_UNITS * 20),
                "maxHashSlotNum": str(HASH_SLOTS), "maxIndexNum": str(INDEX_ITEMS),
                "messageDelayLevel": "1s 2s 3s", "transactionCheckInterval": "600000"}
    broker = RocketBroker.start(store, ns, version, config=geometry)
    try:
        sent = messages()
        c = clients(version)
        results = c.run("send", ns.address, f"producer-{version}", stdin=[m.line() for m in sent])
        assert [r["status"] for r in results] == ["SEND_OK"] * len(sent)
        wanted = sum(m.kind != "rollback" for m in sent)      # the delayed one and the committed one too
        got: list[dict] = []

        def pulled_all() -> bool:
            got[:] = [r for r in c.run("pull", ns.address, f"check-{time.monotonic_ns()}", TOPIC) if "via" in r]
            return len(got) >= wanted

        wait_until(pulled_all, 120, f"the broker to serve {wanted} messages", interval_s=2,
                   error=lambda m: AssertionError(f"{m}: it served {len(got)}"))
        assert len(got) == wanted, f"the broker served {len(got)} of {wanted} messages before it was stopped"
    finally:
        broker.stop()
    assert not (store / "abort").exists()
    return Written(version, store, sent, results)


def commitlog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ingest.cli", *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


def dump(store: Path) -> list[dict]:
    done = commitlog("dump", str(store), "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_verify_is_clean(written: Written) -> None:
    done = commitlog("verify", str(written.store))
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-2000:]}"


def test_the_store_rolled_segments_queues_and_index_files(written: Written) -> None:
    assert len(list((written.store / "commitlog").iterdir())) >= 3
    assert len(list((written.store / "consumequeue" / TOPIC / "0").iterdir())) >= 2
    assert len(list((written.store / "index").iterdir())) >= 2


def plain_body(record: dict) -> bytes:
    body = base64.b64decode(record["bodyBase64"])
    return zlib.decompress(body) if record["sysFlagBits"]["compressed"] else body


def test_dump_holds_every_message_sent(written: Written) -> None:
    records = [r for r in dump(written.store) if r["type"] == "message"]
    by_uniq: dict[str, list[dict]] = {}
    for r in records:
        uniq = r["properties"].get("UNIQ_KEY")
        if uniq:
            by_uniq.setdefault(uniq, []).append(r)
    where = Counter()
    for m, result in zip(written.sent, written.results):
        found = by_uniq.get(result["msgId"], [])
        topics = sorted(r["topic"] for r in found)
        expected = sorted({"normal": [TOPIC], "commit": [HALF_TOPIC, TOPIC], "rollback": [HALF_TOPIC]}[m.kind])
        if m.delay_level:
            expected = sorted([SCHEDULE_TOPIC, TOPIC])
        assert topics == expected, (m, topics)
        for r in found:
            assert plain_body(r) == m.body
            props = r["properties"]
            assert (props.get("TAGS"), props.get("KEYS")) == (m.tags, m.keys)
            assert {k: props.get(k) for k in m.properties} == m.properties
            where[r["topic"]] += 1
        [served] = [r for r in found if r["topic"] == TOPIC] or [None]
        if served is not None and m.kind == "normal" and not m.delay_level:
            assert (served["queueId"], served["queueOffset"]) == (result["queueId"], result["queueOffset"])
            assert served["msgId"] == result["offsetMsgId"]
    compressed = sum(r["sysFlagBits"]["compressed"] for r in records if r["topic"] == TOPIC)
    assert compressed == sum(len(m.body) > COMPRESS_OVER for m in written.sent if m.kind != "rollback")
    other = Counter(r["topic"] for r in records if r["topic"] not in (TOPIC, SCHEDULE_TOPIC, HALF_TOPIC))
    assert set(other) <= {OP_TOPIC}, other      # the broker's own records of the two transactions' ends
    print(f"\n[rocketmq] {written.version}: dump holds {dict(where)} of ours, {dict(other)} of the broker's")


def test_store_reader_and_spark_return_every_message(written: Written, spark: object) -> None:
    from ingest.readback import register
    from store import StoreReader

    offsets = sorted(r["offset"] for r in dump(written.store) if r["type"] == "message")
    with StoreReader.open(written.store) as reader:
        table = reader.to_table()
        assert sorted(table.column("physicalOffset").to_pylist()) == offsets
        assert [o for o, _ in reader.iter_messages()] == offsets
    register(spark)
    df = spark.read.format("rocketmq-commitlog").load(str(written.store))  # type: ignore[attr-defined]
    assert sorted(r.physicalOffset for r in df.select("physicalOffset").collect()) == offsets
    assert df.where(f"topic = '{TOPIC}'").count() == sum(m.kind != "rollback" for m in written.sent)


def test_reindex_writes_the_brokers_index_files_byte_for_byte(written: Written, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "store"
    shutil.copytree(written.store, copy)
    theirs = [p.read_bytes() for p in sorted((written.store / "index").iterdir())]
    shutil.rmtree(copy / "index")
    done = commitlog("reindex", str(copy), "--max-hash-slot-num", str(HASH_SLOTS), "--max-index-num",
                     str(INDEX_ITEMS))
    assert done.returncode == 0, done.stderr
    ours = [p.read_bytes() for p in sorted((copy / "index").iterdir())]
    assert len(ours) == len(theirs) >= 2
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a == b, f"index file {i} differs from the broker's at byte {_first_difference(a, b)}"


def _first_difference(a: bytes, b: bytes) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
