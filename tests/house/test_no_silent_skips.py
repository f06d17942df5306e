"""No tool skips in silence and none says "OK" over what is not there: reindex names a gap in the
commit log and exits 1; verify, stat and dump refuse a directory or a file that is not a store or a
segment (exit 2); a range or a limit that selects nothing is refused; replay refuses Parquet files
given as JSON lines, and says what is wrong with a row that is not UTF-8. (The Spark read of a
damaged store: tests/e2e/crash/test_damaged_readback.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.replay.export_rows import read_export
from store import MessageStore, StoreConfig
from store.format.codec import Message
from tests.helpers.cli import run
from tests.helpers.export import ROOT, good, parquet_export, write_jsonl
from tests.helpers.stores import SEG, four_segments

pytestmark = pytest.mark.unit


def test_reindex_of_a_store_with_a_missing_middle_segment_names_the_gap_and_exits_1(tmp_path: Path) -> None:
    segs = four_segments(tmp_path)
    segs[1].unlink()
    rc, out, err = run("reindex", str(tmp_path))
    assert rc == 1, out + err
    assert f"not indexed: missingSegment at offset {SEG}" in out and f"({SEG} bytes missing)" in out, out


def test_reindex_of_a_whole_store_exits_0(tmp_path: Path) -> None:
    four_segments(tmp_path)
    rc, out, err = run("reindex", str(tmp_path))
    assert rc == 0 and "not indexed" not in out, out + err


@pytest.mark.parametrize("command", ["verify", "stat", "dump"])
def test_an_empty_directory_is_not_a_store(tmp_path: Path, command: str) -> None:
    (tmp_path / "empty").mkdir()
    rc, out, err = run(command, str(tmp_path / "empty"))
    assert rc == 2 and "OK" not in out, out
    assert f"{tmp_path / 'empty'} is an empty directory, not a store" in err, err


@pytest.mark.parametrize("command", ["verify", "stat", "dump"])
def test_a_mistyped_directory_is_not_a_store(tmp_path: Path, command: str) -> None:
    with MessageStore.open(tmp_path / "store", StoreConfig(segment_size=SEG, preallocate=False)) as s:
        s.append([Message("T", b"x")])
        s.commit()
    for wrong in (tmp_path / "store" / "config", tmp_path / "stor"):
        rc, out, err = run(command, str(wrong))
        assert rc == 2 and "OK" not in out and (f"{wrong} is a directory, not a store" in err
                                                 or f"{wrong} does not exist" in err), (wrong, out, err)


@pytest.mark.parametrize("command", ["verify", "stat", "dump"])
def test_a_text_file_is_not_a_segment(tmp_path: Path, command: str) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not a segment\n")
    rc, out, err = run(command, str(text))
    assert rc == 2 and "truncated" not in out + err, out + err
    assert f"{text} is not a segment file" in err, err


def test_a_file_of_records_is_still_read_as_one(golden_dir: Path) -> None:
    rc, out, _ = run("verify", str(golden_dir / "p01_basic.bin"))
    assert rc == 0 and "OK" in out


@pytest.mark.parametrize("limit", ["-1", "0"])
def test_dump_with_a_limit_that_shows_nothing_is_refused(tmp_path: Path, limit: str) -> None:
    four_segments(tmp_path)
    rc, out, err = run("dump", str(tmp_path), "--limit", limit)
    assert rc == 2 and out == "" and f"--limit {limit}: give 1 or more" in err, err


def test_get_with_begin_after_end_says_the_range_is_empty(tmp_path: Path) -> None:
    from tests.helpers.index_stores import write_store

    write_store(tmp_path / "s", batches=1)
    rc, out, err = run("get", str(tmp_path / "s"), "--topic", "T1", "--key", "shared",
                       "--begin", "2030-01-01T00:00", "--end", "2020-01-01T00:00")
    assert rc == 2 and out == "" and "the range is empty" in err and "--begin 2030-01-01T00:00" in err, err


def test_replay_refuses_parquet_files_given_as_json_lines_in_one_line(tmp_path: Path) -> None:
    path = parquet_export(tmp_path / "export", [0] * 8, list(range(8)))
    done = subprocess.run([sys.executable, "-m", "ingest.cli", "replay", "--from-files", str(tmp_path / "export"),
                           "--format", "jsonl", "--store", str(tmp_path / "store"), "--segment-size", "1m"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert f"{path} is a Parquet file" in lines[0] and "--format parquet" in lines[0], lines
    assert not (tmp_path / "store").exists()


def test_a_row_that_is_not_utf8_says_so(tmp_path: Path) -> None:
    path = tmp_path / "export" / "rows.jsonl"
    write_jsonl(path, [json.dumps(good(0, 0))])
    with open(path, "ab") as f:
        f.write(b"\xff\xfe" + json.dumps(good(0, 1)).encode("utf-16-le") + b"\n")   # a UTF-16 line, BOM first
        f.write(json.dumps(good(0, 2)).encode()[:-2] + b"\xe9\"}\n")                  # a Latin-1 byte in a value
    rows = read_export(tmp_path / "export", "jsonl")
    reasons = [u.reason for u in rows.unplaced]
    assert reasons == [f"{path} line 2: not UTF-8 text (byte 0xFF at column 1: invalid start byte); JSON lines "
                       f"must be UTF-8",
                       f"{path} line 3: not UTF-8 text (byte 0xE9 at column {len(json.dumps(good(0, 2))) - 1}: "
                       f"invalid continuation byte); JSON lines must be UTF-8"], reasons
    assert not any("utf-16" in r for r in reasons)
