"""A real full disk for the tests: a tmpfs of a few MiB mounted for the test (root only: elsewhere the
test is skipped, saying why), filled to the brim with a filler file whose tail can be given back.

``python -m tests.helpers.faults.small_fs KIND STORE FILLER`` runs one store on such a disk in a process of its own
(a store into an unbacked page of a mapping is SIGBUS, which would end the test run): it writes
batches until the disk is full and prints what happened as JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PAGE = 4096
BATCH = 400


@contextmanager
def small_filesystem(path: Path, size: str, *, read_only: bool = False) -> Iterator[Path]:
    """A tmpfs of ``size`` (read-only if asked) mounted at ``path`` while the block runs. Where none
    can be mounted the test is skipped with the reason (pytest's -ra, on in pyproject.toml, lists it)."""
    import pytest

    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip(f"a real full disk needs a tmpfs, and mounting one needs root (this is uid {os.geteuid()}); "
                    "run the full-disk tests as root, e.g. in the CI container")
    if shutil.which("mount") is None:
        pytest.skip("a real full disk needs a tmpfs, and there is no mount command on PATH (util-linux)")
    options = f"{'ro,' if read_only else ''}size={size}"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs at {path} (mount -t tmpfs -o {options} exited {done.returncode}): "
                    f"{done.stderr.strip()}")
    try:
        yield path
    finally:
        undone = subprocess.run(["umount", "-l", str(path)], capture_output=True, text=True)
        if undone.returncode:
            import warnings

            warnings.warn(f"the tmpfs at {path} is still mounted: umount said {undone.stderr.strip()}", stacklevel=2)


def fill(filler: Path, leave: int = 0) -> None:
    """Write ``filler`` until the disk is full, then give ``leave`` bytes back."""
    chunk = bytes(1 << 20)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        size = 0
        while True:
            try:
                size += os.write(fd, chunk)
            except OSError:
                break
        os.ftruncate(fd, max(0, size - leave))
        os.fsync(fd)
    finally:
        os.close(fd)


def _config(kind: str):  # noqa: ANN202 - store types are imported in the child only
    from store import IndexConfig, StoreConfig

    if kind == "index":        # the index rolls first: 1000 messages of two keys per file
        return StoreConfig(segment_size=1 << 20, preallocate=False, consume_queue_units=2000,
                           index=IndexConfig(True, 64, 2001))
    if kind == "queue":        # the consume queue rolls first: 1000 units (20,000 bytes) a file
        return StoreConfig(segment_size=1 << 20, preallocate=False, consume_queue_units=1000,
                           index=IndexConfig(False))
    return StoreConfig(segment_size=256 << 10, preallocate=False, consume_queue_units=5000,
                       index=IndexConfig(False))


def _batch(first: int) -> list:
    from store import Message

    return [Message("T", b"x" * 100, properties=f"KEYS\x01k{i}\x02UNIQ_KEY\x01U{i:031d}\x02")
            for i in range(first, first + BATCH)]


def _queue_steps_to_come(config) -> int:  # noqa: ANN001 - StoreConfig, imported in the child only
    from store.space import next_reserved

    size = config.consume_queue_units * 20
    return size - next_reserved(0, BATCH * 20, size)


def run_until_full(kind: str, root: Path, filler: Path) -> dict:
    from store import MessageStore, StoreError

    config = _config(kind)
    store = MessageStore.open(root, config)
    store.append(_batch(0))
    store.commit()
    committed, error = 1, None
    # a commit point's new file needs a page while it replaces the old; and the consume-queue file
    # takes its blocks in steps as it fills (store.space): room for them, unless it is the kind
    # that is to find the disk full (then a page more than its second batch's step, so that the disk
    # is full when it rolls: its first file's last step fits, the next file does not)
    fill(filler, leave=2 * PAGE + (PAGE if kind == "queue" else _queue_steps_to_come(config)))
    for _ in range(400):
        try:
            store.append(_batch(committed * BATCH))
            store.commit()
        except (StoreError, OSError) as e:
            error = e
            break
        committed += 1
    store.close()
    return {"committed": committed * BATCH, "error": str(error) if error else None,
            "errno": getattr(error, "errno", None) or getattr(error.__cause__, "errno", None) if error else None,
            "closed_cleanly": getattr(store, "closed_cleanly", None), "abort": (root / "abort").exists()}


def reopen_and_write(kind: str, root: Path, committed: int) -> int:
    """After the space is back: the store opens, holds what was committed, takes a batch more."""
    from store import MessageStore, StoreReader

    with MessageStore.open(root, _config(kind)) as store:
        store.append(_batch(committed))
        store.commit()
    with StoreReader.open(root) as reader:
        return sum(1 for _ in reader.iter_messages())


if __name__ == "__main__":
    print(json.dumps(run_until_full(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))))
