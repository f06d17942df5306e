"""The compaction log a store writes for RocketMQ 5's compaction topics (store/compaction), read back
by the oracle (tests/oracles/compaction_log.py, the broker's reading): each record of the topic with
KEYS, its bytes as the commit log holds them but for PHYSICALOFFSET, its unit's tagsCode and store
time the consume queue's and the record's; the files rolled as the broker rolls them; what a crash
leaves kept to the commit point and the rest appended again; a topic made a compaction topic later
given its whole log."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from store import CompactionConfig, Message, MessageStore, StoreConfig
from store.topics import merge_topics, read_topics
from tests.oracles.compaction_log import read_queue

pytestmark = pytest.mark.unit

SEG = 1 << 20
SMALL = dict(mapped_file_size=5 * 46 * 20, cq_mapped_file_size=46 * 20)      # 19 records a file at most


def config(*topics: str, **sizes: int) -> StoreConfig:
    return StoreConfig(segment_size=SEG, compaction=CompactionConfig(frozenset(topics), **(sizes or SMALL)))


def messages(n: int, start: int = 0, body: int = 20) -> list[Message]:
    out = []
    for i in range(start, start + n):
        keys = "" if i % 11 == 5 else f"KEYS\x01k{i % 13}\x02"           # some without KEYS
        out.append(Message(topic="table" if i % 4 else "plain", queue_id=i % 2, body=b"x" * (body + i % 7),
                           properties=f"{keys}TAGS\x01t{i % 3}\x02"))
    return out


def commit_log_record(root: Path, phys: int, size: int) -> bytes:
    base = phys - phys % SEG
    with open(root / "commitlog" / str(base).zfill(20), "rb") as f:
        f.seek(phys - base)
        return f.read(size)


def expected(store: MessageStore, topic: str, queue_id: int) -> list[tuple[int, bytes, int, int]]:
    """(queue offset, record bytes, tagsCode, store time) of the queue's records with KEYS, from the
    consume queue and the commit log."""
    low, high = store.queue_range(topic, queue_id)
    out = []
    for first in range(low, high, 32):
        msgs = store.get_by_queue(topic, queue_id, first, 32)
        units = store._cq.find(topic, queue_id, first, 32)
        for qoff, msg, (phys, size, tags) in zip(range(first, high), msgs, units):
            if msg.keys:
                out.append((qoff, commit_log_record(store.root, phys, size), tags, msg.store_timestamp))
    return out


def held(root: Path, topic: str, queue_id: int) -> list[tuple[int, bytes, int, int]]:
    """The same, as the oracle reads the compaction log (PHYSICALOFFSET put back to the commit log's)."""
    out = []
    for r in read_queue(root, topic, queue_id):
        out.append((r.queue_offset, r.record, r.tags_code, r.store_time))
    return out


def assert_level(store: MessageStore, topic: str = "table") -> None:
    for queue_id in (0, 1):
        want, got = expected(store, topic, queue_id), held(store.root, topic, queue_id)
        assert [w[0] for w in want] == [g[0] for g in got]
        for (_, rec, tags, ts), (_, crec, ctags, cts) in zip(want, got):
            assert crec[:28] == rec[:28] and crec[36:] == rec[36:]      # all but PHYSICALOFFSET
            assert (ctags, cts) == (tags, ts)


def test_every_keyed_record_of_a_compaction_topic_and_none_of_another(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, config("table")) as store:
        for k in range(5):
            store.append(messages(60, 60 * k))
            store.commit()
        assert_level(store)
        assert len(list((tmp_path / "compaction" / "compactionLog" / "table" / "0").iterdir())) > 2   # rolled
    assert not (tmp_path / "compaction" / "compactionLog" / "plain").exists()
    table = read_topics(tmp_path)["topicConfigTable"]
    assert table["table"]["attributes"] == {"cleanup.policy": "COMPACTION"} and table["plain"]["attributes"] == {}
    with MessageStore.open(tmp_path, config("table")) as store:    # reopened: nothing twice
        store.append(messages(30, 300))
        store.commit()
        assert_level(store)


def test_a_record_that_does_not_fit_the_log_file_closes_it_before_the_queue_file_is_full(tmp_path: Path) -> None:
    sizes = dict(mapped_file_size=5 * 46 * 40, cq_mapped_file_size=46 * 40)     # 9,200-byte log files
    with MessageStore.open(tmp_path, config("table", **sizes)) as store:
        store.append(messages(80, body=1500))
        store.commit()
        assert_level(store)
        units = [len(read_queue(tmp_path, "table", 0))]
    names = sorted(p.name for p in (tmp_path / "compaction" / "compactionCq" / "table" / "0").iterdir())
    assert len(names) > 3 and units[0] > 0            # each log file took 5 or 6 records, far from 39


def test_the_files_are_the_sizes_the_broker_makes_of_its_settings() -> None:
    assert (CompactionConfig().log_file_size, CompactionConfig().cq_file_size) == (104_857_460, 10_485_746)   # the defaults
    assert CompactionConfig(mapped_file_size=23_000, cq_mapped_file_size=4_600).log_file_size == 27_600
    assert CompactionConfig(mapped_file_size=23_100, cq_mapped_file_size=4_600).log_file_size == 23_000
    assert CompactionConfig(mapped_file_size=1_000, cq_mapped_file_size=4_600).log_file_size == 23_000
    with pytest.raises(ValueError, match="compactionCqMappedFileSize"):
        CompactionConfig(cq_mapped_file_size=50)


def test_a_topic_made_a_compaction_topic_later_gets_its_whole_log(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, StoreConfig(segment_size=SEG)) as store:
        store.append(messages(200))
        store.commit()
    with MessageStore.open(tmp_path, config("table")) as store:
        assert_level(store)
        store.append(messages(20, 200))
        store.commit()
    # an operator's mark (mqadmin updateTopic on a broker) counts as ours: the log is kept up
    merge_topics(tmp_path, {"plain": 2}, compaction=["plain"])
    with MessageStore.open(tmp_path, config("table")) as store:
        store.append(messages(40, 220))
        store.commit()
        assert_level(store, "plain")
        assert_level(store)


def test_a_torn_last_record_is_cut_and_appended_again_from_the_commit_log(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, config("table")) as store:
        store.append(messages(100))
        store.commit()
    last = read_queue(tmp_path, "table", 1)[-1]
    files = sorted((tmp_path / "compaction" / "compactionLog" / "table" / "1").iterdir())
    with open(files[-1], "r+b") as f:     # the record's last page lost: zeros from its middle on
        f.seek(last.physical_offset - int(files[-1].name) + len(last.record) // 2)
        f.write(bytes(len(last.record)))
    with MessageStore.open(tmp_path, config("table")) as store:
        assert_level(store)


def test_a_compaction_log_with_files_that_do_not_pair_is_refused(tmp_path: Path) -> None:
    from store.compaction.compaction_log import CompactionLogError

    with MessageStore.open(tmp_path, config("table")) as store:
        store.append(messages(200))
        store.commit()
    cq = tmp_path / "compaction" / "compactionCq" / "table" / "0"
    sorted(cq.iterdir())[0].unlink()
    with pytest.raises(CompactionLogError, match="every log file has its queue file"):
        MessageStore.open(tmp_path, config("table"))


# --- killed writers ---------------------------------------------------------------------------

def _writer(root: Path, seed: int) -> None:
    rng = random.Random(seed)
    with MessageStore.open(root, config("table")) as store:
        i = 10_000 * seed
        while True:
            n = rng.randint(1, 80)
            store.append(messages(n, i))
            i += n
            if rng.random() < 0.7:
                store.commit()


@pytest.mark.crash
def test_a_killed_writer_leaves_the_log_level_with_the_commit_point(tmp_path: Path) -> None:
    root = tmp_path / "store"
    for seed in range(1, 6):
        pid = os.fork()
        if pid == 0:                         # the child writes until it is killed
            try:
                _writer(root, seed)
            finally:
                os._exit(1)
        time.sleep(0.3 + 0.1 * seed)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        # recovered in place: the next writer goes on from what this recovery kept
        with MessageStore.open(root, config("table")) as store:
            assert store.queue_range("table", 0)[1] > 0
            assert_level(store)              # the units past the commit point are gone, the rest whole
