"""The ``rocketmq-commitlog`` Spark data source: a store read back as a DataFrame.

    spark.read.format("rocketmq-commitlog").load("/data/store")

Columns: store.scan.record_batch.READBACK_SCHEMA (topic, queueId, queueOffset, physicalOffset,
storeTimestamp and bornTimestamp in epoch ms, bornHost, storeHost, sysFlag, flag, reconsumeTimes,
keys, tags, properties, body, kafka_topic, kafka_partition, kafka_offset). The driver fixes the
readable end once, when it plans (the commit point then: a running writer's later appends are not
read), and cuts the commit log into partitions of one segment, or of ``maxBytesPerPartition`` of a
large one, at record starts the consume queues point at. Each task reads its range with
StoreReader.record_batches and hands Arrow batches to Spark.

Filters on topic, queueId (=, IN) and storeTimestamp (=, <, <=, >, >=) are pushed down: when the
chosen queues hold at most ``consumeQueueShare`` of the records, the tasks read just their records,
found through the consume queues; otherwise they scan and drop the others before building columns.

spark.readStream follows a live store: offsets are physical offsets, each micro-batch reads up to
the commit point seen when it is planned (``startingOffsets`` earliest or latest).

Options: ``path`` (or load(path)), ``maxBytesPerPartition`` (default 128 MiB), ``batchSize`` (rows
per Arrow batch, default 65536), ``checkCrc`` (check each BODYCRC, default true: a damaged record
fails the read, naming its offset and segment; false reads bodies unchecked), ``pushFilters``
(default true; false when spark.sql.python.filterPushdown.enabled must stay off),
``consumeQueueShare`` (default 0.5), ``startingOffsets`` (readStream: earliest or latest).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from ingest.readback import SHORT_NAME
from ingest.stream_runner import leave_if_spark_hung_up
from store import CorruptRecordError, StoreError, StoreReader
from store.scan.record_batch import DEFAULT_BATCH_SIZE, READBACK_SCHEMA, RecordFilter

_SPARK_TYPES = {pa.string(): StringType(), pa.int32(): IntegerType(), pa.int64(): LongType(),
                pa.binary(): BinaryType(), pa.map_(pa.string(), pa.string()): MapType(StringType(), StringType())}


class ReadbackOptionError(StoreError, ValueError):
    """An option of the rocketmq-commitlog source that cannot work; the message names it."""


def readback_schema() -> StructType:
    """READBACK_SCHEMA as Spark types (the same names, order and nullability)."""
    return StructType([StructField(f.name, _SPARK_TYPES[f.type], f.nullable) for f in READBACK_SCHEMA])


@dataclass
class ReadOptions:
    path: str
    max_bytes: int = 128 << 20
    batch_size: int = DEFAULT_BATCH_SIZE
    check_crc: bool = True
    push_filters: bool = True
    cq_share: float = 0.5
    starting: str = "earliest"             # readStream only

    @classmethod
    def parse(cls, options: Any) -> ReadOptions:
        opts = {str(k).lower(): str(v) for k, v in dict(options).items()}
        path = opts.get("path")
        if not path:
            raise ReadbackOptionError("no store path: use .load(PATH) or .option('path', PATH)")
        try:
            return cls(path=path, max_bytes=int(opts.get("maxbytesperpartition", cls.max_bytes)),
                       batch_size=int(opts.get("batchsize", cls.batch_size)),
                       check_crc=_flag(opts, "checkcrc", True), push_filters=_flag(opts, "pushfilters", True),
                       cq_share=float(opts.get("consumequeueshare", cls.cq_share)),
                       starting=_choice(opts, "startingoffsets", ("earliest", "latest")))
        except ValueError as exc:
            raise ReadbackOptionError(f"rocketmq-commitlog option: {exc}") from None


def _choice(opts: dict[str, str], name: str, allowed: tuple[str, ...]) -> str:
    value = opts.get(name, allowed[0]).strip().lower()
    if value not in allowed:
        raise ReadbackOptionError(f"option '{name}' is {value!r}: use {' or '.join(allowed)}")
    return value


def _flag(opts: dict[str, str], name: str, default: bool) -> bool:
    value = opts.get(name, str(default)).strip().lower()
    if value not in ("true", "false"):
        raise ReadbackOptionError(f"option '{name}' is {value!r}: use true or false")
    return value == "true"


class CommitLogDataSource(DataSource):
    """Registered as ``rocketmq-commitlog`` (ingest.readback.register); see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> StructType:
        return readback_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = ReadOptions.parse(self.options)
        return CommitLogReader(opts) if opts.push_filters else PlainCommitLogReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return CommitLogStreamReader(ReadOptions.parse(self.options))


@dataclass
class StoreRange(InputPartition):
    """A task: the records starting in [start, end) of one segment, or those at ``offsets``."""

    start: int
    end: int
    offsets: np.ndarray | None = None
    sizes: np.ndarray | None = None


@dataclass
class _Pushed:
    """What the pushed filters ask for (None: no restriction)."""

    topics: set[str] | None = None
    queue_ids: set[int] | None = None
    min_ts: int | None = None
    max_ts: int | None = None
    empty: bool = False                 # contradictory filters: nothing matches

    def record_filter(self) -> RecordFilter:
        return RecordFilter.of(self.topics, self.queue_ids, self.min_ts, self.max_ts)


class PlainCommitLogReader(DataSourceReader):
    """The reader without filter pushdown (Spark filters the rows)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.pushed = _Pushed()

    def partitions(self) -> Sequence[InputPartition]:
        o, p = self.options, self.pushed
        if p.empty:
            return []
        with _one_line(o), _open(o.path) as reader:
            if p.topics is not None:
                picked = _through_consume_queues(reader, p, o)
                if picked is not None:
                    return picked
            return [StoreRange(lo, hi) for lo, hi in reader.read_ranges(o.max_bytes)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, StoreRange)
        o, rf = self.options, self.pushed.record_filter()
        args = dict(topics=rf.topics, queue_ids=rf.queue_ids, min_store_timestamp=rf.min_store_timestamp,
                    max_store_timestamp=rf.max_store_timestamp, check_crc=o.check_crc)
        with _one_line(o), _open(o.path) as reader:
            if partition.offsets is not None:
                batches = reader.record_batches_at(partition.offsets, partition.sizes, o.batch_size, **args)
            else:
                batches = reader.record_batches(partition.start, partition.end, batch_size=o.batch_size, **args)
            yield from batches


class CommitLogReader(PlainCommitLogReader):
    """The reader with filter pushdown on topic, queueId and storeTimestamp."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        for f in filters:
            if not _push(self.pushed, f):
                yield f


class CommitLogStreamReader(DataSourceStreamReader):
    """spark.readStream: follows a live store. An offset is a physical offset of the commit log;
    each micro-batch reads from the last one to the commit point seen when it is planned
    (``startingOffsets``: earliest, the default, or latest). No filter is pushed (Spark filters)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._read = PlainCommitLogReader(options)

    def initialOffset(self) -> dict:
        with _open(self.options.path) as reader:
            start = reader.committed_offset if self.options.starting == "latest" else reader.min_offset
        return {"offset": start}

    def latestOffset(self, start: dict, limit: Any = None) -> dict:
        with _open(self.options.path) as reader:
            return {"offset": max(reader.committed_offset, int(start["offset"]))}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        lo, hi = int(start["offset"]), int(end["offset"])
        if lo >= hi:
            return []
        with _open(self.options.path) as reader:
            if lo < reader.min_offset:
                raise StoreError(f"the stream is at offset {lo} but the store's first offset is now "
                                 f"{reader.min_offset}: retention deleted records not yet read")
            return [StoreRange(a, b) for a, b in reader.read_ranges(self.options.max_bytes, lo, hi)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self._read.read(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the store keeps no reader state."""

    def stop(self) -> None:
        leave_if_spark_hung_up()


def _push(p: _Pushed, f: Filter) -> bool:
    """Take ``f`` into ``p`` if it is one the reader applies exactly; False to leave it to Spark."""
    column = f.attribute[0] if len(getattr(f, "attribute", ())) == 1 else None
    if column == "topic" and isinstance(f, (EqualTo, In)):
        values = [f.value] if isinstance(f, EqualTo) else list(f.value)
        if not all(isinstance(v, str) for v in values):
            return False
        p.topics = set(values) if p.topics is None else p.topics & set(values)
    elif column == "queueId" and isinstance(f, (EqualTo, In)):
        values = [f.value] if isinstance(f, EqualTo) else list(f.value)
        if not all(_is_int(v) for v in values):
            return False
        p.queue_ids = set(values) if p.queue_ids is None else p.queue_ids & set(values)
    elif column == "storeTimestamp" and isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan,
                                                           LessThanOrEqual)):
        if not _is_int(f.value):
            return False
        v = int(f.value)
        low = {EqualTo: v, GreaterThan: v + 1, GreaterThanOrEqual: v}.get(type(f))
        high = {EqualTo: v, LessThan: v - 1, LessThanOrEqual: v}.get(type(f))
        if low is not None:
            p.min_ts = low if p.min_ts is None else max(p.min_ts, low)
        if high is not None:
            p.max_ts = high if p.max_ts is None else min(p.max_ts, high)
    else:
        return False
    p.empty = p.empty or p.topics == set() or p.queue_ids == set() or \
        (p.min_ts is not None and p.max_ts is not None and p.min_ts > p.max_ts)
    return True


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _through_consume_queues(reader: StoreReader, p: _Pushed, o: ReadOptions) -> list[InputPartition] | None:
    """Tasks over just the records of the chosen queues, when they are at most ``cq_share`` of
    the store and the consume queues hold all of them; None to scan instead."""
    all_topics = reader.topics()
    total = sum(hi - lo for t, qs in all_topics.items() for lo, hi in (reader.queue_range(t, q) for q in qs))
    found = reader.queue_records(sorted(p.topics or ()), p.queue_ids)
    if found is None or total == 0 or len(found[0]) > o.cq_share * total:
        return None
    offsets, sizes = found
    if not len(offsets):
        return []
    # about max_bytes of records per task
    cuts = np.flatnonzero(np.diff(np.cumsum(sizes) // o.max_bytes)) + 1
    return [StoreRange(int(a[0]), int(a[-1]) + 1, a, s)
            for a, s in zip(np.split(offsets, cuts), np.split(sizes, cuts), strict=True)]


class ReadbackDamageError(StoreError):
    """The store read back holds a damaged record (or lacks a segment, or one is of the wrong size)
    where the read needs it."""


@contextmanager
def _one_line(o: ReadOptions) -> Iterator[None]:
    """Damage met by a task (or by the planning) reaches the user as one line naming the store and
    where (the offset and the segment), not at the foot of a Python traceback inside a Java one. The Python
    worker formats the exception that ends its task with its traceback unless SPARK_HIDE_TRACEBACK is
    set, and exits right after (pyspark.worker): setting it here changes nothing else."""
    try:
        yield
    except ReadbackOptionError:
        raise
    except StoreError as exc:
        os.environ["SPARK_HIDE_TRACEBACK"] = "1"
        crc = isinstance(exc, CorruptRecordError) and exc.kind == "crc"
        hint = "; option checkCrc=false reads the bodies without their CRC" if crc else ""
        raise ReadbackDamageError(f"rocketmq-commitlog: store {o.path}: {exc}; `commitlog verify {o.path}` lists "
                                  f"every damaged record{hint}") from None


@dataclass
class _open:
    """StoreReader.open as a context manager that names the path when it is not a store."""

    path: str
    reader: StoreReader | None = field(default=None)

    def __enter__(self) -> StoreReader:
        from pathlib import Path

        if not (Path(self.path) / "commitlog").is_dir():
            raise ReadbackOptionError(f"{self.path} is not a store: it has no commitlog/ directory")
        self.reader = StoreReader.open(self.path)
        return self.reader

    def __exit__(self, *exc: object) -> None:
        if self.reader is not None:
            self.reader.close()
