"""The test oracle of the encoded-record checks (store/scan/_record_check.c's check, used by
store.scan.encoded_check): each record read field after field by the record-walk oracle
(tests/oracles/record_spans.py), its lengths added up, its BODYCRC by zlib. Patched over
encoded_check._records, every check_encoded test runs it too."""

from __future__ import annotations

import zlib

import numpy as np

from store.scan.fields import ScanColumns
from tests.oracles import record_spans

_MESSAGE_MAGIC = (0xDAA320A7, 0xDAA320AB)


def _passes(rec: bytes) -> bool:
    if len(rec) < 91 or int.from_bytes(rec[:4], "big", signed=True) != len(rec) \
            or int.from_bytes(rec[4:8], "big") not in _MESSAGE_MAGIC:
        return False
    spans = record_spans.walk(rec)
    if not record_spans.adds_up(rec, spans):
        return False
    body_at, body_len = spans.fields["BODY"]
    stored = int.from_bytes(rec[8:12], "big", signed=True)
    return body_len == 0 or zlib.crc32(rec[body_at:body_at + body_len]) & 0x7FFFFFFF == stored


def records(values: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> tuple[int, ScanColumns]:
    """(index of the first record that fails, or len(starts); the fields of those before it)."""
    data = values.tobytes()
    cols: list[tuple[int, int, int, int, int, int]] = []
    for start, size in zip(starts.tolist(), sizes.tolist()):
        rec = data[start:start + size] if start >= 0 and size >= 0 else b""
        if len(rec) != size or not _passes(rec):
            break
        spans = record_spans.walk(rec).fields
        topic_at, topic_len = spans["TOPIC"]
        cols.append((int.from_bytes(rec[12:16], "big", signed=True), int.from_bytes(rec[20:28], "big", signed=True),
                     int.from_bytes(rec[36:40], "big", signed=True), start + topic_at, topic_len,
                     spans["PROPERTIES"][1]))
    arrays = [np.array(c, dtype=np.int64) for c in zip(*cols)] if cols else [np.zeros(0, np.int64)] * 6
    return len(cols), ScanColumns(*arrays)
