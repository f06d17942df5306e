"""Every refusal of `commitlog run` is one line and exit 2, before Spark starts: a --checkpoint that
is a file or on a read-only filesystem, a store another writer holds, a segment the job cannot write."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from store import Message, MessageStore, StoreConfig
from store.log.lock import StoreLock
from tests.helpers.brokers.kafka_records import create_topics, unique_topic
from tests.helpers.faults.small_fs import small_filesystem

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def topic(bootstrap_servers: str) -> str:
    name = unique_topic("refusals")
    create_topics(bootstrap_servers, [name])
    return name


def run(bootstrap: str, topic: str, store: Path, checkpoint: Path) -> tuple[int, list[str]]:
    done = subprocess.run([sys.executable, "-m", "ingest.cli", "run", "--bootstrap-servers", bootstrap,
                           "--subscribe", topic, "--store", str(store), "--checkpoint", str(checkpoint),
                           "--segment-size", "64k", "--trigger", "available-now", "--master", "local[1]"],
                          capture_output=True, text=True, timeout=600, start_new_session=True)
    return done.returncode, (done.stdout + done.stderr).splitlines()


def assert_refused(code: int, lines: list[str], *words: str) -> None:
    assert code == 2 and len(lines) == 1, f"exit {code}:\n" + "\n".join(lines[-60:])
    assert lines[0].startswith("commitlog run: error: "), lines
    for w in words:
        assert w in lines[0], lines


def a_store(root: Path) -> None:
    with MessageStore.open(root, StoreConfig(segment_size=1 << 16, preallocate=False)) as s:
        s.append([Message("T", b"x" * 100)])
        s.commit()


@contextmanager
def unwritable(path: Path) -> Iterator[None]:
    """``path`` cannot be opened for writing: immutable for root (who ignores modes), read-only else."""
    if os.geteuid() == 0:
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"cannot make a file immutable here: {done.stderr.strip()}")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=False)
    else:
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(0o644)


def test_a_checkpoint_that_is_a_file_is_refused_in_one_line(
        bootstrap_servers: str, topic: str, tmp_path: Path) -> None:
    (tmp_path / "ck").write_text("not a directory")
    code, lines = run(bootstrap_servers, topic, tmp_path / "store", tmp_path / "ck")
    assert_refused(code, lines, f"--checkpoint {tmp_path / 'ck'}", "not a directory")


def test_a_checkpoint_on_a_read_only_filesystem_is_refused_in_one_line(
        bootstrap_servers: str, topic: str, tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "ro", "1m", read_only=True) as ro:
        code, lines = run(bootstrap_servers, topic, tmp_path / "store", ro / "ck")
    assert_refused(code, lines, "--checkpoint", "Read-only file system")


def test_a_second_run_on_a_store_another_writer_holds_is_refused_in_one_line(
        bootstrap_servers: str, topic: str, tmp_path: Path) -> None:
    root = tmp_path / "store"
    a_store(root)
    lock = StoreLock(root)
    lock.acquire()
    try:
        code, lines = run(bootstrap_servers, topic, root, tmp_path / "ck")
    finally:
        lock.release()
    assert_refused(code, lines, f"store {root} is locked by process {os.getpid()}")


def test_a_segment_the_job_cannot_write_is_refused_in_one_line(
        bootstrap_servers: str, topic: str, tmp_path: Path) -> None:
    root = tmp_path / "store"
    a_store(root)
    segment = next((root / "commitlog").iterdir())
    with unwritable(segment):
        code, lines = run(bootstrap_servers, topic, root, tmp_path / "ck")
    assert_refused(code, lines, f"store {root} cannot be written", str(segment))
