"""The bytes of one CommitLog record, as RocketMQ writes them: constants, codec, properties, hosts,
CRCs, batch encoding, the JSON form. Reading many records at once (the walk, the checks, the fields,
Arrow columns) is store.scan's. Imports nothing else of store but store.errors. The C passes take
the layout from _layout.h here, constants.py's numbers under the same names (and _crc32.h's CRC-32).

This face is the record format's public API, the one place ingest takes format names from: every
constant of store.format.constants, and the names below, each loaded on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import Any

from store.format import constants

_LAZY = {
    "CodecConfig": "store.format.codec", "Message": "store.format.codec", "DecodedMessage": "store.format.codec",
    "encode_message": "store.format.codec", "decode_message": "store.format.codec",
    "apply_prop_crcs": "store.format.codec",
    "HostAddress": "store.format.hosts", "tags_code": "store.format.properties",
    "encode_valid_rows": "store.format.batch_codec", "binary_from": "store.format.batch_columns",
    "pooled_bytes": "store.format.batch_columns", "binary_parts": "store.format.batch_columns",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif not name.startswith("_") and name.isupper() and hasattr(constants, name):
        value = getattr(constants, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = sorted(_LAZY) + [n for n in dir(constants) if n.isupper() and not n.startswith("_")]
