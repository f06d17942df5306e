"""The consume queue writes RocketMQ's consumequeue files byte for byte and reads them back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from store.errors import ConsumeQueueGapError, InvalidTopicError
from store.queue.consume_queue import ConsumeQueueStore, check_topic_name
from store.queue.units import read_units
from tests.helpers.stores import golden_stores

pytestmark = pytest.mark.unit

BLANK = (0, 2147483647, 0)


def dispatch_list(cq: ConsumeQueueStore, rows: list[tuple[str, int, int, int, int, int]], **kw: object) -> None:
    """rows: (topic, queue_id, queue_offset, phys, size, tags)."""
    names = sorted({r[0] for r in rows})
    cq.dispatch(names, np.array([names.index(r[0]) for r in rows]), np.array([r[1] for r in rows]),
                np.array([r[2] for r in rows]), np.array([r[3] for r in rows]),
                np.array([r[4] for r in rows]), np.array([r[5] for r in rows]), **kw)


def files_of(root: Path) -> dict[str, bytes]:
    base = root / "consumequeue"
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def test_dispatch_of_the_golden_records_gives_the_golden_files(golden_dir: Path, tmp_path: Path) -> None:
    for store in golden_stores(golden_dir):
        manifest = json.loads((store / "manifest.json").read_text())
        decoded = [json.loads(line) for line in (golden_dir / f"{store.name}.decoded.jsonl").open()]
        rows = [(d["topic"], d["queueId"], d["queueOffset"], d["offset"], d["totalSize"], d["check"]["tagsCode"])
                for d in decoded if d["type"] == "message" and (d["sysFlag"] & 0xC) in (0, 8)]
        out = tmp_path / store.name
        cq = ConsumeQueueStore(out, units_per_file=manifest["consumeQueueFileSize"] // 20)
        cq.load()
        # In two halves: units of one queue arrive across dispatch calls as in a running store.
        dispatch_list(cq, rows[: len(rows) // 2])
        dispatch_list(cq, rows[len(rows) // 2:])
        cq.close()
        assert files_of(out) == files_of(store)


def test_units_read_back_as_the_manifest_lists_them(golden_dir: Path) -> None:
    for store in golden_stores(golden_dir):
        manifest = json.loads((store / "manifest.json").read_text())
        cq = ConsumeQueueStore(store, read_only=True)
        for q in manifest["consumeQueues"]:
            _, topic, qid = q["dir"].split("/")
            units = [e for e in q["entries"] if e["kind"] == "unit"]
            got = cq.find(topic, int(qid), 0, 1000)
            assert got == [(e["commitLogOffset"], e["size"], e["tagsCode"]) for e in units]
            assert cq.queue_range(topic, int(qid)) == (units[0]["cqOffset"], units[-1]["cqOffset"] + 1)
        expected_topics: dict[str, list[int]] = {}
        for q in manifest["consumeQueues"]:
            _, topic, qid = q["dir"].split("/")
            expected_topics.setdefault(topic, []).append(int(qid))
        assert cq.topics() == {t: sorted(v) for t, v in expected_topics.items()}


def test_a_queue_starting_past_zero_is_prefilled_with_blank_units(tmp_path: Path) -> None:
    cq = ConsumeQueueStore(tmp_path, units_per_file=10)
    dispatch_list(cq, [("T", 0, 13, 1000, 100, 7), ("T", 0, 14, 1100, 100, 8)])
    cq.flush()
    path = tmp_path / "consumequeue" / "T" / "0" / "00000000000000000200"
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    assert path.stat().st_size == 200
    units = read_units(path).tolist()
    assert units[:3] == [BLANK] * 3
    assert units[3:5] == [(1000, 100, 7), (1100, 100, 8)]
    assert units[5:] == [(0, 0, 0)] * 5
    assert cq.queue_range("T", 0) == (13, 15)
    assert cq.find("T", 0, 0, 10) == [(1000, 100, 7), (1100, 100, 8)]
    cq.close()
    reopened = ConsumeQueueStore(tmp_path, units_per_file=10)
    reopened.load()
    assert reopened.queue_range("T", 0) == (13, 15)
    assert reopened.next_queue_offsets() == {("T", 0): 15}


def test_schedule_topic_units_carry_the_deliver_time(tmp_path: Path) -> None:
    cq = ConsumeQueueStore(tmp_path)
    sched = "SCHEDULE_TOPIC_XXXX"
    rows = [(sched, 2, 0, 0, 216, 111), (sched, 2, 1, 216, 216, 222), (sched, 2, 2, 432, 216, 333),
            ("Other", 0, 0, 648, 216, 444)]
    dispatch_list(cq, rows, delay_levels=np.array([3, 99, 0, 3]),
                  store_timestamp=np.array([1700000000042, 1000, 5, 7]))
    # level 3 = 10s; level 99 is capped to the highest (18 = 2h); level 0 keeps the tags hash;
    # another topic keeps its tags hash whatever its delay level.
    assert cq.find(sched, 2, 0, 10) == [(0, 216, 1700000010042), (216, 216, 1000 + 7_200_000), (432, 216, 333)]
    assert cq.find("Other", 0, 0, 10) == [(648, 216, 444)]
    with pytest.raises(ValueError, match="store_timestamp"):
        dispatch_list(cq, [(sched, 2, 3, 648, 216, 1)], delay_levels=np.array([1]))


def test_units_of_interleaved_queues_go_to_their_own_files_across_file_ends(tmp_path: Path) -> None:
    cq = ConsumeQueueStore(tmp_path, units_per_file=4)
    rows = []
    for i in range(30):
        rows.append(("A" if i % 3 else "B", i % 2, 0, i * 100, 100, i))
    counters: dict[tuple[str, int], int] = {}
    for i, r in enumerate(rows):
        k = (r[0], r[1])
        rows[i] = (r[0], r[1], counters.get(k, 0), *r[3:])
        counters[k] = counters.get(k, 0) + 1
    dispatch_list(cq, rows[:11])
    dispatch_list(cq, rows[11:])
    assert cq.next_queue_offsets() == counters
    for (t, q), n in counters.items():
        expected = [(r[3], r[4], r[5]) for r in rows if (r[0], r[1]) == (t, q)]
        assert cq.find(t, q, 0, 100) == expected
        assert cq.find(t, q, 3, 2) == expected[3:5]
        assert len(cq.queue_files(t, q)) == -(-n // 4)
    assert cq.topics() == {"A": [0, 1], "B": [0, 1]}


def test_filled_files_stay_open_until_the_flush_makes_them_durable_then_close(tmp_path: Path) -> None:
    import os

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    cq = ConsumeQueueStore(tmp_path, units_per_file=4)
    dispatch_list(cq, [("T", 0, i, i * 100, 100, 0) for i in range(10)])    # fills 2 files, opens a 3rd
    held = 1 if cq._sync.syncs_filesystem else 0                            # the directory syncfs is called on
    assert open_fds() == before + 3 + held
    cq.flush()
    assert open_fds() == before + 1 + held                                  # only the file being written
    assert [u[0] for u in cq.find("T", 0, 0, 10)] == [i * 100 for i in range(10)]
    cq.close()
    assert open_fds() == before


def test_dispatch_twice_writes_once_and_a_hole_is_refused(tmp_path: Path) -> None:
    cq = ConsumeQueueStore(tmp_path, units_per_file=10)
    dispatch_list(cq, [("T", 0, 0, 0, 100, 1), ("T", 0, 1, 100, 100, 2)])
    dispatch_list(cq, [("T", 0, 1, 100, 100, 2), ("T", 0, 2, 200, 100, 3)])
    assert cq.find("T", 0, 0, 10) == [(0, 100, 1), (100, 100, 2), (200, 100, 3)]
    with pytest.raises(ConsumeQueueGapError, match="next queue offset is 3"):
        dispatch_list(cq, [("T", 0, 5, 500, 100, 4)])
    # a hole in one queue refuses the whole batch: the other queue gets nothing either
    with pytest.raises(ConsumeQueueGapError, match="nothing was written"):
        dispatch_list(cq, [("A", 0, 0, 600, 100, 5), ("T", 0, 7, 700, 100, 6)])
    assert cq.next_queue_offsets() == {("T", 0): 3}
    with pytest.raises(ConsumeQueueGapError, match="not consecutive"):
        dispatch_list(cq, [("T", 0, 3, 300, 100, 5), ("T", 0, 5, 500, 100, 6)])
    assert cq.find("T", 0, 3, 10) == []


def test_truncate_dirty_drops_units_at_or_past_the_end(tmp_path: Path) -> None:
    cq = ConsumeQueueStore(tmp_path, units_per_file=4)
    dispatch_list(cq, [("T", 0, i, i * 100, 100, i) for i in range(10)])
    dispatch_list(cq, [("U", 0, 6, 1000, 100, 6)])          # only blanks below the end
    dispatch_list(cq, [("V", 0, 0, 1100, 100, 6)])          # wholly past the end
    cq.flush()
    cq.truncate_dirty(550)
    assert cq.next_queue_offsets() == {("T", 0): 6, ("U", 0): 6}
    assert [p.name for p in cq.queue_files("T", 0)] == ["00000000000000000000", "00000000000000000080"]
    assert read_units(cq.queue_files("T", 0)[-1]).tolist() == [(400, 100, 4), (500, 100, 5), (0, 0, 0), (0, 0, 0)]
    assert not (tmp_path / "consumequeue" / "V").exists()
    # Writing goes on where the kept units end, and a reopen sees the same.
    dispatch_list(cq, [("T", 0, 6, 550, 100, 60)])
    cq.close()
    again = ConsumeQueueStore(tmp_path, units_per_file=4)
    again.load()
    assert again.next_queue_offsets() == {("T", 0): 7, ("U", 0): 6}
    assert again.find("T", 0, 5, 5) == [(500, 100, 5), (550, 100, 60)]


def test_delete_below_removes_whole_files_before_the_first_offset_never_the_last(tmp_path: Path) -> None:
    cq = ConsumeQueueStore(tmp_path, units_per_file=4)
    dispatch_list(cq, [("T", 0, i, i * 100, 100, i) for i in range(10)])
    dispatch_list(cq, [("S", 1, i, 5000 + i, 1, i) for i in range(3)])
    deleted = cq.delete_below(450)
    assert [p.name for p in deleted] == ["00000000000000000000"]
    assert cq.queue_range("T", 0) == (5, 10)
    assert cq.queue_range("S", 1) == (0, 3)
    deleted = cq.delete_below(10**9)
    assert [p.name for p in deleted] == ["00000000000000000080"]
    assert [p.name for p in cq.queue_files("T", 0)] == ["00000000000000000160"]
    assert cq.queue_range("T", 0) == (10, 10)


def test_a_reader_sees_the_writer_s_units_as_they_are_dispatched(tmp_path: Path) -> None:
    writer = ConsumeQueueStore(tmp_path, units_per_file=4)
    dispatch_list(writer, [("T", 0, 0, 0, 100, 1)])
    reader = ConsumeQueueStore(tmp_path, read_only=True)
    assert reader.queue_range("T", 0) == (0, 1)
    dispatch_list(writer, [("T", 0, i, i * 100, 100, 1) for i in range(1, 6)])
    dispatch_list(writer, [("N", 3, 0, 600, 100, 1)])
    assert reader.queue_range("T", 0) == (0, 6)
    assert len(reader.find("T", 0, 0, 100)) == 6
    assert reader.topics() == {"N": [3], "T": [0]}
    with pytest.raises(Exception, match="read-only"):
        dispatch_list(reader, [("T", 0, 6, 600, 100, 1)])


@pytest.mark.parametrize("topic", ["", ".", "..", "../evil", "a/b", "/abs", "nul\x00", "x" * 256, "é" * 128])
def test_a_topic_that_is_no_plain_file_name_is_refused_with_nothing_written(tmp_path: Path, topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        check_topic_name(topic)
    cq = ConsumeQueueStore(tmp_path / "store")
    with pytest.raises(InvalidTopicError):
        dispatch_list(cq, [("Good", 0, 0, 0, 100, 1), (topic, 0, 0, 100, 100, 1)])
    cq.close()
    assert sorted(p.name for p in tmp_path.rglob("*")) == []


@pytest.mark.parametrize("topic", ["TopicA", "%RETRY%group", "x" * 255, "a.b", "...", "é" * 127])
def test_ordinary_topics_pass(topic: str) -> None:
    check_topic_name(topic)


def test_redispatch_from_the_golden_commit_log_rebuilds_the_golden_files(golden_dir: Path, tmp_path: Path) -> None:
    from store.read.view import open_view
    from store.queue.redispatch import redispatch
    from store.tools.dump import walk

    for store in golden_stores(golden_dir):
        manifest = json.loads((store / "manifest.json").read_text())
        out = tmp_path / store.name
        cq = ConsumeQueueStore(out, units_per_file=manifest["consumeQueueFileSize"] // 20)
        cq.load()
        records = [(f.offset, f.decoded) for f in walk(open_view(store)) if f.type == "message"]
        n_units = sum(e["kind"] == "unit" for q in manifest["consumeQueues"] for e in q["entries"])
        assert redispatch(cq, iter(records[:7])) + redispatch(cq, iter(records)) == n_units
        assert redispatch(cq, iter(records)) == 0          # nothing missing any more
        cq.close()
        assert files_of(out) == files_of(store)


def test_redispatch_gives_schedule_records_their_deliver_time(golden_dir: Path, tmp_path: Path) -> None:
    from store.read.view import open_view
    from store.queue.redispatch import redispatch
    from store.tools.dump import walk

    case = golden_dir / "p22_schedule_topic_delay"
    manifest = json.loads(case.with_suffix(".manifest.json").read_text())
    records = [(f.offset, f.decoded) for f in walk(open_view(case.with_suffix(".bin"))) if f.type == "message"]
    cq = ConsumeQueueStore(tmp_path)
    assert redispatch(cq, iter(records)) == len(manifest["messages"])
    for m in manifest["messages"]:
        check = m["fields"]["check"]
        units = cq.find(check["topic"], check["queueId"], check["consumeQueueOffset"], 1)
        assert units == [(check["commitLogOffset"], check["msgSize"], check["tagsCode"])]


@pytest.mark.parametrize("topic", ["../escape", "..", "a/b", "x" * 256])
def test_the_store_refuses_a_path_escaping_topic_before_writing_anything(tmp_path: Path, topic: str) -> None:
    from store import MessageStore
    from store.config import StoreConfig
    from store.format.codec import Message

    root = tmp_path / "store"
    with MessageStore.open(root, StoreConfig(segment_size=64 * 1024, consume_queue_units=10)) as store:
        store.append([Message(topic="Good", body=b"kept")])
        store.commit()
        end = store.max_offset
        with pytest.raises(InvalidTopicError):
            store.append([Message(topic="Good", body=b"not kept"), Message(topic=topic, body=b"evil")])
        assert store.max_offset == end
        assert store.next_queue_offsets() == {("Good", 0): 1}
    assert sorted(p.name for p in (root / "consumequeue").iterdir()) == ["Good"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_a_reader_skips_units_whose_records_retention_deleted(tmp_path: Path) -> None:
    writer = ConsumeQueueStore(tmp_path, units_per_file=4)
    dispatch_list(writer, [("T", 0, i, i * 100, 100, i) for i in range(10)])
    dispatch_list(writer, [("B", 0, 2, 50, 100, 0)])        # blanks, then one unit
    reader = ConsumeQueueStore(tmp_path, read_only=True)
    assert reader.queue_range("T", 0) == (0, 10)
    assert reader.queue_range("B", 0) == (2, 3)
    reader.commitlog_min_offset = 250
    assert reader.queue_range("T", 0) == (3, 10)
    assert reader.find("T", 0, 0, 2) == [(300, 100, 3), (400, 100, 4)]
    assert reader.queue_range("B", 0) == (3, 3)
    writer.delete_below(250)
    assert reader.queue_range("T", 0) == writer.queue_range("T", 0) == (3, 10)
