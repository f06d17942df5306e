"""Reading exported Kafka records (``replay --from-files``) row by row, so that every bad row is named.

Spark's readers stop a whole replay at the first bad row with an error naming neither file nor line
(FAILFAST), or turn it into nulls that are then dropped in silence (PERMISSIVE). Here each piece of
a file (ingest.replay.file_pieces: a byte range of a jsonl file, a row group of a parquet file) is
read with pyarrow and the standard library, in the executors' tasks; ``read_export`` reads a whole
export in one place the same way. Before anything is written:

- a file that cannot be read at all (a truncated parquet footer, a row group that does not decode,
  a parquet column of a type no Kafka column has, an unreadable jsonl file) stops the replay with
  ``ExportFileError``, one line naming the file;
- a row without a usable Kafka position (a cut JSON line, no ``partition``, a string for a number,
  a negative partition or offset) cannot be placed in any partition's range: it is an ``Unplaced``
  dead letter whose reason names the file and the line (jsonl) or the row group and row (parquet);
- a row with a position but a bad field (key or value not base64, a timestamp that is no time)
  keeps its place in its partition's range with ``problem`` set; the mapping makes it a dead letter
  at its offset (ingest.encode.prepare), so it counts like any other offset of the range.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ingest.encode.prepare import PROBLEM
from ingest.replay.jsonl_lines import ExportFileError, check_not_parquet, piece_lines
from ingest.replay.plan import FILE_FORMATS, ReplayError
from ingest.replay.positions import first_of_each_position

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
ROWS_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
    ("headers", HEADERS), (PROBLEM, pa.string()),
])
REQUIRED = ("key", "value", "topic", "partition", "offset", "timestamp")
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


@dataclass(frozen=True)
class Unplaced:
    """A row with no usable Kafka position: a dead letter of its own."""

    reason: str                   # names the file and the line, or the row group and row
    topic: str | None
    partition: int | None
    offset: int | None
    raw: bytes | None             # the line as it was (jsonl), the value (parquet)


@dataclass
class ExportRows:
    """What the files hold: the placed rows (ROWS_SCHEMA, one per position), and the rest."""

    table: pa.Table
    unplaced: list[Unplaced] = field(default_factory=list)
    repeated: int = 0             # rows at a position an earlier row already had (the first is kept)
    files: int = 0


class _Bad(Exception):
    """Internal: this row's reason (the caller adds where it is)."""


def export_files(directory: str | os.PathLike[str], fmt: str) -> list[Path]:
    """The data files of an export, as Spark lists them (hidden and ``_`` files, e.g. _SUCCESS and
    .crc, left out)."""
    path = Path(directory)
    if fmt not in FILE_FORMATS:
        raise ReplayError(f"--format {fmt!r}: use jsonl or parquet")
    if not path.is_dir():
        raise ReplayError(f"--from-files {path}: not a directory")
    entries = [p for p in path.rglob("*") if not any(part.startswith(("_", ".")) for part in p.relative_to(path).parts)]
    _check_contained(path, entries)
    files = sorted(p for p in entries if p.is_file())
    if not files:
        raise ReplayError(f"--from-files {path}: no files in it")
    return files


def _check_contained(path: Path, entries: list[Path]) -> None:
    """What is read is what lies in the directory: a symbolic link out of it (to a file only we may
    read, say) or a directory anyone may add files to would put someone else's bytes in the store."""
    root = path.resolve()
    for p in [path, *entries]:
        if p.is_symlink() and not p.resolve().is_relative_to(root):
            raise ReplayError(f"--from-files {path}: {p} is a symbolic link to {p.resolve()}, outside the directory: "
                              "refused (copy what it points to into the directory)")
        try:
            st = p.stat()
        except FileNotFoundError:      # a broken link: nothing to read there
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IWOTH:
            raise ReplayError(f"--from-files {path}: {p} is writable by every user (mode {stat.S_IMODE(st.st_mode):04o}), "
                              "who could add records to the replay: chmod o-w it")


def read_export(directory: str | os.PathLike[str], fmt: str) -> ExportRows:
    """Every file of the export; see the module docstring."""
    tables: list[pa.Table] = []
    unplaced: list[Unplaced] = []
    files = export_files(directory, fmt)
    for path in files:
        table, bad = _read_jsonl(path)[:2] if fmt == "jsonl" else _read_parquet(path)
        tables.append(table)
        unplaced += bad
    table = pa.concat_tables(tables) if tables else ROWS_SCHEMA.empty_table()
    table, repeated = first_of_each_position(table)
    return ExportRows(table, unplaced, repeated, len(files))


# ---------------------------------------------------------------------------------------- jsonl

def _read_jsonl(path: Path, start: int = 0, stop: int | None = None, first_line: int = 1
                ) -> tuple[pa.Table, list[Unplaced], int]:
    """The lines of ``path`` that begin in bytes [start, stop) (a piece of it, as Spark splits a
    text file: a line belongs to the piece its first byte is in), the first of them being line
    ``first_line``. Returns the rows, the unplaced ones and how many lines the piece holds."""
    rows: list[dict[str, Any]] = []
    unplaced: list[Unplaced] = []
    number = first_line - 1
    try:
        with open(path, "rb") as f:
            check_not_parquet(f, path)
            for line in piece_lines(f, start, stop):
                number += 1
                if not line.strip():
                    continue
                where = f"{path} line {number}"
                try:
                    text = line.decode("utf-8")
                except UnicodeDecodeError as exc:    # JSON lines are UTF-8; json.loads would guess another
                    unplaced.append(Unplaced(f"{where}: not UTF-8 text (byte 0x{line[exc.start]:02X} at column "
                                             f"{exc.start + 1}: {exc.reason}); JSON lines must be UTF-8", None,
                                             None, None, line.rstrip(b"\r\n")))
                    continue
                try:
                    obj = json.loads(text)
                except json.JSONDecodeError as exc:   # a cut line, a stray byte: where in the line, not the file
                    unplaced.append(Unplaced(f"{where}: not a JSON object ({exc.msg} at column {exc.colno})",
                                             None, None, None, line.rstrip(b"\r\n")))
                    continue
                except (ValueError, UnicodeDecodeError) as exc:
                    unplaced.append(Unplaced(f"{where}: not a JSON object ({_short(exc)})", None, None, None,
                                             line.rstrip(b"\r\n")))
                    continue
                if not isinstance(obj, dict):
                    unplaced.append(Unplaced(f"{where}: not a JSON object (a {type(obj).__name__})", None, None,
                                             None, line.rstrip(b"\r\n")))
                    continue
                try:
                    topic, partition, offset = _position(obj.get("topic"), obj.get("partition"), obj.get("offset"))
                except _Bad as bad:
                    unplaced.append(Unplaced(f"{where}: {bad}", *_as_given(obj), line.rstrip(b"\r\n")))
                    continue
                rows.append(_json_row(obj, topic, partition, offset, where))
    except OSError as exc:
        raise ExportFileError(f"--from-files: cannot read {path}: {exc.strerror or exc}") from None
    return pa.Table.from_pylist(rows, schema=ROWS_SCHEMA), unplaced, number - first_line + 1


def _short(exc: Exception) -> str:
    return str(exc).split("\n")[0][:200]


def _as_given(obj: dict) -> tuple[str | None, int | None, int | None]:
    """The coordinates a dead letter can carry: each one only if it is of its type and range."""
    topic = obj.get("topic") if isinstance(obj.get("topic"), str) else None
    partition, offset = obj.get("partition"), obj.get("offset")
    return (topic, partition if _fits(partition, INT32_MAX) else None,
            offset if _fits(offset, INT64_MAX) else None)


def _fits(value: Any, limit: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -limit - 1 <= value <= limit


def _position(topic: Any, partition: Any, offset: Any) -> tuple[str, int, int]:
    if topic is None:
        raise _Bad("topic is missing")
    if not isinstance(topic, str) or not topic:
        raise _Bad(f"topic {topic!r} is not a topic name")
    for name, value, limit in (("partition", partition, INT32_MAX), ("offset", offset, INT64_MAX)):
        if value is None:
            raise _Bad(f"{name} is missing")
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Bad(f"{name} {value!r} is not an integer")
        if value < 0 or value > limit:
            raise _Bad(f"{name} {value} is not a Kafka {name} (0 to {limit})")
    return topic, partition, offset


def _json_row(obj: dict, topic: str, partition: int, offset: int, where: str) -> dict[str, Any]:
    """The row in ROWS_SCHEMA; a bad field sets ``problem`` and keeps the text as it was."""
    row: dict[str, Any] = {"topic": topic, "partition": partition, "offset": offset, "key": None, "value": None,
                           "timestamp": None, "timestampType": 0, "headers": None, PROBLEM: None}
    problems = []
    for name in ("key", "value"):
        text = obj.get(name)
        try:
            row[name] = _unbase64(text, name)
        except _Bad as bad:
            problems.append(str(bad))
            row[name] = str(text).encode("utf-8", "replace")
    try:
        row["timestamp"] = _timestamp(obj.get("timestamp"))
    except _Bad as bad:
        problems.append(str(bad))
    kind = obj.get("timestampType", 0)
    if kind is None or (isinstance(kind, int) and not isinstance(kind, bool) and -(2**31) <= kind <= INT32_MAX):
        row["timestampType"] = kind or 0
    else:
        problems.append(f"timestampType {kind!r} is not an integer")
    try:
        row["headers"] = _headers(obj.get("headers"))
    except _Bad as bad:
        problems.append(str(bad))
    if problems:
        row[PROBLEM] = f"{where}: {'; '.join(problems)}"
    return row


def _unbase64(text: Any, name: str) -> bytes | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise _Bad(f"{name} {text!r} is not a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _Bad(f"{name} is not base64 ({exc})") from None


def _timestamp(value: Any) -> datetime:
    """An ISO-8601 string (Spark's form; no zone = UTC), or epoch milliseconds (a number or digits)."""
    if value is None:
        raise _Bad("timestamp is missing")
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value / 1000, tz=UTC)
        except (OverflowError, OSError, ValueError):
            raise _Bad(f"timestamp {value} is out of range (epoch milliseconds)") from None
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            raise _Bad(f"timestamp {value!r} is neither ISO-8601 nor epoch milliseconds") from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    raise _Bad(f"timestamp {value!r} is neither ISO-8601 nor epoch milliseconds")


def _headers(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _Bad("headers is not a list")
    out = []
    for i, h in enumerate(value):
        if not isinstance(h, dict) or not isinstance(h.get("key"), str):
            raise _Bad(f"header {i} is not {{\"key\": text, \"value\": base64}}")
        out.append({"key": h["key"], "value": _unbase64(h.get("value"), f"header {h['key']!r} value")})
    return out


# -------------------------------------------------------------------------------------- parquet

def _read_parquet(path: Path) -> tuple[pa.Table, list[Unplaced]]:
    pf = parquet_file(path)
    tables, unplaced = [], []
    for group in range(pf.num_row_groups):
        table, bad = read_row_group(pf, path, group)
        tables.append(table)
        unplaced += bad
    return (pa.concat_tables(tables) if tables else ROWS_SCHEMA.empty_table()), unplaced


def parquet_file(path: Path) -> pq.ParquetFile:
    """An export's parquet file, its footer read; a truncated or foreign file is refused here."""
    try:
        pf = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise ExportFileError(f"--from-files: {path} is not a readable parquet file ({_short(exc)})") from None
    missing = [c for c in REQUIRED if c not in pf.schema_arrow.names]
    if missing:
        raise ExportFileError(f"--from-files: {path} lacks column(s) {', '.join(missing)}; expected the Kafka "
                              "source's columns (key, value, topic, partition, offset, timestamp, headers)")
    # every column's type against the Kafka column's, from the footer: a reader that reads only some
    # columns (the scan) still refuses a file whose other columns could never be read
    _parquet_rows(pf.schema_arrow.empty_table(), str(path), path)
    return pf


def read_row_group(pf: pq.ParquetFile, path: Path, group: int, columns: Sequence[str] | None = None
                   ) -> tuple[pa.Table, list[Unplaced]]:
    """The rows of row group ``group`` in ROWS_SCHEMA, and those with no usable position; with
    ``columns``, only those are read (the others null; parquet_file checked every column's type)."""
    try:
        raw = pf.read_row_group(group, columns=None if columns is None else
                                [c for c in columns if c in pf.schema_arrow.names])
    except (OSError, pa.ArrowException) as exc:
        raise ExportFileError(f"--from-files: {path} row group {group} cannot be read ({_short(exc)})") from None
    return _parquet_rows(raw, f"{path} row group {group}", path)


def _column(raw: pa.Table, name: str, typ: pa.DataType, path: Path) -> pa.ChunkedArray:
    if name not in raw.column_names:
        return pa.chunked_array([pa.nulls(raw.num_rows, typ)])
    try:
        return raw.column(name).cast(typ)
    except (pa.ArrowException, ValueError) as exc:
        raise ExportFileError(f"--from-files: {path} column {name} is {raw.column(name).type}, which cannot be "
                              f"the Kafka column's {typ} ({_short(exc)})") from None


def _parquet_rows(raw: pa.Table, where: str, path: Path) -> tuple[pa.Table, list[Unplaced]]:
    n = raw.num_rows
    unplaced = []
    clean = _positions_clean(raw)           # then no row is looked at one by one
    good: list[int] = [] if not clean else list(range(n))
    topics, partitions, offsets = ([] if clean else raw.column(c).to_pylist() for c in ("topic", "partition", "offset"))
    values = None
    for i in range(0 if clean else n):
        try:
            _position(topics[i], partitions[i], offsets[i])
            good.append(i)
        except _Bad as bad:
            if values is None:
                values = _column(raw, "value", pa.binary(), path).to_pylist()
            as_given = _as_given({"topic": topics[i], "partition": partitions[i], "offset": offsets[i]})
            unplaced.append(Unplaced(f"{where} row {i}: {bad}", *as_given, values[i]))
    kept = raw if len(good) == n else raw.take(pa.array(good, pa.int64()))
    problems = pa.nulls(kept.num_rows, pa.string())
    timestamps = kept.column("timestamp")
    if pa.types.is_timestamp(timestamps.type):
        ts = timestamps.cast(pa.timestamp("us")).cast(pa.timestamp("us", tz="UTC"))   # no zone = UTC
    elif pa.types.is_integer(timestamps.type):
        ts = pc.multiply(timestamps.cast(pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC"))
    else:   # text: parsed one by one, like jsonl, so a bad one is named
        parsed, reasons = [], []
        for i, value in zip(good, timestamps.to_pylist()):
            try:
                parsed.append(_timestamp(value))
                reasons.append(None)
            except _Bad as bad:
                parsed.append(None)
                reasons.append(f"{where} row {i}: {bad}")
        ts, problems = pa.array(parsed, pa.timestamp("us", tz="UTC")), pa.array(reasons, pa.string())
    cols = {"key": _column(kept, "key", pa.binary(), path), "value": _column(kept, "value", pa.binary(), path),
            "topic": _column(kept, "topic", pa.string(), path), "partition": _column(kept, "partition", pa.int32(), path),
            "offset": _column(kept, "offset", pa.int64(), path), "timestamp": ts,
            "timestampType": pc.fill_null(_column(kept, "timestampType", pa.int32(), path), 0),
            "headers": _column(kept, "headers", HEADERS, path), PROBLEM: problems}
    return pa.table([cols[f.name] for f in ROWS_SCHEMA], schema=ROWS_SCHEMA), unplaced


def _positions_clean(raw: pa.Table) -> bool:
    """Every row's topic, partition and offset as _position takes them (checked by column)."""
    t, p, o = (raw.column(c) for c in ("topic", "partition", "offset"))
    if not (pa.types.is_string(t.type) and pa.types.is_integer(p.type) and pa.types.is_integer(o.type)) \
            or t.null_count or p.null_count or o.null_count:
        return False
    return raw.num_rows == 0 or (pc.min(pc.utf8_length(t)).as_py() > 0 and pc.min(p).as_py() >= 0
                                 and pc.max(p).as_py() <= INT32_MAX and pc.min(o).as_py() >= 0
                                 and pc.max(o).as_py() <= INT64_MAX)


def iter_problems(rows: ExportRows) -> Iterator[str]:
    """Every reason of the export's bad rows, unplaced first (for logs and tests)."""
    yield from (u.reason for u in rows.unplaced)
    yield from (p for p in rows.table.column(PROBLEM).to_pylist() if p is not None)
