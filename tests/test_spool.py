"""Encoded batches handed from the read tasks to the driver through spool files (local mode)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

from ingest.config import JobConfig, JobConfigError
from ingest.job import spool_directory
from sink import spool
from sink.batch import ENCODED_SCHEMA
from sink.packed import PACKED_SCHEMA, PackedBatchError, pack, unpack
from tests.test_packed import encoded

pytestmark = pytest.mark.unit


def test_a_spooled_batch_comes_back_whole_and_its_file_is_gone_once_mapped(tmp_path: Path) -> None:
    batch = encoded(0, 300)
    (row,) = list(spool.spool_batches(iter([batch, batch.slice(0, 0)]), str(tmp_path)))
    assert row.schema == PACKED_SCHEMA and row.column("chunk").null_count == 1
    (path,) = row.column("spool").to_pylist()
    assert Path(path).parent == tmp_path and Path(path).is_file()

    resolved = spool.resolve(pa.Table.from_batches([row]))
    assert not Path(path).exists(), "the driver removes a file's name as soon as it has mapped it"
    assert resolved.column("spool").null_count == 1
    out = unpack(resolved, ENCODED_SCHEMA)     # read from the mapping, after the unlink
    assert out.equals(pa.Table.from_batches([batch], schema=ENCODED_SCHEMA))


def test_packed_and_spooled_rows_keep_their_order(tmp_path: Path) -> None:
    parts = [encoded(0, 5), encoded(5, 7), encoded(12, 3), encoded(15, 1)]
    rows = [pack(parts[0]), spool.write(parts[1], str(tmp_path)), pack(parts[2]), spool.write(parts[3], str(tmp_path))]
    table = pa.concat_tables([pa.Table.from_batches(rows[:3]).combine_chunks(), pa.Table.from_batches(rows[3:])])
    out = unpack(spool.resolve(table), ENCODED_SCHEMA)
    assert out.column("kafka_offset").to_pylist() == list(range(16))
    assert list(tmp_path.iterdir()) == []


def test_an_unresolved_spool_row_is_refused_by_unpack(tmp_path: Path) -> None:
    row = spool.write(encoded(0, 2), str(tmp_path))
    with pytest.raises(PackedBatchError, match="resolve"):
        unpack(pa.Table.from_batches([row]), ENCODED_SCHEMA)


def test_a_file_the_driver_cannot_see_names_itself_and_the_remedy(tmp_path: Path) -> None:
    row = spool.write(encoded(0, 2), str(tmp_path))
    (path,) = row.column("spool").to_pylist()
    os.unlink(path)          # written on another machine, as far as the driver can tell
    with pytest.raises(spool.SpoolError, match=rf"{path} is not on the driver's machine.*--spool-dir"):
        spool.resolve(pa.Table.from_batches([row]))


def test_a_task_without_the_spool_directory_says_so_with_the_remedy(tmp_path: Path) -> None:
    with pytest.raises(spool.SpoolError, match=r"does not exist on .*--spool-dir .*off"):
        spool.write(encoded(0, 1), str(tmp_path / "absent"))


def test_orphans_are_swept_and_a_fresh_directory_starts_empty(tmp_path: Path) -> None:
    spool_dir = tmp_path / "spool"
    spool.prepare_dir(str(spool_dir))
    for i in range(3):                  # attempts whose results were never collected
        spool.write(encoded(i, 1), str(spool_dir))
    (spool_dir / "notes.txt").write_text("not ours")
    assert spool.sweep(str(spool_dir)) == 3
    assert [p.name for p in spool_dir.iterdir()] == ["notes.txt"]
    spool.write(encoded(0, 1), str(spool_dir))
    spool.prepare_dir(str(spool_dir))   # a new run starts from nothing of the last one
    assert [p.name for p in spool_dir.iterdir()] == ["notes.txt"]
    spool.remove_dir(str(spool_dir))    # someone else's file: the directory stays
    assert spool_dir.is_dir()
    (spool_dir / "notes.txt").unlink()
    spool.remove_dir(str(spool_dir))
    assert not spool_dir.exists()


def _spark(master: str) -> SimpleNamespace:
    return SimpleNamespace(sparkContext=SimpleNamespace(master=master))


def test_auto_spools_in_local_mode_only_in_a_directory_of_the_stores_own(tmp_path: Path) -> None:
    a = JobConfig(store=str(tmp_path / "a"))
    b = JobConfig(store=str(tmp_path / "b"))
    assert spool_directory(a, _spark("local[2]")) != spool_directory(b, _spark("local[*]"))
    assert spool_directory(a, _spark("local[2]")) == spool_directory(a, _spark("local-cluster[2,1,1024]"))
    assert spool_directory(a, _spark("spark://host:7077")) is None
    assert spool_directory(JobConfig(store=a.store, spool_dir="off"), _spark("local[2]")) is None
    assert spool_directory(JobConfig(store=a.store, source="spark-kafka"), _spark("local[2]")) is None
    shared = JobConfig(store=a.store, spool_dir="relative/shared")
    assert spool_directory(shared, _spark("spark://host:7077")) == os.path.abspath("relative/shared")


def test_an_empty_spool_setting_is_refused_before_anything_starts() -> None:
    cfg = JobConfig(bootstrap_servers="k:9092", subscribe="t", store="/s", spool_dir="")
    with pytest.raises(JobConfigError, match="--spool-dir"):
        cfg.validate()
