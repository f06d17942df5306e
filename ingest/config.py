"""Settings of ``commitlog run`` / ``commitlog replay`` and their checks; ingest.job_arguments makes them
from the command line over the config file over these defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from ingest.broker_groups import BrokerGroup, BrokerGroupError
from store import FOREIGN_TAIL_POLICIES, CompactionConfig
from store.format import (DEFAULT_COMMITLOG_FILE_SIZE, DEFAULT_COMPACTION_CQ_MAPPED_FILE_SIZE,
                          DEFAULT_COMPACTION_MAPPED_FILE_SIZE, DEFAULT_MAX_HASH_SLOT_NUM, DEFAULT_MAX_INDEX_NUM,
                          DEFAULT_MAX_MESSAGE_SIZE, END_FILE_MIN_BLANK_LENGTH)

# What a record holds beside its body, at most, for the start check: the fixed fields with IPv6
# hosts, a topic, our Kafka coordinates and UNIQ_KEY. Longer keys and headers are per record: one
# that then does not fit a segment is a dead letter, never a write error.
RECORD_OVERHEAD_ALLOWANCE = 1024


# --topic-cleanup-policy's values: an ordinary RocketMQ topic, or a RocketMQ 5 compaction topic (the
# store writes its compaction log: docs/kafka-lag-and-compaction.md)
CLEANUP_POLICIES = ("delete", "compaction")


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
    compaction_file_size: int = DEFAULT_COMPACTION_MAPPED_FILE_SIZE        # the broker's compactionMappedFileSize
    compaction_queue_file_size: int = DEFAULT_COMPACTION_CQ_MAPPED_FILE_SIZE  # its compactionCqMappedFileSize
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
                                 f"{human_size(near)} or {human_size(near + 4096)}")
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
                    f"--max-message-size {human_size(self.max_message_size)} does not fit --segment-size "
                    f"{human_size(self.segment_size)}: a record is its body plus up to {RECORD_OVERHEAD_ALLOWANCE} "
                    f"bytes of other fields and a segment keeps 8 bytes for its BLANK; give --max-message-size "
                    f"{room} or less, or --segment-size {human_size(segment_size_for(self.max_message_size))} or more")
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
        try:
            CompactionConfig(mapped_file_size=self.compaction_file_size, cq_mapped_file_size=self.compaction_queue_file_size)
        except ValueError as exc:
            raise JobConfigError(f"--compaction-file-size {self.compaction_file_size} / --compaction-queue-file-size "
                                 f"{self.compaction_queue_file_size}: {exc}") from None
        if self.commit_group is not None and not self.commit_group.strip():
            raise JobConfigError("--commit-group '': give the name of a Kafka consumer group")
        for topic, policy in self.topic_cleanup_policy.items():
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


def human_size(n: int) -> str:
    """A size as the command line writes it (64k, 1g), exact, or the plain number."""
    for suffix, unit in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def segment_size_for(body: int) -> int:
    """The smallest valid --segment-size (a multiple of 4096) that holds a body of ``body`` bytes."""
    need = body + RECORD_OVERHEAD_ALLOWANCE + END_FILE_MIN_BLANK_LENGTH
    return -(-need // 4096) * 4096
