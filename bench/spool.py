"""What do the spool's checks cost a batch, against the hand-over without them and the write they guard?

The local-mode fast path (sink.handover.spool): a read task writes its encoded batch to a file, the driver maps
it. Per batch of 50,000 records (100-byte and 1 KiB bodies), in ms:
- ``task.write``: sink.handover.spool_task.write (Arrow IPC into memory, O_EXCL|O_NOFOLLOW file of mode 0600, the
  MAC of name and bytes: keyed BLAKE3), against ``task.write_unchecked``: the IPC stream written straight
  to a file, as the tasks did before the checks (the peer);
- ``driver.resolve``: Spool.resolve (open O_NOFOLLOW relative to the directory, fstat checks, map,
  unlink), against ``driver.map_unchecked``: map by path and unlink (the peer);
- ``driver.check``: Spool.check on the writer thread (the MAC, then store.check_encoded: framing,
  lengths, BODYCRC, columns against records), and its two parts ``check_mac`` and ``check_records``
  (the C pass), beside ``hmac_sha256``: the same bytes' HMAC-SHA256, the MAC the spool used before keyed BLAKE3 (the peer
  of ``check_mac``; both ends of the hand-over pay one);
- ``store.write``: CommitLogWriter.write_batch of the same records (append, SYNC flush, commit): the
  write the check runs before, on the same thread.
Ratios: the checked hand-over (write + resolve + check) over the unchecked one, the check over the
store write, the MAC over HMAC-SHA256.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import records  # noqa: E402

T = TypeVar("T")
FULL = {"batch": 50_000, "bodies": [100, 1024]}
QUICK = {"batch": 5_000, "bodies": [100]}


def encoded_batch(n: int, body: int) -> pa.RecordBatch:
    """``n`` records as a read task hands them over (sink.handover.schema.ENCODED_SCHEMA), all live."""
    from sink.handover.schema import ENCODED_SCHEMA
    from store.format.batch_codec import encode_batch_to_arrow

    enc = encode_batch_to_arrow(records.message_table(n, body))
    idx = np.arange(n, dtype=np.int64)
    cols = {name: enc.column(name) for name in ("record", "topic", "queue_id", "sys_flag", "tags_code", "delay_level")}
    cols.update(kafka_topic=pa.array([common.TOPIC] * n), kafka_partition=pa.array(idx % common.QUEUES, pa.int32()),
                kafka_offset=pa.array(idx // common.QUEUES), raw_timestamp=pa.array(1_700_000_000_000 + idx))
    table = pa.table({f.name: (cols[f.name].cast(f.type) if f.name in cols else pa.nulls(n, f.type))
                      for f in ENCODED_SCHEMA}, schema=ENCODED_SCHEMA)
    return table.combine_chunks().to_batches()[0]


def clock(fn: Callable[[], T]) -> tuple[T, float]:
    """(what ``fn`` returns, the milliseconds it took)."""
    t0 = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0) * 1e3


def unchecked_write(batch: pa.RecordBatch, path: Path) -> Path:
    """The hand-over before the checks: the IPC stream straight to a file (pa.OSFile, mode 0644)."""
    with pa.OSFile(str(path), "wb") as out, pa.ipc.new_stream(out, batch.schema) as w:
        w.write_batch(batch)
    return path


def unchecked_map(path: Path) -> pa.Buffer:
    data = pa.memory_map(str(path), "r").read_buffer()
    os.unlink(path)
    return data


def measure(rep: common.Report, root: Path, batch: pa.RecordBatch, tag: str, runs: int) -> None:
    from sink import CommitLogWriter
    from sink.batch import prepare
    from sink.handover.packed import value_buffer
    from sink.handover.schema import ENCODED_SCHEMA
    from sink.handover.spool import Spool
    from sink.handover.spool_task import file_mac, write
    from store import StoreConfig, check_encoded

    (root / "store").mkdir(parents=True)
    (root / "plain").mkdir()
    spool = Spool.for_store(str(root / "store"))
    writer = CommitLogWriter(root / "store", StoreConfig(segment_size=512 << 20))
    figs: dict[str, list[float]] = {}
    try:
        for i in range(runs + 1):          # the first round warms the page cache and the code
            path, write_plain = clock(lambda: unchecked_write(batch, root / "plain" / f"{i}.arrow"))
            _, map_plain = clock(lambda: unchecked_map(path))
            row, write_checked = clock(lambda: pa.Table.from_batches([write(batch, spool.target)]))
            resolved, resolve = clock(lambda: spool.resolve(row))
            data = value_buffer(resolved.column("chunk").chunk(0), 0)
            name, mac = os.path.basename(row.column("spool")[0].as_py()), row.column("mac")[0].as_py()
            _, mac_ms = clock(lambda: hmac.compare_digest(file_mac(spool.key, name, data), mac))
            _, sha_ms = clock(lambda: hmac.new(spool.key, name.encode() + b"\0", hashlib.sha256).update(data))
            _, records_ms = clock(lambda: [check_encoded(b) for b in pa.ipc.open_stream(data)])
            checked, check = clock(lambda: spool.check(resolved))
            table = prepare(checked, {}).cast(ENCODED_SCHEMA)     # every round writes all its records
            _, store_ms = clock(lambda: writer.write_batch(i, None, table))
            if i:
                for key, ms in (("task.write_unchecked", write_plain), ("task.write", write_checked),
                                ("driver.map_unchecked", map_plain), ("driver.resolve", resolve),
                                ("driver.check", check), ("driver.check_mac", mac_ms), ("driver.hmac_sha256", sha_ms),
                                ("driver.check_records", records_ms),
                                ("store.write", store_ms)):
                    figs.setdefault(key, []).append(ms)
    finally:
        writer.close()
        spool.close()
    for name, values in figs.items():
        rep.add(f"{tag}.{name}_ms", values, "ms")
    rep.add(f"{tag}.driver.check.msgs_per_s", [batch.num_rows / v * 1e3 for v in figs["driver.check"]], "msg/s")
    checked_total = [a + b + c for a, b, c in zip(figs["task.write"], figs["driver.resolve"], figs["driver.check"])]
    plain_total = [a + b for a, b in zip(figs["task.write_unchecked"], figs["driver.map_unchecked"])]
    rep.add(f"{tag}.handover_checked_ms", checked_total, "ms")
    rep.add(f"{tag}.handover_unchecked_ms", plain_total, "ms")
    rep.ratio(f"{tag}.ratio.handover_checked_vs_unchecked", f"{tag}.handover_checked_ms", f"{tag}.handover_unchecked_ms")
    rep.ratio(f"{tag}.ratio.check_vs_store_write", f"{tag}.driver.check_ms", f"{tag}.store.write_ms")
    rep.ratio(f"{tag}.ratio.mac_vs_hmac_sha256", f"{tag}.driver.check_mac_ms", f"{tag}.driver.hmac_sha256_ms")


def main(argv: list[str] | None = None) -> int:
    args = common.parser(__doc__.splitlines()[0]).parse_args(argv)
    runs = common.runs_of(args, quick_default=1)
    p = QUICK if args.quick else FULL
    rep = common.Report("spool", args)
    rep.params = dict(p, runs=runs)
    out = Path(args.out) / "spool"
    with common.work_dir(out, args.keep):
        for body in p["bodies"]:
            batch = encoded_batch(p["batch"], body)
            tag = f"body{body}"
            rep.log(f"== {p['batch']:,} records of {body}-byte bodies, {batch.column('record').nbytes / 1e6:.1f} MB")
            with common.scratch(args, f"spool/{tag}") as root:
                measure(rep, root, batch, tag, runs)
    rep.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
