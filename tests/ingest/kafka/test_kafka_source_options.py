"""Options of the kafka-python source and the offset-range planning: pure functions, no broker."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from ingest.kafka.offsets import (
    KafkaOffsetRange,
    KafkaOffsetRanges,
    check_data_loss,
    group_ranges,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
    rate_limit,
    resolve_markers,
)
from ingest.kafka.options import DataLossError, KafkaOptionError, kafka_client_params, parse_options
from ingest.kafka.source import kafka_schema, source_format

pytestmark = pytest.mark.unit

BOOT = {"kafka.bootstrap.servers": "h1:9092,h2:9092"}


def test_java_client_settings_map_to_kafka_python_arguments() -> None:
    params = kafka_client_params({
        **BOOT, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  'username="alice" password="s3cr\\"et";',
        "kafka.ssl.truststore.location": "/etc/ca.pem", "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.endpoint.identification.algorithm": "", "kafka.max.partition.fetch.bytes": "8388608",
        "kafka.check.crcs": "false", "kafka.group.id": "ignored", "subscribe": "t",
    })
    assert params == {
        "bootstrap_servers": "h1:9092,h2:9092", "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alice", "sasl_plain_password": 's3cr"et',
        "ssl_cafile": "/etc/ca.pem", "ssl_check_hostname": False, "max_partition_fetch_bytes": 8388608,
        "check_crcs": False,
    }


@pytest.mark.parametrize("setting, message", [
    ("kafka.auto.offset.reset", "set startingOffsets instead"),
    ("kafka.value.deserializer", "binary"),
    ("kafka.enable.auto.commit", "never commits"),
    ("kafka.fetch.bogus.ms", "unknown Kafka option 'kafka.fetch.bogus.ms'"),
])
def test_refused_and_unknown_client_settings_name_themselves(setting: str, message: str) -> None:
    with pytest.raises(KafkaOptionError, match=message):
        kafka_client_params({**BOOT, setting: "x"})


def test_jks_stores_and_missing_bootstrap_are_refused_with_a_fix() -> None:
    with pytest.raises(KafkaOptionError, match="PEM"):
        kafka_client_params({**BOOT, "kafka.ssl.truststore.location": "/etc/trust.jks"})
    with pytest.raises(KafkaOptionError, match="kafka.bootstrap.servers"):
        kafka_client_params({"kafka.client.id": "x"})
    with pytest.raises(KafkaOptionError, match="username"):
        kafka_client_params({**BOOT, "kafka.sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"})


def test_exactly_one_topic_strategy_is_required() -> None:
    with pytest.raises(KafkaOptionError, match="exactly one"):
        parse_options(BOOT, streaming=True)
    with pytest.raises(KafkaOptionError, match="exactly one"):
        parse_options({**BOOT, "subscribe": "a", "subscribePattern": "b.*"}, streaming=True)
    o = parse_options({**BOOT, "assign": json.dumps({"a": [1, 0], "b": [2]})}, streaming=False)
    assert o.assign == (("a", 0), ("a", 1), ("b", 2))
    with pytest.raises(KafkaOptionError, match="assign"):
        parse_options({**BOOT, "assign": "[1,2]"}, streaming=False)


def test_offsets_options_follow_spark_defaults_and_rules() -> None:
    stream = parse_options({**BOOT, "subscribe": "a, b"}, streaming=True)
    assert stream.subscribe == ("a", "b") and stream.starting.kind == "latest"
    assert stream.fail_on_data_loss and not stream.include_headers and stream.max_offsets_per_trigger is None
    assert (stream.fetch_offset_retries, stream.fetch_offset_retry_interval_ms) == (3, 1000)
    assert stream.min_offsets_per_trigger is None and stream.max_trigger_delay_ms == 15 * 60_000
    batch = parse_options({**BOOT, "SUBSCRIBE": "a", "startingOffsets": '{"a":{"0":5,"1":-2}}',
                           "maxOffsetsPerTrigger": "100", "failOnDataLoss": "false"}, streaming=False)
    assert batch.starting.offsets == {("a", 0): 5, ("a", 1): -2} and batch.ending.kind == "latest"
    assert batch.max_offsets_per_trigger == 100 and not batch.fail_on_data_loss
    assert parse_options({**BOOT, "subscribe": "a", "startingTimestamp": "1700000000000"},
                         streaming=True).starting.timestamp == 1_700_000_000_000

    with pytest.raises(KafkaOptionError, match="batch queries only"):
        parse_options({**BOOT, "subscribe": "a", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(KafkaOptionError, match="not valid for batch"):
        parse_options({**BOOT, "subscribe": "a", "startingOffsets": "latest"}, streaming=False)
    with pytest.raises(KafkaOptionError, match="earliest"):
        parse_options({**BOOT, "subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, streaming=False)
    with pytest.raises(KafkaOptionError, match="maxOffsetsPerTrigger"):
        parse_options({**BOOT, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, streaming=True)
    with pytest.raises(KafkaOptionError, match="startingOffsets.*JSON"):
        parse_options({**BOOT, "subscribe": "a", "startingOffsets": "{oops"}, streaming=True)
    with pytest.raises(KafkaOptionError, match="failOnDataLoss"):
        parse_options({**BOOT, "subscribe": "a", "failOnDataLoss": "maybe"}, streaming=True)


def test_admission_control_retries_and_unknown_options() -> None:
    o = parse_options({**BOOT, "subscribe": "a", "minOffsetsPerTrigger": "500", "maxTriggerDelay": "30s",
                       "maxOffsetsPerTrigger": "1000", "fetchOffset.numRetries": "0",
                       "fetchOffset.retryIntervalMs": "250"}, streaming=True)
    assert (o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (500, 30_000)
    assert (o.fetch_offset_retries, o.fetch_offset_retry_interval_ms) == (0, 250)
    with pytest.raises(KafkaOptionError, match="minOffsetsPerTrigger.*above"):
        parse_options({**BOOT, "subscribe": "a", "minOffsetsPerTrigger": "5", "maxOffsetsPerTrigger": "4"},
                      streaming=True)
    with pytest.raises(KafkaOptionError, match="streaming queries only"):
        parse_options({**BOOT, "subscribe": "a", "minOffsetsPerTrigger": "5"}, streaming=False)
    with pytest.raises(KafkaOptionError, match="maxTriggerDelay.*15m"):
        parse_options({**BOOT, "subscribe": "a", "maxTriggerDelay": "soon"}, streaming=True)
    with pytest.raises(KafkaOptionError, match="fetchOffset.numRetries"):
        parse_options({**BOOT, "subscribe": "a", "fetchOffset.numRetries": "-1"}, streaming=True)
    with pytest.raises(KafkaOptionError, match="'maxofsetspertrigger' is not an option of the Kafka source"):
        parse_options({**BOOT, "subscribe": "a", "maxOfsetsPerTrigger": "5"}, streaming=True)


def test_a_batch_waits_for_min_offsets_until_the_trigger_delay_passes(monkeypatch) -> None:
    from ingest.kafka import source

    o = parse_options({**BOOT, "subscribe": "t", "minOffsetsPerTrigger": "100", "maxTriggerDelay": "10s"},
                      streaming=True)
    reader = source.KafkaStreamReader(o, source.kafka_schema())
    clock = [1000.0]
    monkeypatch.setattr(source.time, "monotonic", lambda: clock[0])
    begin = {("t", 0): 0, ("t", 1): 0}
    assert not reader._admit(begin, {("t", 0): 30, ("t", 1): 40})       # 70 new: waits
    clock[0] += 5
    assert not reader._admit(begin, {("t", 0): 50, ("t", 1): 40})       # 90 new, 5 s: waits
    assert reader._admit(begin, {("t", 0): 60, ("t", 1): 40})           # 100 new: a batch
    clock[0] += 11
    assert reader._admit({("t", 0): 60, ("t", 1): 40}, {("t", 0): 61, ("t", 1): 40})   # delay passed
    reader._target = {("t", 0): 61, ("t", 1): 40}                       # Trigger.AvailableNow
    assert reader._admit({("t", 0): 61, ("t", 1): 40}, {("t", 0): 61, ("t", 1): 40})


class BrokerAnswers:
    """OffsetReader's lookups answered from a dict, counting the earliest-offset requests."""

    def __init__(self, earliest: dict, latest: dict) -> None:
        self.earliest_now, self.latest_now, self.earliest_asked = earliest, latest, 0

    def partitions(self, **_asked: object) -> list:
        return sorted(self.latest_now)

    def earliest(self, tps: list) -> dict:
        self.earliest_asked += 1
        return {tp: self.earliest_now[tp] for tp in tps}

    def latest(self, tps: list, earliest: dict | None = None, each_batch: bool = False,
               enough: dict | None = None) -> dict:
        return {tp: self.latest_now[tp] for tp in tps}


def test_a_streams_batches_ask_for_earliest_offsets_only_for_new_partitions_and_once_a_second(
        monkeypatch) -> None:
    from ingest.kafka import source

    o = parse_options({**BOOT, "subscribe": "t"}, streaming=True)
    reader = source.KafkaStreamReader(o, source.kafka_schema())
    broker = BrokerAnswers({("t", 0): 0}, {("t", 0): 10})
    reader._reader = broker
    clock = [1000.0]
    monkeypatch.setattr(source.time, "monotonic", lambda: clock[0])
    end = reader.latestOffset(offsets_to_json({("t", 0): 0}), ReadAllAvailable())
    assert broker.earliest_asked == 1 and end == {"t": {"0": 10}}
    broker.latest_now[("t", 0)] = 20
    clock[0] += 0.5
    assert reader.latestOffset(end, ReadAllAvailable()) == {"t": {"0": 20}}
    assert broker.earliest_asked == 1               # same partitions within a second: latest only
    broker.earliest_now[("t", 1)], broker.latest_now[("t", 1)] = 5, 8
    end = reader.latestOffset({"t": {"0": 20}}, ReadAllAvailable())
    assert broker.earliest_asked == 2 and end == {"t": {"0": 20, "1": 5}}   # a new one starts at its earliest
    broker.earliest_now[("t", 0)] = 15              # retention deleted 10..14 before they were read
    clock[0] += 0.5
    reader.latestOffset({"t": {"0": 10, "1": 5}}, ReadAllAvailable())       # the tasks would find it
    clock[0] += 0.6
    with pytest.raises(DataLossError, match=r"t-0: planned start 10, earliest available 15"):
        reader.latestOffset({"t": {"0": 10, "1": 5}}, ReadAllAvailable())   # the driver, within a second
    reader._target = {("t", 0): 20, ("t", 1): 8}    # Trigger.AvailableNow: every batch asks
    asked = broker.earliest_asked
    reader.latestOffset({"t": {"0": 20, "1": 8}}, ReadAllAvailable())
    assert broker.earliest_asked == asked + 1


class LogEnd:
    """A partition's log as OffsetReader's requests see it: ``end`` grows by ``produced`` records
    before each request (a producer at work); ListOffsets answers the end (Apache Kafka) or, with
    ``short_by``, that many records short of it (Tansu's base offset of the last batch + 1)."""

    def __init__(self, produced: int, short_by: int = 0) -> None:
        self.end, self.produced, self.short_by = 100, produced, short_by
        self.list_offsets = self.probes = 0

    def _tick(self) -> int:
        self.end += self.produced
        return self.end

    def reported_latest(self, tps: list) -> dict:
        self.list_offsets += 1
        return {tp: self._tick() - self.short_by for tp in tps}

    def high_watermarks(self, fetch_from: dict) -> tuple[dict, dict]:
        self.probes += 1
        return {tp: self._tick() for tp in fetch_from}, {}


def reader_of(log: LogEnd, monkeypatch) -> object:
    from ingest.kafka import admin

    reader = admin.OffsetReader({"bootstrap_servers": "k:9092"})
    monkeypatch.setattr(reader, "reported_latest", log.reported_latest)
    monkeypatch.setattr(reader, "_high_watermarks", log.high_watermarks)
    monkeypatch.setattr(reader, "earliest", lambda tps: {tp: 0 for tp in tps})
    return reader


def test_records_produced_between_the_answer_and_the_probe_do_not_make_a_broker_short(monkeypatch) -> None:
    # Apache Kafka under a producer: the probe's high watermark is always past the answer before
    # it, and ListOffsets asked again catches up with it: its answers stay trusted, so the next
    # batches within the recheck interval ask ListOffsets only.
    tp = ("t", 0)
    log = LogEnd(produced=7)
    reader = reader_of(log, monkeypatch)
    assert reader.latest([tp], each_batch=True)[tp] == 114          # answered 107, probed 114
    assert (log.list_offsets, log.probes) == (2, 1)                 # and asked again: 121 >= 114
    for _ in range(5):
        reader.latest([tp], each_batch=True)
    assert (log.list_offsets, log.probes) == (7, 1)


def test_a_broker_answering_short_of_the_probe_when_asked_again_is_probed_every_batch(monkeypatch) -> None:
    tp = ("t", 0)
    log = LogEnd(produced=0, short_by=49)                           # 50 records in one batch, nothing since
    reader = reader_of(log, monkeypatch)
    assert reader.latest([tp], each_batch=True)[tp] == 100          # answered 51, the probe found 100
    for _ in range(3):
        assert reader.latest([tp], each_batch=True)[tp] == 100
    assert log.probes == 4


def test_lag_behind_latest_per_partition_from_the_progress() -> None:
    from ingest.lag import offsets_behind

    assert sorted(offsets_behind('{"t":{"0":10,"1":5}}', '{"t":{"0":25,"1":5}}')) == [0, 15]
    assert offsets_behind({"t": {"0": 10}}, {"t": {"0": 12}, "u": {"0": 3}}) == [2]
    assert offsets_behind(None, "not json") == []


def test_headers_column_follows_include_headers() -> None:
    from ingest.kafka.source import KafkaDataSource

    assert "headers" not in KafkaDataSource({"subscribe": "t"}).schema().fieldNames()      # Spark's default
    assert "headers" in KafkaDataSource({"subscribe": "t", "includeHeaders": "true"}).schema().fieldNames()
    assert kafka_schema().fieldNames() == ["key", "value", "topic", "partition", "offset", "timestamp",
                                           "timestampType", "headers"]
    assert "headers" not in kafka_schema(include_headers=False).fieldNames()
    assert source_format("spark-kafka") == "kafka" and source_format("kafka-python") == "kafka-python"
    with pytest.raises(KafkaOptionError, match="spark-kafka"):
        source_format("flink")


def test_rate_limit_splits_the_limit_in_proportion_to_each_backlog() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    end = {("t", 0): 600, ("t", 1): 400, ("t", 2): 6}
    capped = rate_limit(start, end, 100)
    # backlogs 600 / 300 / 1 of 901: floor(66.6), floor(33.3), and the tiny one still gets its record
    assert capped == {("t", 0): 66, ("t", 1): 133, ("t", 2): 6}
    assert sum(capped[tp] - start[tp] for tp in start) <= 100
    assert rate_limit(start, end, 10_000) == end


def test_plan_ranges_gives_one_task_per_partition_and_splits_big_ranges() -> None:
    start = {("a", 0): 10, ("a", 1): 0, ("b", 0): 7}
    end = {("a", 0): 20, ("a", 1): 0, ("b", 0): 12, ("c", 0): 0}   # c: discovered now, nothing to read
    assert plan_ranges(start, end, 1_000) == [KafkaOffsetRange("a", 0, 10, 20), KafkaOffsetRange("b", 0, 7, 12)]
    split = plan_ranges(start, end, 4)
    assert [(r.topic, r.partition, r.from_offset, r.until_offset) for r in split] == [
        ("a", 0, 10, 13), ("a", 0, 13, 16), ("a", 0, 16, 20), ("b", 0, 7, 9), ("b", 0, 9, 12)]
    assert plan_ranges(start, end, 4) == split, "planning must be deterministic"
    assert len(plan_ranges(start, end, 1_000, min_partitions=5)) >= 5


def test_small_ranges_are_read_together_until_a_task_holds_min_records_per_task() -> None:
    ranges = [KafkaOffsetRange("a", 0, 0, 300), KafkaOffsetRange("a", 1, 0, 800), KafkaOffsetRange("a", 2, 5, 5 + 2_000),
              KafkaOffsetRange("b", 0, 0, 50), KafkaOffsetRange("b", 1, 0, 60)]
    grouped = group_ranges(ranges, 1_000)
    assert grouped == [KafkaOffsetRanges(tuple(ranges[:2])), ranges[2], KafkaOffsetRanges(tuple(ranges[3:]))]
    assert [r for g in grouped for r in getattr(g, "ranges", (g,))] == ranges, "the records keep their order"
    assert group_ranges(ranges, 0) == ranges, "0: one task per range, as Spark's connector"
    assert group_ranges(ranges, 10**9) == [KafkaOffsetRanges(tuple(ranges))]
    assert group_ranges(ranges, 1_000, min_partitions=4) == ranges, "minPartitions asks for at least 4 tasks"
    assert parse_options({"kafka.bootstrap.servers": "h:9092", "subscribe": "t"}, streaming=True).min_records_per_task == 10_000
    assert parse_options({"kafka.bootstrap.servers": "h:9092", "subscribe": "t", "minRecordsPerTask": "0"}, streaming=True).min_records_per_task == 0
    with pytest.raises(KafkaOptionError, match="'minRecordsPerTask' must be a non-negative integer, got -1"):
        parse_options({"kafka.bootstrap.servers": "h:9092", "subscribe": "t", "minRecordsPerTask": "-1"}, streaming=True)


def test_data_loss_fails_by_default_and_skips_to_earliest_when_allowed() -> None:
    planned = {("t", 0): 5, ("t", 1): 50}
    earliest = {("t", 0): 20, ("t", 1): 0}
    with pytest.raises(DataLossError, match=r"t-0: planned start 5, earliest available 20.*failOnDataLoss=false"):
        check_data_loss(planned, earliest, fail_on_data_loss=True)
    assert check_data_loss(planned, earliest, fail_on_data_loss=False) == {("t", 0): 20, ("t", 1): 50}


def test_per_partition_json_markers_and_round_trip() -> None:
    tps = [("t", 0), ("t", 1), ("t", 2)]
    got = resolve_markers({("t", 0): -2, ("t", 1): -1, ("t", 2): 7}, tps,
                          earliest={tp: 3 for tp in tps}, latest={tp: 9 for tp in tps}, option="startingOffsets")
    assert got == {("t", 0): 3, ("t", 1): 9, ("t", 2): 7}
    with pytest.raises(KafkaOptionError, match="t-2"):
        resolve_markers({("t", 0): 1, ("t", 1): 1}, tps, {}, {}, "startingOffsets")
    assert offsets_from_json(json.loads(json.dumps(offsets_to_json(got)))) == got


def _given(start: dict[int, int], end: dict[int, int], **more: str) -> dict[str, str]:
    # a broker nobody listens on: a plan that asked it anything would fail or wait, not return
    return {"kafka.bootstrap.servers": "127.0.0.1:9", "assign": json.dumps({"t": sorted(start)}),
            "startingOffsets": json.dumps({"t": {str(p): o for p, o in start.items()}}),
            "endingOffsets": json.dumps({"t": {str(p): o for p, o in end.items()}}), **more}


def test_a_batch_of_assigned_partitions_with_both_ends_given_is_planned_without_the_brokers() -> None:
    from ingest.kafka.source import KafkaDataSource

    reader = KafkaDataSource(_given({0: 5, 1: 0}, {0: 9, 1: 3})).reader(kafka_schema())
    tasks = reader.partitions()
    planned = sorted((r.partition, r.from_offset, r.until_offset) for t in tasks
                     for r in (t.ranges if isinstance(t, KafkaOffsetRanges) else (t,)))
    assert planned == [(0, 5, 9), (1, 0, 3)]
    # the records below a given start that retention deleted are the read task's to find (failOnDataLoss)
    assert reader.plan() == ({("t", 0): 5, ("t", 1): 0}, {("t", 0): 9, ("t", 1): 3})


def test_given_offsets_that_run_backwards_are_refused_without_the_brokers() -> None:
    from ingest.kafka.source import KafkaDataSource

    with pytest.raises(KafkaOptionError, match="starting offset is after the ending offset"):
        KafkaDataSource(_given({0: 9}, {0: 5})).reader(kafka_schema()).partitions()
