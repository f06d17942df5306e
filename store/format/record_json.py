"""The golden ``*.decoded.jsonl`` object of one record (also ``commitlog dump --json``)."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from store.format.codec import (
    CodecConfig,
    DecodedMessage,
    body_crc,
    parse_prop_crc,
)
from store.format.constants import (
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    COMPRESSION_TYPE_MASK,
    CRC32_RESERVED_LEN,
    DEFAULT_MESSAGE_DELAY_LEVEL,
    INNER_BATCH_FLAG,
    MULTI_TAGS_FLAG,
    NEED_UNWRAP_FLAG,
    POS_BORNHOST,
    PROPERTY_CRC32,
    PROPERTY_DELAY,
    SCHEDULE_TOPIC,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_TYPE_MASK,
)
from store.format.layout import RecordSpans, host_lengths, record_length, record_spans
from store.format.properties import java_parse_int, java_utf8, tags_code, utf16_sort_key

BODY_INLINE_LIMIT = 64 * 1024            # bodies over 64 KiB are given by sha256 only
_KNOWN_SYS_FLAG_BITS = 0x7FF
_TRANSACTION_NAMES = {0x0: "NOT", 0x4: "PREPARED", 0x8: "COMMIT", 0xC: "ROLLBACK"}
_COMPRESSION_NAMES = {1: "LZ4", 2: "ZSTD", 3: "ZLIB"}
_DELAY_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def delay_level_millis(levels: str = DEFAULT_MESSAGE_DELAY_LEVEL) -> tuple[int, ...]:
    """messageDelayLevel parsed to milliseconds; index 0 is level 1."""
    return tuple(int(tok[:-1]) * _DELAY_UNITS_MS[tok[-1]] for tok in levels.split())


_DEFAULT_DELAYS = delay_level_millis()


def consume_queue_tags_code(topic: str, properties: dict[str, str], store_timestamp: int,
                            delays_ms: tuple[int, ...] | list[int] | None = None) -> int:
    """The tagsCode of the consume-queue unit (FORMAT §12): TAGS.hashCode(), or for
    SCHEDULE_TOPIC_XXXX with DELAY > 0 the delivery time (level capped at the highest)."""
    code = tags_code(properties.get("TAGS"))
    delay = java_parse_int(properties.get(PROPERTY_DELAY))
    if topic == SCHEDULE_TOPIC and delay is not None:
        delays = delays_ms or _DEFAULT_DELAYS
        level = min(delay, len(delays))
        if level > 0:
            code = store_timestamp + delays[level - 1]
    return code


def _hex32(v: int) -> str:
    return f"0x{v & 0xFFFFFFFF:08X}"


def sys_flag_bits(sys_flag: int) -> dict[str, Any]:
    bits = (sys_flag & COMPRESSION_TYPE_MASK) >> 8
    compressed = bool(sys_flag & COMPRESSED_FLAG)
    if bits == 0:
        # CompressionType.findByValue(0) is ZLIB: older clients compressed without type bits
        name = "ZLIB" if compressed else "NONE(0)"
    else:
        name = _COMPRESSION_NAMES.get(bits, f"UNKNOWN({bits})")
    return {
        "compressed": compressed,
        "multiTags": bool(sys_flag & MULTI_TAGS_FLAG),
        "transaction": _TRANSACTION_NAMES[sys_flag & TRANSACTION_TYPE_MASK],
        "bornHostV6": bool(sys_flag & BORNHOST_V6_FLAG),
        "storeHostV6": bool(sys_flag & STOREHOSTADDRESS_V6_FLAG),
        "needUnwrap": bool(sys_flag & NEED_UNWRAP_FLAG),
        "innerBatch": bool(sys_flag & INNER_BATCH_FLAG),
        "compressionTypeBits": bits,
        "compressionType": name,
        "otherBits": _hex32(sys_flag & ~_KNOWN_SYS_FLAG_BITS),
    }


def _host_json(host, raw: bytes) -> dict[str, Any]:
    return {"ip": host.ip, "port": host.port, "ipv6": len(raw) == 20, "hex": raw.hex()}


def dispatch_check(decoded: DecodedMessage, record: memoryview | None = None,
                   config: CodecConfig | None = None) -> dict[str, Any]:
    """What checkMessageAndReturnSize hands the dispatcher for this record (the ``check`` object).
    ``record`` (the record's bytes) is needed only for the whole-record CRC."""
    config = config or CodecConfig()
    fail = {"success": False, "msgSize": -1}
    body_len = len(decoded.body)
    if config.check_crc_on_recover and not config.force_verify_prop_crc and body_len > 0 \
            and body_crc(decoded.body) != decoded.body_crc:
        return fail
    delay = decoded.properties.get(PROPERTY_DELAY)
    if decoded.topic == SCHEDULE_TOPIC and delay is not None and java_parse_int(delay) is None:
        return fail          # Integer.parseInt throws; the whole check fails
    if config.check_crc_on_recover and config.force_verify_prop_crc:
        expected = parse_prop_crc(decoded.properties.get(PROPERTY_CRC32))
        if expected <= 0 or record is None or \
                body_crc(record[:decoded.total_size - CRC32_RESERVED_LEN]) != expected:
            return fail
    spans = None if record is None else _spans(decoded, record)
    topic_len = len(java_utf8(decoded.topic)) if spans is None else spans.topic_length
    props_len = len(java_utf8(decoded.properties_string)) if spans is None else spans.properties_length
    if record_length(decoded.version, decoded.sys_flag, body_len, topic_len, props_len) != decoded.total_size:
        return {"success": False, "msgSize": decoded.total_size}
    has_props = props_len > 0
    return {
        "success": True,
        "msgSize": decoded.total_size,
        "topic": decoded.topic,
        "queueId": decoded.queue_id,
        "commitLogOffset": decoded.physical_offset,
        "consumeQueueOffset": decoded.queue_offset,
        "tagsCode": consume_queue_tags_code(decoded.topic, decoded.properties, decoded.store_timestamp)
        if has_props else 0,
        "storeTimestamp": decoded.store_timestamp,
        "keys": decoded.properties.get("KEYS") if has_props else "",
        "uniqKey": decoded.properties.get("UNIQ_KEY") if has_props else None,
        "sysFlag": decoded.sys_flag,
        "preparedTransactionOffset": decoded.prepared_transaction_offset,
    }


def _spans(decoded: DecodedMessage, record: memoryview) -> RecordSpans:
    """The walk of a record decode_message has read (so none of its fields runs past TOTALSIZE)."""
    mv = memoryview(record)
    return record_spans(mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B"), 0, decoded.total_size,
                        decoded.version)


def message_to_json(decoded: DecodedMessage, offset: int, segment: str, segment_pos: int,
                    record: memoryview | bytes | None = None, config: CodecConfig | None = None) -> dict[str, Any]:
    """The ``{"type": "message", ...}`` line of the golden decoded.jsonl for one record at global
    ``offset`` (position ``segment_pos`` in file ``segment``). ``record`` = the record's bytes,
    for the exact topic/properties bytes and the whole-record CRC; re-encoded when omitted."""
    rec = memoryview(record) if record is not None else None
    body = decoded.body
    computed = body_crc(body)
    if rec is not None:
        spans = _spans(decoded, rec)
        topic_len, props_len = spans.topic_length, spans.properties_length
        topic_raw = bytes(rec[spans.topic_pos:spans.topic_pos + topic_len])
        props_raw = bytes(rec[spans.properties_pos:spans.properties_end])
        ends_at = spans.properties_end
    else:
        topic_raw = java_utf8(decoded.topic)
        props_raw = java_utf8(decoded.properties_string)
        topic_len, props_len = len(topic_raw), len(props_raw)
        ends_at = decoded.total_size
    born_raw = decoded.born_host.to_bytes()
    store_raw = decoded.store_host_bytes or decoded.store_host.to_bytes()
    if rec is not None:
        born_raw = bytes(rec[POS_BORNHOST:POS_BORNHOST + host_lengths(decoded.sys_flag)[0]])
    out: dict[str, Any] = {
        "type": "message",
        "offset": offset,
        "segment": segment,
        "segmentPos": segment_pos,
        "totalSize": decoded.total_size,
        "magicCode": _hex32(decoded.magic_code),
        "version": decoded.version,
        "bodyCRC": decoded.body_crc,
        "bodyCRCComputed": computed,
        "bodyCRCOk": computed == decoded.body_crc,
        "queueId": decoded.queue_id,
        "flag": decoded.flag,
        "queueOffset": decoded.queue_offset,
        "physicalOffset": decoded.physical_offset,
        "physicalOffsetMatchesPosition": decoded.physical_offset == offset,
        "sysFlag": decoded.sys_flag,
        "sysFlagHex": _hex32(decoded.sys_flag),
        "sysFlagBits": sys_flag_bits(decoded.sys_flag),
        "bornTimestamp": decoded.born_timestamp,
        "bornHost": _host_json(decoded.born_host, born_raw),
        "storeTimestamp": decoded.store_timestamp,
        "storeHost": _host_json(decoded.store_host, store_raw),
        "reconsumeTimes": decoded.reconsume_times,
        "preparedTransactionOffset": decoded.prepared_transaction_offset,
        "bodyLength": len(body),
        "bodySha256": hashlib.sha256(body).hexdigest(),
    }
    if len(body) <= BODY_INLINE_LIMIT:
        out["bodyBase64"] = base64.b64encode(body).decode("ascii")
    out.update({
        "topicLength": topic_len,
        "topic": decoded.topic,
        "topicHex": topic_raw.hex(),
        "propertiesLength": props_len,
        "propertiesString": decoded.properties_string,
        "propertiesHex": props_raw.hex(),
        "properties": {k: decoded.properties[k] for k in sorted(decoded.properties, key=utf16_sort_key)},
        "msgId": decoded.msg_id,
        "recordEndsAt": ends_at,
        "check": dispatch_check(decoded, rec, config),
    })
    if PROPERTY_CRC32 in decoded.properties and rec is not None:
        out["propertiesCRCOk"] = properties_crc_ok(decoded, rec)
    return out


def properties_crc_ok(decoded: DecodedMessage, record: memoryview | bytes) -> bool:
    """The whole-record CRC (the ``__CRC32#`` property, FORMAT.md) matches the record's bytes before it."""
    expected = parse_prop_crc(decoded.properties.get(PROPERTY_CRC32))
    return expected > 0 and body_crc(memoryview(record)[:decoded.total_size - CRC32_RESERVED_LEN]) == expected
