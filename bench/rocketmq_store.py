"""Apache RocketMQ's own store as the peer of bench/store_append.py.

bench/jvm/RocketStorePeer.java opens RocketMQ's DefaultMessageStore (rocketmq-store 4.9.7 and 5.3.3,
the jar sets ``rocketmq4`` / ``rocketmq5`` of deploy/jvm/pom.xml) with the bench's segment size,
flush mode, index setting and warm-up, and puts the bench's records into it: ``batch`` (one
MessageExtBatch per queue per batch, ``asyncPutMessages``) and ``single`` (``asyncPutMessage``
one message at a time), the clock stopped when its dispatcher has built the consume queues and the
index. Every run's store is then reopened and read back; this module checks what it served against
the records (offsets per queue; sampled messages by queue offset: body, KEYS, UNIQ_KEY, and the
index finding them by each key) and refuses figures from a store that lost or changed anything.

Figure names: ``<flush>.body<size>.<jar set>_<path>[_index].msgs_per_s`` (e.g.
``sync.body100.rocketmq5_batch_index.msgs_per_s``); ``put_msgs_per_s`` stops the clock when the
last put returns, before the dispatcher has caught up.
"""

from __future__ import annotations

import json
import os
import subprocess
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import common

JAR_SETS = ("rocketmq4", "rocketmq5")
PATHS = ("batch", "single")
SAMPLES_PER_QUEUE = 16
MIB = 1 << 20
# rocketmq-store 4.9 cleans mapped buffers and mlocks them through JDK internals (RocketMQ's own
# runbroker.sh opens the same packages on Java 9+)
JVM_OPENS = ["--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/java.nio=ALL-UNNAMED",
             "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
             "--add-opens", "java.base/java.lang=ALL-UNNAMED"]
# The collector of RocketMQ's runbroker.sh (G1, 16 MiB regions), but for its marking threshold: the
# messages built before the clock (about 1.4 KB each as objects, 3 GB for 2,000,000) stay in the old
# generation for the whole run, where a broker's heap holds only the batches in flight. Marking
# starts above them, so G1 does not re-mark them over and over while the clock runs.
JVM_GC = ["-XX:+UseG1GC", "-XX:G1HeapRegionSize=16m", "-XX:G1ReservePercent=25", "-XX:-G1UseAdaptiveIHOP",
          "-XX:InitiatingHeapOccupancyPercent=75", "-XX:SoftRefLRUPolicyMSPerMB=0"]
MESSAGE_OBJECT_BYTES = 1600   # a message built for the ``single`` path, with room
# 4.9 logs through logback; 5.x through its own shaded copy, which reads another property
LOGBACK = """<configuration>
  <statusListener class="{pkg}.core.status.NopStatusListener"/>
  <appender name="err" class="{pkg}.core.ConsoleAppender">
    <target>System.err</target>
    <encoder><pattern>%d %p %c{{1}} %m%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="err"/></root>
</configuration>
"""
LOGBACK_PACKAGES = {"rocketmq4": ("logback.configurationFile", "ch.qos.logback"),
                    "rocketmq5": ("rmq.logback.configurationFile", "org.apache.rocketmq.logging.ch.qos.logback")}


class PeerFailed(RuntimeError):
    """RocketMQ's store failed, or served back something other than what it was given."""


def available() -> list[str]:
    """The RocketMQ jar sets `make jvm` has resolved."""
    from ingest.jvm import has_jar_set

    return [s for s in JAR_SETS if has_jar_set(s)]


def compile_peer(jar_set: str, out: Path) -> Path:
    """RocketStorePeer and the jar set's StoreCompat, compiled against that set; the class directory."""
    from ingest.jvm import classpath

    src = common.BENCH_DIR / "jvm"
    return common.compile_java(src / "RocketStorePeer.java", out / jar_set, classpath(jar_set),
                               [src / jar_set / "StoreCompat.java"])


@dataclass
class Setup:
    """What every run of the peer for one body size shares."""

    records: Path           # the timed records, commit-log encoded, back to back
    messages: int           # how many
    first: Path             # the warm-up records put before the clock (one per queue)
    work: Path              # scratch directory for the stores
    segment_size: int
    batch: int
    runs: int
    warmup: int
    samples: int = SAMPLES_PER_QUEUE


def run_peer(jar_set: str, classes: Path, setup: Setup, flushes: Sequence[str], indexes: Sequence[str],
             paths: Sequence[str]) -> list[dict[str, Any]]:
    """One JVM: every (flush, index, path) configuration ``setup.runs`` times, in rotating rounds.
    Returns one dict per measured run (RocketStorePeer's JSON)."""
    from ingest.devtools.broker import free_port
    from ingest.jvm import classpath, java

    setup.work.mkdir(parents=True, exist_ok=True)
    prop, pkg = LOGBACK_PACKAGES[jar_set]
    logback = setup.work / f"logback-{jar_set}.xml"
    logback.write_text(LOGBACK.format(pkg=pkg))
    results = setup.work / f"results-{jar_set}.jsonl"
    log = setup.work / f"{jar_set}.log"
    # the records (read, then parsed), the messages built from them and the wire batches, with room
    heap = f"{(3 * setup.records.stat().st_size + setup.messages * MESSAGE_OBJECT_BYTES + 1024 * MIB) // MIB}m"
    cmd = [java(), f"-Xms{heap}", f"-Xmx{heap}", *JVM_GC, *JVM_OPENS, f"-D{prop}={logback}",
           "-cp", classpath(jar_set, classes), "RocketStorePeer",
           f"records={setup.records}", f"first={setup.first}", f"root={setup.work / jar_set}",
           f"segment={setup.segment_size}", f"batch={setup.batch}", f"runs={setup.runs}", f"warmup={setup.warmup}",
           f"flush={','.join(flushes)}", f"index={','.join(indexes)}", f"paths={','.join(paths)}",
           f"ha_port={free_port()}", f"samples={setup.samples}", f"results={results}"]
    with open(log, "wb") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=3 * 3600)
    if done.returncode != 0:
        tail = log.read_bytes()[-3000:].decode(errors="replace")
        raise PeerFailed(f"RocketStorePeer ({jar_set}) exited {done.returncode}; the end of {log}:\n{tail}")
    runs = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    os.unlink(results)
    return runs


# --- what the reopened store must serve -----------------------------------------------------
@dataclass
class Expected:
    """The messages a store holds after the warm-up records and the timed ones, by queue."""

    first: pa.Table
    data: pa.Table

    def __post_init__(self) -> None:
        self.first_q = self.first.column("queue_id").to_numpy()
        self.data_q = self.data.column("queue_id").to_numpy()

    def count(self, queue: int) -> int:
        return int((self.first_q == queue).sum() + (self.data_q == queue).sum())

    def message(self, queue: int, offset: int) -> dict[str, Any]:
        """Body CRC32, KEYS and UNIQ_KEY of the message at ``offset`` of ``queue``."""
        in_first = np.flatnonzero(self.first_q == queue)
        if offset < len(in_first):
            table, row = self.first, int(in_first[offset])
        else:
            table, row = self.data, int(np.flatnonzero(self.data_q == queue)[offset - len(in_first)])
        props = properties(table.column("properties")[row].as_py())
        return {"body_crc32": zlib.crc32(table.column("body")[row].as_py()), "keys": props.get("KEYS"),
                "uniq_key": props.get("UNIQ_KEY")}


def properties(raw: bytes | str) -> dict[str, str]:
    text = raw.decode() if isinstance(raw, bytes) else raw
    return dict(p.split("\x01", 1) for p in text.split("\x02") if "\x01" in p)


def problems(run: dict[str, Any], exp: Expected) -> list[str]:
    """What a reopened store served differently from the records it was given (empty: nothing)."""
    out = []
    queues = run.get("queues")
    if queues is None:
        return ["the store was not read back"]
    for q, (lo, hi) in enumerate(queues):
        if lo != 0 or hi != exp.count(q):
            out.append(f"queue {q} serves offsets [{lo}, {hi}), expected [0, {exp.count(q)})")
    for s in run["samples"]:
        q, off = s["queue"], s["offset"]
        where = f"queue {q} offset {off}"
        if s["status"] != "FOUND":
            out.append(f"{where}: {s['status']}")
            continue
        want = exp.message(q, off)
        for field in ("body_crc32", "keys", "uniq_key"):
            if s[field] != want[field]:
                out.append(f"{where}: {field} {s[field]!r}, expected {want[field]!r}")
        if s["queue_offset"] != off:
            out.append(f"{where}: the message says queue offset {s['queue_offset']}")
        if run["index"]:
            for by in ("by_keys", "by_uniq_key"):
                if [q, off] not in s[by]:
                    out.append(f"{where}: the index does not find it {by.replace('_', ' ')} (found {s[by][:8]})")
    return out


# --- figures --------------------------------------------------------------------------------
def peer_name(jar_set: str, path: str, index: bool) -> str:
    return f"{jar_set}_{path}{'_index' if index else ''}"


def measure(rep: common.Report, setup: Setup, tag: str, n: int, total_bytes: int, data: pa.Table,
            first: pa.Table, flushes: Sequence[str] = ("async", "sync"), indexes: Sequence[str] = ("off", "on"),
            paths: Sequence[str] = PATHS) -> None:
    """Run the peer of every resolved jar set on ``setup``'s records; add its figures (named as the
    module docstring says) and the ratios ours / RocketMQ's. ``data`` and ``first`` are the records as
    tables, for the read-back check; ``total_bytes`` the timed records' commit-log bytes."""
    exp = Expected(first, data)
    sets = available()
    if not sets:
        rep.note("RocketMQ's store not measured: its jars are not resolved (run `make jvm`)")
    for jar_set in sets:
        classes = compile_peer(jar_set, setup.work / "classes")
        runs = run_peer(jar_set, classes, setup, flushes, indexes, paths)
        by_name: dict[str, list[dict[str, Any]]] = {}
        for run in runs:
            bad = problems(run, exp)
            name = f"{run['flush']}.{tag}.{peer_name(jar_set, run['path'], run['index'])}"
            if bad:
                raise PeerFailed(f"RocketMQ {run['version']} ({name}) lost or changed messages: "
                                 + "; ".join(bad[:10]))
            if run["messages"] != n:
                raise PeerFailed(f"RocketMQ peer ({name}) put {run['messages']} messages, expected {n}")
            by_name.setdefault(name, []).append(run)
        for name, rs in by_name.items():
            rep.add(f"{name}.msgs_per_s", [n / r["seconds"] for r in rs], "msg/s")
            rep.add(f"{name}.mb_per_s", [total_bytes / r["seconds"] / 1e6 for r in rs], "MB/s")
            rep.add(f"{name}.put_msgs_per_s", [n / r["put_seconds"] for r in rs], "msg/s")
        rep.params[f"{tag}.{jar_set}.version"] = runs[0]["version"] if runs else None
        rep.params[f"{tag}.{jar_set}.max_message_size"] = runs[0]["max_message_size"] if runs else None
        rep.params[f"{tag}.{jar_set}.commitlog_bytes"] = runs[0].get("max_phy_offset") if runs else None
        for flush in flushes:
            ratios(rep, f"{flush}.{tag}", jar_set)


# ours (index off / on) against RocketMQ's (index off / on): ratio name -> (our figure, RocketMQ's)
RATIOS = {
    "py_encoded_vs_{s}_batch": ("py_append_encoded", "{s}_batch"),
    "py_encoded_index_vs_{s}_batch_index": ("py_append_encoded_index", "{s}_batch_index"),
    "py_table_vs_{s}_batch": ("py_append_table", "{s}_batch"),
    "py_encoded_vs_{s}_single": ("py_append_encoded", "{s}_single"),
    "py_encoded_index_vs_{s}_single_index": ("py_append_encoded_index", "{s}_single_index"),
    "py_commit_vs_{s}_batch": ("py_append_commit", "{s}_batch"),
    "{s}_batch_index_on_vs_off": ("{s}_batch_index", "{s}_batch"),
}


def ratios(rep: common.Report, prefix: str, jar_set: str) -> None:
    """Every ratio of RATIOS whose two figures this run has."""
    for name, (num, den) in RATIOS.items():
        a = f"{prefix}.{num.format(s=jar_set)}.msgs_per_s"
        b = f"{prefix}.{den.format(s=jar_set)}.msgs_per_s"
        if a in rep.figures and b in rep.figures:
            rep.ratio(f"{prefix}.ratio.{name.format(s=jar_set)}", a, b)


if __name__ == "__main__":  # `make bench-quick` runs the scripts it names; this one is their library
    import sys

    print("bench/rocketmq_store.py: RocketMQ's store as store_append.py's peer; run bench/store_append.py",
          file=sys.stderr)
