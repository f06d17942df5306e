"""A stored message's Kafka record read back: key, value and headers, as the mapping kept them.

The rule (README, "Keys, tombstones and headers"), for any RocketMQ consumer:
- key: the KEYS property (UTF-8 text), or KAFKA_KEY_BASE64 for a key that is not text or holds a
  property separator; neither for a null or empty key.
- value: the body, but RocketMQ has no empty body: a null value (tombstone) is the one-byte body
  EMPTY_VALUE_BODY with KAFKA_VALUE_NULL=true, a 0-byte value the same body with KAFKA_VALUE_EMPTY=true.
  (Stores written before that rule have an empty body, with KAFKA_VALUE_NULL=true for a tombstone.)
- headers: the KAFKA_HEADERS property when there is one (JSON [[name, base64 value or null], ...],
  every header in order); otherwise every property that is not one of the mapping's own (KEYS,
  UNIQ_KEY, KAFKA_*), in the order the properties string holds them, values UTF-8.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping

from ingest.encode.mapping import (
    PROPERTY_KAFKA_HEADERS,
    PROPERTY_KAFKA_KEY_BASE64,
    PROPERTY_KAFKA_VALUE_EMPTY,
    PROPERTY_KAFKA_VALUE_NULL,
    PROPERTY_VALUE_TRUE,
    RESERVED_PROPERTIES,
)
from store.format import EMPTY_VALUE_BODY, PROPERTY_KEYS


class RestoreError(ValueError):
    """A message's properties do not hold what the mapping writes (not written by this job?)."""


def kafka_key(properties: Mapping[str, str]) -> bytes | None:
    """The record's key (None for a null or empty one)."""
    if PROPERTY_KAFKA_KEY_BASE64 in properties:
        return base64.b64decode(properties[PROPERTY_KAFKA_KEY_BASE64])
    text = properties.get(PROPERTY_KEYS)
    return None if text is None else text.encode("utf-8")


def kafka_value(body: bytes, properties: Mapping[str, str]) -> bytes | None:
    """The record's value: None for a tombstone, b"" for a 0-byte value."""
    null = properties.get(PROPERTY_KAFKA_VALUE_NULL) == PROPERTY_VALUE_TRUE
    if not null and properties.get(PROPERTY_KAFKA_VALUE_EMPTY) != PROPERTY_VALUE_TRUE:
        return bytes(body)
    if bytes(body) not in (EMPTY_VALUE_BODY, b""):
        name = PROPERTY_KAFKA_VALUE_NULL if null else PROPERTY_KAFKA_VALUE_EMPTY
        raise RestoreError(f"property {name}=true, but the body is {len(body)} bytes, not the one-byte marker "
                           f"{EMPTY_VALUE_BODY!r} the mapping writes")
    return None if null else b""


def kafka_headers(properties: Mapping[str, str]) -> list[tuple[str, bytes | None]]:
    """The record's headers, in order (``properties`` as parsed, in the order of the string)."""
    raw = properties.get(PROPERTY_KAFKA_HEADERS)
    if raw is None:
        return [(name, value.encode("utf-8")) for name, value in properties.items()
                if name not in RESERVED_PROPERTIES]
    try:
        pairs = json.loads(raw)
        return [(str(name), None if value is None else base64.b64decode(value, validate=True))
                for name, value in pairs]
    except (ValueError, TypeError) as exc:
        raise RestoreError(f"property {PROPERTY_KAFKA_HEADERS} is not the JSON the mapping writes: {exc}") from exc
