"""The job's Spark source: Kafka records read, mapped and encoded as RocketMQ records in the read tasks.

    spark.readStream.format("kafka-rocketmq").options(**kafka_options)
         .option("commitlog.prepare", prepare_option(mapping, codec)).load()

The options and offsets are the ``kafka-python`` source's (ingest.kafka.source); each row is a batch
of ingest.encode.prepare.ENCODED_SCHEMA records packed into one binary value (sink.handover.packed). Mapping and
encoding inside the read task means a record enters the JVM once, as a commit-log record: going in
as Kafka columns and back out to Python for a ``mapInArrow`` cost as much again as the whole read
(BENCHMARKS.md, pipeline); packing spares the JVM its per-row conversions; with the ``commitlog.spoolDir`` option (local
mode) a task writes its batch to a file there and only the file's name and MAC cross Spark (sink.handover.spool). Where the mapping's
default rules cover a fetch, the task goes from the fetched bytes to CommitLog records in one C pass
(ingest.encode.direct_encode); otherwise through Kafka columns and ingest.encode.prepare.map_and_encode. A task reads one
Kafka offset range in offset order and the ranges are planned in (topic, partition, offset) order,
so a collected batch is in source order; ingest.encode.prepare relies on that.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from ingest.encode.direct_encode import DirectEncoder
from ingest.encode.mapping import MappingConfig
from ingest.encode.prepare import hand_over, map_and_encode
from ingest.kafka.fetch import ArrowChunk
from ingest.kafka.offsets import KafkaOffsetRange
from ingest.kafka.options import KafkaOptionError, parse_options
from ingest.kafka.read import BatchMaker, KafkaColumns
from ingest.kafka.source import KafkaBatchReader, KafkaDataSource, KafkaStreamReader, kafka_schema
from sink.handover.packed import packed_spark_schema
from sink.handover.spool_task import SpoolTarget
from store.format import CodecConfig

SHORT_NAME = "kafka-rocketmq"
PREPARE_OPTION = "commitlog.prepare"
# a directory the driver shares with the executors: batches come back through files in it (sink.handover.spool),
# named with the store's tag and sealed with the run's secret key (a name Spark's redaction of plans and
# logs matches: spark.redaction.regex)
SPOOL_OPTION = "commitlog.spoolDir"
SPOOL_TAG_OPTION = "commitlog.spoolTag"
SPOOL_SECRET_OPTION = "commitlog.spoolSecret"
_SPOOL_OPTIONS = (SPOOL_OPTION, SPOOL_TAG_OPTION, SPOOL_SECRET_OPTION)


def prepare_option(mapping: MappingConfig, codec: CodecConfig, index_keys: bool = False) -> str:
    """The ``commitlog.prepare`` option value: the mapping and codec settings as JSON, and whether
    the tasks find each record's index keys (ingest.encode.index_keys: the store's index is on)."""
    return json.dumps({"mapping": dataclasses.asdict(mapping), "codec": dataclasses.asdict(codec),
                       "index_keys": bool(index_keys)})


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


class KafkaMessageSource(KafkaDataSource):
    """Registered as ``kafka-rocketmq``; see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> StructType:
        return packed_spark_schema()

    def reader(self, schema: StructType) -> MessageBatchReader:
        return MessageBatchReader(self.options)

    def streamReader(self, schema: StructType) -> MessageStreamReader:
        return MessageStreamReader(self.options)


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


def source_options(kafka_options: Mapping[str, str], mapping: MappingConfig, codec: CodecConfig,
                   spool: SpoolTarget | None = None, index_keys: bool = False) -> dict[str, Any]:
    """``kafka_options`` plus the prepare option (and the spool's, if the batches are to come back
    through files): what ``format("kafka-rocketmq")`` takes. ``index_keys``: the tasks ship each
    record's index keys (for a store whose index is on)."""
    spooled = {} if spool is None else {SPOOL_OPTION: spool.directory, SPOOL_TAG_OPTION: spool.tag,
                                        SPOOL_SECRET_OPTION: spool.key.hex()}
    return {**kafka_options, PREPARE_OPTION: prepare_option(mapping, codec, index_keys), **spooled}
