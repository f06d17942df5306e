"""What does handing the committed pages back to the kernel save the writer?

The sink's loop, append + commit per batch (SYNC), of large records into fresh stores, the commit
log's page cache below each commit point dropped (``drop_cache_behind``, the default) or kept.
The writer's new pages come from somewhere: kept, the page cache grows into memory the system has
not used yet; dropped, the next batch's pages are the ones just handed back. Per variant: msg/s,
MB/s and the process's CPU seconds per GB written (user + kernel, every thread: the warm-ahead's
page faults are the kernel's); the ratio dropped / kept; and the ceiling in the same run: write +
fdatasync of the same bytes per batch into a fresh file (the disk's speed).
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import records  # noqa: E402

MIB = 1 << 20
# (body bytes, messages, batch records): the mixed workload's size of batch in bytes (~100 MB)
FULL = (4096, 600_000, 25_000)
QUICK = (4096, 20_000, 5_000)
SEGMENT = 1024 * MIB


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_store(args, batches: list, drop: bool) -> tuple[float, float]:
    """Append + commit every batch into a fresh store; (wall seconds, CPU seconds)."""
    from store import MessageStore, StoreConfig

    cfg = StoreConfig(segment_size=SEGMENT, flush_mode="sync", drop_cache_behind=drop)
    with common.scratch(args, f"page_cache/{'drop' if drop else 'keep'}") as root:
        store = MessageStore.open(root, cfg)
        try:
            c0, t0 = cpu_seconds(), time.perf_counter()
            for b in batches:
                store.append_encoded(b)
                store.commit()
            return time.perf_counter() - t0, cpu_seconds() - c0
        finally:
            store.close()


def run_write_fdatasync(args, chunks: list) -> tuple[float, float]:
    """write + fdatasync per batch of the same bytes into a fresh file: the disk's speed."""
    with common.scratch(args, "page_cache/write") as root:
        fd = os.open(root / "data", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            c0, t0 = cpu_seconds(), time.perf_counter()
            common.write_fdatasync(fd, chunks)
            return time.perf_counter() - t0, cpu_seconds() - c0
        finally:
            os.close(fd)


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    args = ap.parse_args(argv)
    runs = common.runs_of(args, quick_default=1)
    body, n, batch = QUICK if args.quick else FULL
    rep = common.Report("page_cache", args)
    tables = [records.message_table(min(batch, n - s), body, common.SEED, s) for s in range(0, n, batch)]
    batches = [records.encode(t) for t in tables]
    chunks = [records.batch_bytes(b) for b in batches]
    total = sum(len(c) for c in chunks)
    rep.params = {"body": body, "messages": n, "batch": batch, "bytes": total, "segment_size": SEGMENT,
                  "runs": runs}
    rep.log(f"== {n:,} messages of {body} bytes in batches of {batch:,} ({total / 1e9:.2f} GB), append + commit "
            f"per batch, SYNC")
    results: dict[str, list[tuple[float, float]]] = {"drop": [], "keep": [], "write_fdatasync": []}
    with common.work_dir(Path(args.out) / "page_cache", args.keep):
        for _ in range(runs):     # alternated: a variant run later finds memory the earlier ones freed
            results["drop"].append(run_store(args, batches, True))
            results["keep"].append(run_store(args, batches, False))
            results["write_fdatasync"].append(run_write_fdatasync(args, chunks))
    for name, got in results.items():
        rep.add(f"{name}.msgs_per_s", [n / wall for wall, _ in got], "msg/s")
        rep.add(f"{name}.mb_per_s", [total / wall / 1e6 for wall, _ in got], "MB/s")
        rep.add(f"{name}.cpu_s_per_gb", [cpu / (total / 1e9) for _, cpu in got], "s/GB")
    rep.ratio("ratio.drop_vs_keep", "drop.msgs_per_s", "keep.msgs_per_s")
    rep.ratio("ratio.cpu_keep_vs_drop", "keep.cpu_s_per_gb", "drop.cpu_s_per_gb")
    rep.ratio("ratio.drop_vs_write_fdatasync", "drop.msgs_per_s", "write_fdatasync.msgs_per_s")
    rep.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
