"""Taking turns with another writer: records a RocketMQ broker appended past our commit point are kept
(adopted) by our next open, never cut as if they were an unfinished batch of ours; our own unfinished
batch is still cut; a tail mixing the two is refused with nothing changed.

The other writer here is a MessageStore that announces nothing (as a broker announces nothing in our
append.intent) and closes without a commit point, as a broker leaves a store: its records, consume-queue
units and index items past our commit point. tests/e2e/brokers/test_broker_turns.py does it with real brokers."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from store import ForeignTailError, Message, MessageStore, StoreConfig, StoreLockedError, StoreReader
from store.format.batch_codec import encode_messages
from store.format.codec import CodecConfig
from store.log.append_intent import AppendIntentLog, read_append_intent
from store.read.view import open_view
from store.tools.verify import verify_source

pytestmark = pytest.mark.unit

SEG = 64 * 1024


def config(**kw) -> StoreConfig:
    return StoreConfig(segment_size=SEG, preallocate=False, **kw)


def msgs(topic: str, n: int, start: int = 0, queues: int = 2) -> list[Message]:
    return [Message(topic=topic, queue_id=i % queues, body=f"{topic}-{i}".encode() * 10,
                    properties=f"KEYS\x01k-{topic}-{i}\x02") for i in range(start, start + n)]


def later_than_now(ms: int = 5_000) -> int:
    """A store timestamp after anything our writer stamped: the other writer runs after ours."""
    return time.time_ns() // 1_000_000 + ms


def other_writer_appends(root: Path, messages: list[Message], monkeypatch: pytest.MonkeyPatch) -> int:
    """What a broker serving the store leaves: records (with their units and index items) past the
    commit point, no commit point of its own, the intent file as ours left it. Returns its end."""
    ours = (root / "commitpoint.json").read_bytes()
    with monkeypatch.context() as m:
        m.setattr(AppendIntentLog, "cover", lambda self, c, ts: None)
        m.setattr(AppendIntentLog, "clear", lambda self: None)
        s = MessageStore.open(root, config(foreign_tail="keep-all"))
        out = s.append_encoded(encode_messages(messages, CodecConfig()), store_timestamp=later_than_now())
        s.close()           # flushed, ``abort`` removed
    (root / "commitpoint.json").write_bytes(ours)      # a broker knows nothing of it
    return out.end_offset


def committed(root: Path, n: int = 50, topic: str = "A") -> MessageStore:
    s = MessageStore.open(root, config())
    s.append(msgs(topic, n))
    s.commit(metadata={"kafka": {"t-0": n}})
    return s


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted((root / "commitlog").iterdir()):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def test_records_another_writer_appended_are_adopted_and_queue_offsets_go_on_after_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    committed(root).close()
    theirs = msgs("A", 20, start=50) + msgs("%RETRY%group-1", 7, queues=1)
    end = other_writer_appends(root, theirs, monkeypatch)

    s = MessageStore.open(root, config())
    assert s.committed_offset == end
    assert s.last_commit.metadata == {"kafka": {"t-0": 50}}         # our source's progress is unchanged
    assert s.open_report.adopted_bytes > 0
    nxt = s.next_queue_offsets()
    assert nxt[("A", 0)] == 35 and nxt[("A", 1)] == 35 and nxt[("%RETRY%group-1", 0)] == 7
    r = s.append(msgs("A", 2, start=70))
    assert r.queue_offsets.tolist() == [35, 35]
    s.commit()
    s.close()

    with StoreReader.open(root) as rd:
        bodies = [m.body.tobytes() for _, m in rd.iter_messages()]
        assert len(bodies) == 50 + 27 + 2
        assert [m.queue_offset for m in rd.get_by_queue("A", 0, 4, 32)] == list(range(4, 36))
        assert [m.body.tobytes() for _, m in rd.messages_by_key("%RETRY%group-1", "k-%RETRY%group-1-3")] \
            == [b"%RETRY%group-1-3" * 10]
    assert verify_source(open_view(root)).problems == []


def test_an_unfinished_batch_of_ours_is_still_cut(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s = committed(root)
    s.append(msgs("A", 30, start=50))
    s.abandon()                             # killed before its commit
    s = MessageStore.open(root, config())
    assert s.open_report.dropped_bytes > 0 and s.open_report.adopted_bytes == 0
    assert s.next_queue_offsets()[("A", 0)] == 25
    s.close()
    with StoreReader.open(root) as rd:
        assert sum(1 for _ in rd.iter_messages()) == 50


def test_a_store_from_before_the_intent_file_closed_cleanly_adopts_what_a_broker_appended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    committed(root).close()
    end = other_writer_appends(root, msgs("A", 20, start=50), monkeypatch)
    (root / "append.intent").unlink()         # v0.3.0 and earlier wrote none; no abort: closed cleanly
    s = MessageStore.open(root, config())
    assert s.committed_offset == end and s.open_report.adopted_bytes > 0
    s.close()


def test_a_store_from_before_the_intent_file_left_by_a_crash_cuts_its_unfinished_batch(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s = committed(root)
    s.append(msgs("A", 30, start=50))
    s.abandon()                               # killed before its commit: ``abort`` stays
    (root / "append.intent").unlink()
    s = MessageStore.open(root, config())
    assert s.open_report.dropped_bytes > 0 and s.open_report.adopted_bytes == 0
    s.close()
    with StoreReader.open(root) as rd:
        assert sum(1 for _ in rd.iter_messages()) == 50


def test_an_unfinished_batch_of_ours_that_rolled_into_new_segments_is_cut(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s = committed(root)
    s.append([Message(topic="A", body=bytes(3000), queue_id=0) for _ in range(60)])   # ~3 segments
    s.close()                               # closed without its commit: the batch is not committed
    s = MessageStore.open(root, config())
    assert s.committed_offset < SEG and s.open_report.adopted_bytes == 0
    s.close()
    assert len(list((root / "commitlog").iterdir())) == 1


def test_a_tail_across_segments_is_adopted_whole_and_a_torn_last_record_is_cut(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    committed(root).close()
    theirs = [Message(topic="rmq_sys_REVIVE_LOG_DefaultCluster", body=bytes(2500), queue_id=0) for _ in range(80)]
    end = other_writer_appends(root, theirs, monkeypatch)
    assert end > 2 * SEG
    last = root / "commitlog" / str(end - end % SEG).zfill(20)
    with open(last, "r+b") as f:                      # a record half written when the broker was killed
        f.seek(end % SEG)
        f.write((300).to_bytes(4, "big") + bytes.fromhex("daa320a7") + b"\x01" * 40)
    s = MessageStore.open(root, config())
    assert s.committed_offset == end
    s.close()
    with StoreReader.open(root) as rd:
        assert sum(1 for _, m in rd.iter_messages() if m.topic.startswith("rmq_sys")) == 80
    assert verify_source(open_view(root)).problems == []


def test_a_foreign_tail_after_an_unfinished_batch_of_ours_is_refused_with_nothing_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    s = committed(root)
    s.append(msgs("A", 30, start=50))
    s.abandon()
    # a broker started on the crashed store keeps our unfinished records and appends after them (the
    # intent file blanked, not removed, while it writes: a store without one is taken as one committed
    # before the file existed, all of whose tail is ours)
    intent = (root / "append.intent").read_bytes()
    (root / "append.intent").write_bytes(bytes(len(intent)))
    other_writer_appends(root, msgs("B", 10), monkeypatch)
    (root / "append.intent").write_bytes(intent)
    before = digest(root)
    with pytest.raises(ForeignTailError) as e:
        MessageStore.open(root, config())
    text = str(e.value)
    assert "30 records" in text and "B (10)" in text and "--foreign-tail keep-all" in text and "\n" not in text
    assert digest(root) == before

    s = MessageStore.open(root, config(foreign_tail="keep-all"))
    assert s.next_queue_offsets()[("A", 0)] == 40 and s.next_queue_offsets()[("B", 0)] == 5
    s.close()


def test_the_refuse_policy_refuses_a_foreign_tail_and_names_the_option_that_adopts_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    committed(root).close()
    other_writer_appends(root, msgs("B", 4), monkeypatch)
    before = digest(root)
    with pytest.raises(ForeignTailError, match=r"--foreign-tail adopt .*default"):
        MessageStore.open(root, config(foreign_tail="refuse"))
    assert digest(root) == before
    assert MessageStore.open(root, config()).next_queue_offsets()[("B", 1)] == 2


def test_a_crash_after_a_broker_turn_keeps_the_broker_records_and_cuts_only_ours(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    committed(root).close()
    other_writer_appends(root, msgs("B", 6), monkeypatch)
    s = MessageStore.open(root, config())       # adopts B
    adopted_end = s.committed_offset
    s.append(msgs("A", 10, start=50))
    s.abandon()
    s = MessageStore.open(root, config())
    assert s.committed_offset == adopted_end
    s.close()


def test_a_commit_of_part_of_what_was_appended_keeps_the_rest_ours(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s = MessageStore.open(root, config())
    a = s.append(msgs("A", 10))
    s.append(msgs("A", 10, start=10))
    s.commit(int(a.end_offset))
    s.abandon()
    s = MessageStore.open(root, config())
    assert s.committed_offset == a.end_offset and s.open_report.adopted_bytes == 0
    s.close()


def test_records_an_append_left_past_a_commit_that_raced_it_stay_ours(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s = committed(root)
    s.append(msgs("A", 5, start=50))
    # a commit that read the write end before the next append landed: its point leaves that append's
    # records past it, though the append announced itself after the point before
    point = s.max_offset
    s.append(msgs("A", 5, start=55))
    s.commit(point)
    s.abandon()
    s = MessageStore.open(root, config())
    assert s.committed_offset == point and s.open_report.adopted_bytes == 0
    s.close()


def test_after_a_clean_close_nothing_past_the_commit_point_is_ours(tmp_path: Path) -> None:
    root = tmp_path / "s"
    committed(root).close()
    assert not read_append_intent(root).active


def test_the_intent_survives_a_torn_write_of_its_newest_slot(tmp_path: Path) -> None:
    log = AppendIntentLog(tmp_path)
    log.cover(100, 5_000)
    log.cover(100, 5_007)                   # slot 0 now; slot 1 holds the first
    assert read_append_intent(tmp_path).last_ts == 5_007
    with open(tmp_path / "append.intent", "r+b") as f:
        f.seek(20)
        f.write(b"\xff\xff")                # torn: its CRC fails
    older = read_append_intent(tmp_path)
    assert (older.from_offset, older.first_ts, older.last_ts) == (100, 5_000, 5_000)
    log.close()


def test_a_rocketmq_broker_holding_the_lock_file_keeps_our_writer_out(tmp_path: Path) -> None:
    root = tmp_path / "s"
    root.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         f"fd = os.open({str(root / 'lock')!r}, os.O_RDWR | os.O_CREAT)\n"
         "fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0)\nprint('held', flush=True)\ntime.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"     # FileChannel.tryLock(0, 1, false), as a broker
        with pytest.raises(StoreLockedError, match="RocketMQ broker"):
            MessageStore.open(root, config())
    finally:
        holder.kill()
        holder.wait()
    MessageStore.open(root, config()).close()
    assert os.path.exists(root / "lock")
