"""The streaming job run in the test's process against the test broker: its settings, a run that
catches up, sample records, and the checks of what a run stored."""

from __future__ import annotations

import threading
from pathlib import Path

from ingest.config import JobConfig
from ingest.job import run_stream
from tests.helpers.brokers.kafka_records import Sent, store_by_coordinates


def job_config(bootstrap: str, topics: list[str], tmp: Path, **overrides: object) -> JobConfig:
    cfg = JobConfig(bootstrap_servers=bootstrap, subscribe=",".join(topics), store=str(tmp / "store"),
                    checkpoint=str(tmp / "checkpoint"), segment_size=1024 * 1024, consume_queue_units=1000,
                    max_offsets_per_trigger=700, master=None, flush="sync")
    for k, v in overrides.items():
        setattr(cfg, k, v)
    cfg.validate()
    return cfg


def run_until_caught_up(cfg: JobConfig, spark: object) -> None:
    run_stream(cfg, stop=threading.Event(), spark=spark, available_now=True)


def sample(topics: list[str], n: int) -> list[tuple[str, int, bytes | None, bytes, list[tuple[str, bytes]]]]:
    out = []
    for i in range(n):
        headers = [("TAGS", f"tag{i % 3}".encode()), ("seq", str(i).encode())]
        key = f"key-{i}".encode() if i % 4 else None
        out.append((topics[i % len(topics)], i % 4, key, f"body-{i}-".encode() * (i % 7), headers))
    return out


def assert_exactly_once(store: str, sent: list[Sent]) -> dict:
    found = store_by_coordinates(store)
    dupes = {k: len(v) for k, v in found.items() if len(v) > 1}
    assert not dupes, f"duplicated in the store: {list(dupes.items())[:5]}"
    missing = [(s.topic, s.partition, s.offset) for s in sent if (s.topic, s.partition, s.offset) not in found]
    assert not missing, f"{len(missing)} records missing, e.g. {missing[:5]}"
    return found


def assert_queues_contiguous_in_partition_order(found: dict) -> None:
    queues: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    for (topic, partition, offset), [(phys, msg)] in found.items():
        queues.setdefault((msg.topic, msg.queue_id), []).append((phys, msg.queue_offset, offset))
    for queue, rows in queues.items():
        rows.sort()
        assert [q for _, q, _ in rows] == list(range(len(rows))), f"queue {queue} offsets not contiguous from 0"
        assert [o for _, _, o in rows] == sorted(o for _, _, o in rows), f"queue {queue} not in partition order"
