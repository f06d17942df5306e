"""`stat`, `dump` and `verify` see the records past a store's commit point (store.read.past_commit).

A RocketMQ broker serving one of our stores appends past our commit point (its producers'
messages, pop consumption's revive-log messages in system topics) and writes units and index items
for them. Made here without a broker: our writer appends and closes without committing, which
leaves the same bytes (records, consume-queue units, index items) past the commit point. These
stores are read with the tools only (a writer's next open decides what becomes of that data).
"""

from __future__ import annotations

import json
from pathlib import Path

from store import MessageStore
from store.config import StoreConfig
from store.format.codec import Message
from tests.helpers.cli import jsonl, run

CONFIG = StoreConfig(segment_size=64 * 1024, consume_queue_units=50)
REVIVE = "rmq_sys_REVIVE_LOG_DefaultCluster"


def messages(topic: str, n: int, first_key: int = 0) -> list[Message]:
    return [Message(topic=topic, body=bytes([i % 251]) * 300, queue_id=i % 2,
                    properties=f"KEYS\x01k{first_key + i}\x02TAGS\x01t{i % 3}\x02") for i in range(n)]


def broker_appended_store(root: Path) -> int:
    """100 committed messages of "orders", then, past the commit point, 5 more of "orders" and
    300 of a topic the committed part does not hold, over three more segments. Returns the
    commit point."""
    with MessageStore.open(root, CONFIG) as store:
        store.append(messages("orders", 100))
        committed = store.commit().offset
    store = MessageStore.open(root, CONFIG)
    store.append(messages("orders", 5, first_key=100))
    store.append(messages(REVIVE, 300, first_key=1000))
    store.close()           # flushed, units and index items written, not committed
    return committed


def dumped(root: Path) -> list[dict]:
    rc, out, err = run("dump", str(root), "--json")
    assert rc == 0, err
    return jsonl(out)


def tear_last_record(root: Path) -> int:
    """Zero the second half of the last record past the commit point, as a crash mid-write
    leaves it. Returns its offset."""
    last = [o for o in dumped(root) if o["type"] == "message"][-1]
    segment = root / "commitlog" / last["segment"]
    data = bytearray(segment.read_bytes())
    half = last["totalSize"] // 2
    at = last["segmentPos"] + half
    data[at:at + last["totalSize"] - half] = bytes(last["totalSize"] - half)
    segment.write_bytes(bytes(data))
    return last["offset"]


def test_stat_counts_the_records_past_the_commit_point_per_topic(tmp_path: Path) -> None:
    committed = broker_appended_store(tmp_path / "s")
    rc, out, _ = run("stat", str(tmp_path / "s"), "--json")
    st = json.loads(out)
    assert rc == 0 and st["committed_offset"] == committed
    past = st["past_commit"]
    assert past["offset"] == committed and past["messages"] == 305
    assert {t: c["messages"] for t, c in past["topics"].items()} == {"orders": 5, REVIVE: 300}
    assert past["bytes"] == sum(c["bytes"] for c in past["topics"].values()) > 300 * 300
    assert len(past["segments"]) == 3 and past["end"] == st["max_offset"] > committed
    assert sum(s["messages"] for s in st["segments"]) == 405
    rc, text, _ = run("stat", str(tmp_path / "s"))
    assert "past the commit point: 305 messages" in text and REVIVE in text and "RocketMQ broker" in text


def test_dump_shows_and_marks_every_record_past_the_commit_point(tmp_path: Path) -> None:
    committed = broker_appended_store(tmp_path / "s")
    found = dumped(tmp_path / "s")
    shown = [o for o in found if o["type"] == "message"]
    assert len(shown) == 405
    assert all(("pastCommitPoint" in o) == (o["offset"] >= committed) for o in shown)
    past = [o for o in shown if o.get("pastCommitPoint")]
    assert [o["topic"] for o in past] == ["orders"] * 5 + [REVIVE] * 300
    # the queues go on from the committed ones: orders queue 0 held 0..49
    assert [o["queueOffset"] for o in past if o["topic"] == "orders" and o["queueId"] == 0] == [50, 51, 52]
    summary = found[-1]
    assert summary["type"] == "summary" and summary["pastCommitPoint"]["messages"] == 305
    assert summary["rocketmqRecoveryStopsAt"] == summary["pastCommitPoint"]["end"]
    rc, text, _ = run("dump", str(tmp_path / "s"))
    assert rc == 0 and text.count("MESSAGE PAST-COMMIT-POINT") == 305 and text.count("MESSAGE ") == 405
    assert "past the commit point" in text.splitlines()[-1]


def test_verify_checks_the_records_past_the_commit_point_and_tells_them_as_information(tmp_path: Path) -> None:
    committed = broker_appended_store(tmp_path / "s")
    rc, out, _ = run("verify", str(tmp_path / "s"), "--json")
    report = json.loads(out)
    # their units and index items point at valid records: not problems
    assert (rc, report["problems"]) == (0, [])
    assert report["messages"] == 100 and report["committed_offset"] == committed
    assert report["past_commit_messages"] == 305 and report["past_commit_topics"] == {"orders": 5, REVIVE: 300}
    assert report["units_checked"] == 405 and report["index_items_checked"] == 405
    assert report["data_end"] > committed
    rc, text, _ = run("verify", str(tmp_path / "s"))
    assert rc == 0 and ": OK" in text
    assert "note: 305 record(s)" in text and f"orders (5), {REVIVE} (300)" in text
    assert "another writer's appends (a RocketMQ broker) or an unfinished batch" in text


def test_a_wrong_unit_past_the_commit_point_is_still_a_problem(tmp_path: Path) -> None:
    committed = broker_appended_store(tmp_path / "s")
    unit_file = tmp_path / "s" / "consumequeue" / REVIVE / "0" / "0".zfill(20)
    data = bytearray(unit_file.read_bytes())
    data[20:28] = (committed + 1).to_bytes(8, "big")    # queue offset 1's unit, off its record
    unit_file.write_bytes(bytes(data))
    rc, out, _ = run("verify", str(tmp_path / "s"), "--json")
    report = json.loads(out)
    assert rc == 1 and [p["kind"] for p in report["problems"]] == ["consumeQueueUnit"], report["problems"]


def test_a_torn_record_ends_the_records_past_the_commit_point(tmp_path: Path) -> None:
    broker_appended_store(tmp_path / "s")
    torn = tear_last_record(tmp_path / "s")
    rc, out, _ = run("stat", str(tmp_path / "s"), "--json")
    past = json.loads(out)["past_commit"]
    assert past["messages"] == 304 and past["end"] == torn
    assert past["stop"].startswith(f"an invalid record at {torn}")
    found = dumped(tmp_path / "s")      # exit 0: a torn tail is not an error of the store
    assert sum(bool(o.get("pastCommitPoint")) for o in found if o["type"] == "message") == 304
    assert not any(o["type"] == "error" for o in found)
    end = [o for o in found if o["type"] == "end"][-1]
    assert end["offset"] == torn and end["pastCommitPoint"] and "invalid record" in end["stop"]
    # the index item of the torn record points past the valid records: that one is a problem
    rc, out, _ = run("verify", str(tmp_path / "s"), "--json")
    report = json.loads(out)
    assert rc == 1 and report["past_commit_messages"] == 304, report["problems"]
    assert {(p["kind"], p["offset"]) for p in report["problems"]} == {("indexPastCommit", torn)}, \
        report["problems"]


def test_a_store_without_records_past_its_commit_point_reads_as_before(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", CONFIG) as store:
        store.append(messages("orders", 100))
        committed = store.commit().offset
    found = dumped(tmp_path / "s")
    assert not any("pastCommitPoint" in o for o in found)
    assert [o["offset"] for o in found if o["type"] == "end"] == [committed]
    rc, out, _ = run("stat", str(tmp_path / "s"), "--json")
    assert json.loads(out)["past_commit"] is None
    rc, out, _ = run("verify", str(tmp_path / "s"), "--json")
    report = json.loads(out)
    assert (rc, report["problems"], report["notes"]) == (0, [], [])
    assert report["past_commit_messages"] == 0 and report["data_end"] == committed


def test_an_index_item_past_the_commit_point_off_its_record_start_is_still_a_problem(tmp_path: Path) -> None:
    from store.format.constants import INDEX_HASH_SLOT_SIZE, INDEX_HEADER_SIZE, INDEX_ITEM_SIZE
    from store.index.lookup import open_index

    committed = broker_appended_store(tmp_path / "s")
    target = [o for o in dumped(tmp_path / "s") if o["type"] == "message" and o["topic"] == REVIVE][200]["offset"]
    service = open_index(tmp_path / "s")
    assert service is not None
    try:
        f = next(f for f in service.files if (f.items()["phy_offset"] == target).any())
        j = int((f.items()["phy_offset"] == target).nonzero()[0][0])
        path, at = f.path, INDEX_HEADER_SIZE + INDEX_HASH_SLOT_SIZE * f.max_hash_slot_num + INDEX_ITEM_SIZE * j + 4
    finally:
        service.close()
    data = bytearray(path.read_bytes())
    data[at:at + 8] = (target + 4).to_bytes(8, "big")      # inside its record, past the commit point
    path.write_bytes(bytes(data))
    rc, out, _ = run("verify", str(tmp_path / "s"), "--json")
    report = json.loads(out)
    assert target > committed and rc == 1, report["problems"]
    assert {p["kind"] for p in report["problems"]} == {"indexItem"}, report["problems"]   # and the items' order
    assert [p["detail"] for p in report["problems"] if p["offset"] == target + 4] == \
        ["an index item points here, but no message record starts here"], report["problems"]
