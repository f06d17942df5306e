"""How long does opening a store take, after a clean close and after a SIGKILL, as it grows?

One store is grown to 1, 4 and 16 full segments (1 GiB each in full mode; 4 MiB in quick
mode) of 1 KiB-body messages by a writer subprocess that commits every batch. At each size:
- ``clean_open``: MessageStore.open after a clean close (must not grow with the store: < 1 s);
- ``kill_open``: open after the writer was SIGKILLed right after a commit (abnormal recovery
  from the segment the checkpoint points at, as RocketMQ's recoverAbnormally);
- ``revalidate_all``: the same with the checkpoint file removed, so recovery re-validates
  every record of the store (magic, CRC, length, PHYSICALOFFSET): its MB/s is the figure;
each with the page cache warm (``warm``) and with the segments evicted first (``cold``).
The peer in the same run is the raw read speed of the same segment files (``raw_read``).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import records  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30
FULL = {"segment_size": GIB, "sizes": [1, 4, 16], "batch": 20_000}
QUICK = {"segment_size": 4 * MIB, "sizes": [1, 4, 16], "batch": 500}
BODY = 1024


def writer_child(root: str, segment_size: int, target: int, batch_records: int) -> int:
    """Subprocess: open the store, append + commit batches until its end reaches ``target``
    (at least one batch), say "ready", and wait to be killed."""
    from store import MessageStore, StoreConfig

    store = MessageStore.open(root, StoreConfig(segment_size=segment_size, flush_mode="async"))
    batch = records.encode(records.message_table(batch_records, BODY))
    while True:
        store.append_encoded(batch)
        store.commit()
        if store.max_offset >= target:
            break
    print(f"ready {store.max_offset}", flush=True)
    time.sleep(3600)
    return 0


def kill_writer(root: Path, segment_size: int, target: int, batch_records: int) -> int:
    """Run a writer up to ``target`` bytes and SIGKILL it; returns the store end it reported."""
    proc = subprocess.Popen([sys.executable, __file__, "--child-writer", str(root), str(segment_size),
                             str(target), str(batch_records)], stdout=subprocess.PIPE, text=True,
                            env=common.env_for_subprocess())
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("ready"):
            raise RuntimeError(f"writer child did not get ready (exit {proc.poll()}): {line!r}")
        return int(line.split()[1])
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)


def segment_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "commitlog").iterdir() if p.name.isdigit())


def timed_open(root: Path, segment_size: int, cold: bool) -> tuple[float, int]:
    from store import MessageStore, StoreConfig

    if cold:
        common.drop_tree_cache(root)
    t0 = time.perf_counter()
    store = MessageStore.open(root, StoreConfig(segment_size=segment_size))
    elapsed = time.perf_counter() - t0
    end = store.committed_offset
    store.close()
    return elapsed, end


def raw_read(root: Path, nbytes: int, cold: bool) -> float:
    """Seconds to read the first ``nbytes`` of the segment files with 8 MiB reads."""
    if cold:
        common.drop_tree_cache(root)
    buf = bytearray(8 * MIB)
    mv = memoryview(buf)
    left = nbytes
    t0 = time.perf_counter()
    for p in segment_files(root):
        with open(p, "rb", buffering=0) as f:
            while left > 0:
                n = f.readinto(mv[:min(len(buf), left)])
                if not n:
                    break
                left -= n
        if left <= 0:
            break
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child-writer":
        _, _, root, seg, target, batch = sys.argv
        return writer_child(root, int(seg), int(target), int(batch))
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--budget-s", type=float, default=150.0,
                    help="skip a full re-validation expected to take longer than this (seconds)")
    args = ap.parse_args(argv)
    logging.getLogger("store").setLevel(logging.ERROR)  # the expected "not closed cleanly" warnings
    runs = common.runs_of(args, quick_default=1)
    p = dict(QUICK if args.quick else FULL)
    seg = p["segment_size"]
    rep = common.Report("recovery", args)
    out = Path(args.out) / "recovery"
    need = max(p["sizes"]) * seg + 2 * seg
    free = common.free_bytes(args.out)
    if free < need + 4 * GIB and not args.quick:
        fit = [s for s in p["sizes"] if s * seg + 2 * seg + 4 * GIB <= free]
        rep.note(f"only {free / GIB:.1f} GiB free under {args.out}: sizes {p['sizes']} cut to {fit}")
        p["sizes"] = fit
    rep.params = dict(p, body=BODY, runs=runs, free_gib_before=round(free / GIB, 1))
    root = out / "store"
    reval_speed = 0.0   # bytes/s of the slowest full re-validation so far
    with common.work_dir(out, args.keep):
        out.mkdir(parents=True, exist_ok=True)
        for n_seg in p["sizes"]:
            # Fill n_seg segments almost completely; the last batch may open the next one.
            target = n_seg * seg - p["batch"] * (BODY + 200)
            t0 = time.perf_counter()
            end = kill_writer(root, seg, target, p["batch"])
            rep.log(f"== {n_seg} segment(s) of {seg // MIB} MiB: store end {end:,} "
                    f"(grown in {time.perf_counter() - t0:.1f} s)")
            rep.params[f"seg{n_seg}.bytes"] = end
            tag = f"seg{n_seg}"
            for cache in ("warm", "cold"):
                cold = cache == "cold"
                # A full re-validation may take minutes on a big store: skip it when the speed
                # measured on the smaller store says one run would exceed --budget-s.
                estimate = end / reval_speed if reval_speed else 0.0
                do_reval = estimate <= args.budget_s
                if not do_reval:
                    rep.note(f"{tag}.{cache}: revalidate_all skipped, one run would take ~{estimate:.0f} s "
                             f"at the {reval_speed / 1e6:.0f} MB/s measured on the smaller store "
                             f"(> --budget-s {args.budget_s:.0f})")
                kill, reval, clean, read = [], [], [], []
                for _ in range(runs):
                    # (a) after a SIGKILL, checkpoint as the writer left it
                    kill_writer(root, seg, 0, p["batch"] // 10)
                    kill.append(timed_open(root, seg, cold)[0])
                    # (b) after a SIGKILL with the checkpoint gone: every record re-validated
                    if do_reval:
                        kill_writer(root, seg, 0, p["batch"] // 10)
                        (root / "checkpoint").unlink(missing_ok=True)
                        secs, end = timed_open(root, seg, cold)
                        reval.append(secs)
                    # (c) clean open (the store was closed cleanly by timed_open)
                    secs, end = timed_open(root, seg, cold)
                    clean.append(secs)
                    read.append(raw_read(root, end, cold))
                rep.params[f"{tag}.bytes"] = end
                rep.add(f"{tag}.{cache}.clean_open_s", clean, "s")
                rep.add(f"{tag}.{cache}.kill_open_s", kill, "s")
                rep.add(f"{tag}.{cache}.raw_read.mb_per_s", [end / s / 1e6 for s in read], "MB/s")
                if reval:
                    rep.add(f"{tag}.{cache}.revalidate_all_s", reval, "s")
                    st = rep.add(f"{tag}.{cache}.revalidate_all.mb_per_s", [end / s / 1e6 for s in reval], "MB/s")
                    reval_speed = min(reval_speed or float("inf"), st.min * 1e6)
                    rep.ratio(f"{tag}.{cache}.ratio.revalidate_vs_raw_read",
                              f"{tag}.{cache}.revalidate_all.mb_per_s", f"{tag}.{cache}.raw_read.mb_per_s")
        first, last = f"seg{p['sizes'][0]}", f"seg{p['sizes'][-1]}"
        for cache in ("warm", "cold"):
            rep.ratio(f"ratio.{cache}.clean_open_largest_vs_smallest", f"{last}.{cache}.clean_open_s",
                      f"{first}.{cache}.clean_open_s")
    rep.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
