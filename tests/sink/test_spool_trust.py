"""Nothing in a spool directory is taken on trust: a directory another user made or can write, a
file swapped, linked or made by someone else, records that are not records (sink.handover.spool, sink.handover.trust).

The tests run as root, so another user is played by chown to uid 65534 (nobody)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from ingest.config import JobConfig
from ingest.lifecycle import check_spool_setting
from sink.handover.packed import unpack
from sink.handover.schema import ENCODED_SCHEMA
from sink.handover.spool import Spool
from sink.handover.spool_task import SpoolError, SpoolTarget, write
from sink.handover.trust import UntrustedPathError
from tests.helpers.batches import corrupt, encoded

pytestmark = pytest.mark.unit

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="playing another user takes chown")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    (tmp_path / "store").mkdir()
    return tmp_path / "store"


@pytest.fixture
def spool(store: Path) -> Iterator[Spool]:
    s = Spool.for_store(str(store))
    yield s
    s.close()


def _ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _written(spool: Spool, batch: pa.RecordBatch) -> tuple[pa.Table, Path]:
    row = pa.Table.from_batches([write(batch, spool.target)])
    return row, Path(row.column("spool")[0].as_py())


# ------------------------------------------------------------------------------ the directory

@needs_root
def test_the_automatic_directory_made_by_another_user_is_refused_and_left_alone(store: Path) -> None:
    (store / "spool").mkdir(mode=0o700)
    os.chown(store / "spool", NOBODY, NOBODY)
    with pytest.raises(UntrustedPathError, match=r"spool directory .*/spool belongs to .*uid 65534.*remove it"):
        check_spool_setting(JobConfig(store=str(store)))
    with pytest.raises(SpoolError, match="belongs to .*uid 65534"):
        Spool.for_store(str(store))
    assert list((store / "spool").iterdir()) == [] and os.stat(store / "spool").st_uid == NOBODY


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770])
def test_an_automatic_directory_others_can_write_is_refused(store: Path, mode: int) -> None:
    (store / "spool").mkdir()
    os.chmod(store / "spool", mode)
    with pytest.raises(UntrustedPathError, match=rf"writable by other users \(mode {mode:04o}\)"):
        check_spool_setting(JobConfig(store=str(store)))
    with pytest.raises(SpoolError, match="writable by other users"):
        Spool.for_store(str(store))


def test_the_automatic_directory_is_made_private_and_an_own_readable_one_tightened(store: Path) -> None:
    s = Spool.for_store(str(store))
    st = os.stat(s.directory)
    assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o700, os.geteuid())
    s.close()
    (store / "spool").mkdir(mode=0o755)
    os.chmod(store / "spool", 0o755)
    s = Spool.for_store(str(store))
    assert stat.S_IMODE(os.stat(s.directory).st_mode) == 0o700
    s.close()


def test_a_link_at_the_automatic_directorys_name_is_refused(store: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (store / "spool").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UntrustedPathError, match="is a symbolic link"):
        check_spool_setting(JobConfig(store=str(store)))
    with pytest.raises(SpoolError, match="is a symbolic link"):
        Spool.for_store(str(store))


@needs_root
@pytest.mark.parametrize("mode, owner, refused", [
    (0o777, None, "writable by other users without the sticky bit"),
    (0o770, None, "writable by other users without the sticky bit"),
    (0o755, NOBODY, "belongs to .*uid 65534"),
    (0o1777, NOBODY, "shared directory owned by .*uid 65534"),
    (0o1777, None, None),        # like /tmp: files are made O_EXCL, 0600, and checked by owner and MAC
    (0o1777, 0, None),
    (0o700, None, None),
])
def test_a_given_spool_dir_gets_the_same_checks(tmp_path: Path, store: Path, mode: int, owner: int | None,
                                                refused: str | None) -> None:
    given = tmp_path / "given"
    given.mkdir()
    os.chmod(given, mode)
    if owner is not None:
        os.chown(given, owner, owner)
    cfg = JobConfig(store=str(store), spool_dir=str(given))
    if refused:
        with pytest.raises(UntrustedPathError, match=f"--spool-dir .*{refused}"):
            check_spool_setting(cfg)
        with pytest.raises(SpoolError, match=refused):
            Spool.given(str(given), str(store))
        return
    check_spool_setting(cfg)
    s = Spool.given(str(given), str(store))
    row, path = _written(s, encoded(0, 3))
    assert unpack(s.check(s.resolve(row)), ENCODED_SCHEMA).num_rows == 3
    s.close()
    assert given.is_dir(), "a directory the user gave is theirs: swept of our files, kept"


def test_a_given_spool_dir_that_does_not_exist_is_made_private(tmp_path: Path, store: Path) -> None:
    s = Spool.given(str(tmp_path / "new" / "spool"), str(store))
    assert stat.S_IMODE(os.stat(tmp_path / "new" / "spool").st_mode) == 0o700
    s.close()


def test_a_task_checks_the_directory_it_writes_into(spool: Spool) -> None:
    os.chmod(spool.directory, 0o777)      # changed under the job: a task refuses to write there
    with pytest.raises(SpoolError, match="writable by other users"):
        write(encoded(0, 1), spool.target)
    os.chmod(spool.directory, 0o700)


# ------------------------------------------------------------------------------------ the files

def test_a_file_swapped_for_crafted_records_fails_the_batch(spool: Spool) -> None:
    row, path = _written(spool, encoded(0, 5))
    forged = _ipc(encoded(1000, 5))        # well-formed records Kafka never had, same owner, same mode
    path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, forged)
    os.close(fd)
    resolved = spool.resolve(row)          # a regular private file of ours: mapped ...
    with pytest.raises(SpoolError, match=rf"spool file {path} is not what this job's task wrote \(its MAC"):
        spool.check(resolved)              # ... but not the bytes the task sealed


def test_a_file_renamed_to_another_rows_name_fails(spool: Spool) -> None:
    row_a, path_a = _written(spool, encoded(0, 5))
    row_b, path_b = _written(spool, encoded(5, 5))
    os.replace(path_a, path_b)             # b's name now holds a's bytes (the MAC covers the name)
    with pytest.raises(SpoolError, match="MAC does not match"):
        spool.check(spool.resolve(row_b))


def test_a_key_of_another_run_does_not_pass(spool: Spool, store: Path) -> None:
    other = SpoolTarget(spool.directory, spool.tag, os.urandom(32))
    row = pa.Table.from_batches([write(encoded(0, 5), other)])
    with pytest.raises(SpoolError, match="MAC does not match"):
        spool.check(spool.resolve(row))


def test_a_link_in_place_of_a_file_is_not_followed(spool: Spool, tmp_path: Path) -> None:
    row, path = _written(spool, encoded(0, 5))
    (tmp_path / "crafted.arrow").write_bytes(path.read_bytes())   # even the very bytes, elsewhere
    path.unlink()
    path.symlink_to(tmp_path / "crafted.arrow")
    with pytest.raises(SpoolError, match=rf"spool file {path} is a symbolic link: refused"):
        spool.resolve(row)
    assert (tmp_path / "crafted.arrow").exists()


@needs_root
def test_a_file_of_another_user_is_refused(spool: Spool) -> None:
    row, path = _written(spool, encoded(0, 5))
    os.chown(path, NOBODY, NOBODY)
    with pytest.raises(SpoolError, match=r"belongs to .*uid 65534.*refused, the batch is not written"):
        spool.resolve(row)


@pytest.mark.parametrize("change, says", [
    (lambda p: os.link(p, p.with_name("extra")), "has 2 names"),
    (lambda p: os.chmod(p, 0o644), "has mode 0644"),
    (lambda p: (p.unlink(), os.mkfifo(p, 0o600)), "is not a regular file"),
    (lambda p: (p.unlink(), os.mkdir(p, 0o700)), "is not a regular file"),
])
def test_what_a_task_never_makes_is_refused(spool: Spool, change, says: str) -> None:  # noqa: ANN001
    row, path = _written(spool, encoded(0, 5))
    change(path)                            # a FIFO must not block the driver either
    with pytest.raises(SpoolError, match=says):
        spool.resolve(row)


def test_a_row_naming_a_file_outside_the_spool_or_of_another_job_is_refused(spool: Spool, tmp_path: Path) -> None:
    row, path = _written(spool, encoded(0, 5))
    for wrong in (str(tmp_path / path.name), os.path.join(spool.directory, "0" * 12 + path.name[12:]),
                  os.path.join(spool.directory, "..", "store", "spool", path.name)):
        forged = row.set_column(1, "spool", pa.array([wrong]))
        with pytest.raises(SpoolError, match="not a name this job's tasks give"):
            spool.resolve(forged)


@pytest.mark.parametrize("at, says", [
    (0, "TOTALSIZE .* is not the record's length"),
    (4, "MAGICCODE"),
    (8, "BODYCRC"),
    (88, "BODYCRC"),        # the body's first byte
])
def test_a_sealed_file_of_bad_records_is_refused_record_by_record(spool: Spool, at: int, says: str) -> None:
    row, _ = _written(spool, corrupt(encoded(0, 5), 3, at))
    with pytest.raises(SpoolError, match=rf"row 3 \(a record of \d+ bytes\): {says}.*not written"):
        spool.check(spool.resolve(row))


def test_columns_that_disagree_with_their_records_are_refused(spool: Spool) -> None:
    batch = encoded(0, 5)
    queue = batch.schema.get_field_index("queue_id")
    bad = batch.set_column(queue, "queue_id", pa.array([0, 0, 7, 0, 0], pa.int32()))
    row, _ = _written(spool, bad)
    with pytest.raises(SpoolError, match="row 2 .*queue_id column says 7 but the record holds 0"):
        spool.check(spool.resolve(row))
    topic = batch.schema.get_field_index("topic")
    row, _ = _written(spool, batch.set_column(topic, "topic", pa.array(["orders"] * 4 + ["ordery"])))
    with pytest.raises(SpoolError, match="row 4 .*topic column says 'ordery' but the record holds 'orders'"):
        spool.check(spool.resolve(row))


def test_the_dead_letters_of_a_batch_have_no_record_to_check(spool: Spool) -> None:
    batch = encoded(0, 4)
    dead = batch.set_column(0, "record", pa.array([None, *batch.column("record").to_pylist()[1:]], pa.binary()))
    row, _ = _written(spool, dead)
    assert unpack(spool.check(spool.resolve(row)), ENCODED_SCHEMA).num_rows == 4
