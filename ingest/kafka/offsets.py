"""Planning offset ranges: pure functions over {(topic, partition): offset} maps, no Kafka calls.

A batch's ranges are fixed when it is planned; these functions are deterministic so that planning the
same (start, end) twice gives the same tasks and a re-run reads the same records.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

from ingest.kafka.options import DataLossError, KafkaOptionError

if TYPE_CHECKING:
    from ingest.kafka.options import KafkaSourceOptions

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]
Offsets = dict[TopicPartitionKey, int]


@dataclass(frozen=True)
class KafkaOffsetRange(InputPartition):
    """One Spark task: offsets [from_offset, until_offset) of one topic-partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


def offsets_to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """Spark's Kafka offset JSON form, {"topic": {"0": 12}}, sorted so equal maps serialize equally."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {(topic, int(p)): int(o) for topic, parts in data.items() for p, o in parts.items()}


def rate_limit(start: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int],
               limit: int) -> Offsets:
    """Cap ``end`` so that about ``limit`` offsets are read, split in proportion to each partition's
    backlog, as Spark's KafkaMicroBatchStream.rateLimit does (a partition whose share is under one
    offset still gets one, so no partition starves)."""
    sizes = {tp: max(0, end[tp] - start.get(tp, end[tp])) for tp in end}
    total = sum(sizes.values())
    if total <= limit:
        return dict(end)
    capped: Offsets = {}
    for tp, until in end.items():
        begin = start.get(tp, until)
        prorate = limit * (sizes[tp] / total)
        step = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        capped[tp] = min(until, begin + step)
    return capped


def plan_ranges(start: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int],
                max_records_per_task: int, min_partitions: int | None = None) -> list[KafkaOffsetRange]:
    """One task per topic-partition range; ranges over ``max_records_per_task`` (or too few tasks
    for ``minPartitions``) are cut into equal consecutive pieces. A partition missing from ``start``
    has nothing to read in this batch (it was discovered by this batch's planning)."""
    ranges = [KafkaOffsetRange(t, p, start[(t, p)], until)
              for (t, p), until in sorted(end.items()) if (t, p) in start and until > start[(t, p)]]
    total = sum(r.size for r in ranges)
    piece = max_records_per_task
    if min_partitions and len(ranges) < min_partitions and total > 0:
        piece = min(piece, max(1, math.ceil(total / min_partitions)))
    out: list[KafkaOffsetRange] = []
    for r in ranges:
        parts = max(1, math.ceil(r.size / piece))
        bounds = [r.from_offset + (r.size * i) // parts for i in range(parts + 1)]
        out += [KafkaOffsetRange(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:]) if b > a]
    return out


@dataclass(frozen=True)
class KafkaOffsetRanges(InputPartition):
    """One Spark task reading several consecutive ranges in turn, with one consumer."""

    ranges: tuple[KafkaOffsetRange, ...]

    @property
    def size(self) -> int:
        return sum(r.size for r in self.ranges)


def group_ranges(ranges: Sequence[KafkaOffsetRange], min_records_per_task: int,
                 min_partitions: int | None = None) -> list[KafkaOffsetRange | KafkaOffsetRanges]:
    """Consecutive ranges read by one task until it holds ``min_records_per_task`` offsets (0: one
    task per range). The order of the records across tasks is unchanged, and ``minPartitions``,
    when given, is kept: never fewer tasks than it asks for."""
    if min_records_per_task <= 0 or len(ranges) < 2:
        return list(ranges)
    groups: list[list[KafkaOffsetRange]] = []
    held = min_records_per_task
    for r in ranges:
        if held >= min_records_per_task:
            groups.append([])
            held = 0
        groups[-1].append(r)
        held += r.size
    if min_partitions and len(groups) < min_partitions:
        return list(ranges)
    return [g[0] if len(g) == 1 else KafkaOffsetRanges(tuple(g)) for g in groups]


def check_data_loss(planned: Mapping[TopicPartitionKey, int], earliest: Mapping[TopicPartitionKey, int],
                    fail_on_data_loss: bool) -> Offsets:
    """Planned start offsets, each raised to its partition's earliest offset when retention has deleted
    the records below it; with failOnDataLoss (the default) that is an error instead."""
    lost = {tp: (off, earliest[tp]) for tp, off in planned.items() if tp in earliest and off < earliest[tp]}
    if lost and fail_on_data_loss:
        detail = ", ".join(f"{t}-{p}: planned start {o}, earliest available {e}"
                           for (t, p), (o, e) in sorted(lost.items()))
        raise DataLossError(f"records were deleted before they were read ({detail}); they are lost. "
                            "Set failOnDataLoss=false to skip to the earliest available offset instead.")
    for (t, p), (o, e) in sorted(lost.items()):
        log.warning("data loss: %s-%d offsets %d..%d were deleted before being read; skipping to %d",
                    t, p, o, e - 1, e)
    return {tp: max(off, earliest.get(tp, off)) for tp, off in planned.items()}


def resolve_markers(spec: Mapping[TopicPartitionKey, int], partitions: Sequence[TopicPartitionKey],
                    earliest: Mapping[TopicPartitionKey, int], latest: Mapping[TopicPartitionKey, int],
                    option: str) -> Offsets:
    """Per-partition JSON offsets with Spark's -2 (earliest) / -1 (latest) markers, made concrete.
    Like Spark, every partition being read must be named."""
    missing = sorted(set(partitions) - set(spec))
    if missing:
        names = ", ".join(f"{t}-{p}" for t, p in missing)
        raise KafkaOptionError(
            f"option '{option}' must name every partition read; missing: {names}")
    out: Offsets = {}
    for tp in partitions:
        off = spec[tp]
        out[tp] = earliest[tp] if off == -2 else latest[tp] if off == -1 else off
    return out


def given_offsets(o: "KafkaSourceOptions", tps: Sequence[TopicPartitionKey]) -> tuple[Offsets, Offsets] | None:
    """A batch read's (start, end) over ``tps`` when the options leave nothing to ask the brokers:
    ``assign``ed partitions with both ends as offsets (no -2/-1 marker) for each of them, as a replay's
    batches are planned. Spark's connector takes specific offsets as given too; records deleted below a
    start, or a log cut short of an end, are then found by the task that reads the range
    (ingest.kafka.read: failOnDataLoss as ever), not by a round of ListOffsets in each batch's planner."""
    if o.assign is None or o.starting.kind != "offsets" or o.ending.kind != "offsets":
        return None
    start, end = o.starting.offsets, o.ending.offsets
    if any(tp not in spec or spec[tp] < 0 for spec in (start, end) for tp in tps):
        return None
    return {tp: start[tp] for tp in tps}, {tp: end[tp] for tp in tps}


def check_forwards(start: Offsets, end: Offsets) -> None:
    """Refuse a read whose start is past its end for a partition."""
    backwards = {tp: (start[tp], end[tp]) for tp in start if start[tp] > end[tp]}
    if backwards:
        raise KafkaOptionError(f"starting offset is after the ending offset for {backwards}; "
                               "check startingOffsets/endingOffsets")


def plan_tasks(start: Offsets, end: Offsets, o: "KafkaSourceOptions") -> list[InputPartition]:
    """The read tasks of a batch: its ranges (plan_ranges), the small ones read together."""
    return list(group_ranges(plan_ranges(start, end, o.max_records_per_task, o.min_partitions),
                             o.min_records_per_task, o.min_partitions))


def report_lost(message: str, fail: bool) -> None:
    """Records the read cannot have: an error with failOnDataLoss, else a warning."""
    if fail:
        raise DataLossError(f"{message}. Set failOnDataLoss=false to continue without those records.")
    log.warning("data loss: %s", message)


def check_gone(begin: Offsets, tps: Sequence[TopicPartitionKey], fail: bool) -> None:
    """Partitions a stream had that the brokers no longer list (a deleted topic) are lost."""
    gone = sorted(set(begin) - set(tps))
    if gone:
        report_lost(f"partitions {', '.join(f'{t}-{p}' for t, p in gone)} no longer exist (topic deleted?)", fail)
