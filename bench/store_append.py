"""How fast does the store append pre-encoded records, against the memory and disk ceilings
and against Apache RocketMQ's own store, on the same messages?

Per body size (100 B, 1 KiB, 16 KiB) and flush mode (ASYNC, SYNC = one durable flush per batch):
- ``py_append_encoded``: MessageStore.append_encoded of pre-encoded batches (+ flush per batch in SYNC),
  index off;
- ``py_append_encoded_index``: the same with the index on, the batches carrying their records' index
  keys as the job's read tasks ship them (store.index.shipped: found and hashed where the batch is
  encoded, not timed, as the encoding is not); the store puts them behind the append, on the copy's
  helper thread (timed until the index holds every batch);
- ``py_append_encoded_index_found``: the index on, batches without keys: the store finds and
  hashes them in the commit log first (a store user who hands the store bare batches);
- ``py_append_table``: MessageStore.append_table (encode_batch, body CRCs included, + append);
- ``py_append_commit`` (SYNC only): append_encoded + commit per batch, what the sink does;
- ``rocketmq4_*`` / ``rocketmq5_*``: RocketMQ's DefaultMessageStore (rocketmq-store 4.9.7 and 5.3.3)
  putting the same messages, index off and on (``_index``), in batches (``_batch``: asyncPutMessages,
  one MessageExtBatch per queue per batch) and one by one (``_single``), its consume queues and
  index built by its own dispatcher before the clock stops; each store reopened and checked
  (bench/rocketmq_store.py);
- ceilings: ``mmap_copy`` (bulk copy of the same bytes into a pre-touched mapping, memory speed)
  and ``write_fdatasync`` (write + fdatasync per batch, disk speed).
Segments are pre-touched before timing (``warm_first_segment``), and so are the items of the first
IndexFile, made when the warm-up batch is indexed: page faults are in neither side of a ratio (on this
VM a new page costs up to 9 us: BENCHMARKS.md, "Page cache behind the writer"). The data fits one
segment and one IndexFile; rolls are bench/roll.py's. Our modes of one flush mode take turns, a run
of each a round (bench/common.rounds): the index's ratios compare runs taken side by side.
"""

from __future__ import annotations

import mmap
import os
import shutil
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import records  # noqa: E402
import rocketmq_store  # noqa: E402

MIB = 1 << 20
# (body bytes, messages, batch records); the 2,000,000 x 100 B in batches of 100,000, and
# the big bodies at a similar byte volume (2,000,000 x 16 KiB would be 32 GiB).
FULL_CASES = [(100, 2_000_000, 100_000), (1024, 500_000, 50_000), (16384, 30_000, 3_000)]
QUICK_CASES = [(100, 50_000, 25_000), (1024, 20_000, 10_000), (16384, 2_000, 1_000)]
FULL_SEGMENT = 1024 * MIB
QUICK_SEGMENT = 64 * MIB


def store_config(segment_size: int, flush: str, index: bool = False) -> object:
    from store import IndexConfig, StoreConfig

    # No background pre-creation: the data fits the first segment, pre-touched when it is created
    # (before timing); a concurrent 1 GiB pre-touch would only add noise on 2 cores.
    # The index is off but in the ``encoded_index`` mode (the JVM peer builds none); the index's own
    # cost is that mode's figure.
    return StoreConfig(segment_size=segment_size, flush_mode=flush, preallocate=False, warm_first_segment=True,
                       index=IndexConfig(enabled=index))


def open_warm_store(root: Path, segment_size: int, flush: str, first: object, index: bool = False) -> object:
    """A fresh store whose first segment exists and is pre-touched (one record appended)."""
    from store import MessageStore

    store = MessageStore.open(root, store_config(segment_size, flush, index))
    store.append_encoded(first)
    store.flush()
    return store


def run_py(args, batches, tables, first, segment_size: int, flush: str, mode: str, keyed: list | None = None) -> float:
    """One timed run of the store; returns seconds."""
    with common.scratch(args, f"store_append/store-{mode}-{flush}") as root:
        store = open_warm_store(root, segment_size, flush, first, index=mode.startswith("encoded_index"))
        try:
            t0 = time.perf_counter()
            # In SYNC mode append_* returns only once the batch is durable (one flush per batch).
            if mode in ("encoded", "encoded_index_found"):
                for b in batches:
                    store.append_encoded(b)
            elif mode == "encoded_index":
                for b in keyed:
                    store.append_encoded(b)
            elif mode == "table":
                for t in tables:
                    store.append_table(t)
            elif mode == "commit":
                for b in batches:
                    store.append_encoded(b)
                    store.commit()
            else:
                raise ValueError(mode)
            store.settle_queues()       # the consume queues and the index are written behind: count them in
            store.settle_index()
            elapsed = time.perf_counter() - t0
        finally:
            store.close()
    return elapsed


def pretouched_file(path: Path, size: int) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)


def run_mmap_copy(path: Path, chunks: list[np.ndarray], size: int) -> float:
    """Bulk copy of the encoded bytes into a pre-touched shared mapping: memory speed."""
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), size)
        try:
            buf = np.frombuffer(mm, dtype=np.uint8)
            buf[::4096] = 0  # pre-touch, as the store's segments are
            t0 = time.perf_counter()
            pos = 0
            for c in chunks:
                buf[pos:pos + len(c)] = c
                pos += len(c)
            elapsed = time.perf_counter() - t0
            del buf
        finally:
            mm.close()
    return elapsed


def run_write_fdatasync(path: Path, chunks: list[np.ndarray]) -> float:
    """write + fdatasync of the encoded bytes, one fdatasync per batch: disk speed."""
    fd = os.open(path, os.O_WRONLY)
    try:
        t0 = time.perf_counter()
        common.write_fdatasync(fd, chunks)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
    return elapsed


# --- the peer: RocketMQ's own store (bench/rocketmq_store.py) ----------------------------------
def rocketmq_peer(rep: common.Report, out: Path, tag: str, tables: list, first_table: object, data: Path,
                  total: int, batch: int, segment_size: int, runs: int, warmup: int) -> None:
    """RocketMQ's DefaultMessageStore on the same records (``data``, after the warm-up records of
    ``first_table``): both flush modes, index off and on, in batches and one by one; its figures and
    the ratios ours / RocketMQ's."""
    import pyarrow as pa

    first_file = out / "first.bin"
    first_file.write_bytes(records.batch_bytes(records.encode(first_table)).tobytes())
    n = sum(t.num_rows for t in tables)
    setup = rocketmq_store.Setup(records=data, messages=n, first=first_file, work=out / "rocketmq",
                                 segment_size=segment_size, batch=batch, runs=runs, warmup=warmup)
    rocketmq_store.measure(rep, setup, tag, n, total, pa.concat_tables(tables), first_table)
    first_file.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--no-peers", action="store_true",
                    help="leave RocketMQ's store out (most of a full run's 45 minutes): our figures and ceilings only")
    args = ap.parse_args(argv)
    runs = common.runs_of(args, quick_default=1)
    warmup = 0 if args.quick else 1
    cases = QUICK_CASES if args.quick else FULL_CASES
    segment_size = QUICK_SEGMENT if args.quick else FULL_SEGMENT
    rep = common.Report("store_append", args)
    rep.params = {"cases": [{"body": b, "messages": n, "batch": k} for b, n, k in cases],
                  "segment_size": segment_size, "topic_bytes": len(common.TOPIC), "properties_bytes": 50,
                  "queues": common.QUEUES, "runs": runs}
    out = Path(args.out) / "store_append"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with common.work_dir(out, args.keep):
        for body, n, batch in cases:
            tag = f"body{body}"
            rep.log(f"== {n:,} messages, {body}-byte bodies, batches of {batch:,}")
            tables = [records.message_table(min(batch, n - s), body, common.SEED, s) for s in range(0, n, batch)]
            batches = [records.encode(t) for t in tables]
            keyed = [records.with_index_keys(b) for b in batches]     # as the read tasks ship them
            # the warm-up batch (before timing) creates the segment and every queue's directory
            first_table = records.message_table(records.QUEUES, body, common.SEED + 1)
            first = records.encode(first_table)
            chunks = [np.ascontiguousarray(records.batch_bytes(b)) for b in batches]
            total = sum(len(c) for c in chunks)
            rep.params[f"{tag}.bytes"] = total
            data = out / "records.bin"
            with open(data, "wb") as f:
                for c in chunks:
                    f.write(c.tobytes())
                # written back now, not by the kernel while the first figures are taken
                f.flush()
                os.fsync(f.fileno())
            target = out / "target.bin"
            size = -(-(total + 4096) // 4096) * 4096

            def figure(name: str, secs: list[float]) -> None:
                rep.add(f"{name}.msgs_per_s", [n / s for s in secs], "msg/s")
                rep.add(f"{name}.mb_per_s", [total / s / 1e6 for s in secs], "MB/s")

            for flush in ("async", "sync"):
                p = f"{flush}.{tag}"
                modes = ["encoded", "encoded_index", "encoded_index_found", "table"] + \
                    (["commit"] if flush == "sync" else [])
                # the modes take turns (common.rounds): index on / off is a ratio of two of them
                timed = common.rounds({mode: partial(run_py, args, batches, tables, first, segment_size, flush, mode,
                                                     keyed) for mode in modes}, runs, warmup=warmup)
                for mode in modes:
                    figure(f"{p}.py_append_{mode}", timed[mode])
                pretouched_file(target, size)
                if flush == "async":
                    secs = common.repeat(lambda: run_mmap_copy(target, chunks, size), runs, warmup=warmup)
                    figure(f"{p}.mmap_copy", secs)
                    rep.ratio(f"{p}.ratio.py_encoded_vs_mmap_copy", f"{p}.py_append_encoded.msgs_per_s",
                              f"{p}.mmap_copy.msgs_per_s")
                else:
                    secs = common.repeat(lambda: run_write_fdatasync(target, chunks), runs, warmup=warmup)
                    figure(f"{p}.write_fdatasync", secs)
                    rep.ratio(f"{p}.ratio.py_encoded_vs_write_fdatasync", f"{p}.py_append_encoded.msgs_per_s",
                              f"{p}.write_fdatasync.msgs_per_s")
                    rep.ratio(f"{p}.ratio.py_commit_vs_write_fdatasync", f"{p}.py_append_commit.msgs_per_s",
                              f"{p}.write_fdatasync.msgs_per_s")
                target.unlink(missing_ok=True)
                rep.ratio(f"{p}.ratio.index_on_vs_off", f"{p}.py_append_encoded_index.msgs_per_s",
                          f"{p}.py_append_encoded.msgs_per_s")
                rep.ratio(f"{p}.ratio.index_found_on_vs_off", f"{p}.py_append_encoded_index_found.msgs_per_s",
                          f"{p}.py_append_encoded.msgs_per_s")
            # --quick: the peer at the first size only (a store's open and close take seconds)
            if not args.no_peers and (not args.quick or body == cases[0][0]):
                rocketmq_peer(rep, out, tag, tables, first_table, data, total, batch, segment_size, runs, warmup)
            data.unlink(missing_ok=True)
            del tables, batches, keyed, chunks
    rep.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
