"""A mapped page that cannot be read arrives as SIGBUS, which ends a Python process: a segment truncated
under a reader, or a page the disk answers with EIO. Every read of the store checks the pages it is
about to parse (Segment.check_readable, the C probe store/log/_page_probe.c) and raises one
UnreadablePageError naming the segment and the offset instead; the process goes on.

Each case runs in a child process: if the check were missing, the SIGBUS would end the child (and
the test would see the signal), not pytest."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from store import Message, MessageStore, StoreConfig

ROOT = Path(__file__).resolve().parents[3]
SEG = 1 << 16
CONFIG = StoreConfig(segment_size=SEG, preallocate=False)


def run_child(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode != -signal.SIGBUS, "the child was killed by SIGBUS"
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def a_store(root: Path, n: int = 300) -> list[int]:
    with MessageStore.open(root, CONFIG) as store:
        offsets = store.append([Message("T", b"body-%04d " % i * 10, queue_id=i % 2) for i in range(n)]) \
            .physical_offsets.tolist()
        store.commit()
    return offsets


@pytest.mark.parametrize("probe", ["first_unreadable(mm, {start}, {end})",
                                   "first_unreadable_data(mm, Path({path!r}), {start}, {end})"])
def test_the_probe_finds_the_first_page_past_a_file_truncated_under_its_mapping(tmp_path: Path, probe: str) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * (16 * 4096))

    def call(start: object, end: object) -> str:
        return probe.format(path=str(path), start=start, end=end)

    found = run_child(f"""
        import json, mmap, os
        from pathlib import Path
        from store.log.segment import first_unreadable, first_unreadable_data
        f = open({str(path)!r}, "rb")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        before = {call(0, "len(mm)")}
        os.truncate({str(path)!r}, 5 * 4096 + 100)
        after = {call(4096, "len(mm)")}
        tail = {call(0, 5 * 4096)}
        print(json.dumps({{"before": before, "after": after, "tail": tail}}))
    """)
    # the page holding byte 5*4096+100 is still backed by the file; the next one is not
    assert found == {"before": -1, "after": 6 * 4096, "tail": -1}


def test_the_data_probe_leaves_reserved_blocks_never_written_out_of_memory(tmp_path: Path) -> None:
    """A segment is reserved whole (1 GiB by default) but written as records come: its unwritten
    blocks cannot fail to read, and faulting them in would fill memory with zero pages."""
    import ctypes
    import mmap
    import os

    from store.log.segment import first_unreadable_data

    path, size = tmp_path / "segment", 256 << 20
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    os.posix_fallocate(fd, 0, size)
    os.pwrite(fd, b"r" * 8192, 0)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)    # the page cache as a fresh reader finds it
    mm = mmap.mmap(fd, size)          # writable only so that ctypes can give mincore its address
    os.close(fd)
    assert first_unreadable_data(mm, path, 0, size) == -1
    libc = ctypes.CDLL(None, use_errno=True)
    pages = size // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * pages)()
    address = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    assert libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vec) == 0
    resident = sum(v & 1 for v in vec)
    # the kernel reads ahead of the 2 written pages (8 MiB here), not through the whole reservation
    assert resident < pages // 8, f"{resident} of {pages} pages faulted in for 2 pages of data"


@pytest.mark.parametrize("read", ["iter_messages", "read", "record_batches", "record_batches_at", "get_by_queue"])
def test_every_read_of_a_segment_truncated_under_the_reader_is_one_error_naming_segment_and_offset(
        tmp_path: Path, read: str) -> None:
    offsets = a_store(tmp_path)
    segment = tmp_path / "commitlog" / f"{0:020d}"
    cut = 20_000
    victim = next(o for o in offsets if o > cut)
    calls = {
        "iter_messages": "list(reader.iter_messages())",
        "read": f"reader.read({victim})",
        "record_batches": "list(reader.record_batches())",
        "record_batches_at": "list(reader.record_batches_at(*reader.queue_records(['T'])))",
        "get_by_queue": f"reader.get_by_queue('T', {offsets.index(victim) % 2}, {offsets.index(victim) // 2}, 4)",
    }
    found = run_child(f"""
        import json, os
        from store import StoreReader, UnreadablePageError
        with StoreReader.open({str(tmp_path)!r}) as reader:
            os.truncate({str(segment)!r}, {cut})
            try:
                {calls[read]}
                print(json.dumps({{"raised": None}}))
            except UnreadablePageError as exc:
                print(json.dumps({{"raised": str(exc), "segment": exc.segment, "offset": exc.offset}}))
    """)
    assert found["segment"] == segment.name
    assert cut - 4096 <= found["offset"] <= victim + 4096, found
    assert "cannot be read" in found["raised"] and f"is {cut} bytes now" in found["raised"]
    assert "\n" not in found["raised"]


def test_the_tools_reading_a_segment_whose_pages_cannot_be_read_say_so_in_one_line(tmp_path: Path) -> None:
    a_store(tmp_path)
    segment = tmp_path / "commitlog" / f"{0:020d}"
    # the tools map a segment at its size when opened; the pages are checked before they are parsed
    found = run_child(f"""
        import json, os
        from store.read.view import SegmentFile, mapped
        from store import UnreadablePageError
        seg = SegmentFile(__import__("pathlib").Path({str(segment)!r}), 0, {SEG})
        real_fstat = os.fstat
        os.fstat = lambda fd: real_fstat(fd)          # the size taken when the file was opened...
        import mmap
        real_mmap = mmap.mmap
        def mmap_then_truncate(*args, **kwargs):      # ...then the file shrinks under the mapping
            mm = real_mmap(*args, **kwargs)
            os.truncate({str(segment)!r}, 8192)
            return mm
        mmap.mmap = mmap_then_truncate
        try:
            with mapped(seg) as mv:
                print(json.dumps({{"raised": None}}))
        except UnreadablePageError as exc:
            print(json.dumps({{"raised": str(exc), "offset": exc.offset}}))
    """)
    assert found["offset"] == 8192 and segment.name in found["raised"]
