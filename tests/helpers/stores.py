"""Small stores for the tests (64 KiB segments): written and committed, crashed, a byte flipped,
four whole segments, a damaged body; which pages of a file are in the page cache."""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

import numpy as np

from store import Message, MessageStore, StoreConfig

SEG = 64 * 1024
CONFIG = StoreConfig(segment_size=SEG, preallocate=False)
_LIBC = ctypes.CDLL(None, use_errno=True)


def msgs(n: int, start: int = 0) -> list[Message]:
    return [Message(topic="R", queue_id=i % 3, body=(f"m{i}-".encode() * 40)[:100 + i % 50])
            for i in range(start, start + n)]


def open_store(root: Path, **kw) -> MessageStore:
    return MessageStore.open(root, StoreConfig(segment_size=SEG, preallocate=False), **kw)


def crash(s: MessageStore) -> None:
    """Leave the store as a SIGKILLed writer does: written bytes stay in the page cache, the
    abort file stays, the flock goes away with the file descriptors."""
    s.abandon()


def seg_path(root: Path, offset: int) -> Path:
    return root / "commitlog" / str(offset - offset % SEG).zfill(20)


def committed_store(root: Path, n: int = 900) -> tuple[MessageStore, list[int]]:
    s = open_store(root)
    r = s.append(msgs(n))
    s.commit(metadata={"n": n})
    return s, r.physical_offsets.tolist()


def flip(root: Path, offset: int) -> None:
    with open(seg_path(root, offset), "r+b") as f:
        f.seek(offset % SEG)
        b = f.read(1)
        f.seek(offset % SEG)
        f.write(bytes([b[0] ^ 0x10]))


def four_segments(root: Path) -> list[Path]:
    with MessageStore.open(root, StoreConfig(segment_size=SEG, preallocate=False)) as store:
        while store.max_offset < 3 * SEG + 1000:
            store.append([Message("T", bytes(900), queue_id=i % 2) for i in range(20)])
        store.commit()
    segs = sorted((root / "commitlog").iterdir())
    assert len(segs) == 4
    return segs


def damaged_store(root: Path, n: int = 100) -> tuple[list[int], int]:
    """A store closed cleanly, then one committed body's byte flipped: (offsets, the damaged one)."""
    with MessageStore.open(root, CONFIG) as store:
        offsets = store.append([Message("T", b"body-%03d " % i * 10, queue_id=i % 2) for i in range(n)]) \
            .physical_offsets.tolist()
        store.commit()
    victim = offsets[n // 2]
    seg = root / "commitlog" / f"{victim // SEG * SEG:020d}"
    data = bytearray(seg.read_bytes())
    at = data.index(b"body-%03d" % (n // 2), victim % SEG)
    data[at] ^= 0x01
    seg.write_bytes(bytes(data))
    return offsets, victim


def resident_pages(path: Path, length: int) -> np.ndarray:
    """Which of the first ``length`` bytes' pages of ``path`` are in the page cache (mincore)."""
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), length, access=mmap.ACCESS_READ)
    try:
        view = np.frombuffer(mm, dtype=np.uint8)
        addr = view.ctypes.data
        pages = -(-length // mmap.PAGESIZE)
        vec = (ctypes.c_ubyte * pages)()
        assert _LIBC.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(length), vec) == 0, \
            f"mincore: {os.strerror(ctypes.get_errno())}"
        del view
        return np.frombuffer(vec, dtype=np.uint8) & 1
    finally:
        mm.close()


def golden_stores(golden_dir: Path) -> list[Path]:
    found = sorted(p for p in golden_dir.glob("store_*") if (p / "manifest.json").is_file())
    assert found, f"no golden store_* folders in {golden_dir}"
    return found
