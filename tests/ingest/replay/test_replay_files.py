"""``replay --from-files`` with bad rows: each one a dead letter naming its file and line (jsonl) or
row group and row (parquet) and the reason, none dropped in silence; a file that cannot be read at all
is one line and exit 2 before anything is written; the summary's counts add up (issue 26, part 2)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ingest.config import JobConfig
from ingest.encode.restore import kafka_value
from ingest.replay.export_rows import ExportFileError, read_export
from ingest.replay.plan import ReplayError
from sink import read_dead_letters
from tests.helpers.brokers.kafka_records import store_by_coordinates
from tests.helpers.export import ROOT, TOPIC, bad_export, good, parquet_export, write_jsonl


@pytest.mark.unit
def test_each_bad_jsonl_row_is_named_by_file_line_and_reason(tmp_path: Path) -> None:
    expected = bad_export(tmp_path / "export")
    rows = read_export(tmp_path / "export", "jsonl")
    path = tmp_path / "export" / "orders-0.jsonl"
    placed = {line: words for line, words in expected.items() if line in (13, 15)}
    assert sorted(rows.table.column("offset").to_pylist()) == list(range(12))
    problems = [p for p in rows.table.column("problem").to_pylist() if p]
    for line, words in placed.items():
        assert any(p.startswith(f"{path} line {line}: ") and words in p for p in problems), (line, problems)
    unplaced = {u.reason.split(":")[0]: u for u in rows.unplaced}
    assert len(rows.unplaced) == 5
    for line, words in expected.items():
        if line in placed:
            continue
        u = unplaced[f"{path} line {line}"]
        assert words in u.reason, (line, u.reason)
        assert u.raw is not None and u.raw.strip()       # the line as it was, kept in the dead letter
    assert unplaced[f"{path} line 9"].partition == -1 and unplaced[f"{path} line 9"].topic == TOPIC


@pytest.mark.unit
def test_a_repeated_position_keeps_the_first_row_and_is_counted(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [json.dumps(good(0, 0)), json.dumps(good(0, 1))])
    write_jsonl(tmp_path / "b.jsonl", [json.dumps(dict(good(0, 1), value=base64.b64encode(b"other").decode()))])
    rows = read_export(tmp_path, "jsonl")
    assert rows.repeated == 1 and rows.table.column("value").to_pylist() == [b"v0", b"v1"]


@pytest.mark.unit
def test_parquet_rows_without_a_position_are_named_by_row_group_and_row(tmp_path: Path) -> None:
    path = parquet_export(tmp_path / "export", [0, 0, 0, 0, 0, None, 0, -1], [0, 1, 2, 3, 4, 5, -7, 6])
    rows = read_export(tmp_path / "export", "parquet")
    assert rows.table.column("offset").to_pylist() == [0, 1, 2, 3, 4]
    assert [u.reason for u in rows.unplaced] == [
        f"{path} row group 1 row 1: partition is missing",
        f"{path} row group 1 row 2: offset -7 is not a Kafka offset (0 to {2**63 - 1})",
        f"{path} row group 1 row 3: partition -1 is not a Kafka partition (0 to {2**31 - 1})"]
    assert [u.raw for u in rows.unplaced] == [b"v5", b"v6", b"v7"]   # each row's value, kept


@pytest.mark.unit
def test_a_truncated_parquet_file_is_refused_naming_it(tmp_path: Path) -> None:
    path = parquet_export(tmp_path / "export", [0] * 8, list(range(8)))
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ExportFileError, match=f"{path} is not a readable parquet file"):
        read_export(tmp_path / "export", "parquet")


@pytest.mark.unit
def test_the_command_refuses_an_unreadable_file_in_one_line_with_exit_2_before_writing(tmp_path: Path) -> None:
    path = parquet_export(tmp_path / "export", [0] * 8, list(range(8)))
    path.write_bytes(path.read_bytes()[:-100])
    done = subprocess.run([sys.executable, "-m", "ingest.cli", "replay", "--from-files", str(tmp_path / "export"),
                           "--format", "parquet", "--store", str(tmp_path / "store"), "--segment-size", "1m",
                           "--max-message-size", "512k"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "store").exists()


@pytest.mark.unit
def test_a_link_out_of_the_directory_is_refused_naming_it(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "export" / "orders-0.jsonl", [json.dumps(good(0, i)) for i in range(3)])
    secret = tmp_path / "private" / "only-we-may-read.jsonl"
    write_jsonl(secret, [json.dumps(good(1, i)) for i in range(3)])
    (tmp_path / "export" / "orders-1.jsonl").symlink_to(secret)
    with pytest.raises(ReplayError, match=r"orders-1.jsonl is a symbolic link to .*only-we-may-read.jsonl, outside"):
        read_export(tmp_path / "export", "jsonl")
    (tmp_path / "export" / "orders-1.jsonl").unlink()
    (tmp_path / "export" / "more").symlink_to(secret.parent, target_is_directory=True)
    with pytest.raises(ReplayError, match=r"more is a symbolic link to .*private, outside"):
        read_export(tmp_path / "export", "jsonl")
    (tmp_path / "export" / "more").unlink()
    (tmp_path / "export" / "again.jsonl").symlink_to(tmp_path / "export" / "orders-0.jsonl")
    assert read_export(tmp_path / "export", "jsonl").repeated == 3, "a link inside the directory is read as any file"


@pytest.mark.unit
def test_a_directory_anyone_can_add_files_to_is_refused(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "export" / "part" / "orders-0.jsonl", [json.dumps(good(0, i)) for i in range(3)])
    os.chmod(tmp_path / "export" / "part", 0o1777)
    with pytest.raises(ReplayError, match=r"export/part is writable by every user \(mode 1777\)"):
        read_export(tmp_path / "export", "jsonl")


@pytest.mark.integration
def test_a_replay_of_bad_files_writes_every_good_row_once_and_every_bad_one_as_a_dead_letter(
        spark: object, tmp_path: Path) -> None:
    from ingest.replay.command import ReplayOptions, replay

    expected = bad_export(tmp_path / "export")
    # partition 1: a tombstone at 7 and a 0-byte value at 8, counted in the summary
    write_jsonl(tmp_path / "export" / "orders-1.jsonl", [json.dumps(good(1, o)) for o in range(5, 7)]
                + [json.dumps(dict(good(1, 7), value=None)), json.dumps(dict(good(1, 8), value=""))])
    cfg = JobConfig(bootstrap_servers="(unused)", subscribe="*", store=str(tmp_path / "store"),
                    segment_size=1 << 20, max_message_size=512 * 1024, master=None, flush="sync",
                    max_offsets_per_trigger=5)
    cfg.validate()
    opts = ReplayOptions(from_files=str(tmp_path / "export"), progress="none")
    first = replay(cfg, opts, spark=spark)
    assert first.complete and first.verified is True
    # partition 0: offsets 0..11, two of them (10, 11) bad; partition 1: 5..8
    assert (first.records, first.dead_letters, first.unplaced) == (14, 2, 5)
    text = "\n".join(first.lines())
    assert "offsets: 16 = 0 already held + 14 messages + 2 dead letters" in text
    assert "rows with no Kafka position: 5 dead letters written" in text
    assert (first.tombstones, first.empty_values) == (1, 1)
    assert "null and empty Kafka values: 1 tombstones, 1 empty values" in text

    found = store_by_coordinates(cfg.store)
    assert sorted(found) == [(TOPIC, 0, o) for o in range(10)] + [(TOPIC, 1, o) for o in range(5, 9)]
    [(_, tomb)], [(_, empty)] = found[(TOPIC, 1, 7)], found[(TOPIC, 1, 8)]
    assert (kafka_value(tomb.body, tomb.properties), kafka_value(empty.body, empty.properties)) == (None, b"")
    letters = read_dead_letters(cfg.store)
    path = tmp_path / "export" / "orders-0.jsonl"
    for line, words in expected.items():
        assert sum(d["reason"].startswith(f"{path} line {line}: ") and words in d["reason"] for d in letters) == 1, line
    placed = [d for d in letters if d["partition"] is not None and d["partition"] >= 0
              and d["offset"] is not None and d["offset"] >= 0]
    assert sorted((d["partition"], d["offset"]) for d in placed) == [(0, 10), (0, 11)]

    again = replay(cfg, opts, spark=spark)           # the same replay again writes nothing twice
    assert (again.records, again.dead_letters, again.unplaced, again.unplaced_held) == (0, 0, 0, 5)
    assert "offsets: 16 = 16 already held + 0 messages + 0 dead letters" in "\n".join(again.lines())
    assert len(read_dead_letters(cfg.store)) == len(letters)


@pytest.mark.unit
def test_the_first_row_of_each_position_is_kept_in_file_order_whatever_order_the_groups_come_in() -> None:
    from ingest.replay.positions import first_of_each_position

    # many chunks and positions: pyarrow's group_by may hand its groups back in any order
    n, chunks = 50_000, 8
    parts = []
    for c in range(chunks):
        offsets = np.random.default_rng(c).permutation(n)
        parts.append(pa.table({"topic": [TOPIC] * n, "partition": pa.array(offsets % 3, pa.int32()),
                               "offset": pa.array(offsets, pa.int64()),
                               "value": pa.array([b"%d" % c] * n)}))
    kept, repeated = first_of_each_position(pa.concat_tables(parts))
    assert repeated == n * (chunks - 1)
    assert kept.column("value").to_pylist() == [b"0"] * n                # each position's first row
    assert kept.column("offset").to_pylist() == parts[0].column("offset").to_pylist()   # in file order
