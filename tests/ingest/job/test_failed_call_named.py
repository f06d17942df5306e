"""The one-line errors the end-to-end fault sweep (tests/e2e/crash/test_fault_sweep_e2e_replay.py, _run.py) found
naming no call, or the wrong one: each names the system call that failed and its file."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from store import Message, MessageStore, StoreConfig, StoreError
from store.log.lock import StoreLock
from store.space import reserve

pytestmark = pytest.mark.unit


def _failing(call: str, err: int, when: str | None = None):  # noqa: ANN202
    original = getattr(os, call)

    def failing(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if when is None or when in str(args[0]):
            raise OSError(err, os.strerror(err), str(args[0]) if isinstance(args[0], (str, Path)) else None)
        return original(*args, **kwargs)
    return failing


def test_a_lock_file_that_cannot_be_emptied_blames_ftruncate_not_pwrite(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """It said "failed (pwrite)" though the ftruncate before the pwrite had failed."""
    monkeypatch.setattr(os, "ftruncate", _failing("ftruncate", errno.ENOSPC))
    with pytest.raises(StoreError) as refused:
        StoreLock(tmp_path).acquire()
    assert str(refused.value) == (f"writing the pid to the lock file {tmp_path / 'lock'} failed (ftruncate): No "
                                  "space left on device; free disk space (or raise the quota or file size limit) "
                                  "and run again")


def test_a_reservation_that_fails_names_fallocate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It said "cannot reserve ... bytes on disk" and no call."""
    monkeypatch.setattr(os, "posix_fallocate", _failing("posix_fallocate", errno.EIO))
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        with pytest.raises(StoreError) as refused:
            reserve(fd, 4096, tmp_path / "f", "commit-log segment")
    finally:
        os.close(fd)
    assert str(refused.value).startswith(f"cannot reserve 4,096 bytes on disk for commit-log segment "
                                         f"{tmp_path / 'f'} (fallocate): Input/output error")


def test_a_consume_queue_directory_that_cannot_be_made_names_mkdir(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """It said "([Errno 30] Read-only file system: '<dir>')": the file, not the call."""
    store = MessageStore.open(tmp_path / "store", StoreConfig(segment_size=64 << 10, preallocate=False))
    try:
        monkeypatch.setattr(os, "mkdir", _failing("mkdir", errno.EROFS, "consumequeue/T/1"))
        with pytest.raises(StoreError) as refused:
            store.append([Message("T", b"x", queue_id=1)])
            store.commit()
        queue_dir = tmp_path / "store" / "consumequeue" / "T" / "1"
        assert f"failed (mkdir on {queue_dir} in " in str(refused.value), str(refused.value)
        assert "Read-only file system); appended batches are in the commit log but not committed" in str(refused.value)
    finally:
        monkeypatch.undo()
        store.abandon()


def test_a_checkpoint_that_cannot_be_written_names_the_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The preflight said "--checkpoint X: cannot be written (Input/output error)": no call."""
    from ingest.preflight import CheckpointPathError, check_checkpoint_path

    monkeypatch.setattr(os, "write", _failing("write", errno.EIO))
    with pytest.raises(CheckpointPathError) as refused:
        check_checkpoint_path(str(tmp_path / "checkpoint"))
    assert str(refused.value).startswith(f"--checkpoint {tmp_path / 'checkpoint'}: cannot be written (write in "
                                         "check_checkpoint_path(): Input/output error); ")


def test_a_streaming_query_that_failed_in_spark_is_one_line_with_spark_s_reason() -> None:
    """Spark's own failure (its checkpoint's directory unreadable) escaped the run as a
    StreamingQueryException: the plan and three tracebacks, exit 1."""
    from ingest.job import _query_failure

    spark_said = ("[STREAM_FAILED] Query [id = 9caf, runId = d360] terminated with exception: Invalid directory or I/O "
                  "error occurred for dir: /c/commits SQLSTATE: XXKST\n=== Streaming Query ===\nIdentifier: commitlog")
    assert str(_query_failure(RuntimeError(spark_said), "/c")) == (
        "the streaming query failed: Invalid directory or I/O error occurred for dir: /c/commits (Spark's checkpoint "
        "/c); the store is closed at its last commit: run again to resume")


def test_a_foreach_batch_failure_passed_on_as_py4j_s_message_is_our_exception_s_line() -> None:
    """Spark sometimes gives py4j's message as its reason, with no error class: the line it ends
    where the Python traceback starts was the whole reason."""
    from ingest.job import _query_failure

    traceback = ("Traceback (most recent call last):\n  File \"/w/sink/handover/spool.py\", line 134, in _take\n"
                 "    raise SpoolError(f\"spool file {path} is {why}\")\n"
                 "sink.handover.spool_task.SpoolError: spool file /s/b.arrow is a symbolic link: refused\n")
    spark_said = ("[STREAM_FAILED] Query [id = 9caf, runId = d360] terminated with exception: An exception was "
                  f"raised by the Python Proxy. Return Message: {traceback} SQLSTATE: 39000\n"
                  "\tat org.apache.spark.sql.execution.streaming.sources.ForeachBatchSink.callBatchWriter(x.scala:60)\n"
                  "Caused by: py4j.Py4JException: An exception was raised by the Python Proxy. Return Message: "
                  f"{traceback}")
    assert str(_query_failure(RuntimeError(spark_said), "/c")) == (
        "the streaming query failed: spool file /s/b.arrow is a symbolic link: refused (Spark's checkpoint /c); "
        "the store is closed at its last commit: run again to resume")


def test_a_store_whose_probe_file_cannot_be_removed_is_refused_in_one_line(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's unlink failing (EROFS) escaped the preflight as a bare OSError."""
    from ingest.preflight import StorePathError, check_store_path

    monkeypatch.setattr(os, "unlink", _failing("unlink", errno.EROFS))
    with pytest.raises(StorePathError) as refused:
        check_store_path(tmp_path / "store", mounts_file="/dev/null")
    assert f"cannot remove a file there (unlink on {tmp_path / 'store' / '.commitlog-preflight'} in unlink(): " \
           "Read-only file system)" in str(refused.value)
