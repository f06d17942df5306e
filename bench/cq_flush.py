"""What a flush of N dirty consume-queue files costs, each way of syncing them (store.queue.sync).

N files of RocketMQ's consume-queue length (6,000,000 bytes, sparse, a page reserved), each with
1,000 bytes written, then made durable by: an fsync each, an fdatasync each, sync_file_range
(start the writeback of all) then an fdatasync each, and one syncfs of the filesystem. The peer
is the fsync loop (the flush before issue 64); the ratio is each way's time over it. Usage:
    .venv/bin/python bench/cq_flush.py [--quick] [--json] [--runs N]
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

CQ_FILE = 300_000 * 20
SYNC_FILE_RANGE_WRITE = 2


def ways(libc: ctypes.CDLL, fds: list[int]) -> dict[str, Callable[[], None]]:
    def fsync_each() -> None:
        for fd in fds:
            os.fsync(fd)

    def fdatasync_each() -> None:
        for fd in fds:
            os.fdatasync(fd)

    def writeback_then_fdatasync() -> None:
        for fd in fds:
            libc.sync_file_range(fd, ctypes.c_int64(0), ctypes.c_int64(0), SYNC_FILE_RANGE_WRITE)
        fdatasync_each()

    def syncfs() -> None:
        if libc.syncfs(fds[0]) != 0:
            raise OSError(ctypes.get_errno(), "syncfs")

    return {"fsync_each": fsync_each, "fdatasync_each": fdatasync_each,
            "writeback_then_fdatasync": writeback_then_fdatasync, "syncfs": syncfs}


def main() -> None:
    args = common.parser(__doc__.splitlines()[0]).parse_args()
    rep = common.Report("cq_flush", args)
    n = 600 if args.quick else 6000
    runs = common.runs_of(args, 1)
    rep.params = {"dirty_files": n, "bytes_written_each": 1000}
    libc = ctypes.CDLL(None, use_errno=True)
    with common.scratch(args, "cq_flush") as work:
        fds = []
        for i in range(n):
            fd = os.open(work / str(i), os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(fd, CQ_FILE)
            os.posix_fallocate(fd, 0, 4096)
            fds.append(fd)
        os.sync()
        times: dict[str, list[float]] = {k: [] for k in ways(libc, fds)}
        k = 0
        try:
            for _ in range(runs):
                for name, way in ways(libc, fds).items():
                    k += 1
                    for fd in fds:
                        os.pwrite(fd, bytes([k % 250 + 1]) * 1000, (k * 1000) % 3000)
                    t0 = time.perf_counter()
                    way()
                    times[name].append(time.perf_counter() - t0)
        finally:
            for fd in fds:
                os.close(fd)
    for name, values in times.items():
        rep.add(f"{name}.q{n}_s", values, "s")
    for name in times:
        rep.ratio(f"{name}.over_fsync_each", f"{name}.q{n}_s", f"fsync_each.q{n}_s")
    rep.note("a shared machine: other jobs' dirty pages are written by syncfs too, and their load slows all")
    rep.finish()


if __name__ == "__main__":
    main()
