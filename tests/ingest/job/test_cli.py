"""The console script exposes one command with subcommands."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def test_commitlog_lists_its_subcommands() -> None:
    out = subprocess.run([sys.executable, "-m", "ingest.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "broker" in out.stdout


def run_command(*args: str, tmp: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ingest.cli", "run", "--subscribe", "t", "--store", f"{tmp}/store",
                           "--checkpoint", f"{tmp}/ckpt", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, says", [
    (["--bootstrap-servers", "127.0.0.1:9092", "--trigger", "banana"], "--trigger 'banana'"),
    (["--bootstrap-servers", "127.0.0.1:9092", "--topic-map", "orders=bad/topic"], "--topic-map orders=bad/topic"),
    (["--bootstrap-servers", "127.0.0.1:9092", "--max-offsets-per-trigger", "0"], "--max-offsets-per-trigger"),
    (["--bootstrap-servers", "127.0.0.1:9092", "--max-index-num", "1"], "--max-index-num 1: at least 2"),
    (["--bootstrap-servers", "127.0.0.1:9092", "--segment-size", "64k", "--max-message-size", "200000"],
     "--max-message-size 200000 does not fit --segment-size 64k"),
    (["--bootstrap-servers", "127.0.0.1:9092", "--broker-group", "2/2"], "--broker-group '2/2': K = 2 is not a group of 2"),
    (["--bootstrap-servers", "127.0.0.1:9092", "--broker-group", "1/2", "--source", "spark-kafka"],
     "--broker-group 1/2 needs --source kafka-python"),
    (["--bootstrap-servers", "127.0.0.1:9092", "--metrics-port", "70000"], "--metrics-port 70000: a TCP port"),
    (["--bootstrap-servers", "127.0.0.1:9092", "--min-records-per-task", "-1"], "--min-records-per-task -1: must be 0"),
])
def test_a_bad_setting_of_run_is_one_line_and_exit_2(args: list[str], says: str, tmp_path) -> None:
    done = run_command(*args, tmp=str(tmp_path))
    assert done.returncode == 2
    assert says in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "store").exists(), "nothing is created for a run that is refused"


def test_a_toml_value_of_the_wrong_type_is_named(tmp_path) -> None:
    (tmp_path / "job.toml").write_text('bootstrap_servers = "127.0.0.1:9092"\nmax_offsets_per_trigger = "lots"\n')
    done = run_command("--config", str(tmp_path / "job.toml"), tmp=str(tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "max-offsets-per-trigger = 'lots': expected int" in done.stderr


def test_a_metrics_port_in_use_is_one_line_before_anything_starts(tmp_path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run_command("--bootstrap-servers", "127.0.0.1:9", "--skip-preflight", "--metrics-port", str(port),
                           tmp=str(tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"--metrics-host 127.0.0.1 --metrics-port {port}: cannot serve metrics there" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "store").exists()


def test_an_unreachable_broker_is_found_before_spark_starts(tmp_path) -> None:
    import socket

    with socket.socket() as s:          # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = run_command("--bootstrap-servers", f"127.0.0.1:{port}", tmp=str(tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"no Kafka broker answers at --bootstrap-servers 127.0.0.1:{port}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="playing another user takes chown")
def test_a_spool_directory_another_user_made_is_refused_before_spark_starts(tmp_path) -> None:
    (tmp_path / "store" / "spool").mkdir(parents=True)
    os.chown(tmp_path / "store" / "spool", 65534, 65534)
    done = run_command("--bootstrap-servers", "127.0.0.1:9092", tmp=str(tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"spool directory {tmp_path}/store/spool belongs to " in done.stderr and "uid 65534" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_spool_dir_others_can_write_is_refused_before_spark_starts(tmp_path) -> None:
    (tmp_path / "shared").mkdir()
    os.chmod(tmp_path / "shared", 0o777)
    done = run_command("--bootstrap-servers", "127.0.0.1:9092", "--spool-dir", str(tmp_path / "shared"),
                       tmp=str(tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--spool-dir" in done.stderr and "writable by other users without the sticky bit" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert list((tmp_path / "shared").iterdir()) == []


@pytest.mark.integration
def test_a_subscribed_topic_the_brokers_lack_is_one_warning(bootstrap_servers: str, tmp_path, caplog) -> None:
    import logging

    from ingest.preflight import warn_missing_topics
    from ingest.config import JobConfig
    from tests.helpers.brokers.kafka_records import create_topics, unique_topic

    there, absent = unique_topic("there"), unique_topic("absent")
    create_topics(bootstrap_servers, [there])
    cfg = JobConfig(bootstrap_servers=bootstrap_servers, subscribe=f"{there},{absent}", store=str(tmp_path / "s"))
    with caplog.at_level(logging.WARNING, logger="commitlog.run"):
        warn_missing_topics(cfg)
    lines = [r.getMessage() for r in caplog.records if r.name == "commitlog.run"]
    assert len(lines) == 1 and absent in lines[0] and there not in lines[0] and "once it exists" in lines[0]


def test_min_records_per_task_reaches_our_source_and_not_spark_s() -> None:
    from ingest.config import JobConfig
    from ingest.reader_options import kafka_reader_options

    ours = JobConfig(bootstrap_servers="h:9092", subscribe="t", min_records_per_task=0)
    assert kafka_reader_options(ours, "earliest")["minRecordsPerTask"] == "0"
    assert "minRecordsPerTask" not in kafka_reader_options(JobConfig(bootstrap_servers="h:9092", subscribe="t"),
                                                           "earliest"), "the source's own default stands"
    spark_s = JobConfig(bootstrap_servers="h:9092", subscribe="t", source="spark-kafka", min_records_per_task=0)
    assert "minRecordsPerTask" not in kafka_reader_options(spark_s, "earliest")


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_run_writes_spark_s_offset_and_commit_logs_without_crc_side_files_unless_told(
        bootstrap_servers: str, tmp_path) -> None:
    from tests.helpers.brokers.kafka_records import create_topics, produce, unique_topic

    topic = unique_topic("crc")
    create_topics(bootstrap_servers, [topic], partitions=1)
    produce(bootstrap_servers, [(topic, 0, b"k", b"v", [])])
    base = ["--bootstrap-servers", bootstrap_servers, "--subscribe", topic, "--starting-offsets", "earliest",
            "--trigger", "available-now"]

    def logs_after(name: str, *args: str) -> list[str]:
        done = subprocess.run([sys.executable, "-m", "ingest.cli", "run", *base, "--store", str(tmp_path / name),
                               "--checkpoint", str(tmp_path / f"{name}-ck"), *args],
                              capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-3000:]
        return sorted(p.name for d in ("offsets", "commits") for p in (tmp_path / f"{name}-ck" / d).iterdir())

    assert logs_after("default") == ["0", "0"]
    # a user who wants Hadoop's checksummed files back says so, and gets them
    assert logs_after("checksummed", "--spark-conf",
                      "spark.hadoop.fs.AbstractFileSystem.file.impl=org.apache.hadoop.fs.local.LocalFs") == [
        ".0.crc", ".0.crc", "0", "0"]
