"""Two broker groups on one 8-partition topic: two ``run`` jobs, each with its own store and checkpoint,
one of them killed with SIGKILL mid-stream and started again, while a producer keeps writing. At the
end the two stores together hold every record exactly once, each partition in its group's store as
queue p div 2, and each store's topics.json gives its own queue count; ``replay`` splits the same way.
Then RocketMQ's own brokers, broker-a and broker-b under one NameServer, each on one group's store,
serve the whole topic to one RocketMQ consumer."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from ingest.config import JobConfig
from ingest.replay.command import ReplayOptions, replay
from sink.state import SinkState
from store.topics import known_queue_counts
from tests.helpers.brokers.kafka_records import Sent, create_topics, produce, store_by_coordinates, unique_topic
from tests.helpers.brokers.rocketmq import RocketBroker, clients
from tests.helpers.job_processes import Producer, logged
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.crash, pytest.mark.integration, pytest.mark.slow(minutes=1.8)]

PARTITIONS, GROUPS = 8, 2


class SpreadProducer(Producer):
    """Producer's steady batches, over all eight partitions."""

    def run(self) -> None:
        i = 0
        try:
            while not self.stop_event.is_set():
                batch = [(self.topic, (i + j) % PARTITIONS, f"k{i + j}".encode(), f"v{i + j}".encode() * 3, [])
                         for j in range(40)]
                self.sent += produce(self.bootstrap, batch)
                i += len(batch)
                self.stop_event.wait(0.5)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def group_command(bootstrap: str, topic: str, tmp: Path, group: int) -> list[str]:
    return [sys.executable, "-m", "ingest.cli", "run", "--bootstrap-servers", bootstrap, "--subscribe", topic,
            "--store", str(tmp / f"store-{group}"), "--checkpoint", str(tmp / f"checkpoint-{group}"),
            "--broker-group", f"{group}/{GROUPS}", "--segment-size", "256k", "--consume-queue-units", "500",
            "--max-offsets-per-trigger", "1000", "--trigger", "300ms", "--master", "local[1]",
            "--shuffle-partitions", "1", "--flush", "sync"]


def start(cmd: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=out, start_new_session=True)


def batches_logged(log: Path) -> int:
    return log.read_text(errors="replace").count(" records, ")


def kill(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def assert_groups_hold_everything_once(stores: list[Path], sent: list[Sent]) -> None:
    union: dict[tuple[str, int, int], list] = {}
    for group, store in enumerate(stores):
        found = store_by_coordinates(str(store))
        assert {p for _, p, _ in found} <= {p for p in range(PARTITIONS) if p % GROUPS == group}, \
            f"group {group} holds another group's partitions"
        for (topic, partition, offset), msgs in found.items():
            assert all(m.queue_id == partition // GROUPS for _, m in msgs)
            union.setdefault((topic, partition, offset), []).extend(msgs)
    dupes = [k for k, v in union.items() if len(v) > 1]
    missing = [(s.topic, s.partition, s.offset) for s in sent if (s.topic, s.partition, s.offset) not in union]
    assert not dupes, f"{len(dupes)} records in the stores twice, e.g. {dupes[:5]}"
    assert not missing, f"{len(missing)} of {len(sent)} records in no store, e.g. {missing[:5]}"
    assert len(union) == len(sent)


def caught_up(store: Path, sent: list[Sent], group: int) -> bool:
    """The store's last commit has every record produced to the group's partitions."""
    try:
        held = SinkState.from_metadata(json.loads((store / "commitpoint.json").read_text())["metadata"]).kafka_offsets
    except (FileNotFoundError, KeyError, ValueError):
        return False
    want: dict[str, int] = {}
    for s in sent:
        if s.partition % GROUPS == group:
            key = f"{s.topic}/{s.partition}"
            want[key] = max(want.get(key, 0), s.offset + 1)
    return all(held.get(k, 0) >= v for k, v in want.items())


@pytest.mark.timeout(1500)
def test_two_groups_hold_the_topic_exactly_once_through_a_sigkill(bootstrap_servers: str, tmp_path: Path,
                                                                 rocketmq_nameservers: object) -> None:
    topic = unique_topic("groups")
    create_topics(bootstrap_servers, [topic], partitions=PARTITIONS)
    producer = SpreadProducer(bootstrap_servers, topic)
    producer.start()
    logs = [tmp_path / f"group-{g}.log" for g in range(GROUPS)]
    stores = [tmp_path / f"store-{g}" for g in range(GROUPS)]
    procs = [start(group_command(bootstrap_servers, topic, tmp_path, g), logs[g]) for g in range(GROUPS)]
    try:
        for g in range(GROUPS):
            wait_until(lambda: logged(logs[g], "batch 1:", procs[g]), 600, f"group {g}'s batch 1: {logs[g]}",
                       interval_s=0.2)
        time.sleep(random.Random(38).uniform(0.0, 2.0))
        kill(procs[1], signal.SIGKILL)                 # mid-stream: group 0 goes on, group 1 is down
        procs[1].wait()
        before = batches_logged(logs[1])
        procs[1] = start(group_command(bootstrap_servers, topic, tmp_path, 1), logs[1])
        # started again, it catches up from its store's Kafka offsets and goes on taking new records
        def three_more_batches() -> bool:
            assert procs[1].poll() is None, f"the restarted group 1 died: {logs[1]}"
            return batches_logged(logs[1]) >= before + 3

        # a busy machine takes its time, a dead job is seen at once
        wait_until(three_more_batches, 600, f"three batches of the restarted group 1: {logs[1]}", interval_s=0.5)
        producer.stop_event.set()
        producer.join(timeout=60)
        assert producer.error is None, producer.error
        def all_caught_up() -> bool:              # both take in the rest of what was produced
            assert all(p.poll() is None for p in procs), f"a group died: {logs}"
            return all(caught_up(stores[g], producer.sent, g) for g in range(GROUPS))

        wait_until(all_caught_up, 600, f"the groups to catch up: {logs}", interval_s=1)
    finally:
        producer.stop_event.set()
        producer.join(timeout=60)
        for proc in procs:
            kill(proc, signal.SIGTERM)                 # a clean stop after the batch in progress
        for proc in procs:
            try:
                proc.wait(timeout=180)
            except subprocess.TimeoutExpired:
                kill(proc, signal.SIGKILL)
                proc.wait()
    assert [p.returncode for p in procs] == [0, 0], f"a group did not stop cleanly: {logs}"

    for g in range(GROUPS):
        verify = subprocess.run([sys.executable, "-m", "ingest.cli", "verify", str(stores[g])],
                                capture_output=True, text=True, timeout=120)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        assert known_queue_counts(stores[g])[topic] == PARTITIONS // GROUPS
        meta = json.loads((stores[g] / "commitpoint.json").read_text())["metadata"]["sink"]
        assert meta["brokerGroup"] == f"{g}/{GROUPS}"
    assert_groups_hold_everything_once(stores, producer.sent)

    # RocketMQ's brokers on the two stores, one NameServer: one consumer gets the whole topic, once
    ns = rocketmq_nameservers.get("4")  # type: ignore[attr-defined]
    with RocketBroker.start(stores[0], ns, "4", name="broker-a"), \
            RocketBroker.start(stores[1], ns, "4", name="broker-b"):
        rows = clients("4").run("pull", ns.address, "groups-pull", topic)
    ends = [r for r in rows if "status" in r]
    assert len(ends) == PARTITIONS, ends                       # 4 queues on each broker
    assert all(r["status"] == "NO_NEW_MSG" and r["next"] == r["max"] for r in ends), ends
    got = Counter((r["properties"]["KAFKA_TOPIC"], int(r["properties"]["KAFKA_PARTITION"]),
                   int(r["properties"]["KAFKA_OFFSET"])) for r in rows if "via" in r)
    assert set(got.values()) == {1}, [k for k, n in got.items() if n > 1][:5]
    assert set(got) == {(s.topic, s.partition, s.offset) for s in producer.sent}

    # a store goes on only as the group that wrote it: one line, exit 2, before Spark starts
    wrong_cmd = group_command(bootstrap_servers, topic, tmp_path, 0)
    wrong_cmd[wrong_cmd.index("--store") + 1] = str(stores[1])
    wrong = subprocess.run(wrong_cmd, capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr
    assert "holds broker group 1/2" in wrong.stderr and len(wrong.stderr.strip().splitlines()) == 1


def test_replay_splits_a_topic_over_two_groups_the_same_way(bootstrap_servers: str, spark: object,
                                                            tmp_path: Path) -> None:
    topic = unique_topic("replay-groups")
    create_topics(bootstrap_servers, [topic], partitions=PARTITIONS)
    sent = produce(bootstrap_servers, [(topic, i % PARTITIONS, None, b"r%d" % i, []) for i in range(1200)])
    stores = []
    for g in range(GROUPS):
        cfg = JobConfig(bootstrap_servers=bootstrap_servers, subscribe=topic, store=str(tmp_path / f"r-{g}"),
                        segment_size=1 << 20, consume_queue_units=1000, max_offsets_per_trigger=500, master=None,
                        broker_group=f"{g}/{GROUPS}")
        cfg.validate()
        summary = replay(cfg, ReplayOptions(topics=(topic,), progress="none"), spark=spark)
        assert summary.complete and summary.verified and summary.records == 600
        assert [p.partition for p in summary.plan.partitions] == list(range(g, PARTITIONS, GROUPS))
        stores.append(tmp_path / f"r-{g}")
    assert_groups_hold_everything_once(stores, sent)
