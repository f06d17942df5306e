"""Kafka rows -> MAPPED_SCHEMA rows, a whole Arrow batch at a time: each record through the rules
of ingest.encode.mapping (map_row), the results assembled into columns.

This is the general path, the one implementation of every rule outside the C pass
(ingest.encode.direct_encode), which hands it the records it does not cover and is tested against it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.encode.mapping import KAFKA_SCHEMA, MAPPED_SCHEMA, DeadRecord, MappedRow, MappingConfig, map_row
from store.format import HostAddress

_RAW_TYPES = {name: MAPPED_SCHEMA.field(f"raw_{name}").type for name in ("key", "value", "headers")}


def map_kafka_batch(batch: pa.RecordBatch | pa.Table, cfg: MappingConfig) -> pa.RecordBatch:
    """Map one Arrow batch of Kafka rows (Spark's kafka columns) to MAPPED_SCHEMA rows, same order.
    A dead letter's message fields are null and its raw Kafka key, value and headers kept."""
    if isinstance(batch, pa.Table):
        batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else pa.RecordBatch.from_pylist([], KAFKA_SCHEMA)
    n = batch.num_rows
    keys, values = batch.column("key").to_pylist(), batch.column("value").to_pylist()
    topics, partitions = batch.column("topic").to_pylist(), batch.column("partition").to_pylist()
    offsets, headers = batch.column("offset").to_pylist(), batch.column("headers").to_pylist()
    default_born = HostAddress.parse(cfg.born_host).to_bytes()
    rows: list[MappedRow | None] = []
    reasons: list[str | None] = [None] * n
    codes: list[str | None] = [None] * n
    for i in range(n):
        try:
            rows.append(map_row(keys[i], values[i], topics[i], partitions[i], offsets[i], headers[i], cfg,
                                default_born))
        except DeadRecord as dead:
            rows.append(None)
            reasons[i], codes[i] = str(dead), dead.code
    return _assemble(batch, cfg, rows, reasons, codes, default_born)


def _assemble(batch: pa.RecordBatch, cfg: MappingConfig, rows: list[MappedRow | None], reasons: list[str | None],
              codes: list[str | None], default_born: bytes) -> pa.RecordBatch:
    """MAPPED_SCHEMA from the mapped rows (None: a dead letter) and the columns every row shares the rule of."""
    n = batch.num_rows
    live = [r for r in rows if r is not None]

    def column(name: str, typ: pa.DataType) -> pa.Array:
        return pa.array([None if r is None else getattr(r, name) for r in rows], typ)

    ts = batch.column("timestamp").cast(pa.timestamp("us")).cast(pa.int64())
    store_host = HostAddress.parse(cfg.store_host).to_bytes()
    zeros32 = pa.array(np.zeros(n, np.int32))
    if len(live) == n:
        raw = {name: pa.nulls(n, typ) for name, typ in _RAW_TYPES.items()}
    else:
        dead = pa.array([r is None for r in rows])
        raw = {name: pc.if_else(dead, batch.column(name).cast(typ), pa.scalar(None, typ))
               for name, typ in _RAW_TYPES.items()}
    arrays = [
        column("topic", pa.string()), column("queue_id", pa.int32()),
        pa.array([0 if r is None else r.flag for r in rows], pa.int32()), column("body", pa.binary()),
        column("properties", pa.string()), column("tags", pa.string()), zeros32,
        pc.divide(ts, 1000).fill_null(0),
        pa.array([default_born if r is None else r.born_host for r in rows], pa.binary()),
        pa.repeat(pa.scalar(store_host, pa.binary()), n), zeros32, pa.array(np.zeros(n, np.int64)),
        batch.column("topic").cast(pa.string()), batch.column("partition").cast(pa.int32()),
        batch.column("offset").cast(pa.int64()), column("value_kind", pa.int8()),
        pa.array(reasons, pa.string()), pa.array(codes, pa.string()),
        raw["key"], raw["value"], raw["headers"], ts.fill_null(0),
    ]
    return pa.RecordBatch.from_arrays([a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays],
                                      schema=MAPPED_SCHEMA)
