"""Disk a store takes for many queues holding few messages, against RocketMQ 5.3.3's own broker.

Two workloads, each written by our store (StoreConfig's defaults: a 1 GiB segment, 6 MB
consume-queue files, the 420 MB IndexFile) and sent to a RocketMQ 5.3.3 broker (its defaults, started
from the jars as the tests do; bench/jvm/WideSend.java sends a batch per queue) on the same queues:
  - ``one``: one message of 100 B to each of N queues (N = 6,000; 600 with --quick);
  - ``spread``: 300,000 records of 100 B over 6,000 queues, 500 topics x 12 (30,000 over 600 with
    --quick).
Prints each store's allocated bytes (st_blocks: ``du``) by folder, and ours over the broker's, in
all and without the commit log (our segment is reserved whole, the broker's mapped sparse).
Also our append + commit time (the consume-queue flush included). Usage:
    .venv/bin/python bench/wide_disk.py [--quick] [--json] [--no-broker]
bench/wide.py may call ``measure``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common  # noqa: E402

BODY = 100
QUEUES_PER_TOPIC = 12
JAR_SET = "rocketmq5"
FOLDERS = ("commitlog", "consumequeue", "index")


def workloads(quick: bool) -> dict[str, tuple[int, int]]:
    """name -> (topics, messages per queue)."""
    topics = 50 if quick else 500
    return {"one": (topics, 1), "spread": (topics, 50)}


def du(root: Path) -> dict[str, int]:
    """Allocated bytes under ``root`` by top folder (``other``: the rest), and ``total``."""
    out = {k: 0 for k in (*FOLDERS, "other")}
    for dirpath, _, names in os.walk(root):
        rel = Path(dirpath).relative_to(root).parts
        key = rel[0] if rel and rel[0] in FOLDERS else "other"
        for n in names:
            try:
                out[key] += os.lstat(os.path.join(dirpath, n)).st_blocks * 512
            except FileNotFoundError:
                pass
    out["total"] = sum(out.values())
    return out


def ours(root: Path, topics: int, per: int) -> tuple[dict[str, int], float]:
    """Our store with its defaults, the workload in one append + commit; (du, seconds)."""
    from store import Message, MessageStore, StoreConfig

    body = bytes((97 + i % 26) for i in range(BODY))
    msgs = [Message(f"Wide{t}", body, queue_id=q, properties=f"KEYS\x01k{t}-{q}-{i}\x02")
            for t in range(topics) for q in range(QUEUES_PER_TOPIC) for i in range(per)]
    t0 = time.perf_counter()
    with MessageStore.open(root, StoreConfig()) as store:
        store.append(msgs)
        store.commit()
    took = time.perf_counter() - t0
    return du(root), took


def broker(work: Path, topics: int, per: int) -> dict[str, int]:
    """RocketMQ 5.3.3's broker with its defaults, the workload sent by WideSend; its store's du
    after it stopped (its shutdown flushes)."""
    from ingest.jvm import classpath, java
    from store.topics import merge_topics
    from tests.helpers.brokers.rocketmq import NameServer, RocketBroker

    source, classes = common.BENCH_DIR / "jvm" / "WideSend.java", Path(common.OUT_DIR) / "wide-send"
    built = classes / "WideSend.class"
    if not built.exists() or built.stat().st_mtime < source.stat().st_mtime:
        common.compile_java(source, classes, classpath(JAR_SET))
    store = work / "broker-store"
    merge_topics(store, {f"Wide{t}": QUEUES_PER_TOPIC for t in range(topics)})
    with NameServer.start(work / "namesrv", "5", timeout_s=300) as ns:
        with RocketBroker.start(store, ns, "5", timeout_s=300) as b:
            done = subprocess.run([java(), "-Xmx512m", "-Drocketmq.client.logLevel=WARN", "-cp",
                                   classpath(JAR_SET, classes), "WideSend", ns.address, b.name, "Wide", str(topics),
                                   str(QUEUES_PER_TOPIC), str(per), str(BODY)],
                                  capture_output=True, text=True, timeout=3600)
            if done.returncode != 0:
                raise RuntimeError(f"WideSend failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return du(store)


def measure(rep: common.Report, work: Path, quick: bool, with_broker: bool = True) -> dict[str, Any]:
    """Both workloads into ``rep``; the raw sizes by workload."""
    raw: dict[str, Any] = {}
    for name, (topics, per) in workloads(quick).items():
        queues = topics * QUEUES_PER_TOPIC
        rep.log(f"{name}: {queues:,} queues, {per} message(s) of {BODY} B each")
        mine, took = ours(work / f"ours-{name}", topics, per)
        raw[name] = {"queues": queues, "messages": queues * per, "ours": mine}
        rep.add(f"{name}.ours.du_mb", mine["total"] / 1e6, "MB")
        rep.add(f"{name}.ours.du_without_commitlog_mb", (mine["total"] - mine["commitlog"]) / 1e6, "MB")
        rep.add(f"{name}.ours.consumequeue_mb", mine["consumequeue"] / 1e6, "MB")
        rep.add(f"{name}.ours.index_mb", mine["index"] / 1e6, "MB")
        rep.add(f"{name}.ours.append_commit_s", took, "s")
        if not with_broker:
            continue
        theirs = broker(work / f"broker-{name}", topics, per)
        raw[name]["broker"] = theirs
        rep.add(f"{name}.broker.du_mb", theirs["total"] / 1e6, "MB")
        rep.add(f"{name}.broker.du_without_commitlog_mb", (theirs["total"] - theirs["commitlog"]) / 1e6, "MB")
        rep.add(f"{name}.broker.consumequeue_mb", theirs["consumequeue"] / 1e6, "MB")
        rep.add(f"{name}.broker.index_mb", theirs["index"] / 1e6, "MB")
        rep.ratio(f"{name}.du.ours_over_broker", f"{name}.ours.du_mb", f"{name}.broker.du_mb")
        rep.ratio(f"{name}.du_without_commitlog.ours_over_broker", f"{name}.ours.du_without_commitlog_mb",
                  f"{name}.broker.du_without_commitlog_mb")
    return raw


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--no-broker", action="store_true", help="our store only (no JVM)")
    args = p.parse_args()
    rep = common.Report("wide_disk", args)
    with common.scratch(args, "wide_disk") as work:
        rep.params = measure(rep, work, args.quick, not args.no_broker)
    rep.finish()


if __name__ == "__main__":
    main()
