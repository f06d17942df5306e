"""The Kafka image's configuration (deploy/kafka/start-kafka.sh), without Docker: the settings the
containerized test broker gets (ingest.devtools.broker.container.kafka_env) become the same server.properties
our embedded Apache Kafka runs with, and the storage is formatted once, as a single-node quorum."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from ingest.devtools.broker.apache_kafka import SINGLE_NODE
from ingest.devtools.broker.container import kafka_env

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "kafka" / "start-kafka.sh"


def run_script(tmp_path: Path, env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Run the entry point with a `java` that records its command lines; (properties, java calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    java = bin_dir / "java"
    java.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/java-calls\n')
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    props = tmp_path / "server.properties"
    base = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SERVER_PROPERTIES": str(props),
            "KAFKA_LOG_DIRS": str(tmp_path / "data")}
    subprocess.run(["bash", str(SCRIPT)], env={**base, **env}, check=True, timeout=30)
    settings = dict(line.split("=", 1) for line in props.read_text().splitlines())
    return settings, (tmp_path / "java-calls").read_text().splitlines()


def test_the_test_brokers_settings_are_the_embedded_brokers(tmp_path: Path) -> None:
    settings, calls = run_script(tmp_path, kafka_env(19092, 19093))
    assert {k: settings[k] for k in SINGLE_NODE} == SINGLE_NODE
    assert settings["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert settings["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert settings["controller.quorum.bootstrap.servers"] == "127.0.0.1:19093"
    assert settings["process.roles"] == "broker,controller"
    fmt, start = calls
    assert "kafka.tools.StorageTool format --standalone --cluster-id" in fmt
    assert start.endswith(f"kafka.Kafka {tmp_path / 'server.properties'}")


def test_variables_name_settings_as_the_apache_kafka_image_does(tmp_path: Path) -> None:
    settings, _ = run_script(tmp_path, {"KAFKA_CONTROLLER_QUORUM_VOTERS": "1@kafka:9093",
                                        "KAFKA_LOG_CLEANER_DEDUPE_BUFFER__SIZE": "1048576",
                                        "KAFKA_SOME___DASHED": "x", "KAFKA_HEAP_OPTS": "-Xmx1g"})
    assert settings["controller.quorum.voters"] == "1@kafka:9093"
    assert "controller.quorum.bootstrap.servers" not in settings, "voters named: no bootstrap of our own"
    assert settings["log.cleaner.dedupe.buffer_size"] == "1048576"
    assert settings["some-dashed"] == "x"
    assert "heap.opts" not in settings


def test_a_formatted_log_directory_is_not_formatted_again(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "meta.properties").write_text("node.id=1\n")
    _, calls = run_script(tmp_path, {})
    assert len(calls) == 1 and "kafka.Kafka" in calls[0]
