"""Export files for the replay tests: good and bad rows as JSON lines, and Parquet exports."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ingest.replay.files import EXPORT_SCHEMA

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "orders"


def good(partition: int, offset: int) -> dict:
    return {"key": base64.b64encode(b"k%d" % offset).decode(), "value": base64.b64encode(b"v%d" % offset).decode(),
            "topic": TOPIC, "partition": partition, "offset": offset, "timestamp": "2026-11-22T10:00:00.000Z",
            "timestampType": 0, "headers": [{"key": "trace", "value": base64.b64encode(b"t").decode()}]}


def write_jsonl(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))


def bad_export(directory: Path) -> dict[int, str]:
    """orders-0.jsonl: 10 good rows of partition 0 and, between them, one of each kind of bad row.
    Returns line number -> the words its reason must hold."""
    lines = [json.dumps(good(0, o)) for o in range(10)]
    bad = {
        3: (json.dumps(good(0, 100))[:40], "not a JSON object"),                          # a cut line
        5: (json.dumps({k: v for k, v in good(0, 101).items() if k != "partition"}), "partition is missing"),
        7: (json.dumps(dict(good(0, 102), partition="0")), "partition '0' is not an integer"),
        9: (json.dumps(dict(good(0, 103), partition=-1)), "partition -1 is not a Kafka partition"),
        11: (json.dumps(dict(good(0, 104), offset=-5)), "offset -5 is not a Kafka offset"),
        13: (json.dumps(dict(good(0, 10), value="not base64!")), "value is not base64"),   # keeps offset 10
        15: (json.dumps(dict(good(0, 11), timestamp="yesterday")), "timestamp 'yesterday'"),
    }
    for line in sorted(bad):
        lines.insert(line - 1, bad[line][0])
    write_jsonl(directory / "orders-0.jsonl", lines)
    return {line: words for line, (_, words) in bad.items()}


def parquet_export(directory: Path, partitions: list, offsets: list) -> Path:
    n = len(offsets)
    table = pa.table({"key": [b"k"] * n, "value": [b"v%d" % i for i in range(n)], "topic": [TOPIC] * n,
                      "partition": pa.array(partitions, pa.int32()), "offset": pa.array(offsets, pa.int64()),
                      "timestamp": pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")),
                      "timestampType": pa.array([0] * n, pa.int32()),
                      "headers": pa.array([[]] * n, EXPORT_SCHEMA.field("headers").type)})
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "part-0.parquet"
    pq.write_table(table, path, row_group_size=4)
    return path
