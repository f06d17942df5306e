"""``commitlog get``: one committed message in full, by offset, msgId or queue position."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TextIO

from store.errors import MessageNotFoundError
from store.format.codec import CodecConfig, decode_message
from store.format.compression import add_decompressed_body
from store.scan.record_check import check_record
from store.read.view import StoreView, mapped


@dataclass
class Found:
    offset: int
    segment: str
    segment_pos: int
    json: dict[str, Any]
    check: str               # "" when the record passes every check, else the error found


def offset_from_msg_id(msg_id: str) -> tuple[bytes, int]:
    """(store host bytes, physical offset) of an offset message id (FORMAT §10)."""
    text = msg_id.strip()
    if len(text) not in (32, 56):
        raise MessageNotFoundError(f"msgId {msg_id!r} is {len(text)} characters; an offset message id has "
                                   f"32 (IPv4 store host) or 56 (IPv6)")
    try:
        raw = bytes.fromhex(text)
    except ValueError as e:
        raise MessageNotFoundError(f"msgId {msg_id!r} is not hexadecimal") from e
    return raw[:-8], int.from_bytes(raw[-8:], "big", signed=True)


def read_at(src: StoreView, offset: int, config: CodecConfig | None = None, decompress: bool = False) -> Found:
    from store.format.record_json import message_to_json

    config = config or CodecConfig()
    if src.committed_offset is not None and offset >= src.committed_offset:
        raise MessageNotFoundError(f"offset {offset} is not committed (the store's commit point is "
                                   f"{src.committed_offset})")
    seg = src.segment_at(offset)
    if seg is None:
        lo = src.segments[0].base_offset if src.segments else 0
        hi = src.segments[-1].end_offset if src.segments else 0
        raise MessageNotFoundError(f"offset {offset} is outside the commit log ({lo}..{hi})")
    with mapped(seg) as mv:
        pos = offset - seg.base_offset
        end = src.segment_end(seg)
        rc = check_record(mv, pos, end, seg.base_offset, config)
        if rc.kind != "message" and rc.error_kind not in ("crc", "propCrc", "physicalOffset"):
            what = rc.detail or rc.kind
            raise MessageNotFoundError(f"no message starts at offset {offset} in segment {seg.name}: {what}")
        decoded = decode_message(mv[:end], pos)
        obj = message_to_json(decoded, offset, seg.name, pos, mv[pos:pos + decoded.total_size], config)
        found = Found(offset, seg.name, pos, obj, "" if rc.kind == "message" else f"{rc.error_kind}: {rc.detail}")
        if decompress:
            add_decompressed_body(obj, decoded)
        return found


def get_message(src: StoreView, *, offset: int | None = None, msg_id: str | None = None, topic: str | None = None,
                queue_id: int | None = None, queue_offset: int | None = None, decompress: bool = False) -> Found:
    if offset is not None:
        return read_at(src, offset, decompress=decompress)
    if msg_id is not None:
        host, off = offset_from_msg_id(msg_id)
        found = read_at(src, off, decompress=decompress)
        if found.json["msgId"] != msg_id.strip().upper():
            raise MessageNotFoundError(f"msgId {msg_id} points at offset {off}, but the record there has msgId "
                                       f"{found.json['msgId']} (another store host)")
        return found
    if topic is None or queue_id is None or queue_offset is None:
        raise MessageNotFoundError("give --offset, --msg-id, or --topic with --queue and --queue-offset")
    cq = src.consume_queues()
    if cq is None:
        raise MessageNotFoundError(f"{src.path} has no consume queues; use --offset or --msg-id")
    lo, hi = cq.queue_range(topic, queue_id)
    units = cq.find(topic, queue_id, queue_offset, 1) if lo <= queue_offset < hi else []
    if not units:
        raise MessageNotFoundError(f"{topic}/{queue_id} has queue offsets {lo}..{hi - 1 if hi > lo else lo}; "
                                   f"{queue_offset} is not among them")
    phys, size, tags = units[0]
    found = read_at(src, phys, decompress=decompress)
    if found.json["totalSize"] != size or found.json["topic"] != topic or found.json["queueId"] != queue_id:
        found.check = (found.check + "; " if found.check else "") + \
            f"the consume-queue unit ({phys}, {size}, {tags}) does not match the record it points to"
    found.json["consumeQueueUnit"] = {"queueOffset": queue_offset, "commitLogOffset": phys, "size": size,
                                      "tagsCode": tags}
    return found


def print_message(found: Found, out: TextIO, as_json: bool = False) -> None:
    """The golden decoded.jsonl form of the message, plus any problem found with it."""
    obj = dict(found.json)
    if found.check:
        obj["problem"] = found.check
    out.write(json.dumps(obj, ensure_ascii=False, indent=None if as_json else 2) + "\n")


def messages_by_key(path: str, topic: str, key: str, *, uniq: bool = False, max_num: int = 64,
                    begin_ms: int | None = None, end_ms: int | None = None, decompress: bool = False) -> list[Found]:
    """The messages of ``topic`` carrying ``key`` (a KEYS token, or with ``uniq`` the UNIQ_KEY),
    through index/, in offset order: what mqadmin queryMsgByKey / queryMsgByUniqueKey print."""
    from store.read.view import open_view
    from store.read.reader import StoreReader

    src = open_view(path)
    if src.kind != "store":
        raise MessageNotFoundError(f"{path} is not a store directory: lookups by key need its index/")
    with StoreReader.open(src.path) as reader:
        try:
            hits = reader.messages_by_key(topic, key, max_num, begin_ms or 0,
                                          end_ms if end_ms is not None else 2**63 - 1, uniq=uniq)
        except ValueError as e:
            raise MessageNotFoundError(str(e)) from e
        offsets = [off for off, _msg in hits]
    return [read_at(src, off, decompress=decompress) for off in offsets]
