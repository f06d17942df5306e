"""The golden ``*.decoded.jsonl`` report of segment files (``decode_segment_files``): every
record, BLANK, end of data and error with its global offset, then a summary."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from store.errors import CorruptRecordError
from store.format.codec import CodecConfig, decode_message
from store.format.constants import BLANK_MAGIC_CODE, FILE_NAME_DIGITS
from store.format.record_json import message_to_json
from store.scan.record_check import check_record
from store.format.layout import TOTAL_AND_MAGIC



def _segment_base(name: str) -> int | None:
    stem = name.split(".", 1)[0]
    return int(stem) if len(stem) == FILE_NAME_DIGITS and stem.isdigit() else None


def _rest_is_zero(arr: np.ndarray, pos: int) -> bool:
    return not arr[pos:].any()


def _open_bytes(path: Path) -> tuple[Any, mmap.mmap | None]:
    size = path.stat().st_size
    if size == 0:
        return b"", None
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return mm, mm


def decode_segment_files(paths: Iterable[str | os.PathLike[str]], config: CodecConfig | None = None,
                         check_physical_offset: bool | None = None) -> Iterator[dict[str, Any]]:
    """Decode segment files in order into the golden ``*.decoded.jsonl`` objects: one
    message/blank/end/eof/error object per finding, then a summary. Decoding goes on after a CRC
    or PHYSICALOFFSET error (the record is still reported); a broken record structure ends its
    file. Files named by a 20-digit offset start there; other files (loose ``.bin`` records)
    follow each other from 0, and their PHYSICALOFFSET is only checked if asked."""
    config = config or CodecConfig()
    files: list[str] = []
    file_bytes = messages = message_bytes = blanks = blank_bytes = crc_errors = magic_errors = 0
    errors: list[dict[str, Any]] = []
    stops_at: int | None = None
    next_base = 0
    offset = 0

    def error(off: int, kind: str, detail: str) -> dict[str, Any]:
        nonlocal crc_errors, magic_errors, stops_at
        crc_errors += kind in ("crc", "propCrc")
        magic_errors += kind == "magic"
        if kind != "physicalOffset" and stops_at is None:
            stops_at = off
        obj = {"type": "error", "offset": off, "kind": kind, "detail": detail}
        errors.append(obj)
        return obj

    for path in map(Path, paths):
        name = path.name
        files.append(name)
        named_base = _segment_base(name)
        base = named_base if named_base is not None else next_base
        check_phys = named_base is not None if check_physical_offset is None else check_physical_offset
        data, mm = _open_bytes(path)
        try:
            mv = memoryview(data)
            arr = np.frombuffer(mv, dtype=np.uint8) if len(mv) else np.zeros(0, np.uint8)
            size = len(mv)
            file_bytes += size
            next_base = base + size
            pos = 0
            while True:
                offset = base + pos
                if pos >= size:
                    yield {"type": "eof", "offset": offset, "segment": name}
                    break
                remaining = size - pos
                header = TOTAL_AND_MAGIC.unpack_from(mv, pos) if remaining >= 8 else None
                if header is None or header == (0, 0):
                    if not _rest_is_zero(arr, pos) and header is None:
                        yield error(offset, "truncated", f"{remaining} bytes left, too few for a record header")
                        break
                    if stops_at is None:
                        stops_at = offset
                    yield {"type": "end", "offset": offset, "segment": name, "segmentPos": pos,
                           "bytesLeft": remaining, "restIsZero": _rest_is_zero(arr, pos)}
                    break
                total, magic = header
                if magic == BLANK_MAGIC_CODE:
                    blanks += 1
                    blank_bytes += total
                    yield {"type": "blank", "offset": offset, "segment": name, "segmentPos": pos,
                           "totalSize": total, "magicCode": f"0x{magic:08X}",
                           "reachesSegmentEnd": pos + total == size,
                           "restIsZero": _rest_is_zero(arr, pos + 8)}
                    break
                verdict = check_record(mv, pos, size, base, _report_config(config))
                if verdict.kind != "error" or verdict.error_kind in ("crc", "propCrc", "physicalOffset"):
                    try:
                        decoded = decode_message(mv, pos)
                    except CorruptRecordError as exc:
                        yield error(offset, exc.kind, exc.detail)
                        break
                    record = mv[pos:pos + decoded.total_size]
                    if verdict.error_kind in ("crc", "propCrc"):
                        yield error(offset, verdict.error_kind, verdict.detail)
                    if check_phys and decoded.physical_offset != offset:
                        yield error(offset, "physicalOffset",
                                    f"PHYSICALOFFSET {decoded.physical_offset} != position {offset}")
                    messages += 1
                    message_bytes += decoded.total_size
                    yield message_to_json(decoded, offset, name, pos, record, config)
                    del decoded, record
                    pos += total
                    continue
                yield error(offset, verdict.error_kind or "unknown", verdict.detail)
                break
            del mv, arr
        finally:
            if mm is not None:
                try:
                    mm.close()
                except BufferError:
                    pass    # a consumer still holds a view; the map is released with it
    yield {"type": "summary", "files": files, "fileBytes": file_bytes, "messages": messages,
           "messageBytes": message_bytes, "blanks": blanks, "blankBytes": blank_bytes,
           "crcErrors": crc_errors, "magicErrors": magic_errors, "errors": errors,
           "rocketmqRecoveryStopsAt": stops_at if stops_at is not None else offset}


def _report_config(config: CodecConfig) -> CodecConfig:
    # The report checks PHYSICALOFFSET itself (only for real segment files), so the record check
    # is asked for everything else; a CRC is always checked to be reported.
    return CodecConfig(max_message_size=config.max_message_size,
                       auto_message_version_on_topic_len=config.auto_message_version_on_topic_len,
                       enabled_append_prop_crc=config.enabled_append_prop_crc,
                       force_verify_prop_crc=config.force_verify_prop_crc, check_crc_on_recover=True)
