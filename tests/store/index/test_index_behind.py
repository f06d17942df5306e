"""The index built behind the append (store.index.writer on its own thread, as RocketMQ's dispatcher
builds it): what a lookup, a commit and a reopen see, a failure on that thread, and the same files
whichever pass (C or numpy) built them."""

from __future__ import annotations

import errno
import os
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from store import MessageStore, StoreConfig, batch_index_keys
from store.errors import FlushError, StoreReadOnlyError
from store.format.batch_codec import encode_messages
from store.format.codec import CodecConfig, Message
from store.index import file as index_file
from store.index import service as index_service
from store.index.file import IndexFile
from store.index.service import IndexConfig, IndexService
from tests.oracles import index_put

pytestmark = pytest.mark.unit
SEG = 1 << 16


def keyed(i: int, topic: str = "T") -> Message:
    return Message(topic, f"body-{i}".encode() * (1 + i % 7), queue_id=i % 3,
                   properties=f"KEYS\x01k{i} shared{i % 5}\x02UNIQ_KEY\x01U{i:08d}\x02")


def batch(first: int, n: int, topic: str = "T"):
    return encode_messages([keyed(i, topic) for i in range(first, first + n)], CodecConfig())


def file_bytes(directory: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted(directory.iterdir())]


def index_bytes(root: Path) -> list[bytes]:
    return file_bytes(root / "index")


def test_a_lookup_right_after_an_append_finds_what_was_appended(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=SEG)) as s:
        for b in range(20):
            res = s.append_encoded(batch(b * 50, 50))
            assert [o for o, _ in s.messages_by_key("T", f"k{b * 50 + 7}")] == [int(res.physical_offsets[7])]


def test_a_commit_leaves_every_committed_key_on_disk_and_a_reopen_keeps_them(tmp_path: Path) -> None:
    root = tmp_path / "s"
    config = StoreConfig(segment_size=SEG, index=IndexConfig(True, 64, 500))
    s = MessageStore.open(root, config)
    for b in range(30):                  # rolls segments and index files
        s.append_encoded(batch(b * 40, 40))
    s.commit()
    committed = index_bytes(root)         # what the commit made durable, read before close
    s.abandon()
    with MessageStore.open(root, config) as s2:
        assert index_bytes(root) == committed
        assert len(committed) > 3
        assert len(s2.messages_by_key("T", "k1199")) == 1


def test_keys_appended_after_the_commit_point_are_gone_after_a_crash(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s = MessageStore.open(root, StoreConfig(segment_size=SEG))
    s.append_encoded(batch(0, 30))
    s.commit()
    s.append_encoded(batch(30, 30))       # indexed behind, never committed
    s.abandon()
    with MessageStore.open(root, StoreConfig(segment_size=SEG)) as s2:
        assert s2.messages_by_key("T", "k29") and not s2.messages_by_key("T", "k30")


def test_keys_of_a_batch_cut_short_by_a_crash_are_gone_though_the_header_does_not_show_them(
        tmp_path: Path) -> None:
    # The index pass counts each item in the header as it puts it and writes the header's other
    # fields (endPhyOffset, endTimestamp) once the batch is in: a kill in between leaves counted
    # items past the commit point that the header's end does not show.
    root = tmp_path / "s"
    config = StoreConfig(segment_size=SEG)
    s = MessageStore.open(root, config)
    s.append_encoded(batch(0, 30))
    point = s.commit()
    path = next((root / "index").iterdir())
    before = path.read_bytes()[:36]
    s.append_encoded(batch(30, 30))
    s.settle_index()
    with open(path, "r+b") as f:          # the batch's items counted, the rest of the header not yet written
        f.write(before)
    s.abandon()
    with MessageStore.open(root, config) as s2:
        assert s2.messages_by_key("T", "k29") and not s2.messages_by_key("T", "k30")
        f = IndexService(root / "index", config.index, read_only=True)
        try:
            (only,) = f.files
            header, phy = only.read_header(), only.items()["phy_offset"].copy()
            assert len(phy) == 30 * 3 and (phy < point.offset).all()
            assert header.end_phy_offset == int(phy.max())
        finally:
            f.close()


def test_a_failure_behind_the_append_makes_the_store_refuse_writes_until_reopened(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "s"
    s = MessageStore.open(root, StoreConfig(segment_size=SEG))
    s.append_encoded(batch(0, 20))
    cp = s.commit()

    def broken(self: IndexService, *args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(IndexService, "put_records", broken)
    s.append_encoded(batch(20, 5))        # in the commit log; its keys fail behind it
    with pytest.raises(FlushError, match="index .* No space left"):
        s.commit()
    with pytest.raises(StoreReadOnlyError, match="reopen"):
        s.append_encoded(batch(25, 1))
    s.close()
    monkeypatch.undo()
    with MessageStore.open(root, StoreConfig(segment_size=SEG)) as s2:
        assert s2.committed_offset == cp.offset
        assert s2.messages_by_key("T", "k19") and not s2.messages_by_key("T", "k20")
        s2.append_encoded(batch(20, 5))
        s2.commit()
        assert len(s2.messages_by_key("T", "k24")) == 1


def test_the_c_pass_and_numpy_build_the_same_index_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two stores fed the same batches at the same store timestamps, one indexed by the numpy oracles
    instead of the C passes: their IndexFiles, rolled over several times, are equal byte for byte."""
    config = StoreConfig(segment_size=SEG, index=IndexConfig(True, 97, 300))
    non_ascii = encode_messages([Message("Tö", b"x", properties="KEYS\x01clé \U0001F600\x02UNIQ_KEY\x01\xe9\x02")],
                                CodecConfig())
    for name, with_c in (("c", True), ("numpy", False)):
        if not with_c:
            monkeypatch.setattr(IndexService, "put_records", index_put.put_records)
            monkeypatch.setattr(IndexFile, "put", index_put.put)
        with MessageStore.open(tmp_path / name, config) as s:
            for b in range(12):
                s.append_encoded(batch(b * 37, 37, topic=f"T{b % 2}"), store_timestamp=1_700_000_000_000 + b * 1500)
                s.append_encoded(non_ascii, store_timestamp=1_700_000_000_000 + b * 1500)
            s.commit()
    c, py = index_bytes(tmp_path / "c"), index_bytes(tmp_path / "numpy")
    assert len(c) == len(py) > 3
    assert c == py
    assert np.frombuffer(c[0][36:40], dtype=">i4")[0] == 300     # a full file: the roll was crossed


def test_a_writer_killed_while_creating_an_index_file_leaves_none_the_next_open_refuses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file gets its name only once it has its size and header: a writer that dies between
    creating it and reserving its blocks (a crash test caught a 0-byte file under the final name,
    which the next run refused) leaves a half-made file the next writer removes."""
    root = tmp_path / "s"
    store = MessageStore.open(root, StoreConfig(segment_size=SEG, index=IndexConfig(max_hash_slot_num=64,
                                                                                    max_index_num=8)))
    store.append_encoded(batch(0, 3))          # 9 keys: a file takes 7
    store.commit()
    size = (root / "index" / sorted(os.listdir(root / "index"))[0]).stat().st_size

    def killed(path: Path, size: int, what: str, named: Path | None = None, reserved: int | None = None) -> int:
        assert named is not None and not named.exists(), "the final name exists before the file is whole"
        path.write_bytes(b"")                  # what a kill before the reservation leaves
        raise OSError("killed")                # and the writer goes no further

    monkeypatch.setattr(index_file, "create_reserved", killed)
    with pytest.raises(OSError, match="killed"):
        store.append_encoded(batch(3, 3))      # fills the file, needs a second one: the writer dies
        store.settle_index()
    monkeypatch.undo()
    store.abandon()                            # as a SIGKILLed writer leaves it
    names = sorted(p.name for p in (root / "index").iterdir())
    assert any(n.endswith(".tmp") for n in names), names
    assert all((root / "index" / n).stat().st_size == size for n in names if n.isdigit()), names

    reopened = MessageStore.open(root, StoreConfig(segment_size=SEG, index=IndexConfig(max_hash_slot_num=64,
                                                                                       max_index_num=8)))
    try:
        assert not any(p.name.endswith(".tmp") for p in (root / "index").iterdir())
        reopened.append_encoded(batch(6, 3))
        reopened.commit()
        for i in (0, 2, 7):
            assert len(reopened.messages_by_key("T", f"k{i}")) == 1, i
    finally:
        reopened.close()


class CountingGate:
    """A writeback gate that counts how often it is taken."""

    def __init__(self) -> None:
        self.holds = 0

    def __enter__(self) -> None:
        self.holds += 1

    def __exit__(self, *exc: object) -> None:
        pass


def test_puts_hold_the_writeback_gate_a_few_thousand_keys_at_a_time(tmp_path: Path) -> None:
    """The commit log's flush takes the gate while it starts writeback (store.log.segment): the
    index must let go of it between short puts, and put the same bytes as without it."""
    gate = CountingGate()
    n = 2 * index_service.GATE_KEYS + 5
    rng = np.random.default_rng(7)
    hashes = rng.integers(-2**31, 2**31 - 1, n, dtype=np.int64).astype(np.int32)
    phy, ts = np.arange(n, dtype=np.int64) * 100, np.full(n, 1_700_000_000_000, dtype=np.int64)
    config = IndexConfig(max_hash_slot_num=1024, max_index_num=4 * n)
    gated = IndexService(tmp_path / "gated", config, gate=gate)
    plain = IndexService(tmp_path / "plain", config)
    for service in (gated, plain):
        service.put_hashes(hashes, phy, ts)
        service.flush()
    assert gate.holds == 3
    assert file_bytes(tmp_path / "gated") == file_bytes(tmp_path / "plain")
    gated.close()
    plain.close()


def test_shipped_keys_hold_the_gate_a_few_thousand_keys_at_a_time_and_split_records_between_holds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = CountingGate()
    monkeypatch.setattr(index_service, "GATE_KEYS", 5)      # 3 keys a record: holds end inside records
    b = batch(0, 40)
    hashes, counts = batch_index_keys(np.asarray(b.data, np.uint8), b.offsets)
    config = IndexConfig(max_hash_slot_num=16, max_index_num=50)       # and fills a file mid-record
    gated = IndexService(tmp_path / "gated", config, gate=gate)
    gated.put_shipped(hashes, counts, np.asarray(b.offsets, np.int64) + 1000, 1_700_000_000_000)
    gated.flush()
    plain = IndexService(tmp_path / "plain", config)
    plain.put_hashes(hashes, np.repeat(np.asarray(b.offsets, np.int64) + 1000, counts),
                     np.full(len(hashes), 1_700_000_000_000, dtype=np.int64))
    plain.flush()
    assert len(hashes) == 120 and gate.holds == 10 + 10 + 5      # files of 49 keys, 49 and 22: 5 a hold
    assert file_bytes(tmp_path / "gated") == file_bytes(tmp_path / "plain")
    gated.close()
    plain.close()


@pytest.mark.parametrize("gate_keys", [4, 1000])
def test_shipped_records_of_any_key_count_put_as_their_keys_one_by_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gate_keys: int) -> None:
    """Records without keys among others, last in a batch too (the file's endPhyOffset is the last
    record that had one), through gate holds and files filling mid-record, or neither."""
    monkeypatch.setattr(index_service, "GATE_KEYS", gate_keys)
    rng = np.random.default_rng(11)
    counts = rng.choice(np.array([0, 0, 1, 2, 3, 5], np.int32), 300)
    counts[-3:] = 0
    hashes = rng.integers(-2**31, 2**31 - 1, int(counts.sum()), dtype=np.int64).astype(np.int32)
    phy = np.arange(len(counts), dtype=np.int64) * 70 + 1000
    config = IndexConfig(max_hash_slot_num=64, max_index_num=2 * gate_keys + 97)
    shipped, plain = IndexService(tmp_path / "shipped", config), IndexService(tmp_path / "plain", config)
    half = len(counts) // 2
    cut = int(counts[:half].sum())      # two batches: the first half's records and keys, then the rest
    shipped.put_shipped(hashes[:cut], counts[:half], phy[:half], 1_700_000_000_000)
    shipped.put_shipped(hashes[cut:], counts[half:], phy[half:], 1_700_000_000_000)
    plain.put_hashes(hashes, np.repeat(phy, counts), np.full(len(hashes), 1_700_000_000_000, dtype=np.int64))
    for service in (shipped, plain):
        service.flush()
    assert file_bytes(tmp_path / "shipped") == file_bytes(tmp_path / "plain")
    shipped.close()
    plain.close()


def test_the_c_put_refuses_key_counts_past_the_keys_it_was_given(tmp_path: Path) -> None:
    f = index_file.IndexFile(tmp_path / "f", 16, 50, create=True, start=index_file.IndexHeader())
    with pytest.raises(ValueError, match="add up to more keys"):
        f.put_shipped(np.array([1, 2, 3], np.int32), np.array([2, 2], np.int32), np.array([0, 90], np.int64),
                      1_700_000_000_000, (0, 0, 0), 100)
    f.close()


def test_the_index_is_put_on_the_commit_log_s_copy_helper_when_it_has_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two cores, two threads: the keys are put between the helper's shares of the copies, not on a
    third thread competing with both."""
    threads: set[str] = set()
    put = IndexService.put_shipped

    def watched(self: IndexService, *args: object) -> int:
        threads.add(threading.current_thread().name)
        return put(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(IndexService, "put_shipped", watched)
    b = batch(0, 30)
    hashes, counts = batch_index_keys(np.asarray(b.data, np.uint8), b.offsets)
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=SEG)) as store:
        helper = store._log.writer.executor
        store.append_encoded(replace(b, key_hashes=hashes, key_counts=counts))
        store.commit()
        assert len(store.messages_by_key("T", "k7")) == 1
    expected = "commitlog-copy" if helper is not None else "dispatch-index"
    assert len(threads) == 1 and threads.pop().startswith(expected)


def test_shipped_keys_measure_their_time_as_put_key_does_in_a_file_begun_at_time_zero(tmp_path: Path) -> None:
    """RocketMQ's putKey leaves timeDiff 0 while the file's beginTimestamp is 0."""
    config = IndexConfig(max_hash_slot_num=16, max_index_num=50)
    shipped, general = IndexService(tmp_path / "shipped", config), IndexService(tmp_path / "general", config)
    hashes = np.arange(1, 7, dtype=np.int32)
    shipped.put_shipped(hashes[:2], np.array([2], np.int32), np.array([0]), 0)
    shipped.put_shipped(hashes[2:], np.array([2, 2], np.int32), np.array([100, 200]), 5_000)
    general.put_hashes(hashes, np.repeat(np.array([0, 100, 200], np.int64), 2),
                       np.array([0, 0, 5_000, 5_000, 5_000, 5_000], np.int64))
    for service in (shipped, general):
        service.flush()
    assert file_bytes(tmp_path / "shipped") == file_bytes(tmp_path / "general")
    shipped.close()
    general.close()
