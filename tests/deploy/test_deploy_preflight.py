"""ingest.preflight.check_store_path: the job refuses a store path that cannot keep a store."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from ingest.preflight import (
    ENV_ALLOW_EPHEMERAL,
    PROBE_NAME,
    StorePathError,
    check_store_path,
    mount_of,
    read_mounts,
)

pytestmark = pytest.mark.unit


def _mounts_file(tmp_path: Path, *lines: str) -> str:
    f = tmp_path / "mounts"
    f.write_text("".join(line + "\n" for line in lines))
    return str(f)


def test_accepts_a_local_disk_directory_creates_it_and_leaves_no_probe(tmp_path: Path) -> None:
    store = tmp_path / "a" / "store"
    mounts = _mounts_file(tmp_path, "/dev/vda / ext4 rw 0 0")
    check_store_path(store, mounts_file=mounts)
    assert store.is_dir()
    assert not (store / PROBE_NAME).exists()


@pytest.mark.parametrize("fs_type", ["tmpfs", "ramfs", "overlay"])
def test_refuses_memory_and_container_layer_filesystems(tmp_path: Path, fs_type: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_ALLOW_EPHEMERAL, raising=False)
    mounts = _mounts_file(tmp_path, "/dev/vda / ext4 rw 0 0",
                          f"none {tmp_path} {fs_type} rw 0 0")
    with pytest.raises(StorePathError) as err:
        check_store_path(tmp_path / "store", mounts_file=mounts)
    message = str(err.value)
    assert str(tmp_path / "store") in message
    assert fs_type in message
    assert ENV_ALLOW_EPHEMERAL in message


def test_the_environment_switch_allows_an_ephemeral_store(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_ALLOW_EPHEMERAL, "1")
    mounts = _mounts_file(tmp_path, f"none {tmp_path} tmpfs rw 0 0")
    check_store_path(tmp_path / "store", mounts_file=mounts)


def test_a_persistent_volume_mounted_below_a_tmpfs_is_accepted(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_ALLOW_EPHEMERAL, raising=False)
    volume = tmp_path / "data"
    mounts = _mounts_file(tmp_path, f"overlay {tmp_path} overlay rw 0 0",
                          f"/dev/sdb {volume} ext4 rw 0 0")
    check_store_path(volume / "store", mounts_file=mounts)


def test_really_refuses_dev_shm_when_the_machine_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    shm = Path("/dev/shm")
    mount = mount_of(str(shm), read_mounts())
    if mount is None or mount.fs_type != "tmpfs":
        pytest.fail(f"this test needs /dev/shm on tmpfs; the mount table says {mount}")
    monkeypatch.delenv(ENV_ALLOW_EPHEMERAL, raising=False)
    refused = shm / f"commitlog-preflight-test-{os.getpid()}"
    with pytest.raises(StorePathError, match="tmpfs"):
        check_store_path(refused)
    assert not refused.exists()     # a refused path is not left behind on the machine's memory


def test_mount_point_names_with_spaces_are_unescaped(tmp_path: Path) -> None:
    mounts = read_mounts(_mounts_file(tmp_path, r"/dev/sdc /mnt/my\040disk xfs rw 0 0"))
    assert mount_of("/mnt/my disk/store", mounts).fs_type == "xfs"  # type: ignore[union-attr]
    assert mount_of("/mnt/my diskette", mounts) is None


def test_refuses_a_path_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "store"
    f.write_text("not a directory")
    with pytest.raises(StorePathError, match="not a directory"):
        check_store_path(f, mounts_file=_mounts_file(tmp_path))


def test_refuses_a_path_that_cannot_be_created(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StorePathError, match="cannot be created|not a directory"):
        check_store_path(blocker / "store", mounts_file=_mounts_file(tmp_path))


def test_refuses_while_another_process_holds_the_probe_lock(tmp_path: Path) -> None:
    # flock locks belong to the open file description: a second open() in this process conflicts
    # just as another process would.
    store = tmp_path / "store"
    store.mkdir()
    fd = os.open(store / PROBE_NAME, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(StorePathError, match="one driver per store"):
            check_store_path(store, mounts_file=_mounts_file(tmp_path))
    finally:
        os.close(fd)
