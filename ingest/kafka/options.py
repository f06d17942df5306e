"""The options of the ``kafka-python`` source: Spark's built-in Kafka source options, same meaning.

Spark hands a Python data source its options with lower-cased keys, so every lookup here is by the
lower-cased name; user-facing messages use Spark's spelling.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from ingest.kafka.groups import PartitionGroup, PartitionGroupError
from ingest.kafka.oauth import LOGIN_MODULE, unsecured_token

log = logging.getLogger(__name__)

EARLIEST = -2  # Spark's per-partition JSON marker for "earliest"
LATEST = -1    # ... and for "latest"


class KafkaSourceError(Exception):
    """Base class of every error the Kafka source raises."""


class KafkaOptionError(KafkaSourceError, ValueError):
    """An option of the Kafka source is missing, malformed or not supported."""


class DataLossError(KafkaSourceError):
    """Records the query was meant to read are gone (retention, topic deleted); see failOnDataLoss."""


class KafkaFetchTimeoutError(KafkaSourceError):
    """A task could not fetch the records of its planned offset range in time."""


# Java consumer setting -> kafka-python KafkaConsumer argument, value converter.
_INT, _STR, _BOOL = int, str, (lambda v: str(v).strip().lower() == "true")
CLIENT_SETTINGS: dict[str, tuple[str, Any]] = {
    "bootstrap.servers": ("bootstrap_servers", _STR),
    "client.id": ("client_id", _STR),
    "client.rack": ("client_rack", _STR),
    "security.protocol": ("security_protocol", _STR),
    "sasl.mechanism": ("sasl_mechanism", _STR),
    "sasl.kerberos.service.name": ("sasl_kerberos_service_name", _STR),
    "ssl.key.password": ("ssl_password", _STR),
    "ssl.cipher.suites": ("ssl_ciphers", _STR),
    # kafka-python reads PEM files only; these non-Java names are accepted for convenience
    "ssl.cafile": ("ssl_cafile", _STR),
    "ssl.certfile": ("ssl_certfile", _STR),
    "ssl.keyfile": ("ssl_keyfile", _STR),
    "ssl.crlfile": ("ssl_crlfile", _STR),
    "request.timeout.ms": ("request_timeout_ms", _INT),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", _INT),
    "fetch.min.bytes": ("fetch_min_bytes", _INT),
    "fetch.max.bytes": ("fetch_max_bytes", _INT),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", _INT),
    "max.poll.records": ("max_poll_records", _INT),
    "receive.buffer.bytes": ("receive_buffer_bytes", _INT),
    "send.buffer.bytes": ("send_buffer_bytes", _INT),
    "reconnect.backoff.ms": ("reconnect_backoff_ms", _INT),
    "reconnect.backoff.max.ms": ("reconnect_backoff_max_ms", _INT),
    "retry.backoff.ms": ("retry_backoff_ms", _INT),
    "metadata.max.age.ms": ("metadata_max_age_ms", _INT),
    "connections.max.idle.ms": ("connections_max_idle_ms", _INT),
    "check.crcs": ("check_crcs", _BOOL),
    "isolation.level": ("isolation_level", _STR),
    "client.dns.lookup": ("client_dns_lookup", _STR),
}
# Valid Java settings that mean nothing here: the source never joins a consumer group.
IGNORED_SETTINGS = frozenset({
    "group.id", "session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms",
    "socket.connection.setup.timeout.ms",
    "socket.connection.setup.timeout.max.ms", "ssl.protocol", "ssl.enabled.protocols",
    "allow.auto.create.topics", "exclude.internal.topics",
})
# Spark refuses these too: the source manages them itself.
REFUSED_SETTINGS = {
    "auto.offset.reset": "set startingOffsets instead",
    "enable.auto.commit": "the source never commits offsets to Kafka",
    "key.deserializer": "keys are always returned as binary; cast them in a query",
    "value.deserializer": "values are always returned as binary; cast them in a query",
    "interceptor.classes": "consumer interceptors are not supported",
    "group.instance.id": "the source never joins a consumer group",
}

SOURCE_OPTIONS = frozenset({
    "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
    "startingtimestamp", "endingtimestamp", "startingoffsetsbytimestamp", "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy", "maxoffsetspertrigger", "minpartitions", "failondataloss",
    "includeheaders", "kafkaconsumer.polltimeoutms", "fetchoffset.numretries",
    "fetchoffset.retryintervalms", "groupidprefix", "maxrecordspertask", "path",
    "minoffsetspertrigger", "maxtriggerdelay", "minrecordspertask",
})
# Ours, not Spark's: read only the partitions of one broker group, "K/N" (ingest.broker_groups).
BROKER_GROUP_OPTION = "commitlog.brokerGroup"

_JAAS = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def kafka_client_params(options: Mapping[str, str]) -> dict[str, Any]:
    """The ``kafka.*`` options as kafka-python ``KafkaConsumer`` arguments.

    Raises KafkaOptionError naming the setting when it is refused or unknown.
    """
    params: dict[str, Any] = {}
    ssl_check_hostname: bool | None = None
    for raw_key, value in options.items():
        key = raw_key.lower()
        if not key.startswith("kafka."):
            continue
        setting = key[len("kafka."):]
        if setting in REFUSED_SETTINGS:
            raise KafkaOptionError(f"Kafka option 'kafka.{setting}' is not supported: "
                                   f"{REFUSED_SETTINGS[setting]}")
        if setting in CLIENT_SETTINGS:
            name, convert = CLIENT_SETTINGS[setting]
            try:
                params[name] = convert(value)
            except ValueError:
                raise KafkaOptionError(f"option 'kafka.{setting}' must be a number, got {value!r}") from None
        elif setting == "sasl.jaas.config":
            params.update(_jaas_credentials(value))
        elif setting == "ssl.truststore.location":
            params["ssl_cafile"] = _pem_only(setting, value, options)
        elif setting == "ssl.keystore.location":
            # a PEM keystore holds the certificate chain and the key; Python's ssl reads both from it
            params["ssl_certfile"] = _pem_only(setting, value, options)
        elif setting in ("ssl.truststore.password", "ssl.keystore.password"):
            if "ssl_password" not in params:
                params["ssl_password"] = value
        elif setting in ("ssl.truststore.type", "ssl.keystore.type"):
            pass      # read with the store's location (_pem_only)
        elif setting == "ssl.endpoint.identification.algorithm":
            ssl_check_hostname = value.strip().lower() == "https"
        elif setting in IGNORED_SETTINGS:
            log.info("Kafka option 'kafka.%s' has no effect on the kafka-python source", setting)
        else:
            raise KafkaOptionError(
                f"unknown Kafka option 'kafka.{setting}': the kafka-python source understands "
                f"{', '.join(sorted(['kafka.' + k for k in CLIENT_SETTINGS]))}, kafka.sasl.jaas.config, "
                f"kafka.ssl.truststore.location / kafka.ssl.keystore.location (PEM) and "
                f"kafka.ssl.endpoint.identification.algorithm")
    if ssl_check_hostname is not None:
        params["ssl_check_hostname"] = ssl_check_hostname
    if "bootstrap_servers" not in params:
        raise KafkaOptionError("option 'kafka.bootstrap.servers' must be specified "
                               "(e.g. .option('kafka.bootstrap.servers', 'host1:9092,host2:9092'))")
    return params


def _jaas_credentials(value: str) -> dict[str, Any]:
    if LOGIN_MODULE in value:
        provider = unsecured_token(value)
        if provider is None:
            raise KafkaOptionError("option 'kafka.sasl.jaas.config': OAuthBearerLoginModule needs "
                                   "unsecuredLoginStringClaim_sub=\"<principal>\" (the kafka-python source "
                                   "has no token endpoint login)")
        return {"sasl_oauth_token_provider": provider}
    fields = {k.lower(): v.replace('\\"', '"') for k, v in _JAAS.findall(value)}
    if "username" not in fields or "password" not in fields:
        raise KafkaOptionError("option 'kafka.sasl.jaas.config' must hold username=\"...\" and "
                               "password=\"...\" (PlainLoginModule / ScramLoginModule), or be an "
                               "OAuthBearerLoginModule with unsecuredLoginStringClaim_sub; other login "
                               "modules are not supported by kafka-python")
    return {"sasl_plain_username": fields["username"], "sasl_plain_password": fields["password"]}


def _pem_only(setting: str, value: str, options: Mapping[str, str]) -> str:
    store_type = setting.replace(".location", ".type")
    kind = str(options.get(f"kafka.{store_type}", "PEM" if value.endswith((".pem", ".crt")) else "")).upper()
    if kind != "PEM":
        raise KafkaOptionError(f"option 'kafka.{setting}' = {value!r}: kafka-python reads PEM files only; "
                               f"convert the JKS/PKCS12 store to PEM and set 'kafka.{store_type}' = 'PEM'")
    return value


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends: ``kind`` is earliest | latest | offsets | timestamp | timestamps."""

    kind: str
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)   # kind "offsets" (-2/-1 allowed)
    timestamp: int | None = None                                        # kind "timestamp"
    timestamps: dict[tuple[str, int], int] = field(default_factory=dict)  # kind "timestamps"


@dataclass(frozen=True)
class KafkaSourceOptions:
    client_params: dict[str, Any]
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: tuple[tuple[str, int], ...] | None
    starting: OffsetSpec
    ending: OffsetSpec
    timestamp_strategy: str            # "error" | "latest": no offset for a starting timestamp
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    max_records_per_task: int          # split a partition's range into tasks of at most this many offsets
    fail_on_data_loss: bool
    include_headers: bool
    poll_timeout_ms: int
    # Ours, not Spark's: consecutive small ranges are read by one task until it holds this many
    # offsets (0: one task per range, as Spark's connector). A Python read task costs tens of ms
    # whatever it reads (a worker round trip, unpickling the reader), a JVM task a few.
    min_records_per_task: int = 10_000
    min_offsets_per_trigger: int | None = None   # with max_trigger_delay_ms: Spark's admission control
    max_trigger_delay_ms: int = 15 * 60_000
    fetch_offset_retries: int = 3                # offset lookups retried on a Kafka error, as Spark does
    fetch_offset_retry_interval_ms: int = 1000
    # how long the driver's offset lookups wait out brokers that cannot be reached (restarting, a
    # network blip) before that counts as a failed attempt: kafka.default.api.timeout.ms, as a Java
    # consumer's calls block that long
    api_timeout_ms: int = 60_000
    broker_group: PartitionGroup | None = None   # read only the partitions p with p mod N == K

    @property
    def bootstrap_servers(self) -> str:
        return str(self.client_params["bootstrap_servers"])


def parse_options(options: Mapping[str, str], streaming: bool) -> KafkaSourceOptions:
    """Validate Spark-style options (keys in any case) the way Spark's Kafka source does."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    for key in opts:
        if not key.startswith("kafka.") and key not in SOURCE_OPTIONS and key != BROKER_GROUP_OPTION.lower():
            raise KafkaOptionError(f"option {key!r} is not an option of the Kafka source (Spark's Kafka source "
                                   f"options are {', '.join(sorted(SOURCE_OPTIONS - {'path'}))}, and kafka.* "
                                   f"consumer settings)")
    strategies = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k, "").strip()]
    if len(strategies) != 1:
        raise KafkaOptionError("exactly one of the options 'subscribe', 'subscribePattern' or 'assign' "
                               f"must be specified, got {len(strategies)}")
    subscribe = pattern = assign = None
    if "subscribe" in strategies:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise KafkaOptionError("option 'subscribe' names no topic")
    elif "subscribepattern" in strategies:
        pattern = opts["subscribepattern"].strip()
        try:
            re.compile(pattern)
        except re.error as exc:
            raise KafkaOptionError(f"option 'subscribePattern' is not a valid regex: {exc}") from None
    else:
        assign = tuple(sorted(_parse_assign(opts["assign"])))

    starting = _offset_spec(opts, "starting", default="latest" if streaming else "earliest")
    ending = _offset_spec(opts, "ending", default="latest")
    if streaming and any(k in opts for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")):
        raise KafkaOptionError("ending offset options ('endingOffsets', 'endingTimestamp') are for batch "
                               "queries only; a streaming query has no end")
    if starting.kind == "latest" and not streaming:
        raise KafkaOptionError("option 'startingOffsets' = 'latest' is not valid for batch queries")
    if ending.kind == "earliest" or EARLIEST in ending.offsets.values():
        raise KafkaOptionError("option 'endingOffsets' cannot be 'earliest' (-2) for a batch query")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise KafkaOptionError("option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
                               f"got {strategy!r}")
    return KafkaSourceOptions(
        client_params=kafka_client_params(opts),
        subscribe=subscribe, subscribe_pattern=pattern, assign=assign,
        starting=starting, ending=ending, timestamp_strategy=strategy,
        max_offsets_per_trigger=_positive(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger"),
        min_partitions=_positive(opts, "minpartitions", "minPartitions"),
        max_records_per_task=_positive(opts, "maxrecordspertask", "maxRecordsPerTask") or 1_000_000,
        min_records_per_task=_count(opts, "minrecordspertask", "minRecordsPerTask", 10_000),
        fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
        include_headers=_bool(opts, "includeheaders", "includeHeaders", False),
        poll_timeout_ms=_positive(opts, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs") or 120_000,
        min_offsets_per_trigger=_min_offsets(opts, streaming),
        max_trigger_delay_ms=_duration_ms(opts.get("maxtriggerdelay", "15m"), "maxTriggerDelay"),
        fetch_offset_retries=_count(opts, "fetchoffset.numretries", "fetchOffset.numRetries", 3),
        fetch_offset_retry_interval_ms=_count(opts, "fetchoffset.retryintervalms", "fetchOffset.retryIntervalMs",
                                              1000),
        api_timeout_ms=_count(opts, "kafka.default.api.timeout.ms", "kafka.default.api.timeout.ms", 60_000),
        broker_group=_broker_group(opts),
    )


def _broker_group(opts: Mapping[str, str]) -> PartitionGroup | None:
    text = opts.get(BROKER_GROUP_OPTION.lower(), "").strip()
    if not text:
        return None
    try:
        return PartitionGroup.parse(text, f"option '{BROKER_GROUP_OPTION}'")
    except PartitionGroupError as exc:
        raise KafkaOptionError(str(exc)) from None


def _min_offsets(opts: Mapping[str, str], streaming: bool) -> int | None:
    value = _positive(opts, "minoffsetspertrigger", "minOffsetsPerTrigger")
    if value is not None and not streaming:
        raise KafkaOptionError("option 'minOffsetsPerTrigger' is for streaming queries only")
    maximum = _positive(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    if value is not None and maximum is not None and value > maximum:
        raise KafkaOptionError(f"option 'minOffsetsPerTrigger' ({value}) is above 'maxOffsetsPerTrigger' ({maximum})")
    return value


def _count(opts: Mapping[str, str], key: str, name: str, default: int) -> int:
    if key not in opts:
        return default
    try:
        value = int(opts[key])
    except ValueError:
        raise KafkaOptionError(f"option '{name}' must be a non-negative integer, got {opts[key]!r}") from None
    if value < 0:
        raise KafkaOptionError(f"option '{name}' must be a non-negative integer, got {value}")
    return value


_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(text: str, name: str) -> int:
    """Spark's time strings: 15m, 30s, 500ms, 2h (a bare number is milliseconds)."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", text.lower())
    if not m or (m.group(2) and m.group(2) not in _UNITS_MS):
        raise KafkaOptionError(f"option '{name}' must be a duration like 15m, 30s or 500ms, got {text!r}")
    return int(m.group(1)) * _UNITS_MS[m.group(2) or "ms"]


def _positive(opts: Mapping[str, str], key: str, name: str) -> int | None:
    if key not in opts:
        return None
    try:
        value = int(opts[key])
    except ValueError:
        raise KafkaOptionError(f"option '{name}' must be a positive integer, got {opts[key]!r}") from None
    if value <= 0:
        raise KafkaOptionError(f"option '{name}' must be a positive integer, got {value}")
    return value


def _bool(opts: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    value = opts.get(key, str(default)).strip().lower()
    if value not in ("true", "false"):
        raise KafkaOptionError(f"option '{name}' must be 'true' or 'false', got {opts[key]!r}")
    return value == "true"


def _parse_assign(text: str) -> set[tuple[str, int]]:
    data = _json(text, "assign", '{"topicA":[0,1],"topicB":[2,4]}')
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise KafkaOptionError('option \'assign\' must be a JSON object of topic -> partition list, '
                               'like {"topicA":[0,1],"topicB":[2,4]}')
    try:
        return {(str(t), int(p)) for t, parts in data.items() for p in parts}
    except (TypeError, ValueError):
        raise KafkaOptionError(f"option 'assign' has a partition that is not an integer: {text}") from None


def _json(text: str, name: str, example: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise KafkaOptionError(f"option '{name}' is not valid JSON ({exc}); expected like {example}") from None


def _per_partition(text: str, name: str) -> dict[tuple[str, int], int]:
    example = '{"topicA":{"0":23,"1":-2},"topicB":{"0":-1}}'
    data = _json(text, name, example)
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise KafkaOptionError(f"option '{name}' must be a JSON object like {example}")
    try:
        return {(str(t), int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}
    except (TypeError, ValueError):
        raise KafkaOptionError(f"option '{name}' must map partition numbers to integer offsets: {text}") from None


def _offset_spec(opts: Mapping[str, str], which: str, default: str) -> OffsetSpec:
    by_ts, ts, offs = (opts.get(f"{which}offsetsbytimestamp"), opts.get(f"{which}timestamp"),
                       opts.get(f"{which}offsets"))
    if by_ts is not None:
        return OffsetSpec("timestamps", timestamps=_per_partition(by_ts, f"{which}OffsetsByTimestamp"))
    if ts is not None:
        try:
            return OffsetSpec("timestamp", timestamp=int(ts))
        except ValueError:
            raise KafkaOptionError(f"option '{which}Timestamp' must be milliseconds since the epoch, "
                                   f"got {ts!r}") from None
    text = (offs or default).strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetSpec(text.lower())
    offsets = _per_partition(text, f"{which}Offsets")
    bad = {tp: o for tp, o in offsets.items() if o < EARLIEST}
    if bad:
        raise KafkaOptionError(f"option '{which}Offsets' has offsets below -2 (-2 = earliest, -1 = latest): {bad}")
    return OffsetSpec("offsets", offsets=offsets)
