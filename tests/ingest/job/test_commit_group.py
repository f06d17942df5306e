"""``--commit-group`` (issue 66, part 1): Kafka's own ConsumerGroupCommand (kafka-consumer-groups
--describe, from the `make jvm` jars) shows the job's lag, 0 once ``run`` has caught up and the
produced count while it is stopped; offsets moved by someone else change nothing the job reads; a
group a live consumer is a member of is refused in one line (exit 2); a commit the coordinator
refuses is one warning, not a stopped stream. And part 2's start: a compacted topic is found from
the brokers' configs and named as the store names it.

Apache Kafka itself (the group coordinator and the tool are Kafka's own): the session's broker
where it is one, else the module's own."""

from __future__ import annotations

import logging
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.errors import KafkaError

from ingest.devtools.broker import Broker
from ingest.job import run_stream
from ingest.jvm import classpath, java
from ingest.kafka.commit_group import GroupCommitter
from tests.helpers.brokers.apache_kafka import job_command, job_config, module_kafka, new_topic, stored
from tests.helpers.brokers.kafka_records import produce
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=2)]

GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
PARTITIONS = 2
FIRST, LATER = 30, 12


@pytest.fixture(scope="module")
def kafka(kafka_broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """The session's broker where it is Apache Kafka or one given by $KAFKA_BOOTSTRAP_SERVERS (no
    second broker to start), else the module's own."""
    if kafka_broker.kind in ("apache-kafka", "testcontainers", "external"):
        yield kafka_broker
    else:
        yield from module_kafka(tmp_path_factory, __name__)


def describe(bootstrap: str, group: str) -> tuple[str, dict[int, tuple[int, int, int]]]:
    """Kafka's own ``kafka-consumer-groups --describe --group``: its output, and per partition
    (current offset, log end offset, lag)."""
    done = subprocess.run([java(), "-cp", classpath("kafka"), GROUP_COMMAND, "--bootstrap-server", bootstrap,
                           "--describe", "--group", group], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {}
    lines = [line.split() for line in done.stdout.splitlines() if line.strip()]
    head = next(i for i, cols in enumerate(lines) if cols[:1] == ["GROUP"])
    names = lines[head]
    for cols in lines[head + 1:]:
        row = dict(zip(names, cols))
        rows[int(row["PARTITION"])] = (int(row["CURRENT-OFFSET"]), int(row["LOG-END-OFFSET"]), int(row["LAG"]))
    return done.stdout, rows


def records(bootstrap: str, topic: str, n: int, start: int, partitions: int = PARTITIONS) -> None:
    produce(bootstrap, [(topic, i % partitions, f"k{i}".encode(), f"v{i}".encode(), []) for i in range(start, start + n)])


def has_members(bootstrap: str, group: str, member: KafkaConsumer) -> bool:
    """Whether the coordinator lists a member of ``group``, ``member`` polled meanwhile so its join
    goes on. The coordinator's own answer, not the consumer's assignment: a join that is still
    rebalancing (a loaded broker, a slow first fetch of the group's metadata) already has a member."""
    member.poll(timeout_ms=500)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        info = admin.describe_groups([group]).get(group, {})
    finally:
        admin.close()
    return bool(info.get("members"))


def stored_count(store: Path) -> int:
    return len(stored(store))


def test_kafka_tools_show_the_lag_and_the_job_never_reads_the_group(kafka: Broker, spark: object, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = new_topic(bootstrap, "lag", PARTITIONS)
    group = f"{topic}-monitor"
    records(bootstrap, topic, FIRST, 0)
    cfg = job_config(bootstrap, [topic], tmp_path, commit_group=group, trigger="200ms")
    stop = threading.Event()
    job = threading.Thread(target=run_stream, kwargs=dict(cfg=cfg, stop=stop, spark=spark))
    job.start()
    try:
        # the running job: every partition's lag 0 once the store holds what was produced
        wait_until(lambda: not job.is_alive() or stored_count(tmp_path / "store") == FIRST and
                   sum(r[0] for r in describe(bootstrap, group)[1].values()) == FIRST, 300,
                   "the job caught up and its group shows it", interval_s=1)
        assert job.is_alive(), "the job ended early (its error is in the log)"
        running, rows = describe(bootstrap, group)
        with capsys.disabled():
            print(f"\n[kafka-consumer-groups --describe, job running]\n{running}")
        assert {p: lag for p, (_, _, lag) in rows.items()} == {p: 0 for p in range(PARTITIONS)}
    finally:
        stop.set()
        job.join(120)
    assert not job.is_alive()
    # stopped: the lag is what was produced since
    records(bootstrap, topic, LATER, FIRST)
    stopped, rows = describe(bootstrap, group)
    assert sum(lag for _, _, lag in rows.values()) == LATER, stopped
    assert sum(cur for cur, _, _ in rows.values()) == FIRST
    # someone moves the group to the start: the job reads from the store's commit point all the same
    reset = subprocess.run([java(), "-cp", classpath("kafka"), GROUP_COMMAND, "--bootstrap-server", bootstrap,
                            "--reset-offsets", "--to-earliest", "--execute", "--group", group, "--topic", topic],
                           capture_output=True, text=True, timeout=120)
    assert reset.returncode == 0, reset.stderr[-2000:]
    assert sum(cur for cur, _, _ in describe(bootstrap, group)[1].values()) == 0
    run_stream(cfg, stop=threading.Event(), spark=spark, available_now=True)
    assert stored_count(tmp_path / "store") == FIRST + LATER      # nothing read twice
    _, rows = describe(bootstrap, group)
    assert rows == {p: (rows[p][1], rows[p][1], 0) for p in range(PARTITIONS)}


def test_a_group_with_a_live_member_is_refused_and_a_refused_commit_is_one_warning(
        kafka: Broker, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = new_topic(bootstrap, "member", 1)
    records(bootstrap, topic, 3, 0, partitions=1)
    group = f"{topic}-app"
    committer = GroupCommitter({"bootstrap_servers": bootstrap}, group, warn_every_s=3600)
    member = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                           session_timeout_ms=30_000)
    try:
        wait_until(lambda: has_members(bootstrap, group, member), 90, "the consumer joined its group", interval_s=0,
                   retry_on=(KafkaError,))
        # refused at start, in one line, before anything is opened
        done = subprocess.run(job_command(bootstrap, tmp_path, "--subscribe", topic, "--commit-group", group),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr[-2000:]
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "--commit-group" in lines[0] and "live consumer" in lines[0], done.stderr
        assert not (tmp_path / "store" / "commitlog").exists()
        # a committer made before the member joined: its commits are refused, said once, and it goes on
        with caplog.at_level(logging.WARNING, logger="commitlog.commit_group"):
            for n in (1, 2, 3):
                committer.offer({(topic, 0): n})
                wait_until(lambda: committer.counts.failures >= n, 30, f"commit {n} answered", interval_s=0.05)
        warned = [r for r in caplog.records if r.name == "commitlog.commit_group"]
        assert len(warned) == 1 and group in warned[0].getMessage(), [r.getMessage() for r in warned]
        assert committer.counts.commits == 0
    finally:
        member.close(autocommit=False)
        committer.close()
    # the member gone, the same committer's next commit is taken
    committer = GroupCommitter({"bootstrap_servers": bootstrap}, group)
    try:
        committer.offer({(topic, 0): 3})
        wait_until(lambda: committer.counts.commits == 1, 60, "the commit taken", interval_s=0.05)
    finally:
        committer.close()
    assert describe(bootstrap, group)[1] == {0: (3, 3, 0)}


def test_a_compacted_topic_is_found_at_start_and_named_as_the_store_names_it(
        kafka: Broker, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Part 2's start (tests/e2e/brokers/test_compaction_topics.py has the rest): the brokers'
    cleanup.policy is read at start and a compacted topic becomes a compaction topic under its
    --topic-map name; --topic-cleanup-policy overrides either way, and a policy that is neither
    is refused in one line."""
    from ingest.cli import main
    from ingest.lifecycle import compacted_topics, compaction_targets

    bootstrap = kafka.bootstrap_servers
    compacted = new_topic(bootstrap, "table", 1, cleanup_policy="compact,delete")
    plain = new_topic(bootstrap, "events", 1)
    cfg = job_config(bootstrap, [compacted, plain], tmp_path)
    assert compacted_topics(cfg) == [compacted]
    cfg.topic_map = {compacted: "Table"}
    assert compaction_targets(cfg) == ["Table"]
    cfg.topic_cleanup_policy = {compacted: "delete", plain: "compaction"}
    assert compacted_topics(cfg) == [plain]
    code = main(["run", "--bootstrap-servers", bootstrap, "--subscribe", compacted, "--store", str(tmp_path / "s"),
                 "--topic-cleanup-policy", f"{compacted}=kept"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"--topic-cleanup-policy {compacted}=kept" in err[0] \
        and "use delete or compaction" in err[0], err
