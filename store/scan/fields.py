"""Vectorized reading of record fields for many records at once (verify's hot path): queue id,
queue offset, sysFlag, topic, and the consume-queue tagsCode of every record, without a
per-record Python loop except for rare records (non-ASCII TAGS, several TAGS pairs, delays)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from store.format.constants import PROPERTY_SEPARATOR, SCHEDULE_TOPIC
from store.format.layout import be_ints, host_positions, record_spans_many

# the first n bytes of 16 as two machine words, for n = 0..16
_TOPIC_MASKS = np.frombuffer(b"".join(b"\xff" * n + bytes(16 - n) for n in range(17)), dtype=np.uint64).reshape(17, 2)

_TAGS_NAME = b"TAGS\x01"
_SEP = ord(PROPERTY_SEPARATOR)
_MAX_FAST_TAG = 64           # longer TAGS values take the per-record path
_MAX_PROPS_ROW = 1024        # longer properties: TAGS is searched for in the segment's bytes


@dataclass
class ScanColumns:
    """Fields the scan reads anyway, per valid message (positions relative to the buffer), so
    verify and the read-back need not read them again."""

    queue_id: np.ndarray
    queue_offset: np.ndarray
    sys_flag: np.ndarray
    topic_pos: np.ndarray
    topic_len: np.ndarray
    props_len: np.ndarray
    # what the C scan reads besides (None from the numpy one): the tagsCode and MARK_* bits from
    # the PROPERTIES, and each record's topic as an index into ``topics``
    tags_code: np.ndarray | None = None
    marks: np.ndarray | None = None
    topic_id: np.ndarray | None = None
    topics: list[str] | None = None

    def head(self, n: int) -> ScanColumns:
        return self.rows(0, n)

    def rows(self, a: int, b: int) -> ScanColumns:
        return self.take(slice(a, b))

    def take(self, idx: np.ndarray | slice) -> ScanColumns:
        return ScanColumns(*(_part(getattr(self, k), idx) for k in _COLUMN_NAMES), topics=self.topics)

    @staticmethod
    def joined(parts: list[ScanColumns]) -> ScanColumns:
        if not parts:
            return ScanColumns(*(np.zeros(0, np.int64) for _ in _COLUMN_NAMES[:6]))
        out = ScanColumns(*(_joined([getattr(p, k) for p in parts]) for k in _COLUMN_NAMES), topics=parts[0].topics)
        if any(p.topics != out.topics for p in parts):      # numbered apart: not comparable
            out.topic_id = out.topics = None
        return out


_COLUMN_NAMES = ("queue_id", "queue_offset", "sys_flag", "topic_pos", "topic_len", "props_len", "tags_code", "marks",
                 "topic_id")
MARK_TAGS_SLOW = 1      # marks: a TAGS value that is not ASCII, its tagsCode left to the Python way
MARK_PROP_CRC = 2       # marks: the properties hold a piece named __CRC32#


def _part(column: np.ndarray | None, rows: slice | np.ndarray) -> np.ndarray | None:
    return None if column is None else column[rows]


def _joined(columns: list[np.ndarray | None]) -> np.ndarray | None:
    return None if any(c is None for c in columns) else np.concatenate(columns)


@dataclass
class RecordFields:
    starts: np.ndarray          # positions in the segment
    sizes: np.ndarray
    queue_id: np.ndarray
    queue_offset: np.ndarray
    sys_flag: np.ndarray
    store_timestamp: np.ndarray
    topic_id: np.ndarray        # index into topics
    topics: list[str]
    props_pos: np.ndarray
    props_len: np.ndarray
    tags_code: np.ndarray | None = None     # ScanColumns.tags_code and marks, when the C scan read them
    marks: np.ndarray | None = None

    def rows(self, a: int, b: int) -> RecordFields:
        """Records a..b (the same topic list)."""
        return self.take(slice(a, b))

    def take(self, idx: np.ndarray | slice) -> RecordFields:
        """The records at ``idx`` (the same topic list)."""
        return RecordFields(self.starts[idx], self.sizes[idx], self.queue_id[idx], self.queue_offset[idx],
                            self.sys_flag[idx], self.store_timestamp[idx], self.topic_id[idx], self.topics,
                            self.props_pos[idx], self.props_len[idx], _part(self.tags_code, idx),
                            _part(self.marks, idx))


def record_fields(arr: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> RecordFields:
    """Fields of well-formed records (their lengths were checked by the scan). The store
    timestamp is only read for SCHEDULE_TOPIC_XXXX records (the others do not need it)."""
    starts = starts.astype(np.int64)
    s = record_spans_many(arr, starts, sizes.astype(np.int64))
    return _fields(arr, starts, sizes, s.heads["queue_id"].astype(np.int64), s.heads["queue_offset"].astype(np.int64),
                   s.sys_flag, s.topic_pos, s.topic_len, s.props_len)


def fields_from_scan(arr: np.ndarray, starts: np.ndarray, sizes: np.ndarray, cols: ScanColumns) -> RecordFields:
    """record_fields from what the scan already read (ScanColumns)."""
    topics = (cols.topic_id, cols.topics) if cols.topic_id is not None and cols.topics is not None else None
    f = _fields(arr, starts.astype(np.int64), sizes, cols.queue_id, cols.queue_offset, cols.sys_flag,
                cols.topic_pos, cols.topic_len, cols.props_len, topics)
    f.tags_code, f.marks = cols.tags_code, cols.marks
    return f


def _fields(arr: np.ndarray, starts: np.ndarray, sizes: np.ndarray, queue_id: np.ndarray, queue_offset: np.ndarray,
            sys_flag: np.ndarray, topic_pos: np.ndarray, topic_len: np.ndarray, props_len: np.ndarray,
            topics_read: tuple[np.ndarray, list[str]] | None = None) -> RecordFields:
    topic_id, topics = topics_read if topics_read is not None else _topic_ids(arr, topic_pos, topic_len)
    store_ts = np.zeros(len(starts), dtype=np.int64)
    if SCHEDULE_TOPIC in topics:
        sched = np.flatnonzero(topic_id == topics.index(SCHEDULE_TOPIC))
        store_ts[sched] = be_ints(arr, starts[sched] + host_positions(sys_flag[sched]).store_timestamp_pos, 8)
    return RecordFields(
        starts=starts, sizes=sizes.astype(np.int64), queue_id=queue_id, queue_offset=queue_offset, sys_flag=sys_flag,
        store_timestamp=store_ts, topic_id=topic_id, topics=topics, props_pos=topic_pos + topic_len + 2,
        props_len=np.maximum(props_len, 0))


def rows_at(arr: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """``width`` bytes from each position (rows past the end are padded with zeros)."""
    if width == 0:
        return np.zeros((len(pos), 0), dtype=np.uint8)
    last = len(arr) - width          # the last position a whole row can start at
    if len(pos) == 0 or last < 0:
        out = np.zeros((len(pos), width), dtype=np.uint8)
        for r, p in enumerate(pos.tolist()):
            chunk = arr[p:p + width]
            out[r, :len(chunk)] = chunk
        return out
    # ``width``-byte void items one byte apart: fancy indexing copies each row in one go, where a
    # 2-D sliding window would gather element by element
    items = np.ndarray((last + 1,), dtype=f"V{width}", buffer=arr, strides=(1,))
    tail = pos > last
    if not tail.any():
        return items[pos].view(np.uint8).reshape(len(pos), width)
    # the few rows that run past the end are padded one by one, not by copying all of ``arr``
    out = np.zeros((len(pos), width), dtype=np.uint8)
    out[~tail] = items[pos[~tail]].view(np.uint8).reshape(-1, width)
    for r in np.flatnonzero(tail).tolist():
        chunk = arr[int(pos[r]):int(pos[r]) + width]
        out[r, :len(chunk)] = chunk
    return out


byte_rows = rows_at
"""``width`` bytes from each of many positions, as rows of a uint8 matrix (one fancy-index copy)."""


def text_ids(arr: np.ndarray, pos: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Short strings that repeat (topics, property names) as an index per string into the list of
    the distinct ones, each decoded once (Java's rules); exact, whatever the hashing."""
    return _topic_ids(arr, pos, length)


def _topic_ids(arr: np.ndarray, pos: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """A topic index per record: grouped by a 64-bit polynomial hash of the topic bytes, then
    checked byte for byte against each group's first record (exact, no hash trust)."""
    from store.format.properties import java_string

    if len(pos) == 0:
        return np.zeros(0, dtype=np.int64), []
    width = int(length.max())
    if width <= 16:
        got = _topic_ids_short(arr, pos, length)
        if got is not None:
            return got
    mat = rows_at(arr, pos, width) if width else np.zeros((len(pos), 0), np.uint8)
    live = np.arange(width) < length[:, None]
    h = length.astype(np.uint64)
    for j in range(width):
        h = h * np.uint64(1099511628211) + np.where(live[:, j], mat[:, j], 0).astype(np.uint64)
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    rep = first[inverse]
    same = (length == length[rep]) & ((mat == mat[rep]) | ~live).all(axis=1)
    if not same.all():   # a hash collision: fall back to exact grouping of the rows
        key = np.concatenate([length.astype(">u2").view(np.uint8).reshape(-1, 2), np.where(live, mat, 0)], axis=1)
        rows = np.ascontiguousarray(key.astype(np.uint8)).view(np.dtype((np.void, width + 2)))[:, 0]
        _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    topics = [java_string(arr[pos[i]:pos[i] + length[i]].tobytes()) for i in first.tolist()]
    return inverse.astype(np.int64), topics


def _topic_ids_short(arr: np.ndarray, pos: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, list[str]] | None:
    """Topics of at most 16 bytes as exact 128-bit keys (bytes, zero-padded, and the length);
    the usual handful of topics is peeled off with one comparison pass each."""
    from store.format.properties import java_string

    words = rows_at(arr, pos, 16).view(np.uint64)     # two words per row, bytes past the topic masked off
    mask = _TOPIC_MASKS[length]
    hi = words[:, 0] & mask[:, 0]
    lo = words[:, 1] & mask[:, 1]
    ids = np.full(len(pos), -1, dtype=np.int64)
    topics: list[str] = []
    left = np.arange(len(pos))
    while len(left):
        if len(topics) == 32:
            return None                              # many topics: the general path
        i = int(left[0])
        same = (hi[left] == hi[i]) & (lo[left] == lo[i]) & (length[left] == length[i])
        ids[left[same]] = len(topics)
        topics.append(java_string(arr[pos[i]:pos[i] + length[i]].tobytes()))
        left = left[~same]
    return ids, topics


def java_hash_ascii(mat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """String.hashCode of ASCII strings (rows of ``mat``, ``lengths`` long), sign-extended."""
    h = np.zeros(len(mat), dtype=np.int64)
    for j in range(mat.shape[1]):
        h = np.where(j < lengths, (h * 31 + mat[:, j]) & 0xFFFFFFFF, h)
    return (h ^ 0x80000000) - 0x80000000


def _value_lengths(arr: np.ndarray, vpos: np.ndarray, avail: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Length of each property value (up to its \x02 or the end of the properties) within the
    first ``width`` bytes, and those bytes; -1 where the value is longer than ``width``."""
    vals = rows_at(arr, vpos, width)
    sep = (vals == _SEP) | (np.arange(width) >= avail[:, None])
    found = sep.any(axis=1)
    return np.where(found, np.argmax(sep, axis=1), -1), vals


def _tags_names(arr: np.ndarray, props_pos: np.ndarray, props_len: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each record's TAGS value starts: (records with one "TAGS\\x01" pair, the position
    of their value, records to decode the slow way). Only the properties are searched, each
    record's side by side as a fixed-width byte string (numpy's C string search), not the
    bodies between them. A name that merely ends in TAGS, or a second TAGS (the later one
    wins), sends the record the slow way."""
    width = int(props_len.max(initial=0))
    none = np.zeros(0, dtype=np.int64)
    if width < 5:
        return none, none, none
    if width > _MAX_PROPS_ROW:      # a few huge properties: everything the slow way
        return none, none, np.flatnonzero(props_len >= 5)
    rows = rows_at(arr, props_pos, width)
    text = rows.view(f"S{width}")[:, 0]
    first = np.strings.find(text, _TAGS_NAME)
    has = (first >= 0) & (first + 5 <= props_len)
    rec = np.flatnonzero(has)
    col = first[rec]
    at_pair = (col == 0) | (rows[rec, np.maximum(col - 1, 0)] == _SEP)
    second = np.strings.find(text[rec], _TAGS_NAME, col + 1)
    unsure = ~at_pair | ((second >= 0) & (second + 5 <= props_len[rec]))
    sure = rec[~unsure]
    return sure, props_pos[sure] + col[~unsure] + 5, rec[unsure]


def tags_codes(arr: np.ndarray, f: RecordFields) -> np.ndarray:
    """The consume-queue tagsCode each record should have (FORMAT §12)."""
    from store.format.properties import java_string, string_to_properties
    from store.format.record_json import consume_queue_tags_code

    n = len(f.starts)
    out = np.zeros(n, dtype=np.int64)
    if n == 0:
        return out
    slow = np.zeros(n, dtype=bool)
    if SCHEDULE_TOPIC in f.topics:
        slow |= f.topic_id == f.topics.index(SCHEDULE_TOPIC)
    if f.tags_code is not None and f.marks is not None:      # the C scan read them
        out[:] = f.tags_code
        slow |= (f.marks & MARK_TAGS_SLOW) != 0
    else:
        _ascii_tags_codes(arr, f, out, slow)
    for i in np.flatnonzero(slow).tolist():
        p, n_ = int(f.props_pos[i]), int(f.props_len[i])
        props = string_to_properties(java_string(arr[p:p + n_].tobytes())) if n_ else {}
        ts = int(f.store_timestamp[i])
        out[i] = consume_queue_tags_code(f.topics[f.topic_id[i]], props, ts) if n_ else 0
    return out


def _ascii_tags_codes(arr: np.ndarray, f: RecordFields, out: np.ndarray, slow: np.ndarray) -> None:
    """tags_codes' numpy way: the tagsCode of each record with one ASCII TAGS value into ``out``,
    the others marked in ``slow``."""
    plen = f.props_len
    owner, vpos, unsure = _tags_names(arr, f.props_pos, plen)
    slow[unsure] = True
    one = ~slow[owner]
    owner, vpos = owner[one], vpos[one]
    pend = f.props_pos[owner] + plen[owner]
    if len(owner):
        # most tags are short: look at 16 bytes first, at more only for the longer values
        avail = pend - vpos
        length, vals = _value_lengths(arr, vpos, avail, int(min(8, avail.max())))
        longer = np.flatnonzero(length < 0)
        if len(longer):
            slow[owner[longer]] = True        # over _MAX_FAST_TAG: the per-record path
            more = int(min(_MAX_FAST_TAG + 1, avail[longer].max()))
            l2, v2 = _value_lengths(arr, vpos[longer], avail[longer], more)
            ok2 = (l2 >= 0) & (l2 <= _MAX_FAST_TAG)
            slow[owner[longer[ok2]]] = False
            fast2 = longer[ok2]
            l2, v2 = l2[ok2], v2[ok2]
            nonascii2 = ((v2 >= 0x80) & (np.arange(more) < l2[:, None])).any(axis=1)
            slow[owner[fast2[nonascii2]]] = True
            out[owner[fast2[~nonascii2]]] = java_hash_ascii(v2[~nonascii2], l2[~nonascii2])
        short = np.flatnonzero(length >= 0)
        ls, vs = length[short], vals[short]
        # any byte >= 0x80 in the window (even past the value) sends the record the slow way:
        # conservative, and one test per row
        nonascii = (vs >= 0x80).any(axis=1)
        slow[owner[short[nonascii]]] = True
        keep = short[~nonascii]
        out[owner[keep]] = java_hash_ascii(vs[~nonascii], ls[~nonascii])
