"""Compressed bodies (SYSFLAG COMPRESSED_FLAG): the producer compressed them, the store keeps the
compressed bytes (FORMAT.md). Compression type bits 0x100 LZ4 (frame format), 0x200 ZSTD (frame),
0x300 ZLIB, and 0 with COMPRESSED_FLAG is ZLIB too (older clients wrote no type bits). Showing a
body decompressed is a library call: zlib, and lz4 / zstandard (kafka-python's codec extras)."""

from __future__ import annotations

import base64
import hashlib
import zlib
from typing import Any

from store.format.codec import DecodedMessage
from store.format.constants import COMPRESSED_FLAG, COMPRESSION_TYPE_MASK
from store.format.record_json import BODY_INLINE_LIMIT

_NAMES = {0: "ZLIB", 1: "LZ4", 2: "ZSTD", 3: "ZLIB"}


class DecompressError(ValueError):
    pass


def compression_name(sys_flag: int) -> str | None:
    """The codec of a compressed body (None: not compressed); CompressionType.findByValue."""
    if not sys_flag & COMPRESSED_FLAG:
        return None
    bits = (sys_flag & COMPRESSION_TYPE_MASK) >> 8
    return _NAMES.get(bits, f"UNKNOWN({bits})")


def decompress_body(body: bytes | memoryview, sys_flag: int) -> bytes:
    name = compression_name(sys_flag)
    data = bytes(body)
    if name is None:
        return data
    try:
        if name == "ZLIB":
            return zlib.decompress(data)
        if name == "LZ4":
            import lz4.frame

            return lz4.frame.decompress(data)
        if name == "ZSTD":
            import zstandard

            return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    except Exception as e:        # each library raises its own error type for bad input
        raise DecompressError(f"the {name} body does not decompress: {e}") from e
    raise DecompressError(f"compression type {name} is not one RocketMQ writes")


def add_decompressed_body(obj: dict[str, Any], decoded: DecodedMessage) -> None:
    """``commitlog get --decompress``: the body as the consumer sees it, beside the stored one."""
    name = compression_name(decoded.sys_flag)
    if name is None:
        return
    try:
        plain = decompress_body(decoded.body, decoded.sys_flag)
    except DecompressError as e:
        obj["decompressError"] = str(e)
        return
    obj["decompressedBodyLength"] = len(plain)
    obj["decompressedBodySha256"] = hashlib.sha256(plain).hexdigest()
    if len(plain) <= BODY_INLINE_LIMIT:
        obj["decompressedBodyBase64"] = base64.b64encode(plain).decode("ascii")
