"""The options a job's settings give its Kafka source, either one (ours or Spark's connector): the
names Spark's own kafka source takes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ingest.config import JobConfig


def kafka_reader_options(cfg: JobConfig, starting_offsets: str | Mapping[str, Any]) -> dict[str, str]:
    """The Kafka source options (the same names Spark's own kafka source takes)."""
    import json

    opts = {"kafka.bootstrap.servers": cfg.bootstrap_servers,
            "failOnDataLoss": str(cfg.fail_on_data_loss).lower(),
            "includeHeaders": "true",   # Spark's own source leaves headers out unless asked
            "startingOffsets": starting_offsets if isinstance(starting_offsets, str) else json.dumps(starting_offsets)}
    for name, opt in (("subscribe", "subscribe"), ("subscribe_pattern", "subscribePattern"), ("assign", "assign")):
        if getattr(cfg, name):
            opts[opt] = getattr(cfg, name)
    if cfg.max_offsets_per_trigger:
        opts["maxOffsetsPerTrigger"] = str(cfg.max_offsets_per_trigger)
    if cfg.min_records_per_task is not None and cfg.source == "kafka-python":
        opts["minRecordsPerTask"] = str(cfg.min_records_per_task)
    if cfg.broker_group:
        from ingest.kafka.options import BROKER_GROUP_OPTION

        opts[BROKER_GROUP_OPTION] = cfg.broker_group
    # what producers committed, not what they aborted: a store is an archive of the topic's data
    # (Spark's own default is read_uncommitted; --kafka-option isolation.level=read_uncommitted stores both)
    opts["kafka.isolation.level"] = "read_committed"
    for key, value in cfg.kafka_option.items():
        opts[key if key.startswith("kafka.") else f"kafka.{key}"] = value
    return opts


