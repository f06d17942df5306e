"""bench/store_append.py's peer is RocketMQ's own store; its figures count only if the reopened store
served back what it was given. The check (bench/rocketmq_store.problems) reads what RocketStorePeer
printed: these tests feed it a faithful read-back and damaged ones."""

from __future__ import annotations

import copy
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.unit

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import records  # noqa: E402
import rocketmq_store  # noqa: E402

QUEUES = records.QUEUES


@pytest.fixture(scope="module")
def expected() -> rocketmq_store.Expected:
    first = records.message_table(QUEUES, 16, seed=7)
    data = records.message_table(40, 16, seed=11)
    return rocketmq_store.Expected(first, data)


def read_back(exp: rocketmq_store.Expected, index: bool = True) -> dict[str, Any]:
    """What a store that kept everything prints: every queue's offsets, every message sampled, the
    index finding each by its KEYS and its UNIQ_KEY."""
    samples = []
    for q in range(QUEUES):
        for off in range(exp.count(q)):
            m = exp.message(q, off)
            samples.append({"queue": q, "offset": off, "status": "FOUND", "queue_offset": off, **m,
                            "by_keys": [[q, off]] if index else [], "by_uniq_key": [[3, 0], [q, off]] if index else []})
    return {"index": index, "queues": [[0, exp.count(q)] for q in range(QUEUES)], "samples": samples}


def test_a_store_that_kept_everything_passes(expected: rocketmq_store.Expected) -> None:
    assert rocketmq_store.problems(read_back(expected), expected) == []
    assert rocketmq_store.problems(read_back(expected, index=False), expected) == []


def test_the_warm_up_messages_come_first_in_each_queue(expected: rocketmq_store.Expected) -> None:
    # 4 warm-up records (one per queue), then 40 records over 4 queues: 11 per queue
    assert [expected.count(q) for q in range(QUEUES)] == [11, 11, 11, 11]
    body = expected.first.column("body")[2].as_py()
    assert expected.message(2, 0)["body_crc32"] == zlib.crc32(body)
    second = expected.data.column("body")[2].as_py()     # record 2 of the data is queue 2's first
    assert expected.message(2, 1)["body_crc32"] == zlib.crc32(second)


def test_a_lost_message_is_reported(expected: rocketmq_store.Expected) -> None:
    run = read_back(expected)
    run["queues"][1] = [0, expected.count(1) - 1]
    assert rocketmq_store.problems(run, expected) == ["queue 1 serves offsets [0, 10), expected [0, 11)"]


def test_a_changed_body_or_key_is_reported(expected: rocketmq_store.Expected) -> None:
    run = read_back(expected)
    run["samples"][5]["body_crc32"] ^= 1
    run["samples"][7]["keys"] = "000000000999"
    found = rocketmq_store.problems(run, expected)
    assert len(found) == 2
    assert "body_crc32" in found[0] and "keys" in found[1]


def test_a_message_not_found_or_misplaced_is_reported(expected: rocketmq_store.Expected) -> None:
    run = read_back(expected)
    run["samples"][0]["status"] = "OFFSET_OVERFLOW_ONE"
    run["samples"][3]["queue_offset"] = 4
    found = rocketmq_store.problems(run, expected)
    assert found[0] == "queue 0 offset 0: OFFSET_OVERFLOW_ONE"
    assert "queue offset 4" in found[1]


def test_the_index_must_find_each_sample_by_both_keys(expected: rocketmq_store.Expected) -> None:
    run = read_back(expected)
    damaged = copy.deepcopy(run)
    damaged["samples"][9]["by_uniq_key"] = [[3, 0]]
    assert len(rocketmq_store.problems(damaged, expected)) == 1
    run["index"] = False          # with the index off nothing is asked of it
    run["samples"][9]["by_keys"] = []
    assert rocketmq_store.problems(run, expected) == []


def test_a_store_never_read_back_is_reported(expected: rocketmq_store.Expected) -> None:
    assert rocketmq_store.problems({"index": True}, expected) == ["the store was not read back"]
