"""The topics bench/pipeline.py reads, each generated from a seed (BENCHMARKS.md, "Pipeline").

- ``uniform``: 100-byte random values, a key from 64 ASCII keys, no headers (the first workload).
- ``mixed``: what a real stream looks like: bodies of 0 to 8 KiB (uniform in size), a UTF-8 key on
  nine records in ten, three headers (TAGS, a trace id, a content type), one record in a hundred
  with a non-ASCII header value, one bad record in 20,000 (a 33,000-byte header: properties over
  RocketMQ's 32,767, a dead letter).
- ``uniform_dlq``: ``uniform`` with one dead letter (as above) every 5,000 records, about one per
  fetch of a task, to set beside ``uniform``.
- ``lz4`` / ``zstd``: 100-byte JSON-like values that compress (about 3x), keys as ``uniform``,
  produced with that compression.type.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

Record = tuple[bytes | None, bytes, list[tuple[str, bytes]]]


@dataclass(frozen=True)
class Workload:
    name: str
    compression: str | None = None

    def records(self, n: int, seed: int) -> Iterator[Record]:
        return {"mixed": _mixed, "uniform_dlq": _uniform_dlq, "lz4": _json_like, "zstd": _json_like}.get(
            self.name, _uniform)(n, seed)


WORKLOADS = {w.name: w for w in (Workload("uniform"), Workload("mixed"), Workload("uniform_dlq"),
                                 Workload("lz4", "lz4"), Workload("zstd", "zstd"))}
_KEYS = [b"key-%d" % i for i in range(64)]
_BAD_HEADER = ("blob", b"x" * 33_000)


def _uniform(n: int, seed: int, dead_every: int = 0) -> Iterator[Record]:
    values = np.random.default_rng(seed).integers(0, 256, size=(n, 100), dtype=np.uint8)
    for i in range(n):
        yield _KEYS[i & 63], values[i].tobytes(), [_BAD_HEADER] if dead_every and i % dead_every == 7 else []


def _uniform_dlq(n: int, seed: int) -> Iterator[Record]:
    return _uniform(n, seed, dead_every=5_000)


def _mixed(n: int, seed: int) -> Iterator[Record]:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 8 * 1024 + 1, size=n)
    pool = rng.integers(0, 256, size=8 * 1024 + 64 * 1024, dtype=np.uint8).tobytes()
    starts = rng.integers(0, 64 * 1024, size=n)
    keyed = rng.random(n) < 0.9
    odd = rng.random(n) < 0.01
    for i in range(n):
        key = f"user-{int(starts[i]) % 5000}-\u00e9".encode() if keyed[i] else None
        headers = [("TAGS", b"tag-%d" % (i % 7)), ("trace", b"%016x" % (int(starts[i]) * 2654435761 + i)),
                   ("content-type", "caf\u00e9/\u6771\u4eac".encode() if odd[i] else b"application/octet-stream")]
        if i % 20_000 == 11:
            headers.append(_BAD_HEADER)
        yield key, pool[int(starts[i]):int(starts[i]) + int(sizes[i])], headers


def _json_like(n: int, seed: int) -> Iterator[Record]:
    rng = np.random.default_rng(seed)
    amounts, users = rng.integers(0, 100_000, size=n), rng.integers(0, 10_000, size=n)
    for i in range(n):
        value = (b'{"id":%d,"user":"user-%05d","amount":%d.%02d,"currency":"EUR","status":"settled"}'
                 % (i, users[i], amounts[i] // 100, amounts[i] % 100))
        yield _KEYS[i & 63], value.ljust(100, b" "), []


def prefill(bootstrap: str, topic: str, partitions: int, n: int, workload: Workload, seed: int) -> float:
    """Create ``topic`` and produce the workload's ``n`` records round-robin over its partitions with
    a kafka-python producer in big batches. Returns the seconds it took."""
    from common_stream import create_topic
    from kafka import KafkaProducer

    create_topic(bootstrap, topic, partitions)
    t0 = time.perf_counter()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20, batch_size=1 << 20,
                             max_request_size=8 << 20, compression_type=workload.compression)
    try:
        for i, (key, value, headers) in enumerate(workload.records(n, seed)):
            producer.send(topic, value=value, key=key, headers=headers, partition=i % partitions)
        producer.flush(timeout=1200)
    finally:
        producer.close()
    return time.perf_counter() - t0


def direct_share(bootstrap: str, topic: str, partitions: int, n: int, cfg: object) -> tuple[float, dict[str, int]]:
    """The share of the topic's records the read tasks' C pass encodes (the rest go the general way,
    by reason), found by reading the topic as a task does, here in the driver: Spark's Python
    workers keep their counts to themselves."""
    from ingest.reader_options import kafka_reader_options
    from ingest.encode.message_reader import EncodedBatches
    from ingest.job_settings import codec_config, mapping_config
    from ingest.kafka.offsets import KafkaOffsetRange
    from ingest.kafka.options import parse_options
    from ingest.kafka.read import KafkaColumns, read_range
    from ingest.kafka.source import arrow_schema, kafka_schema

    opts = parse_options({**kafka_reader_options(cfg, "earliest"), "includeHeaders": "true"}, streaming=False)
    maker = EncodedBatches(KafkaColumns(arrow_schema(kafka_schema(True))), mapping_config(cfg), codec_config(cfg))
    total = 0
    for p in range(partitions):
        per = n // partitions + (1 if p < n % partitions else 0)
        for batch in read_range(KafkaOffsetRange(topic, p, 0, per), opts.client_params, maker,
                                opts.fail_on_data_loss, opts.poll_timeout_ms):
            total += batch.num_rows
    return maker.direct_records() / max(total, 1), maker.fallbacks()
