"""A store left by a SIGKILLed ``commitlog run`` (``abort`` behind it), two ways (issue 35, part 4):
our own recovery on the next open makes it clean; and RocketMQ's broker, opened on the crashed store
directly, recovers abnormally and keeps every index item our index held, because the checkpoint's
indexMsgTimestamp covers the index's last item (IndexService.load destroys each index file that ends
past it, and re-indexes only the segments it re-dispatches). 4.9 and 5.x.

What the broker adds: the keys of records past our index's end, and once more the keys of the one
message at its end. RocketMQ's IndexService.buildIndex skips a re-dispatched message only when its
offset is below the index's endPhyOffset, which is that message's own offset, and the abnormal
recovery re-dispatches whole segments; no checkpoint value avoids that without changing the index
file's bytes. (Our own recovery first, then the broker: a clean store, nothing re-dispatched.)

Two crashes: right after a batch's append (records and their index items past the commit point, which
the broker, not knowing our commit point, keeps), and right after a commit."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from ingest.encode.mapping import uniq_key
from store.index.file import IndexFile
from store.log.checkpoint import read_checkpoint
from tests.helpers.brokers.kafka_records import Sent, create_topics, produce, unique_topic
from tests.helpers.brokers.rocketmq import RocketBroker, clients

pytestmark = [pytest.mark.crash, pytest.mark.integration, pytest.mark.slow(minutes=2.6)]

ROOT = Path(__file__).resolve().parents[3]
VERSIONS = ["4", "5"]
CRASHES = ["after-append:5", "after-commit:4"]   # 4 batches indexed either way: 2 index files
RECORDS, PER_BATCH = 3000, 400
SEGMENT = 256 * 1024
HASH_SLOTS, INDEX_ITEMS = 1000, 2500          # small files: the crash finds several, the last one part full


@pytest.fixture(scope="module")
def produced(bootstrap_servers: str) -> tuple[str, dict[tuple[str, int, int], Sent]]:
    topic = unique_topic("rmq-crash")
    create_topics(bootstrap_servers, [topic])
    sent = produce(bootstrap_servers, [(topic, i % 4, f"order-{i % 900}".encode(), f"v{i}".encode() * (1 + i % 30),
                                        [("TAGS", f"t{i % 3}".encode())]) for i in range(RECORDS)])
    return topic, {(s.topic, s.partition, s.offset): s for s in sent}


@dataclass
class Crashed:
    crash: str
    store: Path
    topic: str
    sent: dict[tuple[str, int, int], Sent]


@pytest.fixture(scope="module", params=CRASHES)
def crashed(request: pytest.FixtureRequest, produced: tuple, bootstrap_servers: str,
            tmp_path_factory: pytest.TempPathFactory) -> Crashed:
    topic, sent = produced
    root = tmp_path_factory.mktemp(f"crashed-{request.param.replace(':', '-')}")
    cmd = [sys.executable, "-m", "ingest.cli", "run", "--bootstrap-servers", bootstrap_servers, "--subscribe", topic,
           "--store", str(root / "store"), "--checkpoint", str(root / "checkpoint"), "--segment-size", "256k",
           "--consume-queue-units", "500", "--max-offsets-per-trigger", str(PER_BATCH), "--trigger", "200ms",
           "--master", "local[1]", "--shuffle-partitions", "1", "--flush", "sync",
           "--max-hash-slot-num", str(HASH_SLOTS), "--max-index-num", str(INDEX_ITEMS)]
    env = {**os.environ, "COMMITLOG_CRASH_AT": request.param}
    with open(root / "run.log", "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=out, start_new_session=True, cwd=ROOT)
        try:
            proc.wait(timeout=600)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)     # the Spark JVM with it
            except ProcessLookupError:
                pass
    assert proc.returncode == -signal.SIGKILL, f"the run did not die at {request.param}: {root / 'run.log'}"
    assert (root / "store" / "abort").exists()
    return Crashed(request.param, root / "store", topic, sent)


def committed(store: Path) -> dict[str, int]:
    from sink.state import SinkState
    from store import read_commit_point

    return dict(SinkState.from_metadata(read_commit_point(store).metadata).kafka_offsets)


def index_items(store: Path) -> list[tuple[str, np.ndarray, int, int]]:
    """(file name, items, endPhyOffset, endTimestamp) of each index file, oldest first."""
    out = []
    for path in sorted((store / "index").iterdir()):
        f = IndexFile(path, HASH_SLOTS, INDEX_ITEMS, read_only=True)
        h = f.read_header()
        out.append((path.name, f.items().copy(), h.end_phy_offset, h.end_timestamp))
        f.close()
    return out


def test_our_recovery_makes_the_crashed_store_clean(crashed: Crashed, tmp_path: Path) -> None:
    from store import MessageStore, StoreConfig, StoreReader
    from store.index.service import IndexConfig

    store = tmp_path / "store"
    shutil.copytree(crashed.store, store)
    offsets = committed(store)
    with MessageStore.open(store, StoreConfig(segment_size=SEGMENT, consume_queue_units=500,
                                              index=IndexConfig(True, HASH_SLOTS, INDEX_ITEMS))):
        pass
    assert not (store / "abort").exists()
    done = subprocess.run([sys.executable, "-m", "ingest.cli", "verify", str(store)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    held = [c for c in crashed.sent if c[2] < offsets.get(f"{c[0]}/{c[1]}", 0)]
    assert 0 < len(held) < RECORDS
    with StoreReader.open(store) as reader:
        coords = Counter((m.properties["KAFKA_TOPIC"], int(m.properties["KAFKA_PARTITION"]),
                          int(m.properties["KAFKA_OFFSET"])) for _, m in reader.iter_messages())
        assert coords == Counter(held), "the recovered store holds other messages than those committed"
        for c in held[::7]:
            assert len(reader.messages_by_key(crashed.topic, uniq_key(*c), 4, uniq=True)) == 1


def lookups(version: str, namesrv: str, topic: str, keys: list[str], rounds: int = 6) -> list[dict]:
    """Each key's answer to RocketMQ's queryMessageByUniqKey. A broker just recovered abnormally is
    still re-dispatching whole segments; on a loaded machine its answers can miss the client's
    deadline (the client then says "no message"), so the keys without an answer are asked again, a
    few seconds apart, and the last answer of each counts."""
    answers: dict[str, dict] = {}
    todo = keys
    for round_ in range(rounds):
        if round_:
            time.sleep(5)
        for a in clients(version).run("query", namesrv, stdin=[f"uniq\t{topic}\t{k}" for k in todo]):
            answers[a["key"]] = a
        todo = [k for k in todo if answers[k]["error"] or not answers[k]["found"]]
        if not todo:
            break
        print(f"\n[rocketmq] {version}: {len(todo)} of {len(keys)} UNIQ_KEY lookups unanswered in round {round_ + 1}, "
              f"e.g. {answers[todo[0]]['error']}")
    return [answers[k] for k in keys]


@pytest.mark.parametrize("version", VERSIONS, ids=[f"rocketmq{v}" for v in VERSIONS])
def test_a_broker_on_the_crashed_store_keeps_every_index_item_of_ours(
        crashed: Crashed, version: str, rocketmq_nameservers: object, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(crashed.store, store)
    ours = index_items(store)
    assert len(ours) >= 2
    checkpoint = read_checkpoint(store / "checkpoint")
    assert checkpoint is not None and checkpoint.index_msg_timestamp >= ours[-1][3], \
        "indexMsgTimestamp does not cover the index: a broker would destroy its last file"
    end_phy = ours[-1][2]
    ns = rocketmq_nameservers.get(version)  # type: ignore[attr-defined]
    broker = RocketBroker.start(store, ns, version)
    try:
        held = [c for c in crashed.sent if c[2] < committed(crashed.store).get(f"{c[0]}/{c[1]}", 0)]
        answers = lookups(version, ns.address, crashed.topic, [uniq_key(*c) for c in held])
        lost = [a["key"] for a in answers if a["error"] or not a["found"]]
        errors = [a["error"] for a in answers if a["error"]]
        assert not lost, (f"{len(lost)} of {len(held)} committed messages not found by their UNIQ_KEY: {lost[:3]}, "
                          f"{len(errors)} errors: {errors[:2]}")
        # 4.9's client keeps one answer per UNIQ_KEY; 5.x's shows the message at the end twice
        twice = [a for a in answers if len(a["found"]) > 1]
        assert all({m["commitLogOffset"] for m in a["found"]} == {end_phy} for a in twice), twice[:2]
    finally:
        broker.stop()
    log = broker.log_text()
    assert "abnormally" in log or "recoverAbnormally" in log or "recover from this mapped file" in log
    after = index_items(store)
    # every file of ours is still there, its items as they were (the broker only appends)
    assert [name for name, *_ in after[:len(ours)]] == [name for name, *_ in ours]
    for (name, before, *_), (_, now, *_) in zip(ours, after):
        assert np.array_equal(now[:len(before)], before), f"the broker changed items of index file {name}"
    added = np.concatenate([now[len(before):] for (_, before, *_), (_, now, *_) in zip(ours, after)]
                           + [items for _, items, *_ in after[len(ours):]])
    assert (added["phy_offset"] >= end_phy).all(), "the broker re-indexed messages our index held"
    old = set(zip(np.concatenate([b for _, b, *_ in ours])["key_hash"].tolist(),
                  np.concatenate([b for _, b, *_ in ours])["phy_offset"].tolist()))
    again = Counter((h, p) for h, p in zip(added["key_hash"].tolist(), added["phy_offset"].tolist()) if (h, p) in old)
    past = int((added["phy_offset"] > end_phy).sum())
    print(f"\n[rocketmq] {version} on a store killed {crashed.crash}: {sum(len(b) for _, b, *_ in ours)} items of "
          f"ours kept; the broker added {len(added)}: {past} for records past our index's end, "
          f"{sum(again.values())} for the message at its end ({end_phy})")
    last = (np.concatenate([b for _, b, *_ in ours])["phy_offset"] == end_phy).sum()
    assert set(p for _, p in again) <= {end_phy} and sum(again.values()) <= last, \
        f"the broker re-indexed keys of messages before our index's end: {sorted(again)[:5]}"
