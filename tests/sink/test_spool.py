"""Encoded batches handed from the read tasks to the driver through spool files (local mode)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

from ingest.config import JobConfig, JobConfigError
from ingest.lifecycle import spool_directory
from sink.handover.packed import PACKED_SCHEMA, PackedBatchError, pack, unpack
from sink.handover.schema import ENCODED_SCHEMA
from sink.handover.spool import Spool
from sink.handover.spool_task import SpoolError, spool_batches, store_tag, write
from tests.helpers.batches import encoded

pytestmark = pytest.mark.unit


@pytest.fixture
def spool(tmp_path: Path) -> Iterator[Spool]:
    (tmp_path / "store").mkdir()
    s = Spool.for_store(str(tmp_path / "store"))
    yield s
    s.close()


def test_a_spooled_batch_comes_back_whole_and_its_file_is_gone_once_mapped(spool: Spool) -> None:
    batch = encoded(0, 300)
    (row,) = list(spool_batches(iter([batch, batch.slice(0, 0)]), spool.target))
    assert row.schema == PACKED_SCHEMA and row.column("chunk").null_count == 1
    (path,) = row.column("spool").to_pylist()
    assert Path(path).parent == Path(spool.directory) and Path(path).is_file()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, "a batch's records are no one else's to read"
    assert Path(path).name.startswith(spool.tag + ".")

    resolved = spool.resolve(pa.Table.from_batches([row]))
    assert not Path(path).exists(), "the driver removes a file's name as soon as it has mapped it"
    out = unpack(spool.check(resolved), ENCODED_SCHEMA)     # read from the mapping, after the unlink
    assert out.equals(pa.Table.from_batches([batch], schema=ENCODED_SCHEMA))


def test_packed_and_spooled_rows_keep_their_order(spool: Spool) -> None:
    parts = [encoded(0, 5), encoded(5, 7), encoded(12, 3), encoded(15, 1)]
    rows = [pack(parts[0]), write(parts[1], spool.target), pack(parts[2]), write(parts[3], spool.target)]
    table = pa.concat_tables([pa.Table.from_batches(rows[:3]).combine_chunks(), pa.Table.from_batches(rows[3:])])
    out = unpack(spool.check(spool.resolve(table)), ENCODED_SCHEMA)
    assert out.column("kafka_offset").to_pylist() == list(range(16))
    assert list(Path(spool.directory).iterdir()) == []


def test_a_spool_row_not_mapped_and_checked_is_refused_by_unpack(spool: Spool) -> None:
    row = pa.Table.from_batches([write(encoded(0, 2), spool.target)])
    with pytest.raises(PackedBatchError, match="resolve and .check"):
        unpack(row, ENCODED_SCHEMA)
    with pytest.raises(PackedBatchError, match="resolve and .check"):
        unpack(spool.resolve(row), ENCODED_SCHEMA)


def test_a_file_the_driver_cannot_see_names_itself_and_the_remedy(spool: Spool) -> None:
    row = write(encoded(0, 2), spool.target)
    (path,) = row.column("spool").to_pylist()
    os.unlink(path)          # written on another machine, as far as the driver can tell
    with pytest.raises(SpoolError, match=rf"{path} is not on the driver's machine.*--spool-dir"):
        spool.resolve(pa.Table.from_batches([row]))


def test_a_task_without_the_spool_directory_says_so_with_the_remedy(spool: Spool, tmp_path: Path) -> None:
    target = type(spool.target)(str(tmp_path / "absent"), spool.tag, spool.key)
    with pytest.raises(SpoolError, match=r"does not exist on .*--spool-dir .*off"):
        write(encoded(0, 1), target)


def test_orphans_are_swept_and_only_this_jobs(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    spool = Spool.for_store(str(tmp_path / "store"))
    spool_dir = Path(spool.directory)
    for i in range(3):                  # attempts whose results were never collected
        write(encoded(i, 1), spool.target)
    (spool_dir / "notes.txt").write_text("not ours")
    other_job = spool_dir / f"{'0' * 12}.{'a' * 32}.arrow"
    other_job.write_bytes(b"another store's job")
    assert spool.sweep() == 3
    assert sorted(p.name for p in spool_dir.iterdir()) == sorted(["notes.txt", other_job.name])
    write(encoded(0, 1), spool.target)
    spool.close()                       # someone else's files: the directory stays
    assert sorted(p.name for p in spool_dir.iterdir()) == sorted(["notes.txt", other_job.name])

    again = Spool.for_store(str(tmp_path / "store"))
    write(encoded(0, 1), again.target)
    (spool_dir / "notes.txt").unlink()
    other_job.unlink()
    again.close()
    assert not spool_dir.exists(), "the automatic directory goes with the job that made it"


def test_a_new_run_starts_without_the_last_ones_orphans_and_with_a_key_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    first = Spool.for_store(str(tmp_path / "store"))
    write(encoded(0, 1), first.target)       # killed before it was collected
    os.close(first.dir_fd)
    second = Spool.for_store(str(tmp_path / "store"))
    assert list(Path(second.directory).iterdir()) == []
    assert second.key != first.key and len(second.key) == 32
    assert second.key.hex() not in repr(second.target)
    second.close()


def _spark(master: str) -> SimpleNamespace:
    return SimpleNamespace(sparkContext=SimpleNamespace(master=master))


def test_auto_spools_in_local_mode_only_inside_the_store(tmp_path: Path) -> None:
    a = JobConfig(store=str(tmp_path / "a"))
    b = JobConfig(store=str(tmp_path / "b"))
    assert spool_directory(a, _spark("local[2]")) == str(tmp_path / "a" / "spool")
    assert spool_directory(a, _spark("local[2]")) != spool_directory(b, _spark("local[*]"))
    assert spool_directory(a, _spark("local[2]")) == spool_directory(a, _spark("local-cluster[2,1,1024]"))
    assert spool_directory(a, _spark("spark://host:7077")) is None
    assert spool_directory(JobConfig(store=a.store, spool_dir="off"), _spark("local[2]")) is None
    assert spool_directory(JobConfig(store=a.store, source="spark-kafka"), _spark("local[2]")) is None
    shared = JobConfig(store=a.store, spool_dir="relative/shared")
    assert spool_directory(shared, _spark("spark://host:7077")) == os.path.realpath("relative/shared")
    assert store_tag(a.store) != store_tag(b.store)


def test_an_empty_spool_setting_is_refused_before_anything_starts() -> None:
    cfg = JobConfig(bootstrap_servers="k:9092", subscribe="t", store="/s", spool_dir="")
    with pytest.raises(JobConfigError, match="--spool-dir"):
        cfg.validate()


def test_a_task_that_meets_a_full_disk_hands_back_one_line_that_the_driver_refuses_the_batch_with(
        tmp_path: Path) -> None:
    import socket

    from tests.helpers.faults.small_fs import fill, small_filesystem

    with small_filesystem(tmp_path / "fs", "1m") as fs:
        (fs / "store").mkdir()
        spool = Spool.for_store(str(fs / "store"))
        try:
            fill(fs / "filler")
            row = write(encoded(0, 3000), spool.target)      # no raise in the task: Spark sees a row
            (path,) = row.column("spool").to_pylist()
            assert Path(path).parent == Path(spool.directory) and not Path(path).exists()
            resolved = spool.resolve(pa.Table.from_batches([row]))
            with pytest.raises(SpoolError) as refused:
                spool.check(resolved)
            assert str(refused.value) == (f"spool file {path}: write() failed on {socket.gethostname()}: "
                                          f"[Errno 28] No space left on device: the batch is not written")
        finally:
            spool.close()
