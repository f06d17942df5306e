"""An admin client for the job's own Kafka requests beside the source (its consumer group, its
topics' configs), made from the source's client settings: a failure to reach the brokers is the
caller's error class, in one line."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka import KafkaAdminClient
from kafka.errors import KafkaError


def admin_client(client_params: Mapping[str, Any], error: type[Exception], what: str) -> KafkaAdminClient:
    """An admin client (it refuses settings it does not know: the consumer's are left out); ``error``
    raised, naming ``what`` it was for, when the brokers cannot be reached."""
    known = KafkaAdminClient.DEFAULT_CONFIG
    try:
        return KafkaAdminClient(**{k: v for k, v in client_params.items() if k in known})
    except KafkaError as exc:
        raise error(f"{what}: cannot reach Kafka at {client_params.get('bootstrap_servers')}: {exc}") from exc
