"""Against what users run instead: a Kafka-to-RocketMQ bridge into a running RocketMQ 5.3.3 broker,
side by side with `commitlog replay` and `commitlog run` on the same topic, and what each keeps
after a kill -9.

Apache Kafka 4.1.1 (the embedded broker, KRaft, on disk) holds an 8-partition topic per copy, pre-filled
with random values and 64 keys: full mode 1,000,000 x 100 B and 300,000 x 1 KiB (every side), and
10,000,000 x 100 B (``bridge_sync`` and ``replay_sync`` only: the copy long enough for the fixed costs
to fade); quick mode 10,000 x 100 B. A NameServer and two 5.3.3 brokers on this machine (as
tests/helpers/brokers/rocketmq.py starts them, default 1 GiB segments): one ``flushDiskType=SYNC_FLUSH``, one
``ASYNC_FLUSH``. Then, taking turns (the order reversed every other round), each side copies the
whole topic:
- ``bridge_sync`` / ``bridge_async``: bench/jvm/KafkaRocketBridge.java, the bridge at its best (a
  KafkaConsumer assigned every partition from earliest, max.poll.records 10,000; a DefaultMQProducer
  sending each partition's records in batches of up to 1,000 messages / 256 KiB with
  send(Collection, MessageQueue, callback) to the queue of the same number, one batch in flight per
  queue, all eight queues in flight at once), counted until every record is SEND_OK, into a fresh
  topic of the SYNC_FLUSH or the ASYNC_FLUSH broker;
- ``replay_sync`` / ``replay_async``: `commitlog replay --topics T --flush sync|async` into a fresh
  store, its closing verify included;
- ``run_sync``: `commitlog run --trigger available-now --flush sync` into a fresh store.
Clocks, each as msg/s: ``whole`` (process launch to exit: the JVM's start, ours with Spark's and the
closing verify), ``own`` (the bridge from main() to the last SEND_OK; replay's own clock, verify left
out), ``first`` (the bridge from the first record read; replay's write phase). ``cpu_s``: CPU seconds
of the side's processes, ``broker_cpu_s``: the broker's during the bridge's run (what bounds each
side: 2 cores shared by the side and the broker). Ratios ours / the bridge's.

``--crash``: the bridge into the SYNC_FLUSH broker is killed (SIGKILL) once 40 % of the records are
SEND_OK and started again with the same group (it commits Kafka offsets after SEND_OK only); then
`commitlog run` is killed the same way after its first committed batch and started again. Each
store is read back by Kafka coordinates (KAFKA_PARTITION, KAFKA_OFFSET): duplicates and losses.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bridge_parts as bp  # noqa: E402
import common  # noqa: E402
import common_stream as cs  # noqa: E402

PARTITIONS = 8
# (record size, records, the sides that copy it): the long copy is where the fixed costs no longer count
FULL = {"sizes": [(100, 1_000_000, None), (1024, 300_000, None), (100, 10_000_000, ("bridge_sync", "replay_sync"))],
        "crash": 1_000_000}
QUICK = {"sizes": [(100, 10_000, None)], "crash": 20_000}
SIDES = ("bridge_sync", "bridge_async", "replay_sync", "replay_async", "run_sync")
FLUSH_TYPES = {"sync": "SYNC_FLUSH", "async": "ASYNC_FLUSH"}
CLOCKS = ("whole", "own", "first")
CRASH_AT = 0.4


def rocket_topic(body: int, n: int, flush: str, r: int) -> str:
    return f"Bridge{body}x{n}{flush.capitalize()}{r}"


def size_tag(body: int, n: int) -> str:
    """The figures' prefix: ``body100`` for a copy of up to 1,000,000 records (the names earlier results
    use), ``body100x10000000`` for a longer one."""
    return f"body{body}" if n <= 1_000_000 else f"body{body}x{n}"


def one_side(side: str, body: int, r: int, n: int, ctx: dict) -> bp.Timed:
    kind, flush = side.split("_")
    topic = ctx["topics"][(body, n)]
    if kind == "bridge":
        broker = ctx["brokers"][FLUSH_TYPES[flush]]
        argv = bp.bridge_argv(ctx["classes"], ctx["bootstrap"], topic, ctx["namesrv"], rocket_topic(body, n, flush, r),
                              broker.name, f"bridge-{uuid.uuid4().hex[:8]}")
        return bp.run_bridge(argv, n, broker.process.pid)
    with common.scratch(ctx["args"], f"bridge/{side}") as root:
        return bp.run_commitlog(bp.commitlog_argv(kind, ctx["bootstrap"], topic, root / "store", flush), n)


def measure(rep: common.Report, body: int, n: int, runs: int, ctx: dict, sides: tuple[str, ...] = SIDES) -> None:
    got: dict[str, list[bp.Timed]] = {s: [] for s in sides}
    tag = size_tag(body, n)
    for r in range(runs):
        for side in (sides if r % 2 == 0 else sides[::-1]):
            t = one_side(side, body, r, n, ctx)
            got[side].append(t)
            rep.log(f"{tag} round {r} {side}: whole {t.whole_s:.1f} s, own {t.own_s or 0:.1f} s, "
                    f"first {t.first_s or 0:.1f} s, cpu {t.cpu_s:.1f} s, broker cpu {t.broker_cpu_s or 0:.1f} s")
    for side, timed in got.items():
        for clock in CLOCKS:
            secs = [getattr(t, f"{clock}_s") for t in timed]
            if all(s for s in secs):
                rep.add(f"{tag}.{side}.{clock}_msgs_per_s", [n / s for s in secs], "msg/s")
        rep.add(f"{tag}.{side}.cpu_s", [t.cpu_s for t in timed], "s")
        if side.startswith("bridge"):
            rep.add(f"{tag}.{side}.broker_cpu_s", [t.broker_cpu_s or 0.0 for t in timed], "s")
            # the two cores' share the bridge and its broker kept busy
            rep.add(f"{tag}.{side}.cores_busy", [(t.cpu_s + (t.broker_cpu_s or 0)) / t.whole_s for t in timed], "cores")
        else:
            rep.add(f"{tag}.{side}.cores_busy", [t.cpu_s / t.whole_s for t in timed], "cores")
    for ours, theirs in (("replay_sync", "bridge_sync"), ("replay_async", "bridge_async"), ("run_sync", "bridge_sync")):
        for clock in CLOCKS:
            num, den = f"{tag}.{ours}.{clock}_msgs_per_s", f"{tag}.{theirs}.{clock}_msgs_per_s"
            if num in rep.figures and den in rep.figures:
                rep.ratio(f"{tag}.ratio.{ours}_vs_{theirs}.{clock}", num, den)


def crash_bridge(rep: common.Report, n: int, ctx: dict, topic: str) -> None:
    """The bridge killed once 40 % is SEND_OK, then started again with its group: the broker's store
    is read after the broker stops (ctx's ``after`` hook)."""
    broker = ctx["brokers"]["SYNC_FLUSH"]
    argv = bp.bridge_argv(ctx["classes"], ctx["bootstrap"], topic, ctx["namesrv"], "BridgeCrash", broker.name,
                          "bridge-crash")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    acked_at_kill = 0
    try:
        for line in proc.stdout:
            parts = line.split()
            if parts and parts[0] == "acked" and int(parts[1]) >= CRASH_AT * n:
                acked_at_kill = int(parts[1])
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        if proc.poll() is None and not acked_at_kill:
            proc.kill()
        proc.wait()
    if not acked_at_kill:
        raise bp.BenchFailed("the bridge ended before 40 % of its records were SEND_OK: nothing to kill")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    lines = bp.parse_bridge(done.stdout)
    if done.returncode != 0 or "done" not in lines:
        raise bp.BenchFailed(f"the restarted bridge exited {done.returncode}:\n{done.stderr[-3000:]}")
    rep.log(f"bridge killed at {acked_at_kill:,} SEND_OK; restarted, it sent {int(lines['assigned'][1]):,} more")
    rep.add("crash.bridge.acked_at_kill", [acked_at_kill], "records")


def crash_run(rep: common.Report, n: int, ctx: dict, topic: str) -> None:
    """`commitlog run` killed (its process group: Spark's JVM and workers too) 0.5 s after its first
    committed batch, then started again on the same store and checkpoint to the end."""
    with common.scratch(ctx["args"], "bridge/crash-run") as root:
        store = root / "store"
        argv = [*bp.commitlog_argv("run", ctx["bootstrap"], topic, store, "sync"),
                "--max-offsets-per-trigger", str(max(1000, n // 5))]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env=common.env_for_subprocess(), start_new_session=True)
        killed = False
        try:
            for line in proc.stderr:
                if " records, " in line and "batch " in line:
                    time.sleep(0.5)
                    os.killpg(proc.pid, signal.SIGKILL)
                    killed = True
                    break
        finally:
            if proc.poll() is None and not killed:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if not killed:
            raise bp.BenchFailed("commitlog run ended before its first batch was logged: nothing to kill")
        at_kill = bp.count_store(store, topic)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=common.env_for_subprocess())
        if done.returncode != 0:
            raise bp.BenchFailed(f"the restarted commitlog run exited {done.returncode}:\n{done.stderr[-3000:]}")
        dupes, lost = bp.duplicates_and_losses(bp.coordinates(store, topic), PARTITIONS, n // PARTITIONS)
    rep.log(f"commitlog run killed with {at_kill:,} records committed; after the restart: {dupes} duplicates, "
            f"{lost} lost")
    rep.add("crash.run.committed_at_kill", [at_kill], "records")
    rep.add("crash.run.duplicates", [dupes], "records")
    rep.add("crash.run.losses", [lost], "records")


def crash(rep: common.Report, n: int, ctx: dict, out: Path) -> None:
    topic = f"bridge-crash-{ctx['run_id']}"
    secs = cs.prefill_topic(ctx["bootstrap"], topic, PARTITIONS, n, value_size=100)
    rep.log(f"pre-filled {topic} with {n:,} records in {secs:.1f} s")
    with bp.rocketmq_brokers(out / "rocketmq-crash", {"SYNC_FLUSH": ["BridgeCrash"]}) as (ns, brokers):
        crash_bridge(rep, n, dict(ctx, namesrv=ns.address, brokers=brokers), topic)
        store = brokers["SYNC_FLUSH"].store
    # the broker has stopped (its shutdown flushes): its store read as ours
    dupes, lost = bp.duplicates_and_losses(bp.coordinates(store, "BridgeCrash"), PARTITIONS, n // PARTITIONS)
    rep.log(f"bridge after the restart: {dupes} duplicates, {lost} lost in the broker's store")
    rep.add("crash.bridge.duplicates", [dupes], "records")
    rep.add("crash.bridge.losses", [lost], "records")
    crash_run(rep, n, ctx, topic)


@contextmanager
def kafka_broker(given: str | None, data: Path) -> Iterator[str]:
    if given:
        yield given
        return
    with cs.embedded_broker("kafka", data) as kafka:
        yield kafka.bootstrap_servers


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--crash", action="store_true", help="only the kill -9 runs: duplicates and losses")
    ap.add_argument("--bootstrap-servers", default=None,
                    help="a running Apache Kafka to use instead of starting the embedded one")
    args = ap.parse_args(argv)
    runs = common.runs_of(args, quick_default=1)
    p = QUICK if args.quick else FULL
    rep = common.Report("bridge", args)
    rep.params = {"sizes": p["sizes"], "partitions": PARTITIONS, "runs": runs, "crash_records": p["crash"],
                  "bridge": "KafkaRocketBridge: 1,000 msgs / 256 KiB batches, one in flight per queue",
                  "rocketmq": "5.3.3, 1 GiB segments", "kafka": "Apache Kafka 4.1.1 (embedded, KRaft)"}
    out = Path(args.out) / "bridge"
    with common.work_dir(out, args.keep):
        classes = bp.compile_bridge(out)
        with kafka_broker(args.bootstrap_servers, out / "kafka") as bootstrap:
            run_id = uuid.uuid4().hex[:6]     # a running Kafka may hold an earlier run's topics
            ctx = {"args": args, "bootstrap": bootstrap, "classes": classes, "run_id": run_id,
                   "topics": {(body, n): f"bridge-body{body}x{n}-{run_id}" for body, n, _ in p["sizes"]}}
            if args.crash:
                crash(rep, p["crash"], ctx, out)
            else:
                for body, n, _ in p["sizes"]:
                    secs = cs.prefill_topic(ctx["bootstrap"], ctx["topics"][(body, n)], PARTITIONS, n, value_size=body)
                    rep.log(f"pre-filled {ctx['topics'][(body, n)]} with {n:,} records in {secs:.1f} s")
                topics = {FLUSH_TYPES[f]: [rocket_topic(b, n, f, r) for b, n, _ in p["sizes"] for r in range(runs)]
                          for f in FLUSH_TYPES}
                with bp.rocketmq_brokers(out / "rocketmq", topics) as (ns, brokers):
                    ctx.update(namesrv=ns.address, brokers=brokers)
                    for body, n, sides in p["sizes"]:
                        measure(rep, body, n, runs, ctx, sides or SIDES)
    rep.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
