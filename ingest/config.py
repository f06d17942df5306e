"""Settings of ``commitlog run`` / ``commitlog replay``: command line over config file over defaults."""

from __future__ import annotations

import argparse
import logging
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ingest.broker_groups import BrokerGroup, BrokerGroupError
from ingest.redaction import Redactor, redact_logging, secrets_of
from store import FOREIGN_TAIL_POLICIES
from store.format import (DEFAULT_COMMITLOG_FILE_SIZE, DEFAULT_MAX_HASH_SLOT_NUM, DEFAULT_MAX_INDEX_NUM,
                          DEFAULT_MAX_MESSAGE_SIZE, END_FILE_MIN_BLANK_LENGTH)

# What a record holds beside its body, at most, for the start check: the fixed fields with IPv6
# hosts, a topic, our Kafka coordinates and UNIQ_KEY. Longer keys and headers are per record: one
# that then does not fit a segment is a dead letter, never a write error.
RECORD_OVERHEAD_ALLOWANCE = 1024


# --topic-cleanup-policy's values. Only "delete" (an ordinary RocketMQ topic) can be stored today: a
# RocketMQ 5 broker serves a compaction topic from its own compaction log only, which it never builds
# from a store it did not write (docs/kafka-lag-and-compaction.md)
CLEANUP_POLICIES = ("delete",)


class JobConfigError(ValueError):
    """A setting of the job that cannot work; the message names it."""


@dataclass
class JobConfig:
    """Everything ``commitlog run`` needs. Field names are the long options with '_' for '-'."""

    bootstrap_servers: str = ""
    subscribe: str | None = None
    subscribe_pattern: str | None = None
    assign: str | None = None
    store: str = ""
    checkpoint: str = ""
    trigger: str = "100ms"                   # a processing-time interval, or "available-now" (bench/latency.py)
    max_offsets_per_trigger: int | None = 200_000
    min_records_per_task: int | None = None  # the kafka-python source's minRecordsPerTask; None: its default
    starting_offsets: str = "earliest"       # used only when the store has no Kafka offsets yet
    fail_on_data_loss: bool = True
    flush: str = "sync"                      # "sync" | "async"
    segment_size: int = DEFAULT_COMMITLOG_FILE_SIZE
    consume_queue_units: int = 300_000
    max_message_size: int | None = None      # None: 4 MiB, or what a smaller segment leaves room for
    master: str | None = "local[*]"          # None: leave it to spark-submit
    shuffle_partitions: int = 4
    source: str = "kafka-python"             # or "spark-kafka" (Spark's own, when on the classpath)
    topic_map: dict[str, str] = field(default_factory=dict)
    queue_mode: str = "partition"
    queue_count: int = 4
    store_host: str = "127.0.0.1:10911"
    born_host: str = "127.0.0.1:0"
    born_host_header: str = "bornHost"
    envelope: bool = False
    # any other kafka.* client setting, config provider references resolved (ingest.client_properties);
    # out of the repr: it holds the secrets
    kafka_option: dict[str, str] = field(default_factory=dict, repr=False)
    kafka_config: str | None = None          # a Kafka client properties file (Kafka tools' --command-config)
    spark_conf: dict[str, str] = field(default_factory=dict)
    retention_hours: float | None = None     # fileReservedTime; None = never delete (an archive)
    delete_when: str = "04"                  # deleteWhen: the hour(s) old segments are deleted
    disk_max_used_space_ratio: float = 0.75
    truncate_on_corruption: bool = False
    foreign_tail: str = "adopt"              # records a broker appended past the commit point (store.config)
    message_index: bool = True               # messageIndexEnable: index/ written with the appends
    max_hash_slot_num: int = DEFAULT_MAX_HASH_SLOT_NUM
    max_index_num: int = DEFAULT_MAX_INDEX_NUM
    drop_cache_behind: bool = True           # a commit hands the page cache of what it covers back
    skip_preflight: bool = False
    spool_dir: str = "auto"                  # auto | off | a directory the executors share (sink.handover.spool)
    broker_group: str | None = None          # "K/N": this job writes broker group K of N (ingest.broker_groups)
    metrics_port: int | None = None          # serve Prometheus metrics on this port (ingest.metrics); None: off
    metrics_host: str = "127.0.0.1"          # ... bound to this address
    commit_group: str | None = None          # a Kafka consumer group the stored offsets are mirrored to
    topic_cleanup_policy: dict[str, str] = field(default_factory=dict)   # Kafka topic -> delete (CLEANUP_POLICIES)

    @property
    def group(self) -> BrokerGroup | None:
        return BrokerGroup.parse(self.broker_group) if self.broker_group else None

    @property
    def message_size_limit(self) -> int:
        """The largest body: --max-message-size, by default RocketMQ's 4 MiB or what a segment
        leaves room for beside a record's other fields, if less."""
        if self.max_message_size is not None:
            return self.max_message_size
        return max(1, min(DEFAULT_MAX_MESSAGE_SIZE, self.segment_size - END_FILE_MIN_BLANK_LENGTH
                          - RECORD_OVERHEAD_ALLOWANCE))

    def validate(self) -> None:
        if not self.bootstrap_servers:
            raise JobConfigError("--bootstrap-servers is required (host:port[,host:port])")
        chosen = [n for n in ("subscribe", "subscribe_pattern", "assign") if getattr(self, n)]
        if len(chosen) != 1:
            raise JobConfigError("give exactly one of --subscribe, --subscribe-pattern, --assign "
                                 f"(got {', '.join(chosen) or 'none'})")
        if not self.store:
            raise JobConfigError("--store DIR is required")
        if self.flush not in ("sync", "async"):
            raise JobConfigError(f"--flush {self.flush!r}: use sync or async")
        if self.foreign_tail not in FOREIGN_TAIL_POLICIES:
            raise JobConfigError(f"--foreign-tail {self.foreign_tail!r}: use one of {', '.join(FOREIGN_TAIL_POLICIES)}")
        if self.segment_size <= 0 or self.segment_size % 4096:
            near = max(4096, self.segment_size // 4096 * 4096)
            raise JobConfigError(f"--segment-size {self.segment_size}: a positive multiple of 4096, e.g. "
                                 f"{_human(near)} or {_human(near + 4096)}")
        if self.source not in ("kafka-python", "spark-kafka"):
            raise JobConfigError(f"--source {self.source!r}: use kafka-python or spark-kafka")
        if self.trigger != "available-now":
            spark_interval(self.trigger)
        if self.max_message_size is not None:
            room = self.segment_size - END_FILE_MIN_BLANK_LENGTH - RECORD_OVERHEAD_ALLOWANCE
            if self.max_message_size <= 0:
                raise JobConfigError(f"--max-message-size {self.max_message_size}: must be positive")
            if self.max_message_size > room:
                raise JobConfigError(
                    f"--max-message-size {_human(self.max_message_size)} does not fit --segment-size "
                    f"{_human(self.segment_size)}: a record is its body plus up to {RECORD_OVERHEAD_ALLOWANCE} "
                    f"bytes of other fields and a segment keeps 8 bytes for its BLANK; give --max-message-size "
                    f"{room} or less, or --segment-size {_human(_segment_for(self.max_message_size))} or more")
        if not self.spool_dir:
            raise JobConfigError("--spool-dir '': give auto, off or a directory")
        if self.max_hash_slot_num <= 0:
            raise JobConfigError(f"--max-hash-slot-num {self.max_hash_slot_num}: must be positive")
        if self.max_index_num < 2:
            raise JobConfigError(f"--max-index-num {self.max_index_num}: at least 2 (item 0 is never used)")
        if self.min_records_per_task is not None and self.min_records_per_task < 0:
            raise JobConfigError(f"--min-records-per-task {self.min_records_per_task}: must be 0 (one read task "
                                 "per partition) or more")
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger <= 0:
            raise JobConfigError("--max-offsets-per-trigger must be positive")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise JobConfigError(f"--metrics-port {self.metrics_port}: a TCP port, 1 to 65535 (0: any free one)")
        if not self.metrics_host.strip():
            raise JobConfigError("--metrics-host '': give an address to bind, e.g. 127.0.0.1 or 0.0.0.0")
        self._validate_broker_group()
        if self.commit_group is not None and not self.commit_group.strip():
            raise JobConfigError("--commit-group '': give the name of a Kafka consumer group")
        for topic, policy in self.topic_cleanup_policy.items():
            if policy == "compaction":
                raise JobConfigError(f"--topic-cleanup-policy {topic}=compaction: not possible yet: a RocketMQ 5 broker "
                                     "serves a compaction topic only from a compaction log it builds from messages it "
                                     "dispatches itself, and this store's messages are dispatched already; give "
                                     f"{topic}=delete (an ordinary topic, every record) or leave it out")
            if policy not in CLEANUP_POLICIES:
                raise JobConfigError(f"--topic-cleanup-policy {topic}={policy}: use {' or '.join(CLEANUP_POLICIES)}")
        from ingest.encode.mapping import topic_problem

        for source, target in self.topic_map.items():
            problem = topic_problem(target)
            if problem:
                raise JobConfigError(f"--topic-map {source}={target}: RocketMQ cannot hold it ({problem})")


    def _validate_broker_group(self) -> None:
        try:
            group = self.group
        except BrokerGroupError as exc:
            raise JobConfigError(str(exc)) from None
        if group is None:
            return
        if self.source != "kafka-python":
            raise JobConfigError(f"--broker-group {group} needs --source kafka-python: Spark's own kafka source "
                                 "reads every partition of a subscription")
        if self.assign:
            import json

            try:
                others = sorted(f"{t}-{p}" for t, ps in json.loads(self.assign).items() for p in ps
                                if not group.owns(int(p)))
            except (ValueError, TypeError, AttributeError):
                return    # the source names what is wrong with the JSON
            if others:
                raise JobConfigError(f"--assign names {', '.join(others)}, not partitions of --broker-group {group} "
                                     f"(partition p belongs to group p mod {group.count})")


_INTERVAL_UNITS = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours"}


def spark_interval(text: str) -> str:
    """'500ms', '2s', '1m' or Spark's own '2 seconds' -> the interval string Spark's trigger takes."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*", text)
    if m:
        return f"{m.group(1)} {_INTERVAL_UNITS[m.group(2)]}"
    if re.fullmatch(r"\s*\d+(?:\.\d+)?\s+(milli)?(second|minute|hour)s?\s*", text):
        return text.strip()
    raise JobConfigError(f"--trigger {text!r}: an interval like 500ms, 2s, 1m, or available-now")


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def _human(n: int) -> str:
    """A size as the command line writes it (64k, 1g), exact, or the plain number."""
    for suffix, unit in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def _segment_for(body: int) -> int:
    """The smallest valid --segment-size (a multiple of 4096) that holds a body of ``body`` bytes."""
    need = body + RECORD_OVERHEAD_ALLOWANCE + END_FILE_MIN_BLANK_LENGTH
    return -(-need // 4096) * 4096


def _size(text: str) -> int:
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def add_job_arguments(p: argparse.ArgumentParser, streaming: bool = True) -> None:
    """Options shared by run and replay. Defaults are None so a config file can fill them."""
    S = argparse.SUPPRESS
    p.add_argument("--config", help="a TOML file of these settings (keys as the long options); "
                                    "the command line wins")
    p.add_argument("--bootstrap-servers", default=S, help="Kafka bootstrap servers, host:port[,...]")
    p.add_argument("--store", default=S, help="the CommitLog store directory (created if missing)")
    p.add_argument("--checkpoint", default=S, help="Spark checkpoint directory")
    p.add_argument("--flush", choices=["sync", "async"], default=S,
                   help="SYNC_FLUSH (each batch durable before commit; default) or ASYNC_FLUSH")
    p.add_argument("--segment-size", type=_size, default=S, help="commit-log segment size (default 1g)")
    p.add_argument("--consume-queue-units", type=int, default=S, help="units per consume-queue file")
    p.add_argument("--max-message-size", type=_size, default=S,
                   help="largest body, bytes or 512k (default 4m, less when --segment-size leaves less room)")
    p.add_argument("--max-offsets-per-trigger", type=int, default=S, help="records per micro-batch, at most")
    p.add_argument("--min-records-per-task", type=int, default=S,
                   help="the small partition ranges of a micro-batch are read by one task until it holds this "
                        "many records (default 10000; 0: one task per partition, as Spark's connector)")
    p.add_argument("--master", default=S, help="Spark master (default local[*]; 'none' under spark-submit)")
    p.add_argument("--shuffle-partitions", type=int, default=S, help="spark.sql.shuffle.partitions")
    p.add_argument("--source", choices=["kafka-python", "spark-kafka"], default=S,
                   help="our Python Kafka source (default) or Spark's own kafka format when on the classpath")
    p.add_argument("--topic-map", action="append", type=_key_value, default=S, metavar="KAFKA=ROCKETMQ",
                   help="rename a topic (repeatable)")
    p.add_argument("--queue-mode", choices=["partition", "key-hash"], default=S,
                   help="queueId = Kafka partition (default) or hash of the key over --queue-count queues")
    p.add_argument("--queue-count", type=int, default=S)
    p.add_argument("--store-host", default=S, help="STOREHOST written in every record, ip:port")
    p.add_argument("--born-host", default=S, help="BORNHOST when a record has no born-host header")
    p.add_argument("--born-host-header", default=S, help="header holding the born host (default bornHost)")
    p.add_argument("--envelope", action="store_true", default=S,
                   help="the Kafka value is a JSON envelope setting RocketMQ fields")
    p.add_argument("--kafka-option", action="append", type=_key_value, default=S, metavar="KEY=VALUE",
                   help="any other kafka.* client setting, e.g. security.protocol=SSL (repeatable)")
    p.add_argument("--kafka-config", default=S, metavar="FILE",
                   help="a Kafka client properties file (as Kafka's tools take --command-config): security.protocol, "
                        "sasl.*, ssl.*, config.providers...; --kafka-option settings go over it")
    p.add_argument("--spark-conf", action="append", type=_key_value, default=S, metavar="KEY=VALUE")
    p.add_argument("--fail-on-data-loss", choices=["true", "false"], default=S)
    p.add_argument("--message-index", choices=["true", "false"], default=S,
                   help="write index/ (RocketMQ's IndexFiles, for lookups by key) with the appends (default true)")
    p.add_argument("--max-hash-slot-num", type=int, default=S,
                   help="hash slots per index file, for a new index (default 5,000,000)")
    p.add_argument("--max-index-num", type=int, default=S,
                   help="items per index file, for a new index (default 20,000,000)")
    p.add_argument("--retention-hours", type=float, default=S,
                   help="delete commit-log segments older than this (RocketMQ's fileReservedTime, e.g. 72) "
                        "at --delete-when or when the disk passes --disk-max-used-space-ratio; default: keep all")
    p.add_argument("--delete-when", default=S, help="hour(s) of the day for retention, e.g. 04 or 04;16")
    p.add_argument("--disk-max-used-space-ratio", type=float, default=S,
                   help="disk usage that triggers retention at any hour (default 0.75)")
    p.add_argument("--truncate-on-corruption", action="store_true", default=S,
                   help="open a store with damaged committed data by cutting it at the damage (loses data)")
    p.add_argument("--foreign-tail", choices=list(FOREIGN_TAIL_POLICIES), default=S,
                   help="records another writer (a RocketMQ broker that served the store) appended past the commit "
                        "point: adopt them and go on after them (default; an unfinished batch of ours before them "
                        "is refused), refuse them, or keep-all (an unfinished batch of ours too: stored twice)")
    p.add_argument("--spool-dir", default=S,
                   help="where the read tasks hand their encoded batches to the driver as files: auto "
                        "(<store>/spool, private, in local mode; through Spark otherwise), off (always through "
                        "Spark), or a directory the executors share with the driver at the same path, yours "
                        "and writable by no one else (or sticky, like /tmp)")
    p.add_argument("--broker-group", default=S, metavar="K/N",
                   help="write broker group K of N (0 <= K < N): Kafka partition p goes to group p mod N as queue "
                        "p div N; run N jobs, each with its own store, to hold the topics together")
    p.add_argument("--metrics-port", type=int, default=S,
                   help="serve Prometheus metrics on this port (default: off; see README, 'Watching a job')")
    p.add_argument("--metrics-host", default=S,
                   help="the address the metrics port binds (default 127.0.0.1; 0.0.0.0 for every interface)")
    p.add_argument("--drop-cache-behind", choices=["true", "false"], default=S,
                   help="after each commit, hand the commit log's page cache below it back to the kernel "
                        "(default true: the job never reads it again, and new pages cost more than reused ones); "
                        "false keeps it cached for readers of the fresh data")
    p.add_argument("--commit-group", default=S, metavar="NAME",
                   help="after each batch is committed to the store, commit its end offsets to this Kafka "
                        "consumer group, for Kafka's own lag tools (never read back; see "
                        "docs/kafka-lag-and-compaction.md)")
    p.add_argument("--topic-cleanup-policy", action="append", type=_key_value, default=S,
                   metavar="TOPIC=delete",
                   help="a compacted Kafka topic is meant to be stored as an ordinary RocketMQ topic: no warning "
                        "for it (repeatable; compaction topics: docs/kafka-lag-and-compaction.md)")
    p.add_argument("--skip-preflight", action="store_true", default=S,
                   help="do not check that the store path is persistent and lockable")
    if streaming:
        p.add_argument("--subscribe", default=S, help="topics, comma separated")
        p.add_argument("--subscribe-pattern", default=S, help="a Java regex of topics")
        p.add_argument("--assign", default=S, help='JSON {"topic":[0,1]}')
        p.add_argument("--trigger", default=S, help="processing-time interval (default 100ms; 1s, 500ms) or available-now")
        p.add_argument("--starting-offsets", default=S,
                       help="earliest | latest | JSON, when the store has no Kafka offsets yet")


def config_from_args(args: argparse.Namespace) -> JobConfig:
    """Defaults, then the --config file, then the command line."""
    values: dict[str, Any] = {}
    config_path = getattr(args, "config", None)
    if config_path:
        try:
            raw = tomllib.loads(Path(config_path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise JobConfigError(f"config file {config_path}: {exc}") from exc
        values.update({k.replace("-", "_"): v for k, v in raw.items()})
    from_toml = dict(values.get("kafka_option") or {})
    cli = {k: v for k, v in vars(args).items() if k not in ("config", "func", "command", "verbose")}
    for name in ("topic_map", "kafka_option", "spark_conf", "topic_cleanup_policy"):
        if name in cli:
            cli[name] = dict(values.get(name, {}), **dict(cli[name]))
    values.update(cli)
    for flag in ("fail_on_data_loss", "message_index", "drop_cache_behind"):
        if flag in values and isinstance(values[flag], str):
            values[flag] = values[flag] == "true"
    if values.get("master") in ("none", ""):
        values["master"] = None
    if isinstance(values.get("segment_size"), str):
        values["segment_size"] = _size(values["segment_size"])
    known = {f.name: f for f in fields(JobConfig)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise JobConfigError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    for name, value in values.items():
        _check_type(name, value, str(known[name].type))
    values["kafka_option"] = _client_settings(values, config_path, from_toml,
                                              dict(getattr(args, "kafka_option", None) or []))
    cfg = JobConfig(**values)
    adopt_store_segment_size(cfg)
    cfg.validate()
    redact_logging(Redactor(secrets_of(cfg.kafka_option)))
    return cfg


def _client_settings(values: Mapping[str, Any], config_path: str | None, from_toml: Mapping[str, str],
                     from_cli: Mapping[str, str]) -> dict[str, str]:
    from ingest import client_properties

    try:
        return client_properties.job_settings(values.get("kafka_config"), values.get("kafka_option") or {},
                                              config_path, from_toml, from_cli)
    except client_properties.ClientConfigError as exc:
        raise JobConfigError(str(exc)) from None


def adopt_store_segment_size(cfg: JobConfig) -> None:
    """A store keeps the segment size it was made with: resuming needs no --segment-size, and a
    different one is said once and set aside (the record limits follow the real segments)."""
    from store import segment_size_on_disk

    size = segment_size_on_disk(Path(cfg.store) / "commitlog") if cfg.store else 0
    if size % 4096:     # no segment size a job makes: a damaged file, not a setting
        odd = next(p for p in sorted((Path(cfg.store) / "commitlog").iterdir())
                   if len(p.name) == 20 and p.name.isdigit() and p.stat().st_size == size)
        raise JobConfigError(f"segment {odd} is {size} bytes, expected {cfg.segment_size} (--segment-size; a segment "
                             f"is a multiple of 4096): it is damaged (cut short?); restore it from a backup, or move "
                             f"it away")
    if size and size != cfg.segment_size:
        if cfg.segment_size != DEFAULT_COMMITLOG_FILE_SIZE:
            logging.getLogger("commitlog").warning(
                "--segment-size %s: the store %s has segments of %s, kept", _human(cfg.segment_size), cfg.store,
                _human(size))
        cfg.segment_size = size


_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,), "dict[str, str]": (dict,)}


def _check_type(name: str, value: Any, annotation: str) -> None:
    """A TOML value of the wrong type is refused by name, before anything runs (the command line's
    values are typed by argparse already)."""
    kinds = [k.strip() for k in annotation.split("|")]
    if value is None and "None" in kinds:
        return
    allowed = tuple(t for k in kinds for t in _TYPES.get(k, ()))
    if allowed and (not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed)):
        want = " or ".join(k for k in kinds if k != "None")
        raise JobConfigError(f"setting {name.replace('_', '-')} = {value!r}: expected {want}")
