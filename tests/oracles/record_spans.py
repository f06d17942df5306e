"""The test oracle of the record walk (store/format/layout.py record_spans and record_spans_many,
_layout.h record_spans): the record read field after field as RocketMQ's MessageDecoder reads a
ByteBuffer, each length checked against TOTALSIZE right after it is read. Written from FORMAT.md
§3, not from the module it checks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class OracleSpans:
    """Field name -> (position in the record, length), as the golden manifests' ``layout`` lists
    them, up to where the walk stopped; ``fault``: the field whose length did not fit."""

    fields: dict[str, tuple[int, int]]
    fault: str | None


def _int(rec: bytes, at: int, width: int) -> int:
    return int.from_bytes(rec[at:at + width], "big", signed=True)


def walk(rec: bytes) -> OracleSpans:
    """``rec``: one whole message record (its TOTALSIZE bytes)."""
    total = len(rec)
    v2 = rec[4:8] == bytes.fromhex("DAA320AB")
    sys_flag = _int(rec, 36, 4)
    born = 20 if sys_flag & 0x10 else 8
    store = 20 if sys_flag & 0x20 else 8
    fields: dict[str, tuple[int, int]] = {}
    at = 0
    for name, width in (("TOTALSIZE", 4), ("MAGICCODE", 4), ("BODYCRC", 4), ("QUEUEID", 4), ("FLAG", 4),
                        ("QUEUEOFFSET", 8), ("PHYSICALOFFSET", 8), ("SYSFLAG", 4), ("BORNTIMESTAMP", 8),
                        ("BORNHOST", born), ("STORETIMESTAMP", 8), ("STOREHOST", store), ("RECONSUMETIMES", 4),
                        ("PREPAREDTRANSACTIONOFFSET", 8), ("BODYLENGTH", 4)):
        fields[name] = (at, width)
        at += width
    if at > total:
        return OracleSpans(fields, "hosts")
    body = _int(rec, at - 4, 4)
    fields["BODY"] = (at, body)
    at += body
    topic_width = 2 if v2 else 1
    if body < 0 or at + topic_width > total:
        return OracleSpans(fields, "body")
    fields["TOPICLENGTH"] = (at, topic_width)
    topic = _int(rec, at, topic_width)
    at += topic_width
    fields["TOPIC"] = (at, topic)
    at += topic
    if topic < 0 or at + 2 > total:
        return OracleSpans(fields, "topic")
    fields["PROPERTIESLENGTH"] = (at, 2)
    props = _int(rec, at, 2)
    at += 2
    fields["PROPERTIES"] = (at, props)
    if props > 0 and at + props > total:
        return OracleSpans(fields, "properties")
    return OracleSpans(fields, None)


def adds_up(rec: bytes, spans: OracleSpans) -> bool:
    """The record's fields fit and end exactly at TOTALSIZE (a negative PROPERTIESLENGTH read as
    no properties, as MessageDecoder reads it)."""
    if spans.fault is not None:
        return False
    at, n = spans.fields["PROPERTIES"]
    return at + max(n, 0) == len(rec)
