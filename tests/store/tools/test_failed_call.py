"""An OSError is told as the system call that failed, the file it was on and the function that made
it (store.failed_call), so that a store's one-line error names them although ``os.fsync(fd)`` gives
neither."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from store.errors import StoreIOError
from store.failed_call import describe_failure, failed_call


class _File:
    # a descriptor not open fails with EBADF: the errno aside, the same path as an EIO's
    def __init__(self, path: Path, fd: int = 987_654) -> None:
        self.path = path
        self._fd = fd

    def sync(self) -> None:
        os.fsync(self._fd)

    def datasync_of(self, fd: int) -> None:
        os.fdatasync(fd)


def _caught(fn, *args) -> OSError:  # noqa: ANN001
    with pytest.raises(OSError) as info:
        fn(*args)
    return info.value


def test_an_fsync_on_a_descriptor_names_the_call_the_object_s_file_and_the_function(tmp_path: Path) -> None:
    f = _File(tmp_path / "00000000000000000000")
    call = failed_call(_caught(f.sync))
    assert (call.call, call.file, call.function) == ("fsync", str(tmp_path / "00000000000000000000"), "sync")
    assert call.describe() == f"fsync on {tmp_path / '00000000000000000000'} in sync()"


def test_a_call_whose_file_cannot_be_told_is_named_without_one() -> None:
    f = _File(Path(__file__))
    del f.path
    call = failed_call(_caught(f.datasync_of, 987_654))
    assert (call.call, call.file) == ("fdatasync", None)
    assert call.describe() == "fdatasync in datasync_of()"


def test_path_calls_name_their_own_file(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such"
    assert failed_call(_caught(os.rename, missing, tmp_path / "x")).call == ""     # os.rename is C: no line
    def rename() -> None:
        os.replace(missing, tmp_path / "x")

    def make() -> None:
        (tmp_path / "no" / "deeper").mkdir()

    got = failed_call(_caught(rename))
    assert (got.call, got.file) == ("rename", str(missing))
    got = failed_call(_caught(make))
    assert got.call == "mkdir" and got.file == str(tmp_path / "no" / "deeper")


def test_an_msync_is_told_from_a_buffered_file_s_flush(tmp_path: Path) -> None:
    path = tmp_path / "seg"
    path.write_bytes(b"\0" * 4096)

    class Mapped:
        def __init__(self) -> None:
            self.path = path
            with open(path, "r+b") as f:
                self._mm = mmap.mmap(f.fileno(), 4096)

        def flush(self) -> None:
            self._mm.flush(1, 10)          # not page-aligned: EINVAL from msync

    got = failed_call(_caught(Mapped().flush))
    assert (got.call, got.file) == ("msync", str(path))


def test_the_store_s_io_error_and_said_put_the_call_in_the_line(tmp_path: Path) -> None:
    f = _File(tmp_path / "q")
    cause = _caught(f.sync)
    line = str(StoreIOError(cause, "committing", tmp_path))
    assert line.startswith(f"committing of store {tmp_path} failed: fsync on {tmp_path / 'q'} in sync(): ")
    assert "\n" not in line
    assert describe_failure(cause).startswith(f"fsync on {tmp_path / 'q'} in sync(): ")
    assert describe_failure(ValueError("x")) == "x"
