"""The ``kafka-python`` Spark data source: Spark's Kafka source options and columns, on kafka-python.

    spark.readStream.format("kafka-python").option("kafka.bootstrap.servers", "h:9092")
         .option("subscribe", "orders").load()

Batch and streaming. Offset ranges are fixed when a batch is planned (the planned end offsets go into
Spark's offset log), so a re-run of a batch reads exactly the same records; each topic-partition range
is one task with a consumer of its own (the small ranges of a batch share one task: minRecordsPerTask);
rows leave the tasks as Arrow record batches.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from kafka.errors import KafkaError
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ingest.kafka import admin as kafka_admin
from ingest.kafka.admin import OffsetReader, earliest_offsets, latest_offsets, offsets_for_timestamp  # noqa: F401 (re-exported)
from ingest.kafka.offsets import (
    KafkaOffsetRange,
    KafkaOffsetRanges,
    Offsets,
    TopicPartitionKey,
    check_data_loss,
    check_forwards,
    check_gone,
    given_offsets,
    offsets_from_json,
    offsets_to_json,
    plan_tasks,
    rate_limit,
    report_lost,
    resolve_markers,
)
from ingest.kafka.groups import owned
from ingest.kafka.options import (
    KafkaOptionError,
    KafkaSourceError,
    KafkaSourceOptions,
    OffsetSpec,
    parse_options,
)
from ingest.kafka.read import BatchMaker, KafkaColumns, read_ranges, unreachable
from ingest.stream_runner import leave_if_spark_hung_up

log = logging.getLogger(__name__)

SHORT_NAME = "kafka-python"
SPARK_KAFKA_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def kafka_schema(include_headers: bool = True) -> StructType:
    """Spark's Kafka source columns (``headers`` only with includeHeaders)."""
    fields = [
        StructField("key", BinaryType()), StructField("value", BinaryType()),
        StructField("topic", StringType()), StructField("partition", IntegerType()),
        StructField("offset", LongType()), StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    # Spark checks RecordBatches against exactly this conversion of the read schema
    return to_arrow_schema(schema, timezone="UTC")


class KafkaDataSource(DataSource):
    """Registered as ``kafka-python``; see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> StructType:
        # as Spark's own source: no headers column unless asked for
        opts = {str(k).lower(): str(v) for k, v in self.options.items()}
        return kafka_schema(opts.get("includeheaders", "false").strip().lower() == "true")

    def reader(self, schema: StructType) -> "KafkaBatchReader":
        return KafkaBatchReader(parse_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> "KafkaStreamReader":
        return KafkaStreamReader(parse_options(self.options, streaming=True), schema)


def _resolve(spec: OffsetSpec, tps: Sequence[TopicPartitionKey], earliest: Offsets, latest: Offsets,
             reader: OffsetReader, which: str, strategy: str = "error") -> Offsets:
    """Concrete offsets for ``tps`` from a starting/ending option."""
    if spec.kind == "earliest":
        return {tp: earliest[tp] for tp in tps}
    if spec.kind == "latest":
        return {tp: latest[tp] for tp in tps}
    if spec.kind == "offsets":
        return resolve_markers(spec.offsets, tps, earliest, latest, f"{which}Offsets")
    if spec.kind == "timestamp":
        asked = {tp: int(spec.timestamp or 0) for tp in tps}
        option = f"{which}Timestamp"
    else:
        missing = sorted(set(tps) - set(spec.timestamps))
        if missing:
            raise KafkaOptionError(f"option '{which}OffsetsByTimestamp' must name every partition read; "
                                   f"missing: {', '.join(f'{t}-{p}' for t, p in missing)}")
        asked = {tp: spec.timestamps[tp] for tp in tps}
        option = f"{which}OffsetsByTimestamp"
    found = reader.for_timestamp(list(tps), asked)
    out: Offsets = {}
    for tp in tps:
        off = found[tp]
        if off is None and which == "starting" and strategy == "error":
            raise KafkaSourceError(
                f"{option}: {tp[0]}-{tp[1]} has no record with a timestamp >= {asked[tp]}; set "
                "startingOffsetsByTimestampStrategy=latest to start at the latest offset instead")
        out[tp] = latest[tp] if off is None else min(off, latest[tp])
    return out


def _partitions(reader: OffsetReader, opts: KafkaSourceOptions) -> list[TopicPartitionKey]:
    """The partitions to read now: those of the topics asked for, or assigned, and of the broker
    group if one is given (a partition added later is read once it is there, by its group only)."""
    tps = reader.partitions(subscribe=opts.subscribe, pattern=opts.subscribe_pattern, assign=opts.assign)
    return owned(tps, opts.broker_group)


class _RangeReading:
    """A task of either reader: read its planned offset range (or ranges, in turn)."""

    options: KafkaSourceOptions
    schema: StructType

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, KafkaOffsetRanges):
            ranges = partition.ranges
        elif isinstance(partition, KafkaOffsetRange):
            ranges = (partition,)
        else:
            # PySpark hands a batch read that planned no range one InputPartition(None): nothing to read
            return iter(())
        o = self.options
        return read_ranges(ranges, o.client_params, self.batch_maker(), o.fail_on_data_loss, o.poll_timeout_ms,
                           o.api_timeout_ms)

    def batch_maker(self) -> BatchMaker:
        """What the task makes of the records: the source's columns."""
        return KafkaColumns(arrow_schema(self.schema))


class KafkaBatchReader(_RangeReading, DataSourceReader):
    """spark.read: the offsets between startingOffsets and endingOffsets, fixed at planning."""

    def __init__(self, options: KafkaSourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def plan(self) -> tuple[Offsets, Offsets]:
        """The (start, end) offsets of the read."""
        o = self.options
        # the reader's clients connect on first use: assigned partitions with both ends given need none
        with OffsetReader(o.client_params) as reader:
            tps = _partitions(reader, o)
            if not tps:
                raise KafkaSourceError(f"no partition to read: no topic matches {_describe(o)} "
                                       f"on {o.bootstrap_servers}")
            given = given_offsets(o, tps)
            if given is None:
                earliest = reader.earliest(tps)
                latest = reader.latest(tps, earliest)
                start = _resolve(o.starting, tps, earliest, latest, reader, "starting", o.timestamp_strategy)
                end = _resolve(o.ending, tps, earliest, latest, reader, "ending")
                start = check_data_loss(start, earliest, o.fail_on_data_loss)
            else:
                start, end = given
        check_forwards(start, end)
        return start, end

    def partitions(self) -> Sequence[InputPartition]:
        start, end = self.plan()
        return plan_tasks(start, end, self.options)


class KafkaStreamReader(_RangeReading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """spark.readStream: each micro-batch's end offsets are chosen in latestOffset (capped by
    maxOffsetsPerTrigger) and recorded by Spark before any task runs."""

    def __init__(self, options: KafkaSourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._reader: OffsetReader | None = None   # driver only, created on first use
        self._target: Offsets | None = None        # Trigger.AvailableNow: do not read past these
        self._latest: Offsets | None = None
        self._last_trigger: float | None = None    # minOffsetsPerTrigger: when the last batch was admitted
        self._earliest_at: float | None = None     # when latestOffset last asked for earliest offsets

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_reader"] = None
        return state

    @property
    def offset_reader(self) -> OffsetReader:
        if self._reader is None:
            self._reader = OffsetReader(self.options.client_params)
        return self._reader

    def initialOffset(self) -> dict:
        o, r = self.options, self.offset_reader
        tps = _partitions(r, o)
        earliest = r.earliest(tps)
        latest = r.latest(tps, earliest)
        start = _resolve(o.starting, tps, earliest, latest, r, "starting", o.timestamp_strategy)
        return offsets_to_json(check_data_loss(start, earliest, o.fail_on_data_loss))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        r = self.offset_reader
        self._target = r.latest(_partitions(r, self.options))

    def _wants_earliest(self, tps: Sequence[TopicPartitionKey], begin: Offsets) -> bool:
        """Whether this batch needs the earliest offsets: for a partition new to the stream (it starts
        there), under Trigger.AvailableNow, and at most every ``RECHECK_S`` to report records retention
        deleted before they were read. Spark's connector asks for latest offsets only; the read tasks
        find deleted records themselves, so between checks a batch saves a round trip."""
        return (self._target is not None or self._earliest_at is None or any(tp not in begin for tp in tps)
                or time.monotonic() - self._earliest_at >= kafka_admin.RECHECK_S)

    def _offsets_now(self, begin: Offsets) -> tuple[list[TopicPartitionKey], Offsets | None, Offsets]:
        """Partitions, earliest (None when this batch can do without, _wants_earliest) and latest
        offsets, retried as fetchOffset.numRetries says; while no broker can be reached an attempt
        waits up to kafka.default.api.timeout.ms first (a broker restarting under the job is a pause,
        not a failed query)."""
        o, r = self.options, self.offset_reader
        attempt = 0
        unreachable_since: float | None = None
        while True:
            try:
                tps = _partitions(r, o)
                if self._target is not None:
                    tps = [tp for tp in tps if tp in self._target]
                earliest: Offsets | None = None
                if self._wants_earliest(tps, begin):
                    earliest = r.earliest(tps)
                    self._earliest_at = time.monotonic()
                latest = r.latest(tps, earliest, each_batch=self._target is None, enough=self._target)
                if unreachable_since is not None:
                    log.warning("Kafka at %s answers again after %.0f s", o.bootstrap_servers,
                                time.monotonic() - unreachable_since)
                return tps, earliest, latest
            except (KafkaError, KafkaSourceError) as exc:
                r.close()
                now = time.monotonic()
                if unreachable(exc):
                    if unreachable_since is None:
                        unreachable_since = now
                        log.warning("Kafka at %s cannot be reached (%s): waiting up to %d s for it",
                                    o.bootstrap_servers, exc, o.api_timeout_ms // 1000)
                    if (now - unreachable_since) * 1000 < o.api_timeout_ms:
                        time.sleep(o.fetch_offset_retry_interval_ms / 1000)
                        continue
                    unreachable_since = None
                if attempt == o.fetch_offset_retries:
                    raise
                attempt += 1
                log.warning("fetching the latest offsets failed (%s); retry %d of %d in %d ms", exc, attempt,
                            o.fetch_offset_retries, o.fetch_offset_retry_interval_ms)
                time.sleep(o.fetch_offset_retry_interval_ms / 1000)

    def _admit(self, begin: Offsets, end: Offsets) -> bool:
        """Spark's admission control: with minOffsetsPerTrigger, a batch waits until that many new
        offsets are there or maxTriggerDelay has passed since the last one (never under
        Trigger.AvailableNow, which must reach its target)."""
        o = self.options
        if not o.min_offsets_per_trigger or self._target is not None:
            return True
        now = time.monotonic()
        if self._last_trigger is None:
            self._last_trigger = now
        new = sum(max(end[tp] - begin[tp], 0) for tp in begin if tp in end)
        if new < o.min_offsets_per_trigger and (now - self._last_trigger) * 1000 < o.max_trigger_delay_ms:
            log.debug("%d new offsets, below minOffsetsPerTrigger %d: the batch waits", new, o.min_offsets_per_trigger)
            return False
        self._last_trigger = now
        return True

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        o = self.options
        begin = offsets_from_json(start)
        tps, earliest, latest = self._offsets_now(begin)
        if self._target is not None:
            latest = {tp: min(off, self._target[tp]) for tp, off in latest.items()}
        self._latest = latest
        check_gone(begin, tps, o.fail_on_data_loss)
        known = {tp: off for tp, off in begin.items() if tp in latest}
        if earliest is not None:
            check_data_loss(known, earliest, o.fail_on_data_loss)  # raises early; tasks skip otherwise
        end: Offsets = {}
        for tp in tps:
            if tp not in begin:
                # discovered now: recorded at its earliest offset, read from the next batch on, so
                # this batch's ranges depend only on offsets already in Spark's offset log
                assert earliest is not None     # _wants_earliest: a partition new to the stream
                end[tp] = earliest[tp]
            elif latest[tp] < begin[tp]:
                report_lost(f"{tp[0]}-{tp[1]}: latest offset {latest[tp]} is below the offset {begin[tp]} "
                      "already read (topic deleted and re-created?)", o.fail_on_data_loss)
                end[tp] = begin[tp]
            else:
                end[tp] = latest[tp]
        if not self._admit(known, end):
            return start
        if isinstance(limit, ReadMaxRows):
            end = {**end, **rate_limit(known, {tp: end[tp] for tp in known}, limit.max_rows)}
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict | None:
        return offsets_to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return plan_tasks(offsets_from_json(start), offsets_from_json(end), self.options)

    def commit(self, end: dict) -> None:
        """Nothing to do: the source keeps no state in Kafka (no consumer group)."""

    def stop(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        leave_if_spark_hung_up()


def _describe(o: KafkaSourceOptions) -> str:
    group = f" (broker group {o.broker_group})" if o.broker_group else ""
    if o.subscribe:
        return f"subscribe={','.join(o.subscribe)}{group}"
    if o.subscribe_pattern:
        return f"subscribePattern={o.subscribe_pattern}{group}"
    return f"assign={o.assign}{group}"


def source_format(kind: str) -> str:
    """The Spark format name for ``--source``: "spark-kafka" -> "kafka", "kafka-python" -> "kafka-python".

    Both leave the headers column out unless includeHeaders=true (the job asks for it)."""
    formats = {"spark-kafka": "kafka", "kafka": "kafka", "kafka-python": SHORT_NAME}
    try:
        return formats[kind]
    except KeyError:
        raise KafkaOptionError(f"unknown source {kind!r}: use 'kafka-python' or 'spark-kafka'") from None


def spark_kafka_available(spark: Any) -> bool:
    """True when Spark's own Kafka source (spark-sql-kafka) is on the JVM classpath."""
    try:
        jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
        loader = jvm.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(SPARK_KAFKA_PROVIDER, False, loader)
        return True
    except Exception as exc:  # noqa: BLE001 - py4j wraps ClassNotFoundException; any failure means "no"
        log.debug("Spark's Kafka source is not available: %s", exc)
        return False
