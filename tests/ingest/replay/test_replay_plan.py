"""Replay planning, retention, progress and the command line, without broker or Spark."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from ingest.replay.cli import job_config_from_args, options_from_args
from ingest.replay.plan import (
    Bound,
    PartitionPlan,
    ReplayError,
    ReplayPlan,
    RetentionError,
    apply_store_offsets,
    check_retention,
    chunks,
    load_plan,
    parse_offsets_json,
    plan_identity,
    plan_path,
    save_plan,
)
from ingest.replay.progress import ReplayProgress

pytestmark = pytest.mark.unit

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def test_chunks_cover_the_range_exactly_once_in_batches_of_the_limit() -> None:
    start, end = {A0: 10, A1: 0, B0: 5}, {A0: 1010, A1: 300, B0: 5}
    got = list(chunks(start, end, 250))
    assert got[0][0] == start and got[-1][1] == end
    for (_, until), (nxt, _) in zip(got, got[1:]):
        assert until == nxt                                   # contiguous, nothing read twice
    assert len(got) == 6                                      # 1290 offsets: the fewest batches of <= ~250
    for a, b in got:
        assert 210 <= sum(b[tp] - a[tp] for tp in end) <= 250 + len(end)   # no tiny tail batch
    assert list(chunks(start, end, 250)) == got               # a file replay cuts the same batches


def test_chunks_of_an_empty_range_are_none() -> None:
    assert list(chunks({A0: 7}, {A0: 7}, 100)) == []
    assert list(chunks({A0: 0}, {A0: 9}, None)) == [({A0: 0}, {A0: 9})]


def test_what_the_store_holds_is_skipped_with_a_message() -> None:
    plan = ReplayPlan([PartitionPlan("a", 0, 0, 100), PartitionPlan("a", 1, 0, 100), PartitionPlan("b", 0, 50, 80)])
    notes = apply_store_offsets(plan, {"a/0": 100, "a/1": 40, "b/0": 10})
    assert [(p.resume, p.held, p.todo) for p in plan.partitions] == [(100, 100, 0), (40, 40, 60), (50, 0, 30)]
    assert len(notes) == 1 and notes[0].startswith("a: 140 offsets of the range are already in the store")
    assert "[0, 100) all held" in notes[0] and "continuing at 40" in notes[0]


def test_a_store_offset_past_the_range_end_holds_all_of_it() -> None:
    plan = ReplayPlan([PartitionPlan("a", 0, 10, 20)])
    apply_store_offsets(plan, {"a/0": 500})
    assert (plan.partitions[0].resume, plan.todo) == (20, 0)


def test_from_timestamp_older_than_the_first_retained_record_says_so_or_fails_strict() -> None:
    earliest = {A0: 1000, A1: 0, B0: 500}
    start = {A0: 1000, A1: 0, B0: 700}       # B0: the asked time is inside what is kept
    first = {A0: 5_000, A1: 1, B0: 9_000}.get
    notes = check_retention(4_000, [A0, A1, B0], earliest, start, strict=False, first_timestamp=first)
    assert len(notes) == 1 and "a-0" in notes[0] and "first retained record, offset 1000" in notes[0]
    with pytest.raises(RetentionError, match="--strict"):
        check_retention(4_000, [A0, A1, B0], earliest, start, strict=True, first_timestamp=first)
    assert check_retention(6_000, [A0], earliest, start, strict=True, first_timestamp=first) == []


def test_plan_file_round_trips_and_identifies_the_arguments(tmp_path: Path) -> None:
    plan = ReplayPlan([PartitionPlan("a", 0, 3, 9), PartitionPlan("b", 0, 0, 4)])
    spec = {"topics": ["a", "b"], "from": "earliest", "to": "latest"}
    path = plan_path(tmp_path, plan_identity(spec))
    assert load_plan(path) is None
    save_plan(path, plan, spec)
    assert load_plan(path).to_json() == plan.to_json()
    assert plan_identity(spec) != plan_identity({**spec, "to": "timestamp 5"})
    path.write_text("{")
    with pytest.raises(ReplayError, match="delete it"):
        load_plan(path)


def test_offsets_json_is_sparks_form() -> None:
    assert parse_offsets_json('{"t": {"0": 23, "1": -2}}', "--from-offsets") == {("t", 0): 23, ("t", 1): -2}
    with pytest.raises(ReplayError, match="--to-offsets"):
        parse_offsets_json("[1]", "--to-offsets")
    with pytest.raises(ReplayError, match="below -2"):
        parse_offsets_json('{"t": {"0": -3}}', "--from-offsets")


def test_progress_reports_per_topic_and_overall_as_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    plan = ReplayPlan([PartitionPlan("a", 0, 0, 100, resume=20), PartitionPlan("b", 0, 0, 100)])
    clock = iter([0.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]).__next__
    progress = ReplayProgress(plan, "log", stream=io.StringIO(), clock=lambda: clock())
    with caplog.at_level("INFO", logger="commitlog.replay"):
        progress.update({"a/0": 60, "b/0": 40})
    assert "100/200 offsets (50.0%), 40 rec/s" in caplog.text and "a 60/100; b 40/100" in caplog.text


def test_progress_bar_redraws_in_place_on_a_terminal() -> None:
    out = io.StringIO()
    plan = ReplayPlan([PartitionPlan("a", 0, 0, 10), PartitionPlan("b", 0, 0, 10)])
    progress = ReplayProgress(plan, "bar", stream=out)
    progress.update({"a/0": 5})
    progress.update({"a/0": 10, "b/0": 10})
    text = out.getvalue()
    assert text.count("overall") == 2 and "\x1b[3F" in text and "100.0%" in text


def _parse(argv: list[str]) -> argparse.Namespace:
    from ingest.cli import build_parser

    return build_parser().parse_args(argv)


def test_command_line_maps_to_options_and_the_shared_job_config(tmp_path: Path) -> None:
    args = _parse(["replay", "--bootstrap-servers", "h:9092", "--topics", "a,b", "--store", str(tmp_path),
                   "--from-timestamp", "1000", "--to-offsets", '{"a": {"0": -1}}', "--strict",
                   "--max-offsets-per-trigger", "5000", "--flush", "async"])
    opts = options_from_args(args)
    assert opts.topics == ("a", "b") and opts.strict and opts.verify
    assert opts.begin == Bound("timestamp", timestamp=1000) and opts.finish.offsets == {("a", 0): -1}
    cfg = job_config_from_args(args, opts)
    assert (cfg.subscribe, cfg.max_offsets_per_trigger, cfg.flush) == ("a,b", 5000, "async")


def test_a_file_replay_needs_no_broker(tmp_path: Path) -> None:
    args = _parse(["replay", "--from-files", str(tmp_path), "--format", "parquet", "--store", str(tmp_path / "s")])
    opts = options_from_args(args)
    assert (opts.from_files, opts.file_format, opts.begin.kind, opts.finish.kind) == (str(tmp_path), "parquet",
                                                                                       "earliest", "latest")
    assert job_config_from_args(args, opts).store == str(tmp_path / "s")


def test_the_topic_selections_are_mutually_exclusive_and_one_source_is_needed() -> None:
    with pytest.raises(SystemExit):
        _parse(["replay", "--topics", "a", "--topic-pattern", "b.*", "--store", "s"])
    with pytest.raises(ReplayError, match="say what to replay"):
        options_from_args(_parse(["replay", "--store", "s"]))
    assert options_from_args(_parse(["replay", "--topics", "a", "--from-files", "d", "--store", "s"])).topics == ("a",)
    with pytest.raises(SystemExit):
        _parse(["replay", "--topics", "a", "--from-timestamp", "1", "--from-offsets", "{}", "--store", "s"])
