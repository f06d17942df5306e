"""What does a segment roll cost an append, with and without background pre-creation?

Appends fixed-size batches of pre-encoded 100-byte-body messages (ASYNC flush), paced at
``--rate`` msg/s, through many segment rolls, and times every append_encoded call. A "roll"
batch is one whose records cross into a new segment; every other batch is "inside" a segment.
Figures per variant (``prealloc``: the next segment is created and pre-touched in the
background, the default; ``no_prealloc``: created when the roll needs it): p50 / p99 / max
latency of roll batches and of inside batches, and the ratio p99(roll) / p99(inside) (target
with pre-creation: <= 2). The peer in the same run is the variant without pre-creation.
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import records  # noqa: E402

MIB = 1 << 20
FULL = {"segment_size": 16 * MIB, "rolls": 40, "batch": 5_000}
QUICK = {"segment_size": 8 * MIB, "rolls": 6, "batch": 1_000}
# Appends arrive at this rate (msg/s), 10x the pipeline's target: a segment then lasts long enough
# for its successor to be pre-touched, as with 1 GiB segments at the pipeline's pace. Unpaced
# (--rate 0), the writer fills a 16 MiB segment faster than any background pre-touch can follow.
DEFAULT_RATE = 1_000_000


def one_run(args, batch, first, segment_size: int, rolls: int, prealloc: bool, rate: float = 0.0
            ) -> tuple[np.ndarray, np.ndarray]:
    """Append until ``rolls`` rolls happened, one batch every len(batch)/rate seconds (as fast as
    possible if rate is 0); returns (latencies in ms, roll mask)."""
    from store import MessageStore, StoreConfig

    cfg = StoreConfig(segment_size=segment_size, flush_mode="async", preallocate=prealloc,
                      warm_first_segment=prealloc)
    lat: list[float] = []
    rolled: list[bool] = []
    with common.scratch(args, f"roll/{'pre' if prealloc else 'nopre'}") as root:
        store = MessageStore.open(root, cfg)
        try:
            store.append_encoded(first)        # creates (and, with prealloc, pre-touches) the first segment
            store.settle_index()               # and the first IndexFile's items, behind the append
            seg_index = store.max_offset // segment_size
            n_rolls = 0
            period = len(batch) / rate if rate else 0.0
            due = time.perf_counter()
            gc.disable()
            try:
                while n_rolls < rolls:
                    due += period
                    t0 = time.perf_counter()
                    res = store.append_encoded(batch)
                    lat.append((time.perf_counter() - t0) * 1e3)
                    now = (res.end_offset - 1) // segment_size
                    rolled.append(now != seg_index)
                    if now != seg_index:
                        n_rolls += 1
                        seg_index = now
                    pause = due - time.perf_counter()
                    if pause > 0:
                        time.sleep(pause)
            finally:
                gc.enable()
        finally:
            store.close()
    return np.asarray(lat), np.asarray(rolled)


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=DEFAULT_RATE,
                    help=f"messages/s the appends arrive at (default {DEFAULT_RATE:,}; 0: as fast as possible)")
    args = ap.parse_args(argv)
    runs = common.runs_of(args, quick_default=1)
    p = QUICK if args.quick else FULL
    rep = common.Report("roll", args)
    rep.params = dict(p, body=100, runs=runs, flush="async", rate=args.rate)
    batch = records.encode(records.message_table(p["batch"], 100))
    first = records.encode(records.message_table(1, 100, common.SEED + 1))
    rep.params["batch_bytes"] = int(batch.nbytes) if hasattr(batch, "nbytes") else None
    out = Path(args.out) / "roll"
    with common.work_dir(out, args.keep):
        for prealloc in (True, False):
            name = "prealloc" if prealloc else "no_prealloc"
            stats: dict[str, list[float]] = {k: [] for k in
                                             ("roll.p50", "roll.p99", "roll.max", "inside.p50", "inside.p99",
                                              "inside.max", "msgs_per_s")}
            warmup = 0 if args.quick else 1  # a first run warms the page cache and the allocator
            for r in range(warmup + runs):
                lat, rolled = one_run(args, batch, first, p["segment_size"], p["rolls"], prealloc, args.rate)
                if r < warmup:
                    continue
                roll, inside = lat[rolled], lat[~rolled]
                for kind, v in (("roll", roll), ("inside", inside)):
                    stats[f"{kind}.p50"].append(common.percentile(v, 50))
                    stats[f"{kind}.p99"].append(common.percentile(v, 99))
                    stats[f"{kind}.max"].append(float(v.max()))
                stats["msgs_per_s"].append(len(lat) * p["batch"] / (lat.sum() / 1e3))
            for k, v in stats.items():
                rep.add(f"{name}.{k}" + ("" if k == "msgs_per_s" else "_ms"), v,
                        "msg/s" if k == "msgs_per_s" else "ms")
            rep.ratio(f"{name}.ratio.roll_p99_vs_inside_p99", f"{name}.roll.p99_ms", f"{name}.inside.p99_ms")
            rep.ratio(f"{name}.ratio.roll_max_vs_inside_p99", f"{name}.roll.max_ms", f"{name}.inside.p99_ms")
        rep.ratio("ratio.prealloc_vs_no_prealloc_roll_p99", "prealloc.roll.p99_ms", "no_prealloc.roll.p99_ms")
    rep.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
