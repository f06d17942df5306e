"""A spool file tampered with between the task's write and the driver's map, in a real run: the batch
fails, nothing of the file reaches the store, and the next run leaves exactly what Kafka had."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from ingest.encode.restore import kafka_value
from ingest.encode.mapping import MappingConfig
from ingest.encode.prepare import map_and_encode
from sink.handover.spool import Spool
from store.format.codec import CodecConfig
from tests.helpers.brokers.kafka_records import create_topics, produce, store_by_coordinates, unique_topic
from tests.helpers.jobs import assert_exactly_once, job_config, run_until_caught_up, sample
from tests.helpers.batches import kafka_rows

pytestmark = pytest.mark.integration

FORGED = b"FORGED: never in Kafka"


def _forged_file(topic: str) -> bytes:
    """An Arrow stream of well-formed encoded records that claim the first Kafka positions of
    ``topic``'s partition 0 with bodies Kafka never had."""
    rows = kafka_rows(*[{"topic": topic, "partition": 0, "offset": i, "value": FORGED} for i in range(5)])
    batch = map_and_encode(rows, MappingConfig(), CodecConfig())
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _tamper_with_the_first_file(monkeypatch: pytest.MonkeyPatch, how: str, topic: str, elsewhere: Path) -> list[str]:
    """Before the driver maps the first spooled file, replace it (same owner, mode 0600) with
    forged records, or with a link to them."""
    original = Spool.resolve
    tampered: list[str] = []

    def resolve(self: Spool, table: pa.Table) -> pa.Table:
        paths = [p for p in table.column("spool").to_pylist() if p]
        if paths and not tampered:
            path = Path(paths[0])
            tampered.append(str(path))
            path.unlink()
            if how == "crafted":
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                os.write(fd, _forged_file(topic))
                os.close(fd)
            else:
                elsewhere.write_bytes(_forged_file(topic))
                path.symlink_to(elsewhere)
        return original(self, table)

    monkeypatch.setattr(Spool, "resolve", resolve)
    return tampered


@pytest.mark.parametrize("spool_dir", ["auto", "given"])
@pytest.mark.parametrize("how", ["crafted", "symlink"])
def test_a_tampered_spool_file_fails_its_batch_and_the_store_ends_with_what_kafka_had(
        bootstrap_servers: str, spark: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, how: str, spool_dir: str) -> None:
    topics = [unique_topic(f"spool-{how}")]
    create_topics(bootstrap_servers, topics)
    sent = produce(bootstrap_servers, sample(topics, 1500))
    overrides = {}
    if spool_dir == "given":     # a shared directory like /tmp: sticky, writable by all
        (tmp_path / "shared").mkdir()
        os.chmod(tmp_path / "shared", 0o1777)
        overrides["spool_dir"] = str(tmp_path / "shared")
    cfg = job_config(bootstrap_servers, topics, tmp_path, **overrides)
    tampered = _tamper_with_the_first_file(monkeypatch, how, topics[0], tmp_path / "forged.arrow")

    says = "MAC does not match" if how == "crafted" else "is a symbolic link"
    with pytest.raises(Exception, match=says):     # the query fails with the batch's reason
        run_until_caught_up(cfg, spark)
    assert tampered, "a batch came through a spool file"
    said = [r.getMessage() for r in caplog.records if r.name == "commitlog.batch" and r.levelname == "ERROR"]
    assert len(said) == 1 and "not committed: spool file" in said[0] and says in said[0], said
    assert len(said[0].splitlines()) == 1
    if Path(cfg.store, "commitlog").is_dir():
        held = store_by_coordinates(cfg.store)
        assert all(bytes(msg.body) != FORGED for [(_, msg)] in held.values()), "a forged record was stored"
        assert len(held) < len(sent), "the failed batch left its records to the next run"

    monkeypatch.undo()
    run_until_caught_up(cfg, spark)
    found = assert_exactly_once(cfg.store, sent)
    assert len(found) == len(sent)
    by_coordinates = {(s.topic, s.partition, s.offset): s.value for s in sent}
    # the Kafka value each message stands for (a 0-byte value is stored as a 1-byte marker body)
    assert {k: kafka_value(msg.body, msg.properties) for k, [(_, msg)] in found.items()} == by_coordinates
    if spool_dir == "given":
        assert list((tmp_path / "shared").iterdir()) == [], "the job's files (and the link at one's name) are swept"


def test_the_runs_key_is_redacted_wherever_spark_prints_the_sources_options(spark: object, tmp_path: Path) -> None:
    from ingest.encode.message_options import SHORT_NAME, source_options
    from sink.handover.spool_task import SpoolTarget

    key = os.urandom(32)
    options = source_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}, MappingConfig(),
                             CodecConfig(), SpoolTarget(str(tmp_path), "0" * 12, key))
    plan = spark.readStream.format(SHORT_NAME).options(**options).load()._jdf.queryExecution().toString()
    assert "spoolSecret=*********(redacted)" in plan and key.hex() not in plan
