"""Damage through Spark and through `commitlog run`: the rocketmq-commitlog source refuses a damaged
record by default and says so in one line naming the store, the offset and the segment (no Python
traceback inside the Java one); ``checkCrc=false`` reads the body as it is. `run` opening a store
whose committed records are damaged says so, with the offset, before its first batch, and keeps
every record."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from store import StoreReader
from tests.helpers.brokers.kafka_records import create_topics, produce, unique_topic
from tests.helpers.stores import SEG, damaged_store, four_segments
from tests.helpers.job_processes import job_command

pytestmark = pytest.mark.integration


def read_error(spark: object, root: Path) -> str:
    """The line of the read's error that says what is wrong: among its first two (Spark's own header
    may come first), with no traceback anywhere."""
    with pytest.raises(Exception) as caught:
        spark.read.format("rocketmq-commitlog").load(str(root)).count()  # type: ignore[attr-defined]
    text = str(caught.value)
    assert "Traceback" not in text, text
    ours = [ln for ln in text.splitlines()[:2] if f"rocketmq-commitlog: store {root}: " in ln]
    assert ours, text
    return ours[0]


def test_a_spark_read_of_a_damaged_record_fails_in_one_line_naming_offset_and_segment(
        spark: object, tmp_path: Path) -> None:
    offsets, victim = damaged_store(tmp_path)
    line = read_error(spark, tmp_path)
    assert f"crc error at offset {victim} in segment {victim // SEG * SEG:020d}" in line, line
    assert "checkCrc=false" in line and "commitlog verify" in line
    unchecked = spark.read.format("rocketmq-commitlog").option("checkCrc", "false").load(str(tmp_path))  # type: ignore[attr-defined]
    assert unchecked.count() == len(offsets)


def test_a_spark_read_of_a_store_missing_a_segment_fails_in_one_line(spark: object, tmp_path: Path) -> None:
    segs = four_segments(tmp_path)
    segs[1].unlink()
    line = read_error(spark, tmp_path)
    assert f"{segs[2].name} does not follow {segs[0].name}" in line, line
    assert f"a segment is missing between them, the one at offset {1 << 16}" in line, line


@pytest.mark.timeout(900)
def test_run_on_a_store_with_damaged_committed_records_says_so_before_its_first_batch_and_keeps_them(
        bootstrap_servers: str, tmp_path: Path) -> None:
    topic = unique_topic("damaged")
    create_topics(bootstrap_servers, [topic])
    sent = produce(bootstrap_servers, [(topic, i % 4, f"k{i}".encode(), b"v%06d" % i * 20, []) for i in range(400)])
    cmd = job_command(bootstrap_servers, topic, tmp_path, trigger="available-now")
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=600, start_new_session=True)
    assert first.returncode == 0, first.stderr[-3000:]
    store = tmp_path / "store"
    with StoreReader.open(store) as reader:
        victim, msg = list(reader.iter_messages())[100]
        body = msg.body.tobytes()
    seg = next(p for p in sorted((store / "commitlog").iterdir()) if int(p.name) <= victim < int(p.name) + (256 << 10))
    data = bytearray(seg.read_bytes())
    at = data.index(body, victim - int(seg.name))
    data[at] ^= 0x01
    seg.write_bytes(bytes(data))
    sent += produce(bootstrap_servers, [(topic, i % 4, f"k{i}".encode(), b"w" * 50, []) for i in range(400, 600)])

    second = subprocess.run(cmd, capture_output=True, text=True, timeout=600, start_new_session=True)
    log = second.stdout + second.stderr
    assert second.returncode == 0, log[-3000:]
    said = log.find(f"damaged (their CRC fails) at offset {victim}")
    first_batch = log.find(" rec/s")
    assert 0 <= said < first_batch, log[-5000:]
    with StoreReader.open(store, check_crc=False) as reader:
        got = sorted((m.properties["KAFKA_PARTITION"], int(m.properties["KAFKA_OFFSET"]))
                     for _, m in reader.iter_messages())
    assert got == sorted((str(s.partition), s.offset) for s in sent)
