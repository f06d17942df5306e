"""Collecting one micro-batch: Kafka records become encoded RocketMQ records in the executors and
come to the driver in source order, ready for the sink (sink.handover.schema).

Two ways in, one result (a table in ENCODED_SCHEMA, commit-log order):
- The job's own source (ingest.encode.message_source, format ``kafka-rocketmq``) maps and encodes inside its
  read tasks, so a record crosses into the JVM once, already a commit-log record. Its partitions are
  Kafka offset ranges in (topic, partition, offset) order and each range is read in offset order, so
  the collected rows are in source order with no shuffle.
- Any DataFrame of Kafka columns (Spark's own Kafka source, exported files) is sorted by (topic,
  partition, offset), then mapped and encoded by ``mapInArrow`` (a narrow step, order kept), each
  partition's rows through the same C pass as the message source's where it covers them.
What the C pass does not take (the records it hands back; whole batches in envelope mode, a refused
target topic, or partitions that interleave) is mapped record by record (ingest.encode.mapping_batch)
and encoded by store.format's batch codec: map_and_encode, the general path.
``toArrow()`` collects the packed partitions in order (collect_packed) and the sink takes them from
there: it unpacks them and drops what the store already holds; the store numbers each queue.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.encode.direct_encode import DirectEncoder
from ingest.encode.index_keys import with_index_keys
from ingest.encode.mapping import PROBLEM, MappingConfig
from ingest.encode.mapping_batch import map_kafka_batch
from sink.handover.packed import CHUNK, gathered, pack_batches, packed_spark_schema
from sink.handover.schema import COORD_COLUMNS, ENCODED_SCHEMA, VALUE_KIND
from sink.handover.spool import Spool
from sink.handover.spool_task import SpoolTarget, spool_batches
from store import DeadLetterReason
from store.format import CodecConfig, encode_valid_rows

MESSAGE_COLUMNS = ["topic", "queue_id", "flag", "body", "properties", "tags", "sys_flag", "born_timestamp",
                   "born_host", "store_host", "reconsume_times", "prepared_transaction_offset"]
# Carried by every row, live or dead: the Kafka coordinates and the record's timestamp.
CARRIED_COLUMNS = [*COORD_COLUMNS, "raw_timestamp"]
RAW_SOURCES = {"raw_key": "key", "raw_value": "value", "raw_headers": "headers"}
MAX_RUNS = 64   # partition_runs: more runs than this (and than one per 64 rows) and a batch goes whole


def map_and_encode(batch: pa.RecordBatch, mapping: MappingConfig, codec: CodecConfig) -> pa.RecordBatch:
    """Kafka rows -> ENCODED_SCHEMA rows the general way (every rule, record by record): the live
    ones encoded (in their order), then the dead letters with their reason and the raw Kafka record."""
    n = batch.num_rows
    if n == 0:
        return pa.RecordBatch.from_pylist([], schema=ENCODED_SCHEMA)
    mapped = map_kafka_batch(batch, mapping)
    reasons, codes = mapped.column("dead_reason"), mapped.column("dead_code")
    if PROBLEM in batch.schema.names and batch.column(PROBLEM).null_count < n:
        problem = batch.column(PROBLEM).cast(pa.string())
        reasons = pc.coalesce(problem, reasons)
        codes = pc.if_else(pc.is_valid(problem), pa.scalar(DeadLetterReason.FILE_ROW_INVALID, pa.string()), codes)
    dead = np.asarray(pc.is_valid(reasons), dtype=bool)
    live_idx = np.flatnonzero(~dead)
    encoded = None
    if live_idx.size:
        live = mapped if live_idx.size == n else mapped.take(pa.array(live_idx))
        ok, why, why_codes, encoded = encode_valid_rows(live.select(MESSAGE_COLUMNS), codec)
        if not ok.all():
            # Limits the mapping could not see (the whole record's size) still end as dead letters.
            bad = live_idx[~ok]
            patched, patched_codes = reasons.to_pylist(), codes.to_pylist()
            for i, j in zip(bad.tolist(), np.flatnonzero(~ok).tolist()):
                patched[i], patched_codes[i] = why[j], why_codes[j]
            reasons, codes = pa.array(patched, pa.string()), pa.array(patched_codes, pa.string())
            dead[bad] = True
            live_idx = live_idx[ok]
            live = live.filter(pa.array(ok))
    parts = []
    if live_idx.size:
        m = live_idx.size
        cols = {name: encoded.column(name) for name in ("record", "topic", "queue_id", "sys_flag", "tags_code",
                                                        "delay_level")}
        cols.update({name: live.column(name) for name in CARRIED_COLUMNS})
        cols[VALUE_KIND] = live.column(VALUE_KIND)
        cols["dead_reason"] = pa.nulls(m, pa.string())
        cols.update({name: pa.nulls(m, ENCODED_SCHEMA.field(name).type) for name in RAW_SOURCES})
        parts.append(_table(cols))
    dead_idx = np.flatnonzero(dead)
    if dead_idx.size:
        take = pa.array(dead_idx)
        d = dead_idx.size
        rows = mapped.take(take)
        cols = {"record": pa.nulls(d, pa.binary()), "topic": rows.column("topic"),
                "queue_id": rows.column("queue_id"), "sys_flag": rows.column("sys_flag"),
                "tags_code": pa.nulls(d, pa.int64()), "delay_level": pa.nulls(d, pa.int32()),
                VALUE_KIND: pa.nulls(d, pa.int8()), "dead_reason": reasons.take(take),
                "dead_code": codes.take(take)}
        cols.update({name: rows.column(name) for name in CARRIED_COLUMNS})
        # the record as it came from Kafka, whichever step refused it
        cols.update({name: batch.column(src).take(take) for name, src in RAW_SOURCES.items()})
        parts.append(_table(cols))
    return pa.concat_tables(parts).combine_chunks().to_batches()[0]


def _table(cols: Mapping[str, Any]) -> pa.Table:
    n = len(next(iter(cols.values())))
    return pa.table({f.name: cols[f.name].cast(f.type) if f.name in cols else pa.nulls(n, f.type)
                     for f in ENCODED_SCHEMA}, schema=ENCODED_SCHEMA)


def map_and_encode_batches(batches: Iterator[pa.RecordBatch], mapping: MappingConfig,
                           codec: CodecConfig) -> Iterator[pa.RecordBatch]:
    """The per-task form (a ``mapInArrow`` over Kafka columns in source order): each partition's run
    of rows through the C pass (ingest.encode.direct_encode) where it covers them, the rest mapped
    and encoded the general way; each run's dead letters follow its live rows."""
    encoders: dict[tuple[str, int], DirectEncoder | None] = {}
    for batch in batches:
        for run, tp in partition_runs(batch):
            out = _encode_run(run, tp, mapping, codec, encoders)
            if out.num_rows:
                yield out


def partition_runs(batch: pa.RecordBatch) -> list[tuple[pa.RecordBatch, tuple[str, int] | None]]:
    """``batch`` cut where its (topic, partition) changes, each run with its partition; one run with
    None (the general way) when a row has no topic or partition, or when the rows change partition
    too often to be worth a C call a run (out of source order: interleaved partitions)."""
    n = batch.num_rows
    topic, partition = batch.column("topic"), batch.column("partition")
    if n == 0 or topic.null_count or partition.null_count:
        return [(batch, None)] if n else []
    uniq = pc.unique(topic)
    codes = np.asarray(pc.index_in(topic, uniq), np.int64)
    parts = np.asarray(partition.cast(pa.int64()), np.int64)
    key = codes << 32 | (parts & 0xFFFFFFFF)
    cuts = (np.flatnonzero(key[1:] != key[:-1]) + 1).tolist()
    if len(cuts) > max(MAX_RUNS, n // MAX_RUNS):
        return [(batch, None)]
    names = uniq.to_pylist()
    bounds = [0, *cuts, n]
    return [(batch.slice(a, b - a), (names[codes[a]], int(parts[a]))) for a, b in zip(bounds, bounds[1:])]


def _encode_run(run: pa.RecordBatch, tp: tuple[str, int] | None, mapping: MappingConfig, codec: CodecConfig,
                encoders: dict[tuple[str, int], DirectEncoder | None]) -> pa.RecordBatch:
    if tp is not None and tp not in encoders:
        encoders[tp] = DirectEncoder.for_partition(*tp, mapping, codec)
    encoder = None if tp is None else encoders[tp]
    encoded = None if encoder is None else encoder.encode_rows(
        run, lambda rest: map_and_encode(rest, mapping, codec))
    return map_and_encode(run, mapping, codec) if encoded is None else encoded


def hand_over(batches: Iterator[pa.RecordBatch], spool: SpoolTarget | None,
              index_keys: bool) -> Iterator[pa.RecordBatch]:
    """A task's encoded batches as it hands them to the driver: with each record's index keys when
    ``index_keys`` (the store's index is on), each packed into one row (sink.handover.packed), or written to
    a ``spool`` file whose name and MAC make the row (sink.handover.spool); consecutive small batches
    (a range each, from a task over many partitions) are gathered into one first."""
    batches = gathered(batches)
    if index_keys:
        batches = with_index_keys(batches)
    return pack_batches(batches) if spool is None else spool_batches(batches, spool)


def encode_and_pack(batches: Iterator[pa.RecordBatch], mapping: MappingConfig, codec: CodecConfig,
                    index_keys: bool = False) -> Iterator[pa.RecordBatch]:
    """map_and_encode_batches, handed over packed: what a ``mapInArrow`` over Kafka columns hands
    Spark (the message source's read tasks hand what they encode over alike)."""
    return hand_over(map_and_encode_batches(batches, mapping, codec), None, index_keys)


def collect_packed(df: Any, mapping: MappingConfig, codec: CodecConfig, spool: Spool | None = None,
                   index_keys: bool = False) -> pa.Table:
    """The Spark part of a micro-batch, independent of the store's state (so the next batch can be
    read while this one is written): ``df`` is either the message source's (packed ENCODED_SCHEMA
    batches, source order) or any DataFrame of Kafka columns, which is sorted into source order and
    encoded by the executors (each record's index keys found with it when ``index_keys``: the
    message source's tasks take that from their options). Returns the packed batches on the driver
    (sink.handover.packed), in order; those the tasks left in the ``spool`` mapped in (still to be checked:
    sink.handover.spool.Spool.check), and the directory swept of the rest."""
    if CHUNK not in df.columns:
        df = df.orderBy("topic", "partition", "offset").mapInArrow(
            partial(encode_and_pack, mapping=mapping, codec=codec, index_keys=index_keys), packed_spark_schema())
    table = df.toArrow()
    if spool is not None:
        table = spool.resolve(table)
        spool.sweep()
    return table

