"""The command line and the config file of ``commitlog run`` / ``commitlog replay`` made into a
JobConfig (ingest.config): the options both commands take, the TOML file under them, the Kafka
client settings resolved, and the segment size a store already has adopted."""

from __future__ import annotations

import argparse
import logging
import tomllib
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from ingest.config import JobConfig, JobConfigError, human_size
from ingest.redaction import Redactor, redact_logging, secrets_of
from store import FOREIGN_TAIL_POLICIES
from store.format import DEFAULT_COMMITLOG_FILE_SIZE


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


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
    p.add_argument("--compaction-file-size", type=_size, default=S, metavar="SIZE",
                   help="compaction topics: the broker's compactionMappedFileSize (default 100m; give the broker the same)")
    p.add_argument("--compaction-queue-file-size", type=_size, default=S, metavar="SIZE",
                   help="compaction topics: the broker's compactionCqMappedFileSize (default 10m; give the broker the same)")
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
                   metavar="TOPIC=delete|compaction",
                   help="overrides the Kafka topic's cleanup.policy: delete stores it as an ordinary RocketMQ topic, "
                        "compaction as a RocketMQ 5 compaction topic (repeatable; docs/kafka-lag-and-compaction.md)")
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
    for name in ("segment_size", "compaction_file_size", "compaction_queue_file_size"):
        if isinstance(values.get(name), str):
            values[name] = _size(values[name])
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
                "--segment-size %s: the store %s has segments of %s, kept", human_size(cfg.segment_size), cfg.store,
                human_size(size))
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
