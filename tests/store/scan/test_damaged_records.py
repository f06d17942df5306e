"""Damage is never served in silence: a committed record whose body no longer matches its BODYCRC is
refused by every read of StoreReader by default (naming its offset and segment; check_crc=False
reads it as it is), and a writer opening such a store says so, with the offset, and keeps it and
every record after it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sink import CommitLogWriter
from store import CorruptRecordError, Message, MessageStore, StoreReader
from tests.helpers.cli import run
from tests.helpers.stores import CONFIG, SEG, damaged_store

pytestmark = pytest.mark.unit


def test_every_read_of_a_reader_refuses_a_damaged_body_naming_its_offset_and_segment(tmp_path: Path) -> None:
    offsets, victim = damaged_store(tmp_path)
    where = f"offset {victim} in segment {victim // SEG * SEG:020d}"
    with StoreReader.open(tmp_path) as reader:
        with pytest.raises(CorruptRecordError, match=where):
            list(reader.record_batches())
        with pytest.raises(CorruptRecordError, match=where):
            list(reader.record_batches_at(*reader.queue_records(["T"])))
        with pytest.raises(CorruptRecordError, match=where):
            list(reader.iter_messages())
        with pytest.raises(CorruptRecordError, match=where):
            reader.read(victim)
        with pytest.raises(CorruptRecordError, match=where):
            reader.get_by_queue("T", 0, 0, 100)
        assert reader.read(offsets[0]).body.tobytes() == b"body-000 " * 10      # the others read as ever


def test_check_crc_false_reads_the_damaged_body_as_it_is(tmp_path: Path) -> None:
    offsets, victim = damaged_store(tmp_path)
    with StoreReader.open(tmp_path, check_crc=False) as reader:
        assert len(list(reader.iter_messages())) == len(offsets)
        assert reader.read(victim).body.tobytes() != b"body-050 " * 10
        assert reader.to_table().num_rows == len(offsets)
    with StoreReader.open(tmp_path) as reader:
        assert reader.to_table(check_crc=False).num_rows == len(offsets)


def test_a_writer_opening_the_store_reports_the_damage_and_keeps_every_record(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    offsets, victim = damaged_store(tmp_path)
    caplog.set_level(logging.ERROR)
    with MessageStore.open(tmp_path, CONFIG) as store:
        assert store.damaged_records == (victim,)
        assert store.committed_offset == offsets[-1] + (offsets[1] - offsets[0])
        store.append([Message("T", b"after")])
        store.commit()
    assert any(str(victim) in r.getMessage() and "damaged" in r.getMessage() for r in caplog.records)
    with StoreReader.open(tmp_path, check_crc=False) as reader:
        bodies = [m.body.tobytes() for _, m in reader.iter_messages()]
    assert len(bodies) == len(offsets) + 1 and bodies[-1] == b"after"


def test_the_sink_writer_counts_the_damage_for_its_log_and_metrics(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _, victim = damaged_store(tmp_path)
    caplog.set_level(logging.ERROR)
    with CommitLogWriter(tmp_path, CONFIG) as writer:
        assert writer.damaged_records == 1
    line = next(r.getMessage() for r in caplog.records if r.name == "sink.writer")
    assert f"1 committed record(s) below the commit point are damaged" in line and str(victim) in line


def test_damage_in_an_older_segment_than_the_last_three_is_left_to_verify(tmp_path: Path) -> None:
    """The open checks the committed records of the last three segments, as RocketMQ's normal recovery
    does (its cost stays that of three segments however large the store); verify checks them all."""
    with MessageStore.open(tmp_path, CONFIG) as store:
        while store.max_offset < 4 * SEG + 100:
            store.append([Message("T", b"x" * 500) for _ in range(20)])
        store.commit()
    first = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(first.read_bytes())
    data[1000] ^= 0x01                          # inside the first records' bodies
    first.write_bytes(bytes(data))
    with MessageStore.open(tmp_path, CONFIG) as store:
        assert store.damaged_records == ()
    rc, out, _ = run("verify", str(tmp_path))
    assert rc == 1 and " crc: " in out
