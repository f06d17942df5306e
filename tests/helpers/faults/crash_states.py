"""Disk states a power cut could leave, SQLite's way (its src/test6.c), for tests/e2e/crash/test_crash_states.py.

A ``SyncRecorder`` wraps the store's sync points (``os.fsync``, ``os.fdatasync``, a segment's msync,
an IndexFile's msync) and snapshots every file of the store right after each one returns: what the
disk holds for sure once sync ``k`` is done. A power cut between sync ``k`` and ``k + 1`` may then
leave snapshot ``k`` plus any subset of the 4 KiB pages that differ in snapshot ``k + 1`` (per
file), a page torn at a 512-byte sector (the new sectors of its prefix, the old ones after), and a
file's size from either snapshot. A file replaced by a rename between the two (another inode) is
whole, old or new: rename never mixes two files' pages; a file created or deleted between them may
or may not be there. ``per_file`` states are harsher (ALICE's way): a file's pages are durable only
as of its own last sync (fsync of its fd, msync of its mapping), sizes and names as above.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from store.index.file import IndexFile
from store.log.segment import Segment

PAGE = 4096
SECTOR = 512


@dataclass(frozen=True)
class FileImage:
    data: bytes
    inode: int


@dataclass(frozen=True)
class Snapshot:
    """The store's files right after one sync returned; ``confirmed``: the batches whose commit had
    returned by then."""
    what: str
    files: dict[str, FileImage]
    confirmed: int
    synced: int = -1        # the inode the sync made durable (-1: a directory's, or unknown)


@dataclass(frozen=True)
class CrashState:
    """One disk a power cut between sync ``after`` and the next could leave: ``files`` (path ->
    bytes); every batch below ``confirmed`` had its commit return before the next sync."""
    after: int
    files: dict[str, bytes]
    confirmed: int
    how: str

    def write(self, root: Path) -> None:
        for rel, data in self.files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)


class SyncRecorder:
    """Snapshots ``root`` at every sync of the process while :meth:`recording` is on."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.snapshots: list[Snapshot] = []
        self.confirmed = 0
        self._lock = threading.Lock()

    def snap(self, what: str, synced: int = -1) -> None:
        with self._lock:
            files = {}
            for dirpath, _dirs, names in os.walk(self.root):
                for name in names:
                    path = Path(dirpath) / name
                    try:
                        with open(path, "rb") as f:
                            files[str(path.relative_to(self.root))] = FileImage(f.read(), os.fstat(f.fileno()).st_ino)
                    except FileNotFoundError:     # deleted meanwhile by another thread of the writer
                        continue
            self.snapshots.append(Snapshot(what, files, self.confirmed, synced))

    @contextmanager
    def recording(self) -> Iterator[SyncRecorder]:
        def after(original: Callable[..., Any], what: str) -> Callable[..., Any]:
            def synced(*args: Any, **kwargs: Any) -> Any:
                first = args[0]
                inode = os.fstat(first).st_ino if isinstance(first, int) else os.stat(first.path).st_ino
                result = original(*args, **kwargs)
                self.snap(what, -1 if isinstance(first, int) and os.path.isdir(f"/proc/self/fd/{first}") else inode)
                return result
            return synced

        with pytest.MonkeyPatch.context() as m:
            m.setattr(os, "fsync", after(os.fsync, "fsync"))
            m.setattr(os, "fdatasync", after(os.fdatasync, "fdatasync"))
            m.setattr(Segment, "flush", after(Segment.flush, "msync segment"))
            m.setattr(IndexFile, "flush", after(IndexFile.flush, "msync index"))
            yield self

    def crash_state(self, k: int, rng: random.Random, per_file: bool = False) -> CrashState:
        """A power cut after sync ``k``: snapshot ``k`` and a random part of what sync ``k + 1``
        would have made durable (nothing more after the last sync). ``per_file``: harsher, ALICE's
        way: a file's pages are only durable as of its own last sync, any page written since may
        be lost (names still as of snapshot ``k``)."""
        old = self.snapshots[k]
        if k + 1 == len(self.snapshots):
            return CrashState(k, {p: f.data for p, f in old.files.items()}, old.confirmed, "last sync")
        new = self.snapshots[k + 1]
        files: dict[str, bytes] = {}
        notes = []
        durable = self.durable(k) if per_file else {}
        for rel in sorted(old.files.keys() | new.files.keys()):
            a, b = old.files.get(rel), new.files.get(rel)
            if a is not None and b is not None and a.inode == b.inode:
                # sizes as of either snapshot: ftruncate and fallocate reach the journal with the next
                # sync of anything (ext4's ordered metadata), a file's pages only with its own sync
                data, note = mixed_pages(durable.get(a.inode, b"") if per_file else a.data, b.data, rng,
                                         (len(a.data), len(b.data)))
                files[rel] = data
                if note:
                    notes.append(f"{rel}: {note}")
                continue
            pick = a if b is None else b if a is None else rng.choice((a, b))
            if (a is None or b is None) and rng.random() < 0.5:
                pick = None
            if pick is not None:
                files[rel] = pick.data
            if a is None or b is None or a.data != b.data:
                notes.append(f"{rel}: {'none' if pick is None else 'old' if pick is a else 'new'}")
        # the commit that returns before sync k + 1 did all its syncs by k
        return CrashState(k, files, new.confirmed, "; ".join(notes) or "no change")


    def durable(self, k: int) -> dict[int, bytes]:
        """Each inode's bytes as of its last sync up to sync ``k``. An inode missing from the
        snapshot before is a new file (inode numbers are reused): what an older one synced goes."""
        out: dict[int, bytes] = {}
        before: set[int] = set()
        for snap in self.snapshots[:k + 1]:
            now = {image.inode for image in snap.files.values()}
            for inode in now - before:
                out.pop(inode, None)
            for image in snap.files.values():
                if image.inode == snap.synced:
                    out[image.inode] = image.data
            before = now
        return out


def mixed_pages(old: bytes, new: bytes, rng: random.Random, sizes: tuple[int, int] | None = None
                ) -> tuple[bytes, str]:
    """``old`` with a random part of the pages that differ in ``new``: each such page stays old,
    becomes new or is torn (its first 1-7 sectors new); one of ``sizes`` (default: either's)."""
    sizes = sizes or (len(old), len(new))
    if old == new and len(old) in sizes:
        return old, ""
    size = rng.choice(sizes)
    a = old[:size].ljust(size, b"\0")
    b = new[:size].ljust(size, b"\0")
    out = bytearray(a)
    kept = torn = changed = 0
    for start in range(0, size, PAGE):
        end = min(start + PAGE, size)
        if a[start:end] == b[start:end]:
            continue
        changed += 1
        r = rng.random()
        if r < 0.4:
            continue
        if r < 0.75 or end - start <= SECTOR:
            out[start:end] = b[start:end]
            kept += 1
        else:
            cut = start + SECTOR * rng.randint(1, (end - start - 1) // SECTOR)
            out[start:cut] = b[start:cut]
            torn += 1
    return bytes(out), f"size {size} of {len(old)}/{len(new)}, {kept} new + {torn} torn of {changed} pages"
