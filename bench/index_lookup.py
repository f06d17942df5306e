"""How fast is a lookup by key (`commitlog get --key`), on a large store, against reading the
message at a known offset?

Builds a store of 1 KiB-body messages (10 GiB in full mode, 64 MiB quick), written with the index
on as `commitlog run` writes it: each message has a KEYS token and a UNIQ_KEY, all distinct, so the
index holds two items per message (a full 10 GiB store fills one 20,000,000-item IndexFile). Then
times, in one process with the page cache warm and with it dropped first:
- ``by_key``: StoreReader.messages_by_key (the index's chain walk, then each hit read and checked);
- ``by_uniq_key``: the same for a UNIQ_KEY;
- ``absent``: a key no message has (the chain walk alone);
- the ceiling ``read_at_offset``: StoreReader.read of the same message by its offset.
Target: a lookup answers in under 50 ms (warm and cold). Also the whole `commitlog get --key`
command as a user runs it (interpreter start included), and the append rate with the index on and off.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import records  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30
FULL = {"store_bytes": 10 * GIB, "segment_size": GIB, "body": 1024, "batch": 50_000, "lookups": 200}
QUICK = {"store_bytes": 64 * MIB, "segment_size": 64 * MIB, "body": 1024, "batch": 10_000, "lookups": 20}


def build_store(root: Path, p: dict, index: bool) -> tuple[int, int, float]:
    """Append distinct batches until the store holds about ``store_bytes``: (messages, end, seconds)."""
    from store import IndexConfig, MessageStore, StoreConfig

    cfg = StoreConfig(segment_size=p["segment_size"], flush_mode="async", index=IndexConfig(enabled=index))
    n = 0
    spent = 0.0
    with MessageStore.open(root, cfg) as store:
        while store.max_offset < p["store_bytes"]:
            batch = records.encode(records.message_table(p["batch"], p["body"], start=n))
            t0 = time.perf_counter()
            store.append_encoded(batch)
            spent += time.perf_counter() - t0
            n += p["batch"]
        t0 = time.perf_counter()
        store.commit()
        spent += time.perf_counter() - t0
        return n, store.committed_offset, spent


def keys_of(i: int) -> tuple[str, str]:
    """The KEYS token and UNIQ_KEY records.message_table gives message ``i``."""
    return f"{i:012d}", f"{i * 7 + 13:012d}"


def time_lookups(root: Path, n: int, count: int, cold: bool, rng: random.Random) -> dict[str, list[float]]:
    from store import StoreReader

    out: dict[str, list[float]] = {"by_key": [], "by_uniq_key": [], "absent": [], "read_at_offset": []}
    for _ in range(count):
        i = rng.randrange(n)
        key, uniq = keys_of(i)
        if cold:
            common.drop_tree_cache(root)
        with StoreReader.open(root) as reader:
            t0 = time.perf_counter()
            hits = reader.messages_by_key(records.TOPIC, key)
            t1 = time.perf_counter()
            uhits = reader.messages_by_key(records.TOPIC, uniq, uniq=True)
            t2 = time.perf_counter()
            none = reader.messages_by_key(records.TOPIC, f"absent-{i}")
            t3 = time.perf_counter()
            if len(hits) != 1 or len(uhits) != 1 or none or hits[0][0] != uhits[0][0]:
                raise RuntimeError(f"lookup of message {i}: {len(hits)} by key, {len(uhits)} by uniq key, "
                                   f"{len(none)} absent")
            target = hits[0][0]
            del hits, uhits, none       # their bodies are views of the segment: the mapping must go
        if cold:
            common.drop_tree_cache(root)     # with no reader holding the pages mapped
        with StoreReader.open(root) as reader:
            t4 = time.perf_counter()
            reader.read(target)
            t5 = time.perf_counter()
        out["by_key"].append((t1 - t0) * 1000)
        out["by_uniq_key"].append((t2 - t1) * 1000)
        out["absent"].append((t3 - t2) * 1000)
        out["read_at_offset"].append((t5 - t4) * 1000)
    return out


def main(argv: list[str] | None = None) -> int:
    args = common.parser(__doc__.splitlines()[0]).parse_args(argv)
    runs = common.runs_of(args, quick_default=1)
    p = QUICK if args.quick else FULL
    rep = common.Report("index_lookup", args)
    rep.params = dict(p, runs=runs)
    out = Path(args.out) / "index_lookup"
    rng = random.Random(7)
    with common.work_dir(out, args.keep):
        # the append's cost of the index: the same bytes with it off, then on
        small = dict(p, store_bytes=min(p["store_bytes"], 2 * GIB))
        for index in (False, True):
            name = "on" if index else "off"
            n, end, secs = build_store(out / f"append-{name}", small, index)
            rep.add(f"append.index_{name}.msgs_per_s", n / secs, "msg/s")
            common.shutil.rmtree(out / f"append-{name}", ignore_errors=True)
        rep.ratio("append.ratio.index_on_vs_off", "append.index_on.msgs_per_s", "append.index_off.msgs_per_s")
        root = out / "store"
        n, end, secs = build_store(root, p, True)
        rep.params["messages"], rep.params["store_end"] = n, end
        rep.log(f"== store of {end / GIB:.2f} GiB, {n:,} messages, built in {secs:.0f} s")
        for cache in ("warm", "cold"):
            times = time_lookups(root, n, p["lookups"] if cache == "warm" else max(5, p["lookups"] // 10),
                                 cache == "cold", rng)
            for what, values in times.items():
                rep.add(f"{cache}.{what}_ms", values, "ms")
            rep.ratio(f"{cache}.ratio.by_key_vs_read_at_offset", f"{cache}.by_key_ms", f"{cache}.read_at_offset_ms")
        cli = []
        for _ in range(runs):
            key, _uniq = keys_of(rng.randrange(n))
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "ingest.cli", "get", str(root), "--topic", records.TOPIC,
                            "--key", key, "--json"], capture_output=True, env=common.env_for_subprocess(),
                           timeout=120, check=True)
            cli.append((time.perf_counter() - t0) * 1000)
        rep.add("cli.get_key_ms", cli, "ms")
    rep.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
