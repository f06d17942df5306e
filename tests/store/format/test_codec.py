"""The single-record codec: limits, versions, hosts, properties quirks, the whole-record CRC."""

from __future__ import annotations

import zlib

import pytest

from store.errors import CorruptRecordError, FieldLimitError, InvalidMessageError
from store.format.codec import (
    CodecConfig,
    Message,
    apply_prop_crc,
    decode_message,
    encode_message,
    parse_prop_crc,
    prop_crc_digits,
)
from store.format.constants import (
    BORNHOST_V6_FLAG,
    DEFAULT_MAX_MESSAGE_SIZE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    STOREHOSTADDRESS_V6_FLAG,
)
from store.format.hosts import HostAddress
from store.format.layout import store_timestamp_pos
from store.format.properties import delete_property, java_utf8, properties_to_string, string_to_properties, tags_code

pytestmark = pytest.mark.unit


def msg(**kw) -> Message:
    base = dict(topic="TopicTest", body=b"hello", properties="TAGS\x01TagA\x02",
                born_host=HostAddress("192.0.2.10", 53422), store_host=HostAddress("198.51.100.20", 10911))
    base.update(kw)
    return Message(**base)


def test_body_of_exactly_max_message_size_is_accepted_one_more_byte_is_refused() -> None:
    record = encode_message(msg(body=bytes(DEFAULT_MAX_MESSAGE_SIZE)))
    assert decode_message(record).body.nbytes == DEFAULT_MAX_MESSAGE_SIZE
    with pytest.raises(FieldLimitError) as exc:
        encode_message(msg(body=bytes(DEFAULT_MAX_MESSAGE_SIZE + 1)))
    assert (exc.value.field, exc.value.size, exc.value.limit) == ("body", DEFAULT_MAX_MESSAGE_SIZE + 1,
                                                                 DEFAULT_MAX_MESSAGE_SIZE)
    assert "body" in str(exc.value) and "4194305" in str(exc.value) and "4194304" in str(exc.value)


def test_max_message_size_is_configurable() -> None:
    config = CodecConfig(max_message_size=1000)
    encode_message(msg(body=bytes(1000)), config)
    with pytest.raises(FieldLimitError, match="body is 1001 bytes, over the limit of 1000"):
        encode_message(msg(body=bytes(1001)), config)


def test_properties_of_32767_bytes_are_accepted_32768_refused() -> None:
    def props(n: int) -> str:
        return "K\x01" + "v" * (n - 3) + "\x02"
    record = encode_message(msg(properties=props(32767)))
    assert len(decode_message(record).properties["K"]) == 32764
    with pytest.raises(FieldLimitError) as exc:
        encode_message(msg(properties=props(32768)))
    assert (exc.value.field, exc.value.size, exc.value.limit) == ("properties", 32768, 32767)


def test_prop_crc_reservation_counts_toward_the_properties_limit() -> None:
    config = CodecConfig(enabled_append_prop_crc=True)
    encode_message(msg(properties="K\x01" + "v" * (32767 - 20 - 3) + "\x02"), config)
    with pytest.raises(FieldLimitError, match="properties is 32768 bytes"):
        encode_message(msg(properties="K\x01" + "v" * (32767 - 20 - 2) + "\x02"), config)


@pytest.mark.parametrize("length, magic, topic_len_size", [(127, MESSAGE_MAGIC_CODE, 1),
                                                            (128, MESSAGE_MAGIC_CODE_V2, 2)])
def test_v1_up_to_127_chars_v2_from_128(length: int, magic: int, topic_len_size: int) -> None:
    record = encode_message(msg(topic="T" * length, body=b""))
    decoded = decode_message(record)
    assert decoded.magic_code == magic and decoded.topic == "T" * length
    assert len(record) == 91 + length + len("TAGS\x01TagA\x02") + (topic_len_size - 1)


def test_version_rule_counts_utf16_chars_not_bytes() -> None:
    # 64 emoji = 128 UTF-16 chars (256 bytes) -> V2; 127 'é' = 254 bytes but 127 chars -> V1, too long.
    assert decode_message(encode_message(msg(topic="\U0001F600" * 64))).version == 2
    with pytest.raises(FieldLimitError) as exc:
        encode_message(msg(topic="é" * 127))
    assert (exc.value.field, exc.value.size, exc.value.limit) == ("topic", 254, 127)


def test_version_can_be_forced_and_auto_versioning_switched_off() -> None:
    assert decode_message(encode_message(msg(version=2))).version == 2
    with pytest.raises(FieldLimitError, match="topic is 128 bytes, over the limit of 127"):
        encode_message(msg(topic="T" * 128), CodecConfig(auto_message_version_on_topic_len=False))
    with pytest.raises(FieldLimitError, match="topic"):
        encode_message(msg(topic="T" * 128, version=1))


@pytest.mark.parametrize("born, store, flags, size", [
    ("[2001:db8::10]:40001", "198.51.100.20:10911", BORNHOST_V6_FLAG, 110 + 12),
    ("192.0.2.10:53422", "[2001:db8::20]:10911", STOREHOSTADDRESS_V6_FLAG, 110 + 12),
    ("[2001:db8::10]:40001", "[::1]:10911", BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG, 110 + 24),
])
def test_ipv6_hosts_take_20_bytes_and_set_their_sys_flag_bits(born: str, store: str, flags: int, size: int) -> None:
    m = msg(body=b"", properties="TAGS\x01TagA\x02", born_host=HostAddress.parse(born),
            store_host=HostAddress.parse(store), sys_flag=0x300 | 0x1)
    record = encode_message(m)
    d = decode_message(record)
    assert len(record) == size
    assert d.sys_flag == 0x301 | flags       # other bits kept verbatim
    assert d.born_host == HostAddress.parse(born) and d.store_host == HostAddress.parse(store)
    assert store_timestamp_pos(d.sys_flag) == (68 if flags & BORNHOST_V6_FLAG else 56)
    assert len(d.msg_id) == (56 if flags & STOREHOSTADDRESS_V6_FLAG else 32)


def test_host_text_forms() -> None:
    assert HostAddress.parse("[2001:db8::10]:40001") == HostAddress("2001:db8:0:0:0:0:0:10", 40001)
    assert HostAddress.parse({"ip": "10.0.0.1", "port": 9}).to_bytes().hex() == "0a00000100000009"
    assert HostAddress.parse("[::ffff:10.0.0.1]:9") == HostAddress("10.0.0.1", 9)   # Java treats it as IPv4
    with pytest.raises(ValueError):
        HostAddress.parse("2001:db8::1:80")


def test_ipv6_flag_without_ipv6_host_is_refused() -> None:
    with pytest.raises(InvalidMessageError, match="BORNHOST_V6_FLAG"):
        encode_message(msg(sys_flag=BORNHOST_V6_FLAG))


def test_out_of_range_int_field_is_refused_not_wrapped() -> None:
    with pytest.raises(InvalidMessageError):
        encode_message(msg(queue_id=2**31))


@pytest.mark.parametrize("sys_flag", [0x4, 0xC])
def test_prepared_and_rollback_records_carry_queue_offset_zero(sys_flag: int) -> None:
    assert decode_message(encode_message(msg(sys_flag=sys_flag, queue_offset=42))).queue_offset == 0
    assert decode_message(encode_message(msg(sys_flag=0x8, queue_offset=42))).queue_offset == 42


def test_body_crc_is_masked_zlib_crc32() -> None:
    body = bytes(range(256)) * 3
    assert decode_message(encode_message(msg(body=body))).body_crc == zlib.crc32(body) & 0x7FFFFFFF
    assert decode_message(encode_message(msg(body=b""))).body_crc == 0


def test_unpaired_surrogate_is_written_as_question_mark() -> None:
    assert java_utf8("a\ud800b") == b"a?b"
    assert java_utf8("\ud83d\ude00") == "\U0001F600".encode()   # a pair held as two code points
    d = decode_message(encode_message(msg(properties="TAGS\x01x\udc00\x02")))
    assert d.properties["TAGS"] == "x?"


def test_properties_decoding_quirks() -> None:
    assert string_to_properties("A\x011\x02B\x012") == {"A": "1", "B": "2"}          # last pair without \x02
    assert string_to_properties("KEYS\x01\x02\x01v\x02noSep\x02") == {}                # empty value/key, no \x01
    assert string_to_properties("A\x01x\x01y\x02A\x01z\x02") == {"A": "z"}             # later duplicate wins
    assert string_to_properties("A\x01x\x01y\x02") == {"A": "x\x01y"}                 # \x01 stays in the value
    assert properties_to_string({"A": "1", "B": "2"}) == "A\x011\x02B\x012\x02"


def test_delete_property_like_message_utils() -> None:
    assert delete_property("A\x011\x02__CRC32#\x01123\x02B\x012\x02", "__CRC32#") == "A\x011\x02B\x012\x02"
    assert delete_property("X__CRC32#\x011\x02", "__CRC32#") == "X__CRC32#\x011\x02"     # not at a pair start
    assert delete_property("A\x011\x02__CRC32#\x01123", "__CRC32#") == "A\x011\x02"


def test_tags_code_is_java_string_hash_code() -> None:
    assert tags_code(None) == 0 and tags_code("") == 0
    assert tags_code("TagA") == 2598919
    assert tags_code("\U0001F600") == (0xD83D * 31 + 0xDE00)          # UTF-16 code units
    assert tags_code("polygenelubricants") == -2147483648                # overflow is sign-extended


def test_prop_crc_round_trip() -> None:
    config = CodecConfig(enabled_append_prop_crc=True)
    m = msg(properties="TAGS\x01TagA\x02__CRC32#\x010000000000\x02KEYS\x01k", physical_offset=4096, queue_offset=7)
    record = encode_message(m, config)
    d = decode_message(record)
    # the incoming __CRC32# is dropped, a missing last \x02 added, then the 20-byte CRC pair
    assert d.properties_string.startswith("TAGS\x01TagA\x02KEYS\x01k\x02__CRC32#\x01")
    assert parse_prop_crc(d.properties["__CRC32#"]) == zlib.crc32(record[:-20]) & 0x7FFFFFFF
    # rewriting after a PHYSICALOFFSET change keeps it right
    buf = bytearray(record)
    buf[28:36] = (8192).to_bytes(8, "big")
    apply_prop_crc(buf, 0, len(buf))
    assert parse_prop_crc(decode_message(buf).properties["__CRC32#"]) == zlib.crc32(buf[:-20]) & 0x7FFFFFFF
    assert buf != bytearray(record)


def test_prop_crc_digits_least_significant_first() -> None:
    assert prop_crc_digits(1957344815) == b"5184437591"
    assert prop_crc_digits(7) == b"7000000000"
    assert parse_prop_crc("5184437591") == 1957344815


def test_prop_crc_with_empty_properties() -> None:
    record = encode_message(msg(properties=""), CodecConfig(enabled_append_prop_crc=True))
    assert list(decode_message(record).properties) == ["__CRC32#"]


def test_decode_refuses_what_is_not_a_record() -> None:
    with pytest.raises(CorruptRecordError, match="magic"):
        decode_message(bytes(100))
    record = bytearray(encode_message(msg()))
    record[84:88] = (10_000).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="BODYLENGTH"):
        decode_message(record)
    short = bytearray(encode_message(msg(body=b"", properties="")))
    short[39] |= 0x30                                   # two IPv6 hosts claimed by a 101-byte record
    with pytest.raises(CorruptRecordError, match="too small for the hosts"):
        decode_message(short)


def test_apply_prop_crcs_writes_what_apply_prop_crc_writes() -> None:
    import numpy as np

    from store.format.codec import apply_prop_crcs
    config = CodecConfig(enabled_append_prop_crc=True)
    records = [encode_message(msg(body=bytes([i]) * i, physical_offset=i * 1000), config) for i in range(12)]
    one_by_one = bytearray(b"".join(records))
    offsets = np.cumsum([0] + [len(r) for r in records[:-1]])
    sizes = np.array([len(r) for r in records])
    for o, s in zip(offsets, sizes):
        one_by_one[o + 28:o + 36] = (7 + int(o)).to_bytes(8, "big")      # patch PHYSICALOFFSET ...
    vectorized = np.frombuffer(bytes(one_by_one), dtype=np.uint8).copy()
    for o, s in zip(offsets.tolist(), sizes.tolist()):
        apply_prop_crc(one_by_one, o, s)                                  # ... then re-sign
    apply_prop_crcs(vectorized, offsets, sizes)
    assert vectorized.tobytes() == bytes(one_by_one) != b"".join(records)


def test_java_parse_int_rules_for_delay_levels() -> None:
    from store.format.properties import java_parse_int
    assert [java_parse_int(s) for s in ("3", "+3", "-1", " 3", "1_0", "", None, "2147483648")] == \
        [3, 3, -1, None, None, None, None, None]


@pytest.mark.parametrize("shape", ["contiguous equal", "scattered equal", "few lengths", "many lengths", "empty"])
def test_crc32_many_equals_zlib_per_slice(shape: str) -> None:
    import numpy as np

    from store.format.crc import crc32_many
    rng = np.random.default_rng(7)
    buf = rng.integers(0, 256, 200_000, dtype=np.uint8)
    n = 500
    if shape == "contiguous equal":
        starts, lengths = np.arange(n) * 100, np.full(n, 100)
    elif shape == "scattered equal":
        starts, lengths = np.sort(rng.choice(190_000, n, replace=False)), np.full(n, 37)
    elif shape == "few lengths":
        starts, lengths = rng.integers(0, 190_000, n), rng.choice([0, 5, 64, 250], n)
    elif shape == "many lengths":
        starts, lengths = rng.integers(0, 190_000, n), rng.integers(0, 3000, n)
    else:
        starts, lengths = np.zeros(0, np.int64), np.zeros(0, np.int64)
    want = [zlib.crc32(buf[s:s + k].tobytes()) & 0x7FFFFFFF for s, k in zip(starts, lengths)]
    assert crc32_many(buf, starts, lengths).tolist() == want
