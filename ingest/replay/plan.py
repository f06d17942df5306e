"""What a replay reads: per Kafka partition, the offset range [start, end), fixed before anything is
written, minus what the store already holds, cut into micro-batches.

Pure functions over {(topic, partition): offset} maps, plus the Kafka lookups that make ``--from`` /
``--to`` concrete. A Kafka replay's plan is kept in ``<store>/replay/`` until it completes, so a run
killed and started again with the same arguments replays the same range even if the topic has grown.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TopicPartitionKey = tuple[str, int]
Offsets = dict[TopicPartitionKey, int]

log = logging.getLogger("commitlog.replay")

PLAN_DIR = "replay"
FILE_FORMATS = ("jsonl", "parquet")      # what replay --from-files reads


class ReplayError(RuntimeError):
    """A replay that cannot run as asked; the message says what to change."""


class RetentionError(ReplayError):
    """``--from-timestamp`` asks for records that retention has already deleted (with ``--strict``)."""


@dataclass(frozen=True)
class Bound:
    """One end of the replayed range: earliest | latest | timestamp | offsets."""

    kind: str
    timestamp: int | None = None
    offsets: Mapping[TopicPartitionKey, int] = field(default_factory=dict)   # -2 earliest, -1 latest

    def describe(self) -> str:
        if self.kind == "timestamp":
            return f"timestamp {self.timestamp}"
        if self.kind == "offsets":
            return "offsets " + ",".join(f"{t}-{p}:{o}" for (t, p), o in sorted(self.offsets.items()))
        return self.kind


def parse_offsets_json(text: str, option: str) -> dict[TopicPartitionKey, int]:
    """Spark's per-partition offsets JSON, {"topic": {"0": 23, "1": -2}}."""
    try:
        data = json.loads(text)
        out = {(str(t), int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}
    except (ValueError, TypeError, AttributeError) as exc:
        raise ReplayError(f"{option}: expected JSON like {{\"orders\": {{\"0\": 23, \"1\": -2}}}} "
                          f"(-2 = earliest, -1 = latest), got {text!r} ({exc})") from None
    bad = {f"{t}-{p}": o for (t, p), o in out.items() if o < -2}
    if bad:
        raise ReplayError(f"{option}: offsets below -2 are not offsets: {bad}")
    return out


@dataclass
class PartitionPlan:
    """One partition's part of the replay. ``start``/``end`` are the asked range made concrete;
    ``resume`` is where this run starts reading (the store may already hold a prefix)."""

    topic: str
    partition: int
    start: int
    end: int
    resume: int = -1

    def __post_init__(self) -> None:
        if self.resume < 0:
            self.resume = self.start

    @property
    def key(self) -> TopicPartitionKey:
        return (self.topic, self.partition)

    @property
    def total(self) -> int:
        return max(0, self.end - self.start)

    @property
    def held(self) -> int:
        """Offsets of the range the store already held when this run started."""
        return max(0, min(self.resume, self.end) - self.start)

    @property
    def todo(self) -> int:
        return max(0, self.end - self.resume)


@dataclass
class ReplayPlan:
    partitions: list[PartitionPlan]

    def starts(self) -> Offsets:
        return {p.key: p.resume for p in self.partitions}

    def ends(self) -> Offsets:
        return {p.key: p.end for p in self.partitions}

    def topics(self) -> list[str]:
        return sorted({p.topic for p in self.partitions})

    @property
    def todo(self) -> int:
        return sum(p.todo for p in self.partitions)

    def to_json(self) -> dict[str, Any]:
        return {"partitions": [{"topic": p.topic, "partition": p.partition, "start": p.start, "end": p.end}
                               for p in self.partitions]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ReplayPlan":
        return cls([PartitionPlan(str(d["topic"]), int(d["partition"]), int(d["start"]), int(d["end"]))
                    for d in data["partitions"]])


def apply_store_offsets(plan: ReplayPlan, held: Mapping[str, int]) -> list[str]:
    """Move each partition's ``resume`` past what the store holds ("topic/partition" -> next offset,
    the sink's recorded Kafka offsets). Returns one message per topic that was (partly) skipped."""
    from sink.state import tp_key

    skipped: dict[str, list[str]] = {}
    for p in plan.partitions:
        stored_next = held.get(tp_key(p.topic, p.partition), 0)
        p.resume = max(p.start, min(stored_next, p.end)) if stored_next > p.start else p.start
        if p.held:
            what = (f"{p.partition}: [{p.start}, {p.end}) all held" if p.resume >= p.end
                    else f"{p.partition}: [{p.start}, {p.resume}) held, continuing at {p.resume}")
            skipped.setdefault(p.topic, []).append(what)
    messages = []
    for topic, parts in sorted(skipped.items()):
        n = sum(p.held for p in plan.partitions if p.topic == topic)
        messages.append(f"{topic}: {n} offsets of the range are already in the store (its recorded Kafka "
                        f"offsets), skipped, not written again; partition {'; '.join(parts)}")
    return messages


def chunks(start: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int],
           limit: int | None) -> Iterator[tuple[Offsets, Offsets]]:
    """Consecutive (from, until) offset maps: the range cut into the fewest batches of at most about
    ``limit`` offsets, every partition advancing by an equal share of its own range in each (so no
    batch is a tiny tail). Depends only on (start, end, limit): a replay from Kafka and one from files
    of the same records cut the same batches, so they write the same commit log."""
    begin = {tp: min(int(start[tp]), int(end[tp])) for tp in end}
    total = sum(end[tp] - begin[tp] for tp in end)
    if total <= 0:
        return
    n = max(1, math.ceil(total / limit)) if limit else 1
    bounds = [{tp: begin[tp] + (end[tp] - begin[tp]) * i // n for tp in end} for i in range(n + 1)]
    for lo, hi in zip(bounds, bounds[1:]):
        if any(hi[tp] > lo[tp] for tp in end):
            yield lo, hi


def sub_ranges(start: Mapping[TopicPartitionKey, int], until: Mapping[TopicPartitionKey, int]
               ) -> dict[TopicPartitionKey, tuple[int, int]]:
    """The non-empty ranges of one chunk."""
    return {tp: (start[tp], until[tp]) for tp in sorted(until) if until[tp] > start[tp]}


# ---------------------------------------------------------------- Kafka: making the bounds concrete

def first_record_timestamp(client_params: Mapping[str, Any], tp: TopicPartitionKey, offset: int,
                           end: int) -> int | None:
    """Timestamp (ms) of the first record at or after ``offset`` (below ``end``), read the way the
    source's tasks read."""
    import pyarrow as pa

    from ingest.kafka.offsets import KafkaOffsetRange
    from ingest.kafka.read import KafkaColumns, read_range

    schema = pa.schema([("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC"))])
    if offset >= end:
        return None
    # one record is enough, but a compacted/transactional log may have a gap: read a small range
    rng = KafkaOffsetRange(tp[0], tp[1], offset, min(end, offset + 16))
    for batch in read_range(rng, client_params, KafkaColumns(schema), fail_on_data_loss=False, poll_timeout_ms=30_000):
        if batch.num_rows:
            return int(batch.column("timestamp").cast(pa.int64())[0].as_py()) // 1000
    return None


def retention_problem(asked_ms: int, earliest: int, first_ms: int | None) -> bool:
    """True when ``--from-timestamp`` reaches back past what retention kept: records were deleted
    (earliest > 0) and the first one kept is newer than the asked time, so deleted ones may have
    been in range."""
    return earliest > 0 and first_ms is not None and asked_ms < first_ms


def check_retention(asked_ms: int, tps: Sequence[TopicPartitionKey], earliest: Mapping[TopicPartitionKey, int],
                    start: Mapping[TopicPartitionKey, int], strict: bool,
                    first_timestamp: Callable[[TopicPartitionKey], int | None]) -> list[str]:
    """``--from-timestamp`` against retention: for each partition whose start fell on its first
    retained record, is the asked time older than that record (so deleted records may have been in
    range)? Says so (a note per partition), or with ``strict`` raises RetentionError."""
    notes = []
    for tp in tps:
        if earliest[tp] == 0 or start[tp] != earliest[tp]:
            continue   # nothing deleted, or the asked time is inside what is kept
        first = first_timestamp(tp)
        if not retention_problem(asked_ms, earliest[tp], first):
            continue
        msg = (f"--from-timestamp {asked_ms} is older than the first retained record of {tp[0]}-{tp[1]} "
               f"(offset {earliest[tp]}, timestamp {first}): the records before it were deleted by retention")
        if strict:
            raise RetentionError(msg + "; --strict refuses to replay an incomplete range (without --strict "
                                       "the replay starts at the first retained record)")
        notes.append(msg + f"; starting at the first retained record, offset {earliest[tp]}")
    return notes


def resolve_kafka_plan(client_params: Mapping[str, Any], topics: Sequence[str] | None, pattern: str | None,
                       begin: Bound, finish: Bound, strict: bool) -> tuple[ReplayPlan, list[str]]:
    """The concrete range of each partition, from the broker, now. Returns the plan and messages
    worth telling the user (retention, empty ranges)."""
    from ingest.kafka.admin import OffsetReader
    from ingest.kafka.offsets import resolve_markers

    notes: list[str] = []
    with OffsetReader(client_params) as reader:
        tps = reader.partitions(subscribe=list(topics) if topics else None, pattern=pattern)
        if not tps:
            what = f"topics {','.join(topics)}" if topics else f"pattern {pattern!r}"
            raise ReplayError(f"no partition to replay: {what} matches no topic on "
                              f"{client_params.get('bootstrap_servers')}")
        if topics:
            missing = sorted(set(topics) - {t for t, _ in tps})
            if missing:
                raise ReplayError(f"topic(s) {', '.join(missing)} do not exist on "
                                  f"{client_params.get('bootstrap_servers')}")
        earliest = reader.earliest(tps)
        latest = reader.latest(tps, earliest)

        def concrete(bound: Bound, which: str) -> Offsets:
            if bound.kind == "earliest":
                return dict(earliest)
            if bound.kind == "latest":
                return dict(latest)
            if bound.kind == "offsets":
                return resolve_markers(bound.offsets, tps, earliest, latest, f"--{which}-offsets")
            found = reader.for_timestamp(tps, {tp: int(bound.timestamp or 0) for tp in tps})
            return {tp: latest[tp] if off is None else min(off, latest[tp]) for tp, off in found.items()}

        start = concrete(begin, "from")
        end = concrete(finish, "to")
        if begin.kind == "timestamp":
            notes += check_retention(int(begin.timestamp or 0), tps, earliest, start, strict,
                                     lambda tp: first_record_timestamp(client_params, tp, earliest[tp],
                                                                       latest[tp]))
    for tp in tps:
        lost = earliest[tp] - start[tp]
        if lost > 0:
            msg = (f"{tp[0]}-{tp[1]}: the range starts at offset {start[tp]} but the first retained record "
                   f"is {earliest[tp]} ({lost} offsets deleted by retention)")
            if strict:
                raise RetentionError(msg + "; --strict refuses an incomplete range")
            notes.append(msg + f"; starting at {earliest[tp]}")
            start[tp] = earliest[tp]
        if start[tp] > end[tp]:
            raise ReplayError(f"{tp[0]}-{tp[1]}: the range starts at offset {start[tp]}, after its end "
                              f"{end[tp]}; check --from/--to")
    return ReplayPlan([PartitionPlan(t, p, start[(t, p)], end[(t, p)]) for t, p in tps]), notes


# ---------------------------------------------------------------- the plan file

def plan_identity(spec: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def plan_path(store: str | os.PathLike[str], identity: str) -> Path:
    return Path(store) / PLAN_DIR / f"plan-{identity}.json"


def load_plan(path: Path) -> ReplayPlan | None:
    try:
        return ReplayPlan.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise ReplayError(f"replay plan {path} is unreadable ({exc}); delete it to plan the range again") from exc


def save_plan(path: Path, plan: ReplayPlan, spec: Mapping[str, Any]) -> None:
    """Atomically (tmp, fsync, rename, fsync dir): a kill leaves the old plan or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    data = json.dumps({"spec": dict(spec), **plan.to_json()}, indent=1, sort_keys=True).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


