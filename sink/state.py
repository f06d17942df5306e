"""What one commit records besides the store's own offsets: the sink's exactly-once state.

It rides in the store's commit point (``MessageStore.commit(offset, metadata=...)``), so the commit-log
end offset, the queue offsets, the batch id and the Kafka offsets are made durable in ONE atomic step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from store import CommitPointError

# The version this release writes; it reads every version in READ_VERSIONS and refuses any other,
# never reading it as one of these (CHANGELOG.md). Version 1 kept each partition's next offset
# under a "topic/partition" key; version 2 keeps one list per topic (compact_offsets), a third of
# the size at thousands of partitions, where the whole map is written on every commit.
STATE_VERSION = 2
READ_VERSIONS = (1, 2)
NO_OFFSET = -1      # version 2: a partition below the topic's highest one that has no offset


def tp_key(topic: str, partition: int) -> str:
    """Kafka topic names cannot contain '/', so it separates topic and partition unambiguously."""
    return f"{topic}/{partition}"


def parse_tp_key(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition("/")
    return topic, int(partition)


def compact_offsets(offsets: Mapping[str, int]) -> dict[str, list[int]]:
    """Version 2's form of {"topic/partition": next offset}: {"topic": [next offset of partition 0,
    of 1, ...]}, NO_OFFSET where a partition has none (Kafka's partitions are numbered from 0 up,
    so the lists have few holes)."""
    by_topic: dict[str, dict[int, int]] = {}
    for key, nxt in offsets.items():
        topic, partition = parse_tp_key(key)
        by_topic.setdefault(topic, {})[partition] = int(nxt)
    out: dict[str, list[int]] = {}
    for topic in sorted(by_topic):
        parts = by_topic[topic]
        row = [NO_OFFSET] * (max(parts) + 1)
        for partition, nxt in parts.items():
            row[partition] = nxt
        out[topic] = row
    return out


def expand_offsets(compact: Mapping[str, Any]) -> dict[str, int]:
    """compact_offsets undone; a value that is not a list of integers is a damaged commit point."""
    out: dict[str, int] = {}
    for topic, row in compact.items():
        if not isinstance(row, list):
            raise CommitPointError(f"commitpoint.json metadata.sink.kafkaOffsets[{topic!r}] is {type(row).__name__}, "
                                   "not a list of offsets: the commit point is damaged")
        for partition, nxt in enumerate(row):
            if int(nxt) != NO_OFFSET:
                out[tp_key(str(topic), partition)] = int(nxt)
    return out


@dataclass(frozen=True)
class SinkState:
    """The sink's view of the last commit."""

    batch_id: int = -1
    query_id: str | None = None                      # the Spark checkpoint's query id
    kafka_offsets: Mapping[str, int] = field(default_factory=dict)  # "topic/partition" -> next offset
    dead_letter_bytes: int = 0                       # committed length of the dead-letter file
    dead_letters: int = 0                            # dead letters committed so far
    records: int = 0                                 # messages committed so far
    tombstones: int = 0                              # ... of them Kafka null values (a 1-byte body)
    empty_values: int = 0                            # ... of them 0-byte Kafka values (a 1-byte body)
    broker_group: str | None = None                  # "K/N": the share of partitions it holds (ingest.broker_groups)

    @property
    def empty(self) -> bool:
        """Nothing committed yet: no Kafka position, message or dead letter."""
        return not self.kafka_offsets and not self.records and not self.dead_letters

    def to_metadata(self) -> dict[str, Any]:
        sink = {"version": STATE_VERSION, "batchId": self.batch_id, "queryId": self.query_id,
                "kafkaOffsets": compact_offsets(self.kafka_offsets),
                "deadLetterBytes": self.dead_letter_bytes, "deadLetters": self.dead_letters,
                "records": self.records, "tombstones": self.tombstones, "emptyValues": self.empty_values}
        if self.broker_group is not None:
            sink["brokerGroup"] = self.broker_group
        return {"sink": sink}

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any] | None) -> "SinkState":
        sink = (metadata or {}).get("sink")
        if not sink:
            return cls()
        version = sink.get("version", STATE_VERSION)
        if type(version) is not int or version not in READ_VERSIONS:
            raise CommitPointError(
                f"commitpoint.json metadata.sink has version {version!r}, and this release reads versions "
                f"{', '.join(map(str, READ_VERSIONS))} only: the store was written by another release of "
                "commitlog-ingest")
        raw = sink.get("kafkaOffsets", {})
        offsets = ({str(k): int(v) for k, v in raw.items()} if version == 1 else expand_offsets(raw))
        return cls(batch_id=int(sink["batchId"]), query_id=sink.get("queryId"), kafka_offsets=offsets,
                   dead_letter_bytes=int(sink.get("deadLetterBytes", 0)),
                   dead_letters=int(sink.get("deadLetters", 0)), records=int(sink.get("records", 0)),
                   tombstones=int(sink.get("tombstones", 0)), empty_values=int(sink.get("emptyValues", 0)),
                   broker_group=sink.get("brokerGroup"))

    def advanced(self, batch_id: int, query_id: str | None, kafka_next: Mapping[str, int],
                 dead_letter_bytes: int, dead_letters: int, records: int, tombstones: int = 0,
                 empty_values: int = 0) -> "SinkState":
        offsets = dict(self.kafka_offsets)
        for key, nxt in kafka_next.items():
            offsets[key] = max(offsets.get(key, 0), nxt)
        return replace(self, batch_id=batch_id, query_id=query_id, kafka_offsets=offsets,
                       dead_letter_bytes=dead_letter_bytes, dead_letters=self.dead_letters + dead_letters,
                       records=self.records + records, tombstones=self.tombstones + tombstones,
                       empty_values=self.empty_values + empty_values)

    def starting_offsets_json(self) -> dict[str, dict[str, int]]:
        """The Kafka source's ``startingOffsets`` JSON that continues exactly after this state."""
        out: dict[str, dict[str, int]] = {}
        for key, nxt in self.kafka_offsets.items():
            topic, partition = parse_tp_key(key)
            out.setdefault(topic, {})[str(partition)] = nxt
        return out
