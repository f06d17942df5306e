"""``make demo``: the main job end to end on the embedded broker, checked.

Starts ``commitlog broker``, creates 3 topics of 4 partitions, produces ~200,000 sample events (tags,
keys, headers, bodies of many sizes, empty and null values, a few bad records, a few headers only
KAFKA_HEADERS can keep),
runs ``commitlog run`` until every event is in the store (as a message or a dead letter), stops it
with SIGTERM, then prints ``commitlog stat``, the dead-letter count and ``commitlog verify``, and reads
the store back as Arrow to find the awkward headers as they were produced and every null and empty
value stored as RocketMQ can serve it (a one-byte body and its property, no empty body). Exits
non-zero when verify is not clean or a count or a header differs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

TOPICS = ("demo-orders", "demo-payments", "demo-clicks")
PARTITIONS = 4
DEMO_MAX_MESSAGE_SIZE = 256 * 1024     # small enough that the demo can show oversize dead letters


@dataclass
class Produced:
    """What the producer sent: the counts the store must end with."""

    total: int = 0
    bad: int = 0                # dead letters to be
    awkward: dict[int, list[tuple[str, bytes]]] = field(default_factory=dict)   # seq -> headers, kept whole
    per_topic: dict[str, int] = field(default_factory=dict)
    tombstones: int = 0         # good events with a null value
    empty_values: int = 0       # good events with a 0-byte value

    @property
    def good(self) -> int:
        return self.total - self.bad


def create_topics(bootstrap: str, topics: tuple[str, ...] = TOPICS, partitions: int = PARTITIONS) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="commitlog-demo")
    try:
        admin.create_topics([NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics])
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()


def body_sizes(rng: np.random.Generator, n: int) -> np.ndarray:
    """Mostly small bodies, some kilobytes, a few up to 64 KiB, and some empty ones."""
    kind = rng.random(n)
    sizes = rng.integers(10, 512, n)
    sizes = np.where(kind < 0.02, 0, sizes)
    sizes = np.where(kind > 0.93, rng.integers(1024, 8192, n), sizes)
    sizes = np.where(kind > 0.998, rng.integers(16384, 65536, n), sizes)
    return sizes


def produce_sample_events(bootstrap: str, n: int = 200_000, seed: int = 7, topics: tuple[str, ...] = TOPICS,
                          bad_each: int = 3) -> Produced:
    """Produce ``n`` events across ``topics``: ``3 * bad_each`` of them bad (a body over
    maxMessageSize, properties over RocketMQ's 32,767 bytes, a bornHost header that is no address)
    and ``2 * bad_each`` with headers that name=value properties would lose (a separator, bytes
    that are not UTF-8), kept in KAFKA_HEADERS; returns what was sent."""
    from kafka import KafkaProducer

    rng = np.random.default_rng(seed)
    sizes = body_sizes(rng, n)
    pool = rng.integers(0, 256, 65536 + 1024, dtype=np.uint8).tobytes()
    tags = ["TagA", "TagB", "TagC", "", "order-created", "paid"]
    picked = rng.choice(n, size=5 * bad_each, replace=False).tolist()
    bad_kinds = {i: k % 3 for k, i in enumerate(sorted(picked[:3 * bad_each]))}
    awkward_kinds = {i: k % 2 for k, i in enumerate(sorted(picked[3 * bad_each:]))}
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=512 * 1024,
                             max_request_size=4 * 1024 * 1024, acks=1, client_id="commitlog-demo")
    produced = Produced()
    for i in range(n):
        topic = topics[i % len(topics)]
        start = int(rng.integers(0, 1024))
        value = pool[start:start + int(sizes[i])]
        headers = [("TAGS", tags[i % len(tags)].encode()), ("source", b"demo"), ("seq", str(i).encode())]
        if i in bad_kinds:
            kind = bad_kinds[i]
            produced.bad += 1
            if kind == 0:
                value = b"x" * (DEMO_MAX_MESSAGE_SIZE + 1)          # over maxMessageSize
            elif kind == 1:
                headers.append(("note", b"n" * 40_000))              # properties over 32,767 bytes
            else:
                headers.append(("bornHost", b"not an address"))      # BORNHOST must be ip:port
        else:
            if i in awkward_kinds:
                headers.append(("note", b"a\x02separator" if awkward_kinds[i] == 0 else b"\xff\xfe not utf-8"))
            if any(not v or b"\x01" in v or b"\x02" in v or not _utf8(v) for _, v in headers):
                # name=value properties would lose or corrupt these (an empty value among them):
                # KAFKA_HEADERS keeps them as sent
                produced.awkward[i] = list(headers)
        key = f"key-{i % 5000}".encode() if i % 10 else None
        if not value and key is not None and i % 4 == 0:
            value = None                                             # a tombstone (Kafka's have a key)
        if i not in bad_kinds:
            produced.tombstones += value is None
            produced.empty_values += value == b""
        producer.send(topic, key=key, value=value, headers=headers, partition=i % PARTITIONS)
        produced.per_topic[topic] = produced.per_topic.get(topic, 0) + 1
        produced.total += 1
    producer.flush()
    producer.close()
    return produced


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def committed_counts(store: Path) -> tuple[int, int]:
    """(messages, dead letters) the store has committed so far, from its commit point."""
    from sink.state import SinkState
    from store import read_commit_point

    try:
        point = read_commit_point(store)
    except (OSError, ValueError):
        return 0, 0
    state = SinkState.from_metadata(point.metadata if point else None)
    return state.records, state.dead_letters


@dataclass
class ReadBack:
    """What the store holds, read back as Arrow (StoreReader) with ingest/encode/restore.py."""

    awkward: dict[int, list[tuple[str, bytes | None]]] = field(default_factory=dict)   # seq -> KAFKA_HEADERS
    tombstones: int = 0          # KAFKA_VALUE_NULL=true
    empty_values: int = 0        # KAFKA_VALUE_EMPTY=true
    empty_bodies: int = 0        # what RocketMQ's 4.9 consumers cannot take: must stay 0


def read_back(store: Path) -> ReadBack:
    import pyarrow.compute as pc

    from ingest.encode.restore import kafka_headers
    from store import StoreReader
    from store.format.constants import PROPERTY_KAFKA_HEADERS, PROPERTY_KAFKA_VALUE_EMPTY, PROPERTY_KAFKA_VALUE_NULL

    out = ReadBack()
    with StoreReader.open(store) as reader:
        for batch in reader.record_batches():
            props = batch.column("properties")
            out.empty_bodies += pc.sum(pc.equal(pc.binary_length(batch.column("body")), 0)).as_py() or 0
            for name in (PROPERTY_KAFKA_VALUE_NULL, PROPERTY_KAFKA_VALUE_EMPTY):
                marked = pc.sum(pc.equal(pc.map_lookup(props, name, "first"), "true")).as_py() or 0
                if name == PROPERTY_KAFKA_VALUE_NULL:
                    out.tombstones += marked
                else:
                    out.empty_values += marked
            has = pc.is_valid(pc.map_lookup(props, PROPERTY_KAFKA_HEADERS, "first"))
            for row in props.filter(has).to_pylist():
                headers = kafka_headers(dict(row))
                seq = int(dict((k, v) for k, v in headers if v is not None)["seq"])
                out.awkward[seq] = headers
    return out


def commitlog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ingest.cli", *args], text=True, capture_output=True)


def start_broker(kind: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "ingest.cli", "broker", "--kind", kind],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("bootstrap.servers="):
        proc.kill()
        raise SystemExit(f"demo: the broker did not start: {line!r}")
    return proc, line.split("=", 1)[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--store", default="demo-store")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for every event")
    # Tansu: the faster of the two embedded brokers to start (BENCHMARKS.md, "Brokers")
    ap.add_argument("--broker", choices=["tansu", "kafka"], default="tansu",
                    help="the embedded broker: tansu (default: starts fastest) or kafka (Apache Kafka)")
    args = ap.parse_args(argv)

    store = Path(args.store).resolve()
    checkpoint = store.with_name(store.name + "-checkpoint")
    for path in (store, checkpoint):
        shutil.rmtree(path, ignore_errors=True)
    started = time.monotonic()
    broker, bootstrap = start_broker(args.broker)
    job = None
    try:
        name = {"tansu": "Tansu (in memory)", "kafka": "Apache Kafka"}[args.broker]
        print(f"demo: {name} broker at {bootstrap}, started in {time.monotonic() - started:.1f} s "
              f"(--broker {'kafka' if args.broker == 'tansu' else 'tansu'} for the other; Tansu is the "
              f"default as the faster to start, BENCHMARKS.md \"Brokers\")", flush=True)
        create_topics(bootstrap)
        t0 = time.time()
        produced = produce_sample_events(bootstrap, args.events)
        print(f"demo: produced {produced.total} events ({produced.bad} bad) to {', '.join(TOPICS)} "
              f"in {time.time() - t0:.1f} s", flush=True)
        job = subprocess.Popen([sys.executable, "-m", "ingest.cli", "run", "--bootstrap-servers", bootstrap,
                                "--subscribe", ",".join(TOPICS), "--store", str(store),
                                "--checkpoint", str(checkpoint), "--segment-size", "64m",
                                "--max-message-size", str(DEMO_MAX_MESSAGE_SIZE), "--flush", "sync",
                                "--trigger", "500ms", "--max-offsets-per-trigger", "100000",
                                "--master", "local[2]",
                                # the demo made its topics (delete): no DescribeConfigs, which Tansu lacks
                                *[a for t in TOPICS for a in ("--topic-cleanup-policy", f"{t}=delete")]])
        deadline = time.time() + args.timeout
        while True:
            messages, dead = committed_counts(store)
            if messages + dead >= produced.total:
                break
            if job.poll() is not None:
                raise SystemExit(f"demo: commitlog run exited with {job.returncode} before every event was in")
            if time.time() > deadline:
                raise SystemExit(f"demo: only {messages + dead} of {produced.total} events in after {args.timeout:.0f} s")
            time.sleep(1.0)
        job.send_signal(signal.SIGTERM)
        job.wait(timeout=120)
        print(f"demo: commitlog run stopped with SIGTERM (exit {job.returncode}), "
              f"abort file left: {(store / 'abort').exists()}", flush=True)
    finally:
        if job is not None and job.poll() is None:
            job.kill()
        broker.send_signal(signal.SIGTERM)
        broker.wait(timeout=30)

    stat = commitlog("stat", str(store))
    print(stat.stdout, end="")
    messages, dead = committed_counts(store)
    print(f"demo: dead letters: {dead} (in {store / 'deadletter' / 'deadletter.jsonl'})")
    verify = commitlog("verify", str(store))
    print(verify.stdout, end="", flush=True)
    problems = []
    if verify.returncode != 0:
        problems.append(f"verify exited {verify.returncode}: {verify.stderr.strip()}")
    if messages != produced.good:
        problems.append(f"{messages} messages in the store, {produced.good} good events produced")
    if dead != produced.bad:
        problems.append(f"{dead} dead letters, {produced.bad} bad events produced")
    if (store / "abort").exists():
        problems.append("abort file left: the job did not close the store cleanly")
    back = read_back(store)
    found = back.awkward
    print(f"demo: read back as Arrow: {len(found)} messages with their headers in KAFKA_HEADERS; "
          f"{back.tombstones} tombstones and {back.empty_values} empty values stored as a 1-byte body, "
          f"{back.empty_bodies} empty bodies")
    if (back.tombstones, back.empty_values, back.empty_bodies) != (produced.tombstones, produced.empty_values, 0):
        problems.append(f"null and empty values: {back.tombstones} tombstones and {back.empty_values} empty values "
                        f"read back, {produced.tombstones} and {produced.empty_values} sent; {back.empty_bodies} "
                        "messages with an empty body (none may have one)")
    if found != produced.awkward:
        differ = sorted(set(found) ^ set(produced.awkward)
                        | {k for k in set(found) & set(produced.awkward) if found[k] != produced.awkward[k]})
        problems.append(f"headers kept in KAFKA_HEADERS: {len(found)} read back, {len(produced.awkward)} sent, "
                        f"{len(differ)} differ (seq {differ[:5]} ...)")
    if problems:
        print("demo: FAILED: " + "; ".join(problems))
        return 1
    print(f"demo: OK: {messages} messages, {dead} dead letters, verify clean")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
