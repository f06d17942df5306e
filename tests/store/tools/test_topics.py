"""config/topics.json: every topic and queue we commit is in RocketMQ's topic config, merged with
what an operator put there, written before the commit point that needs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from store import MessageStore, StoreConfig
from store.errors import StoreError
from store.format.codec import Message
from store.topics import queue_counts, topics_path

pytestmark = pytest.mark.unit


def commit(root: Path, *msgs: Message) -> None:
    with MessageStore.open(root, StoreConfig(segment_size=1 << 16)) as store:
        store.append(list(msgs))
        store.commit()


def table(root: Path) -> dict:
    return json.loads(topics_path(root).read_text())


def test_each_committed_topic_gets_queues_up_to_its_highest_queue_id(tmp_path: Path) -> None:
    commit(tmp_path, Message("T1", b"a", queue_id=0), Message("T1", b"b", queue_id=3), Message("T2", b"c"))
    cfg = table(tmp_path)
    assert cfg["topicConfigTable"]["T1"] == {"topicName": "T1", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
                                             "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False,
                                             "attributes": {}}
    assert cfg["topicConfigTable"]["T2"]["readQueueNums"] == 1
    assert cfg["dataVersion"]["counter"] == 1 and cfg["dataVersion"]["timestamp"] > 0


def test_an_operator_s_topics_and_settings_are_kept_and_counts_only_grow(tmp_path: Path) -> None:
    topics_path(tmp_path).parent.mkdir(parents=True)
    topics_path(tmp_path).write_text(json.dumps({
        "topicConfigTable": {"T1": {"topicName": "T1", "readQueueNums": 8, "writeQueueNums": 8, "perm": 4,
                                    "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": True},
                             "Ops": {"topicName": "Ops", "readQueueNums": 2, "writeQueueNums": 1, "perm": 6}},
        "dataVersion": {"counter": 41, "timestamp": 1}}))
    commit(tmp_path, Message("T1", b"a", queue_id=2), Message("Ops", b"b", queue_id=1), Message("New", b"c"))
    t = table(tmp_path)["topicConfigTable"]
    assert (t["T1"]["readQueueNums"], t["T1"]["perm"], t["T1"]["order"]) == (8, 4, True)
    assert (t["Ops"]["readQueueNums"], t["Ops"]["writeQueueNums"]) == (2, 2)
    assert t["New"]["writeQueueNums"] == 1
    assert table(tmp_path)["dataVersion"]["counter"] == 42


def test_a_commit_with_no_new_topic_or_queue_leaves_the_file_alone(tmp_path: Path) -> None:
    commit(tmp_path, Message("T1", b"a", queue_id=1))
    before = topics_path(tmp_path).read_text()
    commit(tmp_path, Message("T1", b"b", queue_id=0), Message("T1", b"c", queue_id=1))
    assert topics_path(tmp_path).read_text() == before
    commit(tmp_path, Message("T1", b"d", queue_id=2))
    assert table(tmp_path)["topicConfigTable"]["T1"]["readQueueNums"] == 3


def test_system_topics_are_left_to_the_broker() -> None:
    assert queue_counts([("SCHEDULE_TOPIC_XXXX", 2), ("RMQ_SYS_TRANS_HALF_TOPIC", 0), ("rmq_sys_x", 0),
                         ("%RETRY%g", 0), ("T", 5)]) == {"%RETRY%g": 1, "T": 6}


def test_a_broken_topics_json_stops_the_commit_with_a_reason(tmp_path: Path) -> None:
    topics_path(tmp_path).parent.mkdir(parents=True)
    topics_path(tmp_path).write_text("{not json")
    with pytest.raises(StoreError, match="topics.json is not readable JSON"):
        commit(tmp_path, Message("T1", b"a"))
