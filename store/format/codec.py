"""Encode and decode one CommitLog message record exactly as the broker writes it (FORMAT §3-§10).

``encode_message`` plays MessageExtEncoder.encode + DefaultAppendMessageCallback.doAppend for one
record at a given PHYSICALOFFSET; ``decode_message`` plays MessageDecoder.decode.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from store.errors import CorruptRecordError, FieldLimitError, InvalidMessageError
from store.format.constants import (
    BORNHOST_V6_FLAG,
    CRC32_RESERVED_LEN,
    DEFAULT_MAX_MESSAGE_SIZE,
    END_FILE_MIN_BLANK_LENGTH,
    FIXED_PART_LENGTH,
    IPV6_HOST_LENGTH,
    MAX_PROPERTIES_LENGTH,
    MAX_RECORD_OVERHEAD,
    MAX_TOPIC_LENGTH_V1,
    MAX_TOPIC_LENGTH_V2,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    NAME_VALUE_SEPARATOR,
    POS_BORNHOST,
    PROPERTY_CRC32,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from store.format.crc import crc32, crc32_many
from store.format import layout
from store.format.hosts import HostAddress
from store.format.layout import record_length
from store.format.properties import delete_property, java_string, java_utf8, string_to_properties, utf16_length

_HEAD = layout.HEAD_TO_BORNHOST
_I64 = struct.Struct(">q")
# RECONSUMETIMES PREPAREDTRANSACTIONOFFSET BODYLENGTH
_TAIL = struct.Struct(">iqi")
_I16 = struct.Struct(">h")
_CRC_PREFIX = (PROPERTY_CRC32 + NAME_VALUE_SEPARATOR).encode("ascii")
_CRC_SUFFIX = PROPERTY_SEPARATOR.encode("ascii")


@dataclass
class CodecConfig:
    """The MessageStoreConfig settings that change record bytes or their checks."""

    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    auto_message_version_on_topic_len: bool = True
    enabled_append_prop_crc: bool = False
    force_verify_prop_crc: bool = False
    check_crc_on_recover: bool = True
    # the largest record the store's segments can hold (segment size - 8, room for the BLANK);
    # None: no store in view. A record over it can never be written: a writer refuses it up front.
    segment_room: int | None = None

    @property
    def max_record_size(self) -> int:
        # MessageExtEncoder: maxMessageSize + 64 KiB, capped at Integer.MAX_VALUE.
        limit = min(self.max_message_size + MAX_RECORD_OVERHEAD, 0x7FFFFFFF)
        return limit if self.segment_room is None else min(limit, self.segment_room)


@dataclass
class Message:
    """What a producer/broker hands the store."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: str = ""
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: HostAddress = field(default_factory=lambda: HostAddress("127.0.0.1", 0))
    store_timestamp: int = 0
    store_host: HostAddress = field(default_factory=lambda: HostAddress("127.0.0.1", 10911))
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    version: int | None = None


@dataclass
class DecodedMessage:
    """Everything read back from one record; ``body`` is a zero-copy view into the buffer."""

    total_size: int
    magic_code: int
    version: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: HostAddress
    store_timestamp: int
    store_host: HostAddress
    reconsume_times: int
    prepared_transaction_offset: int
    body: memoryview
    topic: str
    properties_string: str
    properties: dict[str, str]
    store_host_bytes: bytes = b""

    @property
    def msg_id(self) -> str:
        """FORMAT §10: STOREHOST address and port, then PHYSICALOFFSET, as upper-case hex."""
        raw = self.store_host_bytes or self.store_host.to_bytes()
        return (raw + _I64.pack(self.physical_offset)).hex().upper()

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def transaction_type(self) -> int:
        return self.sys_flag & TRANSACTION_TYPE_MASK


def message_version(topic: str, config: CodecConfig, forced: int | None = None) -> int:
    """CommitLog.asyncPutMessage: V2 only when auto versioning is on and the topic has more than
    127 UTF-16 chars (not bytes); ``forced`` (1 or 2) overrides."""
    if forced is not None:
        if forced not in (1, 2):
            raise InvalidMessageError(f"version is {forced!r}; expected 1, 2 or None (the broker's rule)")
        return forced
    if config.auto_message_version_on_topic_len and utf16_length(topic) > MAX_TOPIC_LENGTH_V1:
        return 2
    return 1


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """UtilAll.crc32: CRC-32 masked with 0x7FFFFFFF."""
    return crc32(body) & 0x7FFFFFFF


def prepare_properties(properties: str, config: CodecConfig) -> bytes:
    """The properties bytes the broker writes before the CRC reservation (if any): an incoming
    ``__CRC32#`` is deleted and a missing last \\x02 appended when the prop CRC is enabled."""
    if config.enabled_append_prop_crc:
        data = java_utf8(delete_property(properties, PROPERTY_CRC32))
        if data and data[-1] != 0x02:
            data += b"\x02"
        return data
    return java_utf8(properties)


def check_limits(body_length: int, topic_length: int, version: int, properties_length: int,
                 total: int, config: CodecConfig, row: int | None = None) -> None:
    """The broker's limits, in its order (properties, body, whole record) plus the topic length
    field's range. Raises FieldLimitError naming the field, the size and the limit."""
    where = f"row {row}" if row is not None else ""
    if properties_length > MAX_PROPERTIES_LENGTH:
        raise FieldLimitError("properties", properties_length, MAX_PROPERTIES_LENGTH,
                              _detail(where, "PROPERTIESLENGTH is an int16 (PROPERTIES_SIZE_EXCEEDED)"))
    topic_limit = MAX_TOPIC_LENGTH_V2 if version == 2 else MAX_TOPIC_LENGTH_V1
    if topic_length > topic_limit:
        raise FieldLimitError("topic", topic_length, topic_limit,
                              _detail(where, f"UTF-8 bytes of a V{version} topic"))
    if body_length > config.max_message_size:
        raise FieldLimitError("body", body_length, config.max_message_size,
                              _detail(where, "maxMessageSize (MESSAGE_ILLEGAL)"))
    if total > config.max_record_size:
        why = "whole record, maxMessageSize + 64 KiB (MESSAGE_ILLEGAL)"
        if config.segment_room is not None and config.segment_room < config.max_message_size + MAX_RECORD_OVERHEAD:
            why = (f"whole record, over what a segment of {config.segment_room + END_FILE_MIN_BLANK_LENGTH} bytes "
                   f"holds (--segment-size, less 8 for its BLANK)")
        raise FieldLimitError("message", total, config.max_record_size, _detail(where, why))


def _detail(where: str, what: str) -> str:
    return f"{where}: {what}" if where else what


def encode_message(msg: Message, config: CodecConfig | None = None) -> bytes:
    """The record the broker writes for ``msg`` at ``msg.physical_offset``."""
    config = config or CodecConfig()
    born, store = HostAddress.parse(msg.born_host), HostAddress.parse(msg.store_host)
    born_bytes, store_bytes = born.to_bytes(), store.to_bytes()
    sys_flag = msg.sys_flag
    if len(born_bytes) == IPV6_HOST_LENGTH:
        sys_flag |= BORNHOST_V6_FLAG
    elif sys_flag & BORNHOST_V6_FLAG:
        raise InvalidMessageError(f"sys_flag {sys_flag:#x} has BORNHOST_V6_FLAG but born host {born} is IPv4")
    if len(store_bytes) == IPV6_HOST_LENGTH:
        sys_flag |= STOREHOSTADDRESS_V6_FLAG
    elif sys_flag & STOREHOSTADDRESS_V6_FLAG:
        raise InvalidMessageError(
            f"sys_flag {sys_flag:#x} has STOREHOSTADDRESS_V6_FLAG but store host {store} is IPv4")

    props = prepare_properties(msg.properties, config)
    reserved = CRC32_RESERVED_LEN if config.enabled_append_prop_crc else 0
    props_len = len(props) + reserved
    topic = java_utf8(msg.topic)
    version = message_version(msg.topic, config, msg.version)
    body = msg.body if msg.body is not None else b""
    total = record_length(version, sys_flag, len(body), len(topic), props_len)
    check_limits(len(body), len(topic), version, props_len, total, config)

    tx = sys_flag & TRANSACTION_TYPE_MASK
    queue_offset = 0 if tx in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE) else msg.queue_offset
    out = bytearray(total)
    try:
        _HEAD.pack_into(out, 0, total, MESSAGE_MAGIC_CODE_V2 if version == 2 else MESSAGE_MAGIC_CODE,
                        body_crc(body), msg.queue_id, msg.flag, queue_offset, msg.physical_offset,
                        sys_flag, msg.born_timestamp)
        p = _HEAD.size
        out[p:p + len(born_bytes)] = born_bytes
        p += len(born_bytes)
        _I64.pack_into(out, p, msg.store_timestamp)
        p += 8
        out[p:p + len(store_bytes)] = store_bytes
        p += len(store_bytes)
        _TAIL.pack_into(out, p, msg.reconsume_times, msg.prepared_transaction_offset, len(body))
    except struct.error as exc:
        raise InvalidMessageError(f"a numeric field does not fit its int32/int64 slot: {exc}") from None
    p += _TAIL.size
    out[p:p + len(body)] = body
    p += len(body)
    if version == 2:
        _I16.pack_into(out, p, len(topic))
        p += 2
    else:
        out[p] = len(topic)
        p += 1
    out[p:p + len(topic)] = topic
    p += len(topic)
    _I16.pack_into(out, p, props_len)
    p += 2
    out[p:p + len(props)] = props
    if reserved:
        apply_prop_crc(out, 0, total)
    return bytes(out)


def prop_crc_digits(crc: int) -> bytes:
    """MessageDecoder.createCrc32: ten ASCII digits, least significant first, '0'-padded."""
    digits = bytearray(10)
    for i in range(10):
        digits[i] = 0x30 + crc % 10
        crc //= 10
    return bytes(digits)


def apply_prop_crc(buf: bytearray | memoryview | np.ndarray, pos: int, size: int) -> None:
    """Write ``__CRC32#\\x01<digits>\\x02`` over the last 20 bytes of the record at ``pos``: the
    masked CRC32 of its first ``size - 20`` bytes (after QUEUEOFFSET, PHYSICALOFFSET and
    STORETIMESTAMP are final)."""
    mv = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf.cast("B")
    end = pos + size - CRC32_RESERVED_LEN
    crc = crc32(mv[pos:end]) & 0x7FFFFFFF
    mv[end:pos + size] = _CRC_PREFIX + prop_crc_digits(crc) + _CRC_SUFFIX


_POW10 = 10 ** np.arange(10, dtype=np.int64)
_CRC_PAIR_TEMPLATE = np.frombuffer(_CRC_PREFIX + b"0" * 10 + _CRC_SUFFIX, dtype=np.uint8)


def apply_prop_crcs(buf: np.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> None:
    """apply_prop_crc for many records of one uint8 buffer: the CRCs are one CRC-32 call per
    record, the 20-byte pairs are written vectorized."""
    n = len(offsets)
    if n == 0:
        return
    arr = np.frombuffer(memoryview(buf).cast("B"), dtype=np.uint8)
    offsets = np.asarray(offsets, dtype=np.int64)
    signed = np.asarray(sizes, dtype=np.int64) - CRC32_RESERVED_LEN
    ends = offsets + signed
    crcs = crc32_many(arr, offsets, signed)
    pairs = np.tile(_CRC_PAIR_TEMPLATE, (n, 1))
    pairs[:, len(_CRC_PREFIX):len(_CRC_PREFIX) + 10] = 0x30 + (crcs[:, None] // _POW10) % 10
    windows = np.lib.stride_tricks.as_strided(arr, (len(arr) - CRC32_RESERVED_LEN + 1, CRC32_RESERVED_LEN), (1, 1))
    windows[ends] = pairs


def parse_prop_crc(value: str | None) -> int:
    """CommitLog.checkMessageAndReturnSize: the digits read back least significant first (Java int
    arithmetic); -1 when the property is missing."""
    if value is None:
        return -1
    crc = 0
    for ch in reversed(value):
        crc = (crc * 10 + (ord(ch) - 0x30)) & 0xFFFFFFFF
    return crc - (1 << 32) if crc & 0x80000000 else crc


def decode_message(buf: bytes | bytearray | memoryview | np.ndarray, pos: int = 0) -> DecodedMessage:
    """Read the record at ``pos`` (MessageDecoder.decode). Raises CorruptRecordError when the
    bytes are not a well-formed message record (magic, lengths)."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.ndim != 1 or mv.format != "B":
        mv = mv.cast("B")
    limit = len(mv)
    if pos < 0 or pos + 8 > limit:
        raise CorruptRecordError(pos, "truncated", f"{limit - pos} bytes left, a record header needs 8")
    try:
        (total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
         born_ts) = _HEAD.unpack_from(mv, pos)
    except struct.error:
        raise CorruptRecordError(pos, "truncated", f"{limit - pos} bytes left, less than a record header") from None
    version = layout.message_version(magic)
    if not version:
        raise CorruptRecordError(pos, "magic", f"MAGICCODE {magic:#010x} is not a message magic code")
    if total < FIXED_PART_LENGTH or pos + total > limit:
        raise CorruptRecordError(pos, "size", f"TOTALSIZE {total} does not fit ({limit - pos} bytes left)")
    s = layout.record_spans(mv, pos, total, version)
    if s.fault is not None:
        raise CorruptRecordError(pos, "size", s.detail)
    if s.properties_length < 0:        # MessageDecoder reads it as none; a decode of ours refuses it
        raise CorruptRecordError(pos, "size", f"PROPERTIESLENGTH {s.properties_length} is negative")
    born = HostAddress.from_bytes(mv[pos + POS_BORNHOST:pos + POS_BORNHOST + s.born_host_length])
    store_ts = _I64.unpack_from(mv, pos + s.store_timestamp_pos)[0]
    store_raw = bytes(mv[pos + s.store_host_pos:pos + s.store_host_pos + s.store_host_length])
    reconsume, prepared, _ = _TAIL.unpack_from(mv, pos + s.reconsume_times_pos)
    topic = java_string(mv[pos + s.topic_pos:pos + s.topic_pos + s.topic_length])
    props_string = java_string(mv[pos + s.properties_pos:pos + s.properties_end]) if s.properties_length else ""
    return DecodedMessage(
        total_size=total, magic_code=magic, version=version, body_crc=crc, queue_id=queue_id, flag=flag,
        queue_offset=queue_offset, physical_offset=physical_offset, sys_flag=sys_flag,
        born_timestamp=born_ts, born_host=born, store_timestamp=store_ts, store_host=HostAddress.from_bytes(store_raw),
        reconsume_times=reconsume, prepared_transaction_offset=prepared,
        body=mv[pos + s.body_pos:pos + s.body_pos + s.body_length], topic=topic,
        properties_string=props_string, properties=string_to_properties(props_string),
        store_host_bytes=store_raw,
    )
