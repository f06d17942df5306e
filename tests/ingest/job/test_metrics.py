"""The job's Prometheus metrics without Spark: what a committed batch counts, what a scrape reads from
the store, the reason labels of dead letters, the names Prometheus' own checker accepts, and the
HTTP endpoint (ingest.metrics)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.request
from pathlib import Path

import pyarrow as pa
import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ingest import version
from ingest.encode.mapping import MappingConfig
from ingest.encode.mapping_batch import map_kafka_batch
from ingest.encode.prepare import map_and_encode
from ingest.lag import LagLog, partition_lag
from ingest.metrics import PHASES, JobMetrics, MetricsPortError, MetricsServer
from ingest.replay.export_rows import read_export
from sink import BatchStats
from store import DeadLetterReason, Message, MessageStore, StoreConfig
from store.format.codec import CodecConfig
from tests.helpers.batches import kafka_rows

pytestmark = pytest.mark.unit


def stats(batch_id: int = 0, **kw) -> BatchStats:
    figures = {"records": 3, "dead_letters": 1, "append_ms": 4.0, "flush_ms": 2.0, "commit_ms": 1.0,
               "commit_offset": 900, "index_ms": 0.5, "collect_ms": 250.0, "topic_records": {"a": 2, "b": 1},
               "topic_bytes": {"a": 400, "b": 150}, "dead_reasons": {"body_too_large": 1}}
    return BatchStats(batch_id, **{**figures, **kw})


def samples(metrics: JobMetrics) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_a_committed_batch_counts_its_messages_bytes_dead_letters_and_phases() -> None:
    m = JobMetrics("run", "/data/store", "1/2")
    m.batch(stats(0))
    m.batch(stats(1, topic_records={"a": 5}, topic_bytes={"a": 1000}, dead_reasons={}))
    got = samples(m)
    assert got[("commitlog_stored_records_total", (("topic", "a"),))] == 7
    assert got[("commitlog_stored_records_total", (("topic", "b"),))] == 1
    assert got[("commitlog_stored_bytes_total", (("topic", "a"),))] == 1400
    assert got[("commitlog_dead_letters_total", (("reason", "body_too_large"),))] == 1
    assert got[("commitlog_batches_total", ())] == 2
    assert got[("commitlog_batch_phase_seconds_count", (("phase", "collect"),))] == 2
    assert got[("commitlog_batch_phase_seconds_sum", (("phase", "collect"),))] == pytest.approx(0.5)
    assert got[("commitlog_batch_phase_seconds_sum", (("phase", "index"),))] == pytest.approx(0.001)
    assert {dict(k[1]).get("phase") for k in got if k[0] == "commitlog_batch_phase_seconds_count"} == set(PHASES)
    assert got[("commitlog_job_info", (("broker_group", "1/2"), ("command", "run"), ("store", "/data/store"),
                                  ("version", version())))] == 1


def test_two_jobs_in_one_process_count_apart_and_leave_the_global_registry_alone() -> None:
    first, second = JobMetrics("run", "/a"), JobMetrics("replay", "/b")
    first.batch(stats())
    assert samples(second)[("commitlog_batches_total", ())] == 0
    assert "commitlog_batches_total" not in generate_latest(REGISTRY).decode()


def test_kafka_lag_per_partition_follows_each_progress() -> None:
    m = JobMetrics("run", "/s")
    lag = LagLog(on_lag=m.kafka_lag)
    progress = {"batchId": 4, "timestamp": "t1", "sources": [
        {"endOffset": {"t": {"0": 10, "1": 7}}, "latestOffset": {"t": {"0": 25, "1": 7}}}]}
    lag.after(progress)
    assert samples(m)[("commitlog_kafka_lag_records", (("partition", "0"), ("topic", "t")))] == 15
    # an idle progress (same batch, new time) after the source saw no more: lag stays current
    lag.after({**progress, "timestamp": "t2", "sources": [
        {"endOffset": {"t": {"0": 25, "1": 7}}, "latestOffset": {"t": {"0": 25, "1": 7}}}]})
    assert samples(m)[("commitlog_kafka_lag_records", (("partition", "0"), ("topic", "t")))] == 0
    assert partition_lag('{"t":{"0":3}}', {"t": {"0": 9}, "u": {"0": 1}}) == {("t", 0): 6}


def test_every_dead_letter_carries_the_code_of_where_it_was_refused() -> None:
    def dead(rows: pa.RecordBatch | pa.Table, mapping: MappingConfig = MappingConfig(),
             codec: CodecConfig = CodecConfig()) -> tuple[str, str]:
        out = map_and_encode(rows, mapping, codec).to_pylist()
        letters = [(r["dead_code"], r["dead_reason"]) for r in out if r["dead_reason"] is not None]
        assert len(letters) == 1, letters
        return letters[0]

    assert dead(kafka_rows({"value": b"x" * 300}), MappingConfig(max_message_size=100))[0] \
        == DeadLetterReason.BODY_TOO_LARGE
    assert dead(kafka_rows({"headers": [{"key": "h", "value": b"v" * 40_000}]}))[0] \
        == DeadLetterReason.PROPERTIES_TOO_LARGE
    assert dead(kafka_rows({"topic": "no spaces"}))[0] == DeadLetterReason.TOPIC_INVALID
    assert dead(kafka_rows({"headers": [{"key": "bornHost", "value": b"nowhere"}]}))[0] \
        == DeadLetterReason.HEADER_INVALID
    assert dead(kafka_rows({"value": b"{not json"}), MappingConfig(envelope=True))[0] \
        == DeadLetterReason.ENVELOPE_INVALID
    code, text = dead(kafka_rows({"value": b"x" * 3000}), MappingConfig(max_message_size=3500),
                      CodecConfig(max_message_size=3500, segment_room=2048))
    assert text.startswith("message is") and code == DeadLetterReason.RECORD_TOO_LARGE
    live = map_kafka_batch(kafka_rows({"value": b"ok"}), MappingConfig())
    assert live.column("dead_reason").null_count == live.column("dead_code").null_count == 1


def test_a_replayed_file_row_with_a_problem_is_a_file_row_dead_letter(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(json.dumps({"topic": "t", "partition": 0, "offset": 0, "key": "***",
                                                  "value": None}) + "\n")
    rows = read_export(tmp_path, "jsonl").table
    (letter,) = map_and_encode(rows, MappingConfig(), CodecConfig()).to_pylist()
    assert letter["dead_code"] == DeadLetterReason.FILE_ROW_INVALID
    assert letter["dead_reason"] == rows.column("problem")[0].as_py()


def test_dead_letters_are_counted_by_their_code() -> None:
    m = JobMetrics("run", "/s")
    m.batch(stats(0, dead_letters=3, dead_reasons={"topic_invalid": 2, "other": 1}))
    m.count_dead_letters({DeadLetterReason.FILE_ROW_INVALID: 4})
    got = samples(m)
    assert got[("commitlog_dead_letters_total", (("reason", "topic_invalid"),))] == 2
    assert got[("commitlog_dead_letters_total", (("reason", "other"),))] == 1
    assert got[("commitlog_dead_letters_total", (("reason", "file_row_invalid"),))] == 4


def test_a_scrape_reads_the_store_as_it_is_then(tmp_path: Path) -> None:
    m = JobMetrics("run", str(tmp_path))
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=1 << 20)) as store:
        m.watch_store(store.usage, store.open_report)
        before = samples(m)
        assert before[("commitlog_store_committed_offset_bytes", ())] == 0
        assert before[("commitlog_store_open_unclean", ())] == 0
        store.append([Message(topic="T", queue_id=0, body=b"b" * 100, properties="KEYS\x01k\x02")])
        store.commit()
        after = samples(m)
        assert after[("commitlog_store_committed_offset_bytes", ())] == store.committed_offset > 0
        assert after[("commitlog_store_commit_log_bytes", ())] == store.committed_offset
        assert after[("commitlog_store_segments", ())] >= 1
        assert after[("commitlog_store_disk_bytes", ())] > 0 and after[("commitlog_store_free_disk_bytes", ())] > 0
        assert 0 < after[("commitlog_store_index_fill_ratio", ())] < 1e-6
        assert after[("commitlog_store_last_commit_timestamp_seconds", ())] == store.last_commit.timestamp / 1000
    assert ("commitlog_store_segments", ()) not in samples(m), "a closed store is no longer measured"


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (make test installs Debian's prometheus package as root)")
def test_promtool_accepts_the_exposition(tmp_path: Path) -> None:
    m = JobMetrics("run", str(tmp_path))
    with MessageStore.open(tmp_path / "s", StoreConfig(segment_size=1 << 20)) as store:
        m.watch_store(store.usage, store.open_report)
        m.batch(stats())
        m.kafka_lag({("t", 0): 3})
        text = generate_latest(m.registry)
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert done.returncode == 0, (done.stdout + done.stderr).decode()


def test_the_endpoint_serves_on_loopback_and_a_busy_port_is_one_clear_error(tmp_path: Path) -> None:
    m = JobMetrics("run", str(tmp_path))
    m.batch(stats())
    server = MetricsServer(m, "127.0.0.1", 0)
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10).read().decode()
        assert "commitlog_batches_total 1.0" in body
        with pytest.raises(MetricsPortError, match=rf"--metrics-port {server.port}: cannot serve.*free port"):
            MetricsServer(JobMetrics("run", "/x"), "127.0.0.1", server.port)
    finally:
        server.stop()
    with socket.socket() as probe:        # stopped: the port is free again (past the connection's TIME_WAIT)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", server.port))
        probe.listen()
