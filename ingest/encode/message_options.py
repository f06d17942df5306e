"""The message source's options (ingest.encode.message_source), as the driver writes them: its name,
the mapping and codec settings, and the spool's. The read side parses them (ingest.encode.message_reader)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ingest.encode.mapping import MappingConfig
    from sink.handover.spool_task import SpoolTarget
    from store.format import CodecConfig

SHORT_NAME = "kafka-rocketmq"
PREPARE_OPTION = "commitlog.prepare"
# a directory the driver shares with the executors: batches come back through files in it (sink.handover.spool),
# named with the store's tag and sealed with the run's secret key (a name Spark's redaction of plans and
# logs matches: spark.redaction.regex)
SPOOL_OPTION = "commitlog.spoolDir"
SPOOL_TAG_OPTION = "commitlog.spoolTag"
SPOOL_SECRET_OPTION = "commitlog.spoolSecret"


def prepare_option(mapping: MappingConfig, codec: CodecConfig, index_keys: bool = False) -> str:
    """The ``commitlog.prepare`` option value: the mapping and codec settings as JSON, and whether
    the tasks find each record's index keys (ingest.encode.index_keys: the store's index is on)."""
    return json.dumps({"mapping": dataclasses.asdict(mapping), "codec": dataclasses.asdict(codec),
                       "index_keys": bool(index_keys)})


def source_options(kafka_options: Mapping[str, str], mapping: MappingConfig, codec: CodecConfig,
                   spool: SpoolTarget | None = None, index_keys: bool = False) -> dict[str, Any]:
    """``kafka_options`` plus the prepare option (and the spool's, if the batches are to come back
    through files): what ``format("kafka-rocketmq")`` takes. ``index_keys``: the tasks ship each
    record's index keys (for a store whose index is on)."""
    spooled = {} if spool is None else {SPOOL_OPTION: spool.directory, SPOOL_TAG_OPTION: spool.tag,
                                        SPOOL_SECRET_OPTION: spool.key.hex()}
    return {**kafka_options, PREPARE_OPTION: prepare_option(mapping, codec, index_keys), **spooled}
