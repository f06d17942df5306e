"""Kafka record -> RocketMQ message: the mapping's settings and its rules, record by record (map_row);
ingest.encode.mapping_batch applies them to whole Arrow batches (in Spark's executors, see
ingest.encode.prepare). The one Python implementation of every rule and every dead-letter reason:
the C pass (ingest.encode.direct_encode) covers the usual records and hands the others here, and
is tested against these rules.

No Spark: the same rules map a micro-batch in the stream, a replayed range and an exported file,
and are unit-tested on their own. A record that cannot become a RocketMQ message is not
dropped: it leaves with ``dead_reason`` set and its raw Kafka fields kept, for the dead-letter file.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from ingest.kafka.decode import HEADER_TYPE
from sink.handover.schema import VALUE_EMPTY, VALUE_IN_BODY, VALUE_NULL
from store import DeadLetterReason
from store.format import (
    DEFAULT_MAX_MESSAGE_SIZE,
    EMPTY_VALUE_BODY,
    MAX_PROPERTIES_LENGTH,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KAFKA_HEADERS,
    PROPERTY_KAFKA_KEY_BASE64,
    PROPERTY_KAFKA_OFFSET,
    PROPERTY_KAFKA_PARTITION,
    PROPERTY_KAFKA_TOPIC,
    PROPERTY_KAFKA_VALUE_EMPTY,
    PROPERTY_KAFKA_VALUE_NULL,
    PROPERTY_VALUE_TRUE,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    HostAddress,
)
from store.format import tags_code as java_string_hash

# Source coordinates every message carries (PROPERTY_KAFKA_*, named in store.format.constants so the
# store's readers know them), so any reader can deduplicate and prove exactly-once; the key, what a
# one-byte EMPTY_VALUE_BODY stands for and the headers a property would lose (KAFKA_KEY_BASE64,
# KAFKA_VALUE_NULL / KAFKA_VALUE_EMPTY, KAFKA_HEADERS), which ingest.encode.restore reads back.
RESERVED_PROPERTIES = {PROPERTY_KAFKA_TOPIC, PROPERTY_KAFKA_PARTITION, PROPERTY_KAFKA_OFFSET,
                       PROPERTY_UNIQ_KEY, PROPERTY_KEYS, PROPERTY_KAFKA_KEY_BASE64, PROPERTY_KAFKA_HEADERS,
                       PROPERTY_KAFKA_VALUE_NULL, PROPERTY_KAFKA_VALUE_EMPTY}

# RocketMQ's TopicValidator: what a broker accepts as a topic name.
TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_MAX_LENGTH = 127


# An optional column of the Kafka rows: a reason found before the mapping (a replayed file's row
# whose key is not base64, say); a row with one is a dead letter with it, at its offset.
PROBLEM = "problem"
KAFKA_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
    ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", pa.timestamp("us")),
    ("timestampType", pa.int32()), ("headers", HEADER_TYPE),
])

# What map_kafka_batch returns: the store's message columns (no queue_offset: the store numbers each
# queue as it appends),
# the source coordinates, and for dead rows the reason and the raw record.
MAPPED_SCHEMA = pa.schema([
    ("topic", pa.string()), ("queue_id", pa.int32()), ("flag", pa.int32()), ("body", pa.binary()),
    ("properties", pa.string()), ("tags", pa.string()), ("sys_flag", pa.int32()),
    ("born_timestamp", pa.int64()), ("born_host", pa.binary()), ("store_host", pa.binary()),
    ("reconsume_times", pa.int32()), ("prepared_transaction_offset", pa.int64()),
    ("kafka_topic", pa.string()), ("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()),
    ("value_kind", pa.int8()), ("dead_reason", pa.string()), ("dead_code", pa.string()),
    ("raw_key", pa.binary()), ("raw_value", pa.binary()), ("raw_headers", HEADER_TYPE),
    ("raw_timestamp", pa.int64()),
])


class MappingConfigError(ValueError):
    """A mapping setting that cannot work (bad host, bad queue mode)."""


@dataclass(frozen=True)
class MappingConfig:
    """How Kafka records become RocketMQ messages."""

    topic_map: Mapping[str, str] = field(default_factory=dict)
    queue_mode: str = "partition"          # "partition": queueId = Kafka partition; "key-hash"
    queue_count: int = 4                   # queues per topic in key-hash mode
    broker_groups: int = 1                 # N stores share the partitions: queueId = partition div N
    store_host: str = "127.0.0.1:10911"    # the broker address written as STOREHOST
    born_host: str = "127.0.0.1:0"         # BORNHOST when the record has no born-host header
    born_host_header: str = "bornHost"
    envelope: bool = False                 # value is a JSON envelope setting RocketMQ fields
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE

    def __post_init__(self) -> None:
        if self.queue_mode not in ("partition", "key-hash"):
            raise MappingConfigError(f"queue mode {self.queue_mode!r}: use 'partition' or 'key-hash'")
        if self.queue_count < 1:
            raise MappingConfigError(f"queue count {self.queue_count} must be at least 1")
        if self.broker_groups < 1:
            raise MappingConfigError(f"broker groups {self.broker_groups} must be at least 1")
        for name in ("store_host", "born_host"):
            try:
                HostAddress.parse(getattr(self, name))
            except (ValueError, TypeError) as exc:
                raise MappingConfigError(f"{name} {getattr(self, name)!r} is not ip:port: {exc}") from exc

    def partition_queue(self, partition: int) -> int:
        """The queueId of a Kafka partition in partition mode (ingest.broker_groups: group p mod N
        stores partition p as queue p div N)."""
        return partition // self.broker_groups


def uniq_key(topic: str, partition: int, offset: int) -> str:
    """32 upper-case hex chars derived from the source coordinates, the same every time:
    crc32(topic) | partition | offset, big-endian. Unique within a topic by construction; the
    KAFKA_* properties stay the authoritative coordinates."""
    return f"{zlib.crc32(topic.encode('utf-8')):08X}{partition & 0xFFFFFFFF:08X}{offset & 0xFFFFFFFFFFFFFFFF:016X}"


def topic_problem(topic: str | None) -> str | None:
    """Why RocketMQ cannot hold ``topic`` (its TopicValidator's rules), or None."""
    if not topic:
        return "topic is empty"
    if len(topic) > TOPIC_MAX_LENGTH:
        return f"topic is {len(topic)} chars, over the limit of {TOPIC_MAX_LENGTH}"
    if not TOPIC_PATTERN.match(topic):
        return f"topic {topic!r} has characters outside [%|a-zA-Z0-9_-]"
    return None


def _prop(name: str, value: str) -> str:
    return f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"


def _has_separator(s: str) -> bool:
    return NAME_VALUE_SEPARATOR in s or PROPERTY_SEPARATOR in s


@dataclass
class MappedRow:
    """One live record's mapped fields (a dead one raises DeadRecord instead)."""

    topic: str | None
    queue_id: int
    flag: int
    body: bytes | None
    properties: str
    tags: str | None
    born_host: bytes
    value_kind: int = VALUE_IN_BODY


def _decode_text(raw: bytes | None, what: str) -> str:
    try:
        return (raw or b"").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DeadRecord(DeadLetterReason.HEADER_INVALID,
                    f"{what} is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None


class DeadRecord(Exception):
    """Raised by map_row: this record goes to the dead letters with this reason (code and text)."""

    def __init__(self, code: DeadLetterReason, text: str) -> None:
        super().__init__(text)
        self.code = code


def _header_properties(headers: list[dict] | None, cfg: MappingConfig) -> tuple[list[str], str | None, bytes | None]:
    parts: list[str] = []
    tags: str | None = None
    born: bytes | None = None
    headers = list(headers or [])
    seen: dict[str, int] = {}
    for i, h in enumerate(headers):
        # Kafka has neither; an export file written by other tools may (parquet allows both)
        if h is None:
            raise DeadRecord(DeadLetterReason.HEADER_INVALID,
                        f"header {i} is null (a Kafka header has a name and a value or null value)")
        if h["key"] is None:
            raise DeadRecord(DeadLetterReason.HEADER_INVALID,
                        f"header {i} has a null name (a Kafka header's name is text)")
        seen[h["key"]] = seen.get(h["key"], 0) + 1
    lossy = False
    for h in headers:
        name, raw = h["key"], h["value"]
        if name == cfg.born_host_header:
            text = _decode_text(raw, f"header {name}")
            try:
                born = HostAddress.parse(text).to_bytes()
            except (ValueError, TypeError):
                raise DeadRecord(DeadLetterReason.HEADER_INVALID, f"header {name} value {text!r} is not ip:port") from None
            lossy = True       # BORNHOST holds the address, not the header's text: KAFKA_HEADERS keeps it
            continue
        value = _plain_text(raw)
        if (value is None or not name or _has_separator(name) or name in RESERVED_PROPERTIES or seen[name] > 1
                or PROPERTY_SEPARATOR in value):
            lossy = True       # kept in KAFKA_HEADERS below, not as a property of its own
            continue
        if name == PROPERTY_TAGS:
            tags = value
        parts.append(_prop(name, value))
    if lossy:
        parts.append(_prop(PROPERTY_KAFKA_HEADERS, headers_json(headers)))
    return parts, tags, born


def _plain_text(raw: bytes | None) -> str | None:
    """A header value a property can hold as it is: non-empty UTF-8 (RocketMQ's parser drops empty
    values), else None."""
    if not raw:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def headers_json(headers: list[dict]) -> str:
    """The KAFKA_HEADERS value: ASCII JSON, so it holds no property separator."""
    return json.dumps([[h["key"], None if h["value"] is None else base64.b64encode(h["value"]).decode("ascii")]
                       for h in headers], separators=(",", ":"))


def _key_properties(key: bytes | None) -> tuple[list[str], str | None]:
    if not key:
        return [], None
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or _has_separator(text):
        # A binary key has no faithful text form: keep it losslessly instead of as KEYS.
        return [_prop(PROPERTY_KAFKA_KEY_BASE64, base64.b64encode(key).decode())], None
    return [_prop(PROPERTY_KEYS, text)], text


def _envelope_fields(value: bytes | None) -> dict:
    try:
        env = json.loads(value or b"")
    except (ValueError, UnicodeDecodeError) as exc:
        raise DeadRecord(DeadLetterReason.ENVELOPE_INVALID, f"envelope is not JSON: {exc}") from None
    if not isinstance(env, dict):
        raise DeadRecord(DeadLetterReason.ENVELOPE_INVALID, "envelope is not a JSON object")
    if "bodyBase64" in env:
        try:
            body = base64.b64decode(env["bodyBase64"], validate=True)
        except (ValueError, TypeError):
            raise DeadRecord(DeadLetterReason.ENVELOPE_INVALID, "envelope bodyBase64 is not base64") from None
    else:
        body_field = env.get("body", "")
        body = (body_field if isinstance(body_field, str) else json.dumps(body_field)).encode()
    props = env.get("properties") or {}
    if not isinstance(props, dict):
        raise DeadRecord(DeadLetterReason.ENVELOPE_INVALID, "envelope properties is not an object")
    flag = env.get("flag", 0)
    if not isinstance(flag, int) or not -(2**31) <= flag < 2**31:
        raise DeadRecord(DeadLetterReason.ENVELOPE_INVALID, f"envelope flag {flag!r} is not an int32")
    return {"topic": env.get("topic"), "tags": env.get("tags"), "keys": env.get("keys"),
            "properties": {str(k): str(v) for k, v in props.items()}, "body": body, "flag": flag}


def map_row(key: bytes | None, value: bytes | None, topic: str, partition: int, offset: int,
            headers: list[dict] | None, cfg: MappingConfig, default_born: bytes) -> MappedRow:
    header_parts, tags, born = _header_properties(headers, cfg)
    key_parts, key_text = _key_properties(key)
    target_topic = cfg.topic_map.get(topic, topic)
    body, flag = value, 0
    if cfg.envelope:
        env = _envelope_fields(value)
        body, flag = env["body"], env["flag"]
        target_topic = env["topic"] or target_topic
        extra = dict(env["properties"])
        if env["tags"] is not None:
            tags = str(env["tags"])
            extra[PROPERTY_TAGS] = tags
        if env["keys"] is not None:
            keys = " ".join(env["keys"]) if isinstance(env["keys"], list) else str(env["keys"])
            key_parts, key_text = [_prop(PROPERTY_KEYS, keys)], keys
        for name, val in extra.items():
            if name in RESERVED_PROPERTIES - {PROPERTY_KEYS}:
                continue
            if not name or _has_separator(name) or PROPERTY_SEPARATOR in val:
                raise DeadRecord(DeadLetterReason.ENVELOPE_INVALID,
                            f"envelope property {name!r} contains a RocketMQ property separator")
            header_parts.append(_prop(name, val))
    problem = topic_problem(target_topic)
    if problem:
        raise DeadRecord(DeadLetterReason.TOPIC_INVALID, problem)
    if cfg.queue_mode == "partition":
        queue_id = cfg.partition_queue(partition)
    else:
        # RocketMQ's SelectMessageQueueByHash: abs(key.hashCode() % n)
        h = java_string_hash(key_text if key_text is not None else (key or b"").hex())
        queue_id = abs(h) % cfg.queue_count  # == Java's Math.abs(h % n)
    coords = [_prop(PROPERTY_KAFKA_TOPIC, topic), _prop(PROPERTY_KAFKA_PARTITION, str(partition)),
              _prop(PROPERTY_KAFKA_OFFSET, str(offset)), _prop(PROPERTY_UNIQ_KEY, uniq_key(topic, partition, offset))]
    kind, empty_mark = _empty_value(value, body, cfg.envelope)
    properties = "".join(key_parts + header_parts + empty_mark + coords)
    size = len(properties.encode("utf-8"))
    if size > MAX_PROPERTIES_LENGTH:
        raise DeadRecord(DeadLetterReason.PROPERTIES_TOO_LARGE,
                    f"properties are {size} bytes, over the limit of {MAX_PROPERTIES_LENGTH}")
    body_len = len(body or b"")
    if body_len > cfg.max_message_size:
        raise DeadRecord(DeadLetterReason.BODY_TOO_LARGE,
                    f"body is {body_len} bytes, over the limit of {cfg.max_message_size} (maxMessageSize)")
    return MappedRow(target_topic, queue_id, flag, body or EMPTY_VALUE_BODY, properties, tags, born or default_born, kind)


def _empty_value(value: bytes | None, body: bytes | None, envelope: bool) -> tuple[int, list[str]]:
    """(value_kind, the property saying what EMPTY_VALUE_BODY stands for) of a record whose body
    would be empty: RocketMQ has no empty body (see store.format.constants)."""
    if body:
        return VALUE_IN_BODY, []
    if value is None and not envelope:
        return VALUE_NULL, [_prop(PROPERTY_KAFKA_VALUE_NULL, PROPERTY_VALUE_TRUE)]
    return VALUE_EMPTY, [_prop(PROPERTY_KAFKA_VALUE_EMPTY, PROPERTY_VALUE_TRUE)]
