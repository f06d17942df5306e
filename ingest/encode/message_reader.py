"""The message source's readers (ingest.encode.message_source): the Kafka source's offsets and tasks,
each task's fetches mapped and encoded as RocketMQ records (straight from the fetched bytes by the C
pass where it covers them, ingest.encode.direct_encode; otherwise through Kafka columns and
ingest.encode.prepare.map_and_encode), packed and handed over (ingest.encode.prepare.hand_over).
Loaded by Spark's planner and the read tasks, not by the one that only creates the source."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ingest.encode.direct_encode import DirectEncoder
from ingest.encode.mapping import MappingConfig
from ingest.encode.message_options import PREPARE_OPTION, SPOOL_OPTION, SPOOL_SECRET_OPTION, SPOOL_TAG_OPTION
from ingest.encode.prepare import hand_over, map_and_encode
from ingest.kafka.fetch import ArrowChunk
from ingest.kafka.offsets import KafkaOffsetRange
from ingest.kafka.options import KafkaOptionError, parse_options
from ingest.kafka.read import BatchMaker, KafkaColumns
from ingest.kafka.source import KafkaBatchReader, KafkaStreamReader, kafka_schema
from sink.handover.spool_task import SpoolTarget
from store.format import CodecConfig

_SPOOL_OPTIONS = (SPOOL_OPTION, SPOOL_TAG_OPTION, SPOOL_SECRET_OPTION)


def _settings(options: Mapping[str, str]) -> tuple[dict[str, str], MappingConfig, CodecConfig, bool]:
    """(the Kafka source's options, mapping, codec, index keys) from this source's options."""
    ours = (PREPARE_OPTION, *(o.lower() for o in _SPOOL_OPTIONS), "includeheaders")
    kafka = {k: v for k, v in options.items() if str(k).lower() not in ours}
    kafka["includeHeaders"] = "true"   # the mapping reads the headers
    raw = next((v for k, v in options.items() if str(k).lower() == PREPARE_OPTION), None)
    try:
        spec = json.loads(raw) if raw is not None else {}
        return (kafka, MappingConfig(**spec.get("mapping", {})), CodecConfig(**spec.get("codec", {})),
                bool(spec.get("index_keys", False)))
    except (ValueError, TypeError, AttributeError) as exc:
        raise KafkaOptionError(f"option '{PREPARE_OPTION}' is not the JSON prepare_option() writes: {exc}") from exc


class EncodedBatches:
    """A task's fetches as ENCODED_SCHEMA batches: straight from the fetched bytes where the C
    path covers them (ingest.encode.direct_encode), through Kafka columns and map_and_encode otherwise."""

    def __init__(self, columns: KafkaColumns, mapping: MappingConfig, codec: CodecConfig) -> None:
        self.columns, self.mapping, self.codec = columns, mapping, codec
        self._direct: dict[tuple[str, int], DirectEncoder | None] = {}

    def from_chunk(self, chunk: ArrowChunk, rng: KafkaOffsetRange) -> pa.RecordBatch:
        key = (rng.topic, rng.partition)
        if key not in self._direct:
            self._direct[key] = DirectEncoder.for_partition(rng.topic, rng.partition, self.mapping, self.codec)
        direct = self._direct[key]
        encoded = None
        if direct is not None:
            encoded = direct.encode(chunk, rng.until_offset, lambda rest: self._general(rest, rng))
        if encoded is not None:
            return encoded
        return self._general(chunk, rng)

    def _general(self, chunk: ArrowChunk, rng: KafkaOffsetRange) -> pa.RecordBatch:
        return map_and_encode(self.columns.from_chunk(chunk, rng), self.mapping, self.codec)

    def fallbacks(self) -> dict[str, int]:
        """How many records of the fast path's fetches went the general way, by reason, over every
        partition this task read."""
        total: dict[str, int] = {}
        for encoder in self._direct.values():
            for reason, count in (encoder.fallbacks if encoder is not None else {}).items():
                total[reason] = total.get(reason, 0) + count
        return total

    def direct_records(self) -> int:
        """How many records the C pass encoded (with fallbacks(): the share it took)."""
        return sum(encoder.direct_records for encoder in self._direct.values() if encoder is not None)

    def from_records(self, records: list[Any], rng: KafkaOffsetRange) -> pa.RecordBatch:
        return map_and_encode(self.columns.from_records(records, rng), self.mapping, self.codec)


class _Encoding:
    """Mixed in before a Kafka reader: the same offsets and tasks, each task's batches encoded.
    Pickled to the executors with the reader, mapping and codec included."""

    streaming: bool

    def __init__(self, options: Mapping[str, str]) -> None:
        kafka, self.mapping, self.codec, self.index_keys = _settings(options)
        self.spool = spool_target(options)
        super().__init__(parse_options(kafka, streaming=self.streaming), kafka_schema(True))  # type: ignore[call-arg]

    def batch_maker(self) -> BatchMaker:
        return EncodedBatches(super().batch_maker(), self.mapping, self.codec)  # type: ignore[misc, arg-type]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return hand_over(super().read(partition), self.spool, self.index_keys)  # type: ignore[misc]


class MessageBatchReader(_Encoding, KafkaBatchReader):
    streaming = False


class MessageStreamReader(_Encoding, KafkaStreamReader):
    streaming = True


def spool_target(options: Mapping[str, str]) -> SpoolTarget | None:
    """Where and how the tasks hand their batches over through files, from the spool options."""
    given = {name: next((v for k, v in options.items() if str(k).lower() == name.lower()), None)
             for name in _SPOOL_OPTIONS}
    if not given[SPOOL_OPTION]:
        return None
    if not given[SPOOL_TAG_OPTION] or not given[SPOOL_SECRET_OPTION]:
        raise KafkaOptionError(f"option '{SPOOL_OPTION}' needs '{SPOOL_TAG_OPTION}' and '{SPOOL_SECRET_OPTION}' "
                               "(source_options() writes all three)")
    try:
        key = bytes.fromhex(str(given[SPOOL_SECRET_OPTION]))
    except ValueError:
        raise KafkaOptionError(f"option '{SPOOL_SECRET_OPTION}' is not hex") from None
    return SpoolTarget(str(given[SPOOL_OPTION]), str(given[SPOOL_TAG_OPTION]), key)
