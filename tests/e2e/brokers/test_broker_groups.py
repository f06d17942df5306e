"""Broker groups without Kafka: which partitions a group takes and as which queues, the settings
that cannot work, the source reading only its group's partitions, and a store that refuses to be
continued as another group (ingest.broker_groups)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.broker_groups import BrokerGroup, BrokerGroupError, check_store_group, owned
from ingest.cli import build_parser
from ingest.config import JobConfigError
from ingest.job_arguments import config_from_args
from ingest.kafka.options import BROKER_GROUP_OPTION, KafkaOptionError, parse_options
from ingest.kafka.source import _partitions
from ingest.replay.command import group_plan, remaining
from ingest.replay.plan import PartitionPlan, ReplayPlan
from sink import CommitLogWriter
from store import StoreConfig
from tests.helpers.batches import collected

pytestmark = pytest.mark.unit


def test_n_groups_take_every_partition_once_each_as_its_own_queues_from_zero() -> None:
    groups = [BrokerGroup.parse(f"{k}/3") for k in range(3)]
    partitions = [("t", p) for p in range(8)]
    taken = [owned(partitions, g) for g in groups]
    assert sorted(tp for part in taken for tp in part) == partitions
    assert [[g.queue_id(p) for _, p in part] for g, part in zip(groups, taken)] == [[0, 1, 2], [0, 1, 2], [0, 1]]
    assert [g.broker_name for g in groups] == ["broker-a", "broker-b", "broker-c"]
    assert owned(partitions, None) == partitions
    # a partition added later joins a group as a new queue; none of the others moves
    assert (groups[8 % 3].owns(8), groups[2].queue_id(8)) == (True, 2)


@pytest.mark.parametrize("text, says", [
    ("1", "give K/N"), ("a/2", "give K/N"), ("2/2", "K = 2 is not a group of 2 (0 to 1)"),
    ("0/0", "N = 0 groups; give 1 to 1024"), ("-1/2", "give K/N"),
])
def test_a_group_that_cannot_be_is_named_with_its_limit(text: str, says: str) -> None:
    with pytest.raises(BrokerGroupError, match=rf"--broker-group '{text}': .*{says.split('(')[0]}"):
        BrokerGroup.parse(text)


def job(*argv: str) -> object:
    return config_from_args(build_parser().parse_args(["run", "--bootstrap-servers", "h:9092", "--store", "/s",
                                                       *argv]))


def test_run_refuses_a_group_with_spark_s_source_or_with_partitions_of_other_groups() -> None:
    assert job("--subscribe", "t", "--broker-group", "1/2").group == BrokerGroup(1, 2)
    with pytest.raises(JobConfigError, match="needs --source kafka-python"):
        job("--subscribe", "t", "--broker-group", "1/2", "--source", "spark-kafka")
    with pytest.raises(JobConfigError, match=r"--assign names t-0, t-2, not partitions of --broker-group 1/2"):
        job("--assign", '{"t": [0, 1, 2, 3]}', "--broker-group", "1/2")
    job("--assign", '{"t": [1, 3]}', "--broker-group", "1/2")


class Reader:
    def partitions(self, subscribe=None, pattern=None, assign=None):  # noqa: ANN001, ANN201
        return [(t, p) for t in ("a", "b") for p in range(5)]


def test_the_source_reads_only_its_group_s_partitions() -> None:
    opts = parse_options({"subscribe": "a,b", "kafka.bootstrap.servers": "h:1", BROKER_GROUP_OPTION: "1/2"},
                         streaming=True)
    assert _partitions(Reader(), opts) == [("a", 1), ("a", 3), ("b", 1), ("b", 3)]
    everything = parse_options({"subscribe": "a,b", "kafka.bootstrap.servers": "h:1"}, streaming=True)
    assert len(_partitions(Reader(), everything)) == 10
    with pytest.raises(KafkaOptionError, match=r"option 'commitlog.brokerGroup' '3/2'"):
        parse_options({"subscribe": "a", "kafka.bootstrap.servers": "h:1", BROKER_GROUP_OPTION: "3/2"}, True)


def test_a_replay_plans_only_its_group_s_partitions_and_its_lag_is_what_is_left() -> None:
    plan = ReplayPlan([PartitionPlan("t", p, 10, 50) for p in range(4)])
    mine = group_plan(plan, BrokerGroup(0, 2))
    assert [p.partition for p in mine.partitions] == [0, 2]
    assert group_plan(plan, None) is plan
    assert remaining(mine, {"t/0": 30}) == {("t", 0): 20, ("t", 2): 40}


def test_a_store_continues_only_as_the_group_that_wrote_it(tmp_path: Path) -> None:
    config = StoreConfig(segment_size=1 << 20)
    check_store_group(tmp_path / "none", BrokerGroup(1, 2))               # no store: anything goes
    with CommitLogWriter(tmp_path / "g", config, broker_group="0/2"):
        pass
    check_store_group(tmp_path / "g", BrokerGroup(1, 2))                  # nothing committed: anything goes
    with CommitLogWriter(tmp_path / "g", config, broker_group="0/2") as w:
        w.write_batch(0, "q", collected(0))
    check_store_group(tmp_path / "g", BrokerGroup(0, 2))
    with pytest.raises(BrokerGroupError, match=r"--broker-group 1/2: the store .* holds broker group 0/2 .* "
                                               r"Give --broker-group 0/2, or another store"):
        check_store_group(tmp_path / "g", BrokerGroup(1, 2))
    with pytest.raises(BrokerGroupError, match=r"--broker-group \(none\): .* Give --broker-group 0/2"):
        check_store_group(tmp_path / "g", None)
    with CommitLogWriter(tmp_path / "all", config) as w:
        w.write_batch(0, "q", collected(0))
    with pytest.raises(BrokerGroupError, match=r"holds every partition \(no broker group\).* Give no --broker-group"):
        check_store_group(tmp_path / "all", BrokerGroup(0, 2))
