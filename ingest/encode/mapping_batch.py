"""Kafka rows -> MAPPED_SCHEMA rows, a whole Arrow batch at a time: the rules of ingest.encode.mapping
applied row by row, or on whole columns (ingest.encode.mapping_fast) with the rows that path cannot
map exactly redone row by row. Both give the same rows (tests/test_mapping.py runs every test both
ways)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.encode.mapping import (
    KAFKA_SCHEMA,
    MAPPED_SCHEMA,
    RESERVED_PROPERTIES,
    DeadRecord,
    MappedRow,
    MappingConfig,
    map_row,
    topic_problem,
)
from ingest.encode.mapping_fast import map_fast
from sink.handover.schema import VALUE_IN_BODY
from store.format import HostAddress

VECTORIZED_MIN_ROWS = 128     # fewer rows are mapped row by row: cheaper than the columns' fixed cost


def _assemble(batch: pa.RecordBatch, cfg: MappingConfig, topic: pa.Array, queue_id: pa.Array,
              flag: pa.Array, body: pa.Array, properties: pa.Array, tags: pa.Array, born_host: pa.Array,
              value_kind: pa.Array, dead_reason: pa.Array, dead_code: pa.Array) -> pa.RecordBatch:
    """MAPPED_SCHEMA from the mapped columns and the columns every row shares the rule of."""
    n = batch.num_rows
    ts = batch.column("timestamp").cast(pa.timestamp("us")).cast(pa.int64())
    store_host = HostAddress.parse(cfg.store_host).to_bytes()
    zeros32 = pa.array(np.zeros(n, np.int32))
    live = {"topic": topic, "queue_id": queue_id, "body": body, "properties": properties, "tags": tags,
            "value_kind": value_kind}
    raw = {name: MAPPED_SCHEMA.field(f"raw_{name}").type for name in ("key", "value", "headers")}
    if dead_reason.null_count == n:
        # the usual batch: no dead letter, so no column to mask (masking costs ~15 % of a mapping)
        raw_cols = {name: pa.nulls(n, typ) for name, typ in raw.items()}
    else:
        dead = pc.is_valid(dead_reason)
        live = {k: pc.if_else(dead, pa.scalar(None, v.type), v) for k, v in live.items()}
        raw_cols = {name: pc.if_else(dead, batch.column(name).cast(typ), pa.scalar(None, typ))
                    for name, typ in raw.items()}
    arrays = [
        live["topic"], live["queue_id"].cast(pa.int32()), flag.cast(pa.int32()), live["body"],
        live["properties"], live["tags"], zeros32, pc.divide(ts, 1000).fill_null(0), born_host,
        pa.repeat(pa.scalar(store_host, pa.binary()), n), zeros32, pa.array(np.zeros(n, np.int64)),
        batch.column("topic").cast(pa.string()), batch.column("partition").cast(pa.int32()),
        batch.column("offset").cast(pa.int64()), live["value_kind"].cast(pa.int8()), dead_reason, dead_code,
        raw_cols["key"], raw_cols["value"],
        raw_cols["headers"], ts.fill_null(0),
    ]
    return pa.RecordBatch.from_arrays([a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays],
                                      schema=MAPPED_SCHEMA)


def map_rows(batch: pa.RecordBatch, cfg: MappingConfig) -> pa.RecordBatch:
    """The per-row path: every rule, one record at a time (envelopes, odd keys and headers, small batches)."""
    n = batch.num_rows
    keys, values = batch.column("key").to_pylist(), batch.column("value").to_pylist()
    topics, partitions = batch.column("topic").to_pylist(), batch.column("partition").to_pylist()
    offsets, headers = batch.column("offset").to_pylist(), batch.column("headers").to_pylist()
    default_born = HostAddress.parse(cfg.born_host).to_bytes()
    rows = []
    for i in range(n):
        try:
            rows.append(map_row(keys[i], values[i], topics[i], partitions[i], offsets[i], headers[i], cfg,
                                default_born))
        except DeadRecord as dead:
            rows.append(MappedRow(None, 0, 0, None, "", None, default_born, VALUE_IN_BODY, str(dead), dead.code))
    return _assemble(
        batch, cfg, pa.array([r.topic for r in rows], pa.string()), pa.array([r.queue_id for r in rows], pa.int32()),
        pa.array([r.flag for r in rows], pa.int32()), pa.array([r.body for r in rows], pa.binary()),
        pa.array([r.properties for r in rows], pa.string()), pa.array([r.tags for r in rows], pa.string()),
        pa.array([r.born_host for r in rows], pa.binary()), pa.array([r.value_kind for r in rows], pa.int8()),
        pa.array([r.dead_reason for r in rows], pa.string()), pa.array([r.dead_code for r in rows], pa.string()))


def map_kafka_batch(batch: pa.RecordBatch | pa.Table, cfg: MappingConfig) -> pa.RecordBatch:
    """Map one Arrow batch of Kafka rows (Spark's kafka columns) to MAPPED_SCHEMA rows, same order:
    row by row in envelope mode and for batches too small to pay the vectorized path's fixed cost
    (a few milliseconds: what the C pass hands back is a few records), else vectorized."""
    if isinstance(batch, pa.Table):
        batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else pa.RecordBatch.from_pylist([], KAFKA_SCHEMA)
    if batch.num_rows < VECTORIZED_MIN_ROWS or cfg.envelope:
        return map_rows(batch, cfg)
    return map_vectorized(batch, cfg)


def map_vectorized(batch: pa.RecordBatch, cfg: MappingConfig) -> pa.RecordBatch:
    """map_kafka_batch on whole columns (ingest.encode.mapping_fast); the rows it flags are mapped
    row by row and put back in place."""
    n = batch.num_rows
    cols, slow = map_fast(batch, cfg.topic_map, frozenset(RESERVED_PROPERTIES), cfg.born_host_header,
                          cfg.queue_count if cfg.queue_mode == "key-hash" else None, cfg.max_message_size,
                          topic_problem)
    born = pa.repeat(pa.scalar(HostAddress.parse(cfg.born_host).to_bytes(), pa.binary()), n)
    if cfg.queue_mode == "partition" and cfg.broker_groups > 1:
        cols["queue_id"] = pa.array(np.asarray(cols["queue_id"], dtype=np.int32) // cfg.broker_groups)
    fast = _assemble(batch, cfg, cols["topic"], cols["queue_id"], pa.array(np.zeros(n, np.int32)), cols["body"],
                     cols["properties"], cols["tags"], born, pa.array(np.zeros(n, np.int8)), cols["dead_reason"],
                     cols["dead_code"])
    if not slow.any():
        return fast
    slow_idx, fast_idx = np.nonzero(slow)[0], np.nonzero(~slow)[0]
    redone = map_rows(batch.take(pa.array(slow_idx)), cfg)
    combined = pa.Table.from_batches([fast.take(pa.array(fast_idx)), redone])
    order = np.empty(n, dtype=np.int64)
    order[np.concatenate([fast_idx, slow_idx])] = np.arange(n)
    return combined.take(pa.array(order)).combine_chunks().to_batches()[0]
