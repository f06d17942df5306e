"""The topics' ``cleanup.policy`` as the brokers give it (DescribeConfigs), read once at a job's start:
a topic whose policy includes ``compact`` is named at start (ingest.lifecycle), stored as an ordinary
RocketMQ topic (docs/kafka-lag-and-compaction.md says why not a compaction topic).

The policy is a list (``compact``, ``delete`` or ``compact,delete``); a topic that compacts keeps its
latest value per key whatever else it deletes by age.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import KafkaError

from ingest.kafka.access import captured_connection_errors
from ingest.kafka.admin_client import admin_client
from ingest.kafka.options import KafkaSourceError

CLEANUP_POLICY = "cleanup.policy"
COMPACTION, DELETE = "compaction", "delete"      # a topic that compacts, or one that only deletes


class TopicConfigError(KafkaSourceError):
    """The brokers did not give the topics' configs (no DescribeConfigs ACL?): the message says so."""


def policy_of(value: str | None) -> str:
    """``compaction`` when Kafka's cleanup.policy list includes compact, else ``delete``."""
    return COMPACTION if "compact" in {p.strip().lower() for p in (value or "").split(",")} else DELETE


def _values(answer: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, str | None]:
    """{topic: cleanup.policy} from kafka-python's describe_configs answer ({"topic": {name: {config:
    {"value": ...}}}})."""
    out: dict[str, str | None] = {}
    for name, entries in answer.get("topic", {}).items():
        entry = entries.get(CLEANUP_POLICY)
        out[name] = None if entry is None else entry.get("value")
    return out


def cleanup_policies(client_params: Mapping[str, Any], topics: Sequence[str] = (), pattern: str | None = None
                     ) -> dict[str, str]:
    """{topic: ``compaction`` | ``delete``} of ``topics`` (or of the topics matching ``pattern`` now)."""
    if not topics and pattern is None:
        return {}
    admin = admin_client(client_params, TopicConfigError, "the topics' cleanup.policy")
    try:
        names = list(topics)
        if pattern is not None:
            regex = re.compile(pattern)
            names = sorted(t for t in admin.list_topics() if regex.fullmatch(t) and not t.startswith("__"))
        if not names:
            return {}
        try:
            with captured_connection_errors():    # the warning below says what failed, in one line
                answer = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t, [CLEANUP_POLICY])
                                                 for t in names], config_filter="all")
        except KafkaError as exc:
            raise TopicConfigError(f"the brokers did not describe the configs of {', '.join(names)} ({exc}): the "
                                   f"job needs DescribeConfigs on them, or give --topic-cleanup-policy for each") \
                from exc
        found = _values(answer)
        return {t: policy_of(found.get(t)) for t in names}
    finally:
        admin.close()
