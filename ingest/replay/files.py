"""Exported Kafka records as files: reading them back as the Kafka source's columns, and writing them.

The file form is what Spark writes for a Kafka DataFrame (``df.write.json`` / ``df.write.parquet``):
columns key, value, topic, partition, offset, timestamp, timestampType (optional), headers. In JSON
lines, key, value and header values are base64 (Spark's JSON form of binary) and the timestamp is an
ISO-8601 string (Spark's form) or epoch milliseconds. Parquet holds binary and timestamps natively.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ingest.replay.file_pieces import ExportScan
from ingest.replay.plan import FILE_FORMATS, Bound, Offsets, PartitionPlan, ReplayError, ReplayPlan, TopicPartitionKey

log = logging.getLogger("commitlog.replay")

FORMATS = FILE_FORMATS

# Spark's Kafka source columns as Arrow (timestamp in microseconds, UTC), for the exporter.
EXPORT_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])


def read_kafka_files(spark: Any, directory: str | os.PathLike[str], fmt: str) -> Any:
    """A DataFrame with the Kafka source's columns and types, plus ``problem`` (a reason a row is a
    dead letter, or null), one row per (topic, partition, offset) (an export holding a record twice
    gives it once), the files read by the executors (ingest.replay.file_pieces)."""
    from ingest.replay.file_pieces import batch_rows, plan_pieces, scan_export

    return batch_rows(spark, scan_export(spark, plan_pieces(directory, fmt)))


def resolve_file_plan(scan: ExportScan, begin: Bound, finish: Bound, topics: Sequence[str] | None,
                      pattern: str | None) -> ReplayPlan:
    """The range of each partition found in the files (``scan``, taken with these bounds'
    timestamps), with --from/--to applied the Kafka way: a timestamp bound is the first offset
    whose timestamp is >= it."""
    import re

    found = scan.partitions()
    if topics:
        found = {tp: st for tp, st in found.items() if tp[0] in set(topics)}
    elif pattern:
        found = {tp: st for tp, st in found.items() if re.fullmatch(pattern, tp[0])}
    if not found:
        raise ReplayError("no records to replay in the files" + (" for the topics asked" if topics or pattern else ""))
    parts = []
    for tp, st in sorted(found.items()):
        first, end = st.first, st.last + 1
        start = {"earliest": first, "latest": end}.get(begin.kind)
        if begin.kind == "timestamp":
            start = end if st.from_ts is None else st.from_ts
        elif begin.kind == "offsets":
            start = _marker(begin.offsets, tp, first, end, "--from-offsets")
        stop = end
        if finish.kind == "timestamp":
            stop = end if st.to_ts is None else st.to_ts
        elif finish.kind == "offsets":
            stop = _marker(finish.offsets, tp, first, end, "--to-offsets")
        start = max(first, min(start, end))
        stop = max(first, min(stop, end))
        if start > stop:
            raise ReplayError(f"{tp[0]}-{tp[1]}: the range starts at {start}, after its end {stop}; check --from/--to")
        parts.append(PartitionPlan(tp[0], tp[1], start, stop))
    return ReplayPlan(parts)


def _marker(offsets: Mapping[TopicPartitionKey, int], tp: TopicPartitionKey, first: int, end: int,
            option: str) -> int:
    if tp not in offsets:
        raise ReplayError(f"{option} must name every partition replayed; missing {tp[0]}-{tp[1]}")
    off = offsets[tp]
    return first if off == -2 else end if off == -1 else off


# ---------------------------------------------------------------- the exporter

def export_records(bootstrap_servers: str, out_dir: str | os.PathLike[str], fmt: str,
                   topics: Sequence[str] | str, start: Offsets | None = None, end: Offsets | None = None,
                   kafka_params: Mapping[str, str] | None = None) -> int:
    """Write a topic's records (each partition from ``start`` (earliest) to ``end`` (the true end now))
    into ``out_dir`` as ``<topic>-<partition>.jsonl|parquet``, in the form ``replay --from-files`` reads.
    Returns the number of records written."""
    from ingest.kafka.admin import OffsetReader
    from ingest.kafka.offsets import KafkaOffsetRange
    from ingest.kafka.options import kafka_client_params
    from ingest.kafka.read import KafkaColumns, read_range

    if fmt not in FORMATS:
        raise ReplayError(f"format {fmt!r}: use jsonl or parquet")
    names = [t.strip() for t in topics.split(",")] if isinstance(topics, str) else list(topics)
    opts = {f"kafka.{k}" if not k.startswith("kafka.") else k: v for k, v in (kafka_params or {}).items()}
    opts["kafka.bootstrap.servers"] = bootstrap_servers
    params = kafka_client_params(opts)
    with OffsetReader(params) as reader:
        tps = reader.partitions(subscribe=names)
        earliest = reader.earliest(tps)
        latest = reader.latest(tps, earliest)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    total = 0
    for tp in tps:
        a = (start or {}).get(tp, earliest[tp])
        b = (end or {}).get(tp, latest[tp])
        rng = KafkaOffsetRange(tp[0], tp[1], a, b)
        batches = list(read_range(rng, params, KafkaColumns(EXPORT_SCHEMA), fail_on_data_loss=True,
                                  poll_timeout_ms=60_000))
        table = pa.Table.from_batches(batches, schema=EXPORT_SCHEMA)
        write_records(table, out / f"{tp[0]}-{tp[1]}.{fmt}", fmt)
        total += table.num_rows
    return total


def write_records(table: pa.Table, path: Path, fmt: str) -> None:
    """One file of Kafka records (EXPORT_SCHEMA) in ``fmt``."""
    if fmt == "parquet":
        pq.write_table(table, path)
        return
    iso = pc.strftime(table.column("timestamp").cast(pa.timestamp("ms", tz="UTC")),
                      format="%Y-%m-%dT%H:%M:%SZ").to_pylist()   # %S carries the milliseconds
    cols = {name: table.column(name).to_pylist() for name in
            ("key", "value", "topic", "partition", "offset", "timestampType", "headers")}
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(_json_lines(cols, iso))


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode("ascii")


def _json_lines(cols: Mapping[str, list], iso: list[str]) -> Iterable[str]:
    for i, ts in enumerate(iso):
        row: dict[str, Any] = {"key": _b64(cols["key"][i]), "value": _b64(cols["value"][i]),
                               "topic": cols["topic"][i], "partition": cols["partition"][i],
                               "offset": cols["offset"][i], "timestamp": ts,
                               "timestampType": cols["timestampType"][i],
                               "headers": [{"key": h["key"], "value": _b64(h["value"])}
                                           for h in cols["headers"][i] or []]}
        yield json.dumps(row, separators=(",", ":")) + "\n"
