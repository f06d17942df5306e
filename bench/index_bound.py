"""What bounds the index behind an ASYNC append (store_append.py's ``index_on_vs_off``)?

Per body size, on the batches bench/store_append.py appends (pre-encoded, 100 B: 2,000,000 records
in batches of 100,000; 1 KiB: 500,000 in 50,000), the wall time and the process CPU time (every
thread) of:
- ``append_off`` / ``append_on``: MessageStore.append_encoded, ASYNC, index off / on (timed until the
  index holds every batch), as store_append.py's ``py_append_encoded`` / ``_index``;
- ``index_alone``: the index's C pass over the same records (keys found, hashed and put:
  IndexFile.put_records), on one thread with nothing beside it, into a new IndexFile as the store's;
- ``put_only``: IndexFile.put of the same keys hashed beforehand (not timed): what the index would
  still cost the writer if the read tasks shipped each record's key hashes with its batch.
The ceiling of on / off: the append off keeps ``cpu_off / wall_off`` of the cores busy; adding the
index's CPU, the best wall time is max(wall_off, (cpu_off + cpu_index) / cores), so on / off is at
most wall_off / that (``bound_found``: index_alone's CPU; ``bound_shipped``: put_only's). Printed
with the measured on / off and its ratio to the bound.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import records  # noqa: E402
import store_append  # noqa: E402

FULL_CASES = store_append.FULL_CASES[:2]      # 100 B and 1 KiB: the sizes whose target is missed
QUICK_CASES = store_append.QUICK_CASES[:2]
TARGET = 0.8                                  # issue 37: index on / off at every size, ASYNC and SYNC


def timed(fn) -> tuple[float, float]:
    """(wall, process CPU) seconds of ``fn()``."""
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def run_append(root: Path, batches: list, first: object, segment_size: int, index: bool) -> tuple[float, float]:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    store = store_append.open_warm_store(root, segment_size, "async", first, index=index)
    try:
        def append() -> None:
            for b in batches:
                store.append_encoded(b)
            store.settle_queues()
            store.settle_index()
        return timed(append)
    finally:
        store.close()
        shutil.rmtree(root, ignore_errors=True)


def new_index_file(path: Path) -> object:
    """A new IndexFile of the default geometry, as IndexService makes one."""
    from store.index.file import IndexFile, IndexHeader
    from store.index.service import IndexConfig

    path.unlink(missing_ok=True)
    cfg = IndexConfig()
    f = IndexFile(path, cfg.max_hash_slot_num, cfg.max_index_num, create=True, start=IndexHeader())
    return f


def run_index_alone(path: Path, batches: list) -> tuple[float, float]:
    f = new_index_file(path)
    try:
        def index() -> None:
            base = 0
            for b in batches:
                status, _, _ = f.put_records(b.data, np.ascontiguousarray(b.offsets, np.int64), 0, 0, base)
                if status != 0:
                    raise RuntimeError(f"the index pass stopped early (status {status})")
                base += int(b.data.nbytes)
        return timed(index)
    finally:
        f.close()
        path.unlink(missing_ok=True)


def run_put_only(path: Path, keys: list) -> tuple[float, float]:
    f = new_index_file(path)
    try:
        def put() -> None:
            for k in keys:
                f.put(k.key_hash, k.phy_offset, k.store_timestamp)
        return timed(put)
    finally:
        f.close()
        path.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    from store.index.build import record_keys

    args = common.parser(__doc__.splitlines()[0]).parse_args(argv)
    runs = common.runs_of(args)
    cases = QUICK_CASES if args.quick else FULL_CASES
    segment_size = store_append.QUICK_SEGMENT if args.quick else store_append.FULL_SEGMENT
    cores = os.cpu_count() or 1
    rep = common.Report("index_bound", args)
    rep.params = {"cases": [{"body": b, "messages": n, "batch": k} for b, n, k in cases], "cores": cores,
                  "runs": runs, "segment_size": segment_size}
    out = Path(args.out) / "index_bound"
    with common.work_dir(out, args.keep):
        out.mkdir(parents=True, exist_ok=True)
        for body, n, batch in cases:
            tag = f"body{body}"
            rep.log(f"== {n:,} messages, {body}-byte bodies, batches of {batch:,}")
            tables = [records.message_table(min(batch, n - s), body, common.SEED, s) for s in range(0, n, batch)]
            batches = [records.encode(t) for t in tables]
            first = records.encode(records.message_table(records.QUEUES, body, common.SEED + 1))
            keys, base = [], 0
            for b in batches:
                keys.append(record_keys(b.data, np.ascontiguousarray(b.offsets, np.int64), base))
                base += int(b.data.nbytes)
            shipped = [records.with_index_keys(b) for b in batches]
            rep.params[f"{tag}.keys"] = sum(len(k) for k in keys)
            found: dict[str, list[tuple[float, float]]] = {}
            for _ in range(runs + 1):       # the first round warms up
                for name, fn in (("append_off", lambda: run_append(out / "store", batches, first, segment_size, False)),
                                 ("append_on", lambda: run_append(out / "store", batches, first, segment_size, True)),
                                 ("append_on_shipped",
                                  lambda: run_append(out / "store", shipped, first, segment_size, True)),
                                 ("index_alone", lambda: run_index_alone(out / "index", batches)),
                                 ("put_only", lambda: run_put_only(out / "index", keys))):
                    found.setdefault(name, []).append(fn())
            for name, got in found.items():
                got = got[1:]
                rep.add(f"{tag}.{name}.wall_ms", [w * 1e3 for w, _ in got], "ms")
                rep.add(f"{tag}.{name}.cpu_ns_per_msg", [c / n * 1e9 for _, c in got], "ns")
            med = {name: (float(np.median([w for w, _ in got[1:]])), float(np.median([c for _, c in got[1:]])))
                   for name, got in found.items()}
            wall_off, cpu_off = med["append_off"]
            rep.add(f"{tag}.append_off.cores_busy", cpu_off / wall_off, "cores")
            for bound, index_cpu in (("bound_found", med["index_alone"][1]), ("bound_shipped", med["put_only"][1])):
                rep.add(f"{tag}.{bound}", wall_off / max(wall_off, (cpu_off + index_cpu) / cores), "on/off")
            rep.add(f"{tag}.measured", wall_off / med["append_on"][0], "on/off")
            rep.add(f"{tag}.measured_shipped", wall_off / med["append_on_shipped"][0], "on/off")
            rep.add(f"{tag}.target", TARGET, "on/off")
            rep.ratio(f"{tag}.ratio.measured_vs_bound_found", f"{tag}.measured", f"{tag}.bound_found")
            rep.ratio(f"{tag}.ratio.measured_shipped_vs_bound_shipped", f"{tag}.measured_shipped",
                      f"{tag}.bound_shipped")
            rep.ratio(f"{tag}.ratio.bound_shipped_vs_target", f"{tag}.bound_shipped", f"{tag}.target")
    rep.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
