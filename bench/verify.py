"""How fast is `commitlog verify`, against the raw read speed of the same files?

Builds a 1 GiB store (32 MiB in quick mode) of 1 KiB-body messages and of 100-byte-body
messages, then times ``commitlog verify STORE`` as a user runs it (a subprocess, interpreter
start included) and a plain sequential read of the same segment bytes, with the page cache
warm (``warm``) and with the files evicted first (``cold``). Target: verify >= 500 MB/s.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import records  # noqa: E402
from recovery import raw_read  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30
FULL = {"store_bytes": GIB, "segment_size": GIB, "bodies": [1024, 100]}
QUICK = {"store_bytes": 32 * MIB, "segment_size": 32 * MIB, "bodies": [1024, 100]}


def build_store(root: Path, segment_size: int, nbytes: int, body: int) -> int:
    """Append pre-encoded batches until the store holds about ``nbytes``; returns its end."""
    from store import MessageStore, StoreConfig

    per = body + 200
    batch_records = max(1, min(20_000, (nbytes // per) // 8))
    batch = records.encode(records.message_table(batch_records, body))
    with MessageStore.open(root, StoreConfig(segment_size=segment_size, flush_mode="async")) as store:
        while store.max_offset + batch.nbytes + 8 <= nbytes:
            store.append_encoded(batch)
        store.commit()
        return store.committed_offset


def run_verify(root: Path, cold: bool) -> float:
    if cold:
        common.drop_tree_cache(root)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ingest.cli", "verify", str(root)], capture_output=True,
                          text=True, env=common.env_for_subprocess(), timeout=1800)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"commitlog verify {root} exited {done.returncode}:\n{done.stdout[-2000:]}"
                           f"\n{done.stderr[-2000:]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    args = common.parser(__doc__.splitlines()[0]).parse_args(argv)
    runs = common.runs_of(args, quick_default=1)
    p = QUICK if args.quick else FULL
    rep = common.Report("verify", args)
    rep.params = dict(p, runs=runs)
    out = Path(args.out) / "verify"
    with common.work_dir(out, args.keep):
        for body in p["bodies"]:
            root = out / f"store-body{body}"
            end = build_store(root, p["segment_size"], p["store_bytes"], body)
            rep.params[f"body{body}.bytes"] = end
            rep.log(f"== store of {end / MIB:.0f} MiB, {body}-byte bodies")
            for cache in ("warm", "cold"):
                cold = cache == "cold"
                if not cold:
                    run_verify(root, False)   # warm-up: the page cache and the interpreter's files
                ver = [run_verify(root, cold) for _ in range(runs)]
                read = [raw_read(root, end, cold) for _ in range(runs)]
                tag = f"body{body}.{cache}"
                rep.add(f"{tag}.verify_s", ver, "s")
                rep.add(f"{tag}.verify.mb_per_s", [end / s / 1e6 for s in ver], "MB/s")
                rep.add(f"{tag}.raw_read.mb_per_s", [end / s / 1e6 for s in read], "MB/s")
                rep.ratio(f"{tag}.ratio.verify_vs_raw_read", f"{tag}.verify.mb_per_s", f"{tag}.raw_read.mb_per_s")
            common.shutil.rmtree(root, ignore_errors=True)
        # What every verify run pays before reading a byte: the interpreter and the imports.
        t = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "ingest.cli", "verify", "--help"], capture_output=True,
                           env=common.env_for_subprocess(), timeout=120, check=True)
            t.append(time.perf_counter() - t0)
        rep.add("startup_s", t, "s")
    rep.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
