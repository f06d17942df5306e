"""What does adopting a broker's appends cost an open?

A store of committed records, then a tail another writer appended past the commit point (records,
their consume-queue units and index items; no announcement in append.intent, as a RocketMQ broker
leaves it): 275,000 records of ~880 bytes in full mode (the ~244 MB a 5.x broker appended for pop
consumption in issue 53's trial), 20,000 in quick mode. The figure: ``adopt_open_s``, MessageStore.open
adopting the tail (validate it, find whose it is, complete its consume-queue units, index it, move the
commit point). In the same run, the peers: ``clean_open_s``, the same store opened again once the tail
is committed (what an open costs without a tail), and ``revalidate_s``, the commit log's own check of
the same bytes (store.scan's scan_segment_fast: magic, CRC, length, PHYSICALOFFSET), the floor of any
adoption that trusts nothing it did not check.
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import records  # noqa: E402

MIB = 1 << 20
FULL = {"segment_size": 64 * MIB, "committed": 200_000, "tail": 275_000, "body": 800, "batch": 25_000}
QUICK = {"segment_size": 4 * MIB, "committed": 10_000, "tail": 20_000, "body": 800, "batch": 5_000}


def build(root: Path, p: dict) -> tuple[int, int]:
    """The store: committed records, then a tail that is not ours. Returns (commit point, end)."""
    from store import MessageStore, StoreConfig

    cfg = StoreConfig(segment_size=p["segment_size"])
    s = MessageStore.open(root, cfg)
    for start in range(0, p["committed"], p["batch"]):
        s.append_encoded(records.encode(records.message_table(p["batch"], p["body"], start=start)))
    committed = s.commit().offset
    for start in range(0, p["tail"], p["batch"]):
        s.append_encoded(records.encode(records.message_table(p["batch"], p["body"], start=p["committed"] + start)))
    s.flush()
    end = s.max_offset
    s.close()
    (root / "append.intent").unlink()       # nothing says the tail is ours: another writer's
    return committed, end


def revalidate(root: Path, start: int, end: int, segment_size: int) -> float:
    import numpy as np  # noqa: F401  (the scan's import, outside the clock)
    from store.format.codec import CodecConfig
    from store.read.view import mapped, open_view
    from store.scan.record_check import scan_segment_fast

    src = open_view(root)
    t0 = time.perf_counter()
    for seg in src.segments:
        if seg.end_offset <= start or seg.base_offset >= end:
            continue
        with mapped(seg) as mv:
            scan_segment_fast(mv, seg.base_offset, min(seg.size, end - seg.base_offset), CodecConfig(),
                              start=max(start - seg.base_offset, 0))
    return time.perf_counter() - t0


def timed_open(root: Path, segment_size: int) -> tuple[float, int, int]:
    from store import MessageStore, StoreConfig

    t0 = time.perf_counter()
    s = MessageStore.open(root, StoreConfig(segment_size=segment_size))
    secs = time.perf_counter() - t0
    out = (secs, s.committed_offset, s.open_report.adopted_records)
    s.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    args = ap.parse_args(argv)
    logging.getLogger("store").setLevel(logging.ERROR)      # the "adopted" warning, once per run
    runs = common.runs_of(args, quick_default=1)
    p = dict(QUICK if args.quick else FULL)
    rep = common.Report("adopt", args)
    rep.params = dict(p, runs=runs)
    out = Path(args.out) / "adopt"
    adopt, clean, reval = [], [], []
    with common.work_dir(out, args.keep):
        out.mkdir(parents=True, exist_ok=True)
        pristine = out / "pristine"
        committed, end = build(pristine, p)
        rep.log(f"store: commit point {committed:,}, a tail of {end - committed:,} bytes past it")
        rep.params["tail_bytes"] = end - committed
        for _ in range(runs):
            root = out / "store"
            shutil.rmtree(root, ignore_errors=True)
            shutil.copytree(pristine, root)
            secs, at, n = timed_open(root, p["segment_size"])
            if at != end or n != p["tail"]:
                raise RuntimeError(f"the open adopted {n} records up to {at}, not {p['tail']} up to {end}")
            adopt.append(secs)
            clean.append(timed_open(root, p["segment_size"])[0])
            reval.append(revalidate(root, committed, end, p["segment_size"]))
        rep.add("adopt_open_s", adopt, "s")
        rep.add("adopt.records_per_s", [p["tail"] / s for s in adopt], "records/s")
        rep.add("adopt.mb_per_s", [(end - committed) / s / 1e6 for s in adopt], "MB/s")
        rep.add("clean_open_s", clean, "s")
        rep.add("revalidate_s", reval, "s")
        rep.ratio("ratio.revalidate_vs_adopt", "revalidate_s", "adopt_open_s")
    rep.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
