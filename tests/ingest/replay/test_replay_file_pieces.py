"""``replay --from-files`` read by the executors (ingest.replay.file_pieces): an export cut into pieces
(jsonl byte ranges, parquet row groups) gives, whatever the cuts, the rows, reasons and dead letters
the whole files give read in one place (ingest.replay.export_rows.read_export)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.replay.export_rows import _read_jsonl, read_export
from ingest.replay.fast_rows import jsonl_rows
from ingest.replay.file_pieces import FilePiece, plan_pieces, read_piece, scan_export
from ingest.replay.files import read_kafka_files
from tests.helpers.export import TOPIC, bad_export, good, parquet_export, write_jsonl


@pytest.mark.unit
@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"x")), max_size=25),
       st.lists(st.integers(0, 400), max_size=6), st.booleans())
def test_the_pieces_of_a_file_hold_each_of_its_lines_once_numbered_as_in_the_file(tmp_path_factory, lines, cuts,
                                                                                  last_newline):
    path = tmp_path_factory.mktemp("lines") / "f.jsonl"
    data = b"\n".join(lines) + (b"\n" if last_newline and lines else b"")
    path.write_bytes(data)
    edges = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    numbered: list[tuple[int, bytes]] = []
    first = 1
    for a, b in zip(edges, edges[1:] or [len(data)]):
        with open(path, "rb") as f:
            from ingest.replay.jsonl_lines import piece_lines

            got = list(piece_lines(f, a, b))
        numbered += [(first + i, line) for i, line in enumerate(got)]
        first += len(got)
    with open(path, "rb") as f:
        whole = list(enumerate(f, 1))
    assert numbered == whole


@pytest.mark.unit
def test_a_piece_of_a_jsonl_file_names_its_rows_by_their_line_in_the_file(tmp_path: Path) -> None:
    expected = bad_export(tmp_path / "export")
    path = tmp_path / "export" / "orders-0.jsonl"
    pieces = plan_pieces(tmp_path / "export", "jsonl", piece_bytes=300)
    assert len(pieces) > 4
    first, reasons, offsets = 1, [], []
    for p in pieces:
        table, unplaced, lines = read_piece(FilePiece(p.path, p.fmt, p.start, p.stop, first))
        first += lines
        reasons += [u.reason for u in unplaced] + [r for r in table.column("problem").to_pylist() if r]
        offsets += table.column("offset").to_pylist()
    whole = read_export(tmp_path / "export", "jsonl")
    assert sorted(offsets) == sorted(whole.table.column("offset").to_pylist())
    assert sorted(reasons) == sorted([u.reason for u in whole.unplaced]
                                     + [r for r in whole.table.column("problem").to_pylist() if r])
    assert {int(r.split(" line ")[1].split(":")[0]) for r in reasons if r.startswith(f"{path} line ")} == set(expected)
    assert _read_jsonl(path)[2] == first - 1


@pytest.mark.integration
def test_the_executors_read_what_the_driver_read(spark: object, tmp_path: Path) -> None:
    bad_export(tmp_path / "jsonl")
    write_jsonl(tmp_path / "jsonl" / "orders-1.jsonl", [json.dumps(good(1, o)) for o in range(5, 9)])
    parquet_export(tmp_path / "parquet", [0, 0, 0, 0, 0, None, 0, -1, 1, 1], [0, 1, 2, 3, 4, 5, -7, 6, 0, 1])
    for fmt in ("jsonl", "parquet"):
        whole = read_export(tmp_path / fmt, fmt)
        pieces = plan_pieces(tmp_path / fmt, fmt, piece_bytes=256)
        assert len(pieces) >= 3, fmt
        scan = scan_export(spark, pieces)
        assert sorted(u.reason for u in scan.unplaced) == sorted(u.reason for u in whole.unplaced), fmt
        want = sorted(zip(*(whole.table.column(c).to_pylist() for c in ("topic", "partition", "offset", "value",
                                                                          "problem"))))
        df = read_kafka_files(spark, tmp_path / fmt, fmt)
        got = sorted((r["topic"], r["partition"], r["offset"], bytes(r["value"]) if r["value"] is not None else None,
                      r["problem"]) for r in df.collect())
        assert got == want, fmt
        parts = scan.partitions()
        assert {tp: (s.first, s.last) for tp, s in parts.items()} == \
            {("orders", 0): (0, 11 if fmt == "jsonl" else 4), ("orders", 1): (5, 8) if fmt == "jsonl" else (0, 1)}


@pytest.mark.integration
def test_a_position_in_two_files_keeps_the_first_and_counts_the_other(spark: object, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [json.dumps(good(0, o)) for o in (0, 1, 2, 5)])
    write_jsonl(tmp_path / "b.jsonl", [json.dumps(dict(good(0, o), value=base64.b64encode(b"later").decode()))
                                       for o in (2, 3, 4, 5)])
    scan = scan_export(spark, plan_pieces(tmp_path, "jsonl"))
    assert scan.repeated == 2 and scan.overlapping == {("orders", 0)}
    rows = read_kafka_files(spark, tmp_path, "jsonl").orderBy("offset").collect()
    assert [(r["offset"], bytes(r["value"])) for r in rows] == \
        [(0, b"v0"), (1, b"v1"), (2, b"v2"), (3, b"later"), (4, b"later"), (5, b"v5")]


_field = st.one_of(st.none(), st.integers(-3, 2**31 + 1), st.booleans(), st.just("0"), st.text(max_size=3),
                   st.just(base64.b64encode(b"ok").decode()), st.just("not base64!"), st.just("YQ=")
                   ).map(lambda v: v if not isinstance(v, str) or v != "" else "x")
_stamp = st.sampled_from(["2026-11-22T10:00:00.000Z", "2026-11-22T10:00:00+01:00", "2026-11-22T10:00:00",
                          "1700000000000", 1_700_000_000_000, "yesterday", None])


@pytest.mark.unit
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), _field, _field, _stamp, st.integers(0, 2)), min_size=1, max_size=12))
def test_a_piece_read_column_by_column_is_what_line_by_line_reading_gives(tmp_path_factory, rows):
    """A clean piece is read by pyarrow (ingest.replay.fast_rows), any other line by line: either way
    the same rows, problems and dead letters."""
    lines = []
    for n, (clean, key, partition, stamp, headers) in enumerate(rows):
        row = good(0, n)
        if not clean:
            row.update(key=key, partition=partition, timestamp=stamp)
        row["headers"] = [{"key": f"h{i}", "value": base64.b64encode(b"%d" % i).decode()} for i in range(headers)]
        lines.append(json.dumps(row))
    path = tmp_path_factory.mktemp("rows") / "orders-0.jsonl"
    write_jsonl(path, lines)
    size = path.stat().st_size
    table, unplaced, count = read_piece(FilePiece(str(path), "jsonl", 0, size))
    slow_table, slow_unplaced, slow_count = _read_jsonl(path)
    assert table.to_pylist() == slow_table.to_pylist()
    assert [u.reason for u in unplaced] == [u.reason for u in slow_unplaced]
    assert count == slow_count == len(lines)
    if all(clean for clean, *_ in rows):
        assert jsonl_rows(path.read_bytes()) is not None       # a clean piece is read by pyarrow


_b64_text = st.one_of(st.binary(max_size=10).map(lambda b: base64.b64encode(b).decode()),
                      st.text(alphabet="AQgw+/=\n é-_", max_size=9), st.none())


@pytest.mark.unit
@settings(max_examples=400, deadline=None)
@given(st.lists(_b64_text, max_size=8), st.integers(0, 2))
def test_base64_values_decoded_at_once_are_what_line_by_line_decoding_gives_or_are_refused(values, skip) -> None:
    """fast_rows decodes a column's base64 in one call; what it takes it decodes as b64decode(validate=True)
    does, and whatever that refuses it refuses too (the piece is then read line by line)."""
    import binascii

    import pyarrow as pa

    from ingest.replay.fast_rows import _NotClean, _unbase64

    column = pa.array([None] * skip + values, pa.string()).slice(skip)     # a column that starts mid-buffer
    try:
        want = [None if v is None else base64.b64decode(v, validate=True) for v in values]
    except (binascii.Error, ValueError):
        want = None
    from unittest import mock

    from ingest.replay import fast_rows

    def stdlib(text):                   # the decoder of an executor without pybase64
        return binascii.a2b_base64(text.tobytes(), strict_mode=True)

    for decoder in (fast_rows._decode_base64, stdlib):
        with mock.patch.object(fast_rows, "_decode_base64", decoder):
            try:
                got = _unbase64(pa.chunked_array([column], pa.string())).to_pylist()
            except _NotClean:
                got = None
        assert got == want or got is None
        if want is not None and all(v is None or base64.b64encode(w).decode() == v for v, w in zip(values, want)):
            assert got == want          # canonical base64, as an export writes it, is always taken


@pytest.mark.unit
@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.booleans(), _field, _field, _stamp, st.integers(0, 2)), min_size=1, max_size=12),
       st.sampled_from([None, 1_700_000_000_000, 1_800_000_000_000]))
def test_the_scan_of_a_piece_finds_what_reading_it_line_by_line_finds(tmp_path_factory, rows, from_ms) -> None:
    """The scan reads only positions (and timestamps when a bound needs them) where it can: the same
    partitions' spans, unplaced rows and lines as the line-by-line reading of the piece."""
    from ingest.replay.positions import first_of_each_position
    from ingest.replay.file_pieces import scan_piece

    lines = []
    for n, (clean, key, partition, stamp, headers) in enumerate(rows):
        row = good(n % 2, n)
        if not clean:
            row.update(key=key, partition=partition, timestamp=stamp)
        lines.append(json.dumps(row))
    path = tmp_path_factory.mktemp("scan") / "orders.jsonl"
    write_jsonl(path, lines)
    scan = scan_piece(FilePiece(str(path), "jsonl", 0, path.stat().st_size), from_ms, None)
    table, unplaced, count = _read_jsonl(path)
    table, _ = first_of_each_position(table)
    spans: dict = {}
    for r in table.to_pylist():
        first, last, at = spans.get((r["topic"], r["partition"]), (None, None, None))
        ms = None if r["timestamp"] is None else int(r["timestamp"].timestamp() * 1000)
        hit = r["offset"] if from_ms is not None and ms is not None and ms >= from_ms else None
        spans[(r["topic"], r["partition"])] = (min(x for x in (first, r["offset"]) if x is not None),
                                               max(x for x in (last, r["offset"]) if x is not None),
                                               min((x for x in (at, hit) if x is not None), default=None))
    assert {tp: (s.first, s.last, s.from_ts) for tp, s in scan.parts.items()} == spans
    assert [u.reason for u in scan.unplaced] == [u.reason for u in unplaced] and scan.lines == count


@pytest.mark.unit
def test_the_scan_of_a_parquet_row_group_finds_what_reading_all_of_it_finds(tmp_path: Path) -> None:
    """The scan reads a row group's positions and timestamps only, unless a row has no usable
    position: that row's dead letter still carries its value."""
    from ingest.replay.file_pieces import scan_piece

    path = parquet_export(tmp_path / "export", [0, 0, 1, 1, 0, None, 0, -1], [0, 1, 2, 3, 4, 5, -7, 6])
    clean, bad = (scan_piece(FilePiece(str(path), "parquet", g, g + 1), 1_700_000_000_000, None) for g in (0, 1))
    assert {tp: (s.first, s.last, s.from_ts) for tp, s in clean.parts.items()} == \
        {(TOPIC, 0): (0, 1, 0), (TOPIC, 1): (2, 3, 2)}
    assert not clean.unplaced and clean.error is None
    assert [u.raw for u in bad.unplaced] == [b"v5", b"v6", b"v7"]
    assert [u.reason.split(": ", 1)[1] for u in bad.unplaced] == [
        "partition is missing", f"offset -7 is not a Kafka offset (0 to {2**63 - 1})",
        f"partition -1 is not a Kafka partition (0 to {2**31 - 1})"]


@pytest.mark.unit
def test_the_scan_refuses_a_parquet_column_it_does_not_read_when_it_can_never_be_the_kafka_column(
        tmp_path: Path) -> None:
    """Keys, values and headers are left to the batches, but a key column of integers is refused
    by the scan, before anything is written, as reading the whole row group would refuse it."""
    from ingest.replay.file_pieces import scan_piece

    table = pa.table({"key": pa.array([1, 2], pa.int64()), "value": [b"a", b"b"], "topic": [TOPIC] * 2,
                      "partition": pa.array([0, 0], pa.int32()), "offset": pa.array([0, 1], pa.int64()),
                      "timestamp": pa.array([1_700_000_000_000_000] * 2, pa.timestamp("us", tz="UTC")),
                      "headers": pa.array([[]] * 2, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))})
    path = tmp_path / "part-0.parquet"
    pq.write_table(table, path)
    scan = scan_piece(FilePiece(str(path), "parquet", 0, 1), None, None)
    assert scan.error is not None and "column key is int64" in scan.error
