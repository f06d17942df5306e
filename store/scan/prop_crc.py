"""The whole-record CRC a broker may append as the ``__CRC32#`` property (FORMAT.md): found in many
records at once (numpy's string search over the properties side by side), then checked one by
one, as few records carry it."""

from __future__ import annotations

import numpy as np

from store.format.codec import body_crc, parse_prop_crc
from store.format.constants import CRC32_RESERVED_LEN, PROPERTY_CRC32
from store.scan.fields import MARK_PROP_CRC, RecordFields, rows_at
from store.format.properties import java_string, string_to_properties

_NAME = f"{PROPERTY_CRC32}\x01".encode()
_MAX_ROW = 4096


def prop_crc_mismatches(arr: np.ndarray, f: RecordFields) -> list[tuple[int, str]]:
    """(record index, what is wrong) for each record whose ``__CRC32#`` does not match its bytes."""
    plen = f.props_len
    if f.marks is not None:      # the C scan found the pieces named __CRC32#
        candidates = np.flatnonzero(f.marks & MARK_PROP_CRC).tolist()
        short = np.zeros(0, dtype=np.int64)
    else:
        candidates = np.flatnonzero(plen > _MAX_ROW).tolist()
        short = np.flatnonzero((plen >= len(_NAME)) & (plen <= _MAX_ROW))
    if len(short):
        width = int(plen[short].max())
        text = rows_at(arr, f.props_pos[short], width).view(f"S{width}")[:, 0]
        at = np.strings.find(text, _NAME)
        candidates += short[(at >= 0) & (at + len(_NAME) <= plen[short])].tolist()
    out = []
    for i in sorted(candidates):
        p, n = int(f.props_pos[i]), int(plen[i])
        props = string_to_properties(java_string(arr[p:p + n].tobytes()))
        value = props.get(PROPERTY_CRC32)
        if value is None:
            continue
        start, size = int(f.starts[i]), int(f.sizes[i])
        expected = parse_prop_crc(value)
        computed = body_crc(arr[start:start + size - CRC32_RESERVED_LEN])
        if expected <= 0 or computed != expected:
            out.append((i, f"{PROPERTY_CRC32} {value} != crc32 of the record before it ({computed})"))
    return out
