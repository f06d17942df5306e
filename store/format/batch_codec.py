"""Encode a whole Arrow batch of messages into back-to-back CommitLog records, vectorized.

Fixed-width fields are packed as big-endian numpy structured rows, variable fields (body, topic,
properties) come straight from Arrow's contiguous value buffers, and Arrow's
``binary_join_element_wise`` lays the pieces out record after record. The only per-record Python
work is the body CRC (zlib over zero-copy slices) and, when enabled, the whole-record CRC.
Every record equals ``encode_message`` of the same row (store timestamp and physical offset 0,
patched by the store at append time).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store.errors import DeadLetterReason, InvalidMessageError
from store.format.batch_columns import (
    MESSAGE_TABLE_SCHEMA,
    OPTIONAL_COLUMNS,
    BatchPlan,
    binary_column,
    binary_from,
    binary_parts,
    columns_of,
    fixed_binary,
    fixed_rows,
    gather_binary,
    index_keys_column,
    int_column,
    limit_error,
    limit_mask,
    null_mask,
    plan_batch,
    pooled_bytes,
    rows_containing,
)
from store.format.codec import CodecConfig, Message, apply_prop_crcs, encode_message
from store.format.constants import (
    CRC32_RESERVED_LEN,
    IPV4_HOST_LENGTH,
    IPV6_HOST_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    POS_BORNTIMESTAMP,
    POS_SYSFLAG,
    PROPERTY_DELAY,
    PROPERTY_TAGS,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from store.format.crc import crc32_many
from store.format.properties import java_parse_int, parse_delay_property, string_to_properties, tags_code

PIECE_MIN_BYTES = 1 << 20       # records of a batch left in their buffers when these are this large on average
# from_arrow's optional column of each record's index keys (list<int32>, store.index.shipped)
INDEX_KEYS_COLUMN = "index_keys"
__all__ = ["INDEX_KEYS_COLUMN", "MESSAGE_TABLE_SCHEMA", "OPTIONAL_COLUMNS", "EncodedBatch", "encode_batch",
           "encode_batch_to_arrow", "validate_batch"]



@dataclass
class EncodedBatch:
    """Records back to back in ``data`` plus what the store and the consume queue need per record.
    A batch collected from several buffers (the read tasks' spool files) may hold its records
    where they are instead: ``pieces`` (first record, buffer) in record order, each piece's
    records back to back in its buffer, ``offsets`` then into their piece (``data`` unused)."""

    data: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    topic_names: list[str]
    topic_index: np.ndarray
    queue_ids: np.ndarray
    sys_flags: np.ndarray
    tags_codes: np.ndarray
    delay_levels: np.ndarray
    queue_offsets: np.ndarray | None
    pieces: tuple[tuple[int, np.ndarray], ...] = ()
    # The records' index keys when they came with the batch (store.index.shipped: found and hashed
    # where the batch was encoded): every key in record order, and a count per record. None: the
    # store's index finds them in the commit log.
    key_hashes: np.ndarray | None = None
    key_counts: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def nbytes(self) -> int:
        return sum(int(d.nbytes) for _, d in self.pieces) if self.pieces else int(self.data.nbytes)

    def record(self, i: int) -> memoryview:
        data = self.data
        if self.pieces:
            data = self.pieces[bisect.bisect_right([first for first, _ in self.pieces], i) - 1][1]
        return memoryview(data)[int(self.offsets[i]):int(self.offsets[i]) + int(self.sizes[i])]

    def born_timestamps(self) -> np.ndarray:
        """Each record's BORNTIMESTAMP (ms; a Kafka record's own timestamp), in record order."""
        out = np.empty(len(self), dtype=np.int64)
        for first, end, data in self.sources():
            at = np.asarray(self.offsets[first:end], dtype=np.int64) + POS_BORNTIMESTAMP
            out[first:end] = np.asarray(data, dtype=np.uint8)[at[:, None] + np.arange(8)].view(">i8")[:, 0]
        return out

    def sources(self) -> list[tuple[int, int, np.ndarray]]:
        """(first record, end record, buffer) of each buffer holding records, in record order."""
        if not self.pieces:
            return [(0, len(self), self.data)]
        ends = [first for first, _ in self.pieces[1:]] + [len(self)]
        return [(first, end, d) for (first, d), end in zip(self.pieces, ends) if end > first]

    @classmethod
    def from_arrow(cls, table: pa.Table | pa.RecordBatch, rows: np.ndarray | None = None) -> "EncodedBatch":
        """From the ``encode_batch_to_arrow`` form: a ``record`` binary column (records encoded
        elsewhere, e.g. by Spark executors) with topic, queue_id, sys_flag, tags_code,
        delay_level and queue_offset columns. Metadata columns are used without copying; the
        record bytes too when they lie in large chunks (``pieces``), else they are copied once
        into one buffer. ``rows`` (ascending) takes only those rows; the others' records must be
        null and empty (a batch's dead letters), so nothing more is copied."""
        records = table.column("record")
        if not (pa.types.is_binary(records.type) or pa.types.is_large_binary(records.type)):
            raise InvalidMessageError(f"column record is {records.type}, not binary")
        if rows is not None:
            present = pc.is_valid(records).to_numpy(zero_copy_only=False)
            if not present[rows].all():
                raise InvalidMessageError(f"column record has {int((~present[rows]).sum())} null rows to append")
            left_out = np.ones(len(records), dtype=bool)
            left_out[rows] = False
            if pc.binary_length(records).fill_null(0).to_numpy(zero_copy_only=False)[left_out].any():
                return cls.from_arrow(table.take(pa.array(rows)))    # rows left out hold bytes: copy
        elif records.null_count:
            raise InvalidMessageError(f"column record has {records.null_count} null rows")
        starts, sizes, data, pieces = _record_bytes(records)
        key_hashes, key_counts = index_keys_column(table, INDEX_KEYS_COLUMN, rows)
        meta = table.select([name for name in table.schema.names if name not in ("record", INDEX_KEYS_COLUMN)])
        if rows is not None:
            starts, sizes, meta = starts[rows], sizes[rows], meta.take(pa.array(rows))
            pieces = tuple((int(np.searchsorted(rows, first)), d) for first, d in pieces)
        n = len(starts)
        cols = columns_of(meta)
        topics = pc.dictionary_encode(cols["topic"])
        queue_offsets = None
        if "queue_offset" in cols and cols["queue_offset"].null_count < n:
            queue_offsets = int_column(cols["queue_offset"], np.int64)
        return cls(
            data=data, offsets=starts, sizes=sizes,
            topic_names=topics.dictionary.to_pylist(), topic_index=int_column(topics.indices, np.int32),
            queue_ids=int_column(cols["queue_id"], np.int32), sys_flags=int_column(cols["sys_flag"], np.int32),
            tags_codes=int_column(cols["tags_code"], np.int64), delay_levels=int_column(cols["delay_level"], np.int32),
            queue_offsets=queue_offsets, pieces=pieces, key_hashes=key_hashes, key_counts=key_counts)


def _record_bytes(records: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple]:
    """(starts, sizes, data, pieces) of a binary column of records: where they are when its chunks
    are large (the spool files' buffers, nothing copied: the commit log copies from them), else
    copied once into one buffer (many small pieces would cost more than the copy)."""
    chunks = [c for c in (records.chunks if isinstance(records, pa.ChunkedArray) else [records]) if len(c)]
    total = sum(int(c.buffers()[2].size) if c.buffers()[2] is not None else 0 for c in chunks)
    if len(chunks) <= 1 or total < PIECE_MIN_BYTES * len(chunks):
        starts, data = gather_binary(records)
        return starts, np.diff(np.append(starts, data.size)).astype(np.int32), data, ()
    starts, sizes, pieces, first = [], [], [], 0
    for c in chunks:
        offs, values = binary_parts(c)
        starts.append(offs[:-1] - offs[0])
        sizes.append(np.diff(offs))
        pieces.append((first, values[offs[0]:offs[-1]]))
        first += len(c)
    return np.concatenate(starts), np.concatenate(sizes).astype(np.int32), np.zeros(0, np.uint8), tuple(pieces)


def validate_batch(table: pa.Table | pa.RecordBatch,
                   config: CodecConfig | None = None) -> tuple[np.ndarray, list[str | None]]:
    """Which rows can be encoded (True) and, for the others, why: the text of the error
    encode_batch would raise, so a dead-letter record says what to fix."""
    config = config or CodecConfig()
    ok, reasons, _ = _validity(plan_batch(table, config), config)
    return ok, reasons


def _validity(plan: BatchPlan, config: CodecConfig
              ) -> tuple[np.ndarray, list[str | None], list[DeadLetterReason | None]]:
    reasons, codes = plan.problems.copy(), plan.problem_reasons.copy()
    for i in np.flatnonzero(limit_mask(plan, config)):
        if reasons[i] is None:
            exc = limit_error(plan, int(i), config)
            reasons[i], codes[i] = str(exc), exc.reason
    return np.equal(reasons, None), reasons.tolist(), codes.tolist()


def encode_valid_rows(table: pa.Table | pa.RecordBatch, config: CodecConfig | None = None
                      ) -> tuple[np.ndarray, list[str | None], list[DeadLetterReason | None], pa.Table]:
    """validate_batch, then encode_batch_to_arrow of the rows that passed: (ok, reasons, their
    DeadLetterReason codes, encoded). The batch is planned once when every row is valid, the usual case."""
    config = config or CodecConfig()
    plan = plan_batch(table, config)
    ok, reasons, codes = _validity(plan, config)
    if ok.all():
        return ok, reasons, codes, _to_arrow(_encode_plan(plan, config, writable=False))
    return ok, reasons, codes, encode_batch_to_arrow(table.filter(pa.array(ok)), config)


# --- encoding ---------------------------------------------------------------------------------------

def _head_dtype(born: int, store: int) -> np.dtype:
    # TOTALSIZE .. BODYLENGTH: everything before BODY, fixed width for a given pair of host kinds.
    return np.dtype([("total", ">i4"), ("magic", ">u4"), ("body_crc", ">i4"), ("queue_id", ">i4"), ("flag", ">i4"),
                     ("queue_offset", ">i8"), ("physical_offset", ">i8"), ("sys_flag", ">i4"),
                     ("born_timestamp", ">i8"), ("born_host", f"V{born}"), ("store_timestamp", ">i8"),
                     ("store_host", f"V{store}"), ("reconsume_times", ">i4"),
                     ("prepared_transaction_offset", ">i8"), ("body_length", ">i4")])


def _body_crcs(body: pa.Array) -> np.ndarray:
    """Masked CRC32 of every body: the one per-record Python step of the hot path."""
    offs, values = binary_parts(body)
    return crc32_many(values, offs[:-1], np.diff(offs))


def _heads(plan: BatchPlan, queue_offsets: np.ndarray) -> pa.Array:
    """The fixed-width part of every record as a binary column (one structured row per record)."""
    cols, n = plan.cols, plan.n
    born6 = plan.born_len == IPV6_HOST_LENGTH
    store6 = plan.store_len == IPV6_HOST_LENGTH
    widths = 88 + born6 * 12 + store6 * 12
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(widths, out=offs[1:])
    buf = np.empty(int(offs[-1]), dtype=np.uint8)
    magic = np.where(plan.version == 2, MESSAGE_MAGIC_CODE_V2, MESSAGE_MAGIC_CODE).astype(np.uint32)
    crcs = _body_crcs(plan.body)
    b_offs, b_vals = binary_parts(binary_column(cols, "born_host", n))
    s_offs, s_vals = binary_parts(binary_column(cols, "store_host", n))
    for b6 in (False, True):
        for s6 in (False, True):
            rows = np.flatnonzero((born6 == b6) & (store6 == s6))
            if not len(rows):
                continue
            bw, sw = (IPV6_HOST_LENGTH if b6 else IPV4_HOST_LENGTH), (IPV6_HOST_LENGTH if s6 else IPV4_HOST_LENGTH)
            dt = _head_dtype(bw, sw)
            all_rows = len(rows) == n
            pick = (lambda a: a) if all_rows else (lambda a: a[rows])   # noqa: E731
            h = np.empty(len(rows), dtype=dt)
            h["total"] = pick(plan.total)
            h["magic"] = pick(magic)
            h["body_crc"] = pick(crcs)
            h["queue_id"] = pick(int_column(cols.get("queue_id"), np.int32, n))
            h["flag"] = pick(int_column(cols.get("flag"), np.int32, n))
            h["queue_offset"] = pick(queue_offsets)
            h["physical_offset"] = 0
            h["sys_flag"] = pick(plan.sys_flag)
            h["born_timestamp"] = pick(int_column(cols.get("born_timestamp"), np.int64, n))
            h["born_host"] = fixed_rows(b_vals, b_offs, rows, bw).view(f"V{bw}")[:, 0]
            h["store_timestamp"] = 0
            h["store_host"] = fixed_rows(s_vals, s_offs, rows, sw).view(f"V{sw}")[:, 0]
            h["reconsume_times"] = pick(int_column(cols.get("reconsume_times"), np.int32, n))
            h["prepared_transaction_offset"] = pick(int_column(cols.get("prepared_transaction_offset"), np.int64, n))
            h["body_length"] = pick(plan.body_len)
            raw = h.view(np.uint8).reshape(len(rows), dt.itemsize)
            if all_rows:
                buf = raw.reshape(-1)
            else:
                np.lib.stride_tricks.as_strided(buf, (max(len(buf) - dt.itemsize + 1, 0), dt.itemsize),
                                                (1, 1))[offs[rows]] = raw
    return binary_from(buf, offs)


def encode_batch(table: pa.Table | pa.RecordBatch, config: CodecConfig | None = None) -> EncodedBatch:
    """Encode every row of a MESSAGE_TABLE_SCHEMA table. Raises FieldLimitError (field, size,
    limit and row) or InvalidMessageError for the first row that cannot be a record."""
    config = config or CodecConfig()
    return _encode_plan(plan_batch(table, config), config)


def _encode_plan(plan: BatchPlan, config: CodecConfig, writable: bool = True) -> EncodedBatch:
    """``writable=False``: the records may stay in the joined Arrow buffer (read-only) when nothing
    is patched in place; for a batch going straight back to Arrow, that spares a copy of it."""
    bad = np.flatnonzero(plan.problems != None)  # noqa: E711 (element-wise on an object array)
    over = np.flatnonzero(limit_mask(plan, config))
    first_bad = int(bad[0]) if len(bad) else plan.n
    if len(over) and int(over[0]) < first_bad:
        raise limit_error(plan, int(over[0]), config)
    if len(bad):
        raise InvalidMessageError(f"row {first_bad}: {plan.problems[first_bad]}")
    n, cols = plan.n, plan.cols
    tx = plan.sys_flag & TRANSACTION_TYPE_MASK
    has_queue_offsets = "queue_offset" in cols and cols["queue_offset"].null_count < n
    queue_offsets = int_column(cols.get("queue_offset"), np.int64, n)
    queue_offsets = np.where((tx == TRANSACTION_PREPARED_TYPE) | (tx == TRANSACTION_ROLLBACK_TYPE), 0, queue_offsets)

    pieces = [_heads(plan, queue_offsets), plan.body]
    topic_parts = pa.array(plan.topic_parts, pa.binary()).take(pa.array(plan.topic_index)) if n \
        else pa.array([], pa.binary())
    pieces += [topic_parts, fixed_binary(plan.props_len.astype(">i2"), 2, n), plan.props]
    if config.enabled_append_prop_crc:
        sep = np.where(plan.needs_separator, 1, 0)
        pieces.append(binary_from(np.full(int(sep.sum()), 0x02, np.uint8), np.concatenate([[0], np.cumsum(sep)])))
        pieces.append(fixed_binary(np.zeros((n, CRC32_RESERVED_LEN), np.uint8), CRC32_RESERVED_LEN, n))
    if int(plan.total.sum()) > 0x7FFFFFFF:
        pieces = [p.cast(pa.large_binary()) for p in pieces]
    joined = pc.binary_join_element_wise(*pieces, b"") if n else pa.array([], pa.binary())
    offs, values = binary_parts(joined)
    if not n:
        data = np.zeros(0, np.uint8)
    elif writable or config.enabled_append_prop_crc:
        data = pooled_bytes(int(offs[-1] - offs[0]))
        data[:] = values[offs[0]:offs[-1]]
    else:
        data = values[offs[0]:offs[-1]]
    offsets = (offs[:-1] - offs[0]).astype(np.int64)
    sizes = plan.total.astype(np.int32)
    if config.enabled_append_prop_crc:
        apply_prop_crcs(data, offsets, sizes)
    return EncodedBatch(
        data=data, offsets=offsets, sizes=sizes, topic_names=plan.topic_names, topic_index=plan.topic_index,
        queue_ids=int_column(cols.get("queue_id"), np.int32, n), sys_flags=plan.sys_flag.astype(np.int32),
        tags_codes=_tags_codes(cols.get("tags"), n), delay_levels=_delay_levels(plan.props, n),
        queue_offsets=queue_offsets if has_queue_offsets else None)


def _tags_codes(tags: pa.Array | None, n: int) -> np.ndarray:
    if tags is None or n == 0:
        return np.zeros(n, np.int64)
    enc = pc.dictionary_encode(tags)
    codes = np.array([tags_code(t) for t in enc.dictionary.to_pylist()] or [0], dtype=np.int64)
    idx = enc.indices
    out = codes[int_column(idx, np.int64, n)] if len(enc.dictionary) else np.zeros(n, np.int64)
    if idx.null_count:
        out[null_mask(idx)] = 0
    return out


def _delay_levels(props: pa.Array, n: int) -> np.ndarray:
    out = np.zeros(n, np.int32)
    if n == 0:
        return out
    for i in rows_containing(props, (PROPERTY_DELAY + "\x01").encode()):
        # delayed messages are rare: read them the exact RocketMQ way
        text = props[int(i)].as_py().decode("utf-8", "replace")
        out[i] = java_parse_int(string_to_properties(text).get(PROPERTY_DELAY)) or 0
    return out


def encode_batch_to_arrow(table: pa.Table | pa.RecordBatch, config: CodecConfig | None = None) -> pa.Table:
    """encode_batch in the Arrow form executors send to the driver: ``record`` (binary) and
    topic, queue_id, sys_flag, tags_code, delay_level, queue_offset (null when the store assigns)."""
    return _to_arrow(encode_batch(table, config))


def _to_arrow(batch: EncodedBatch) -> pa.Table:
    n = len(batch)
    data, offsets = batch.data, batch.offsets
    if batch.pieces:        # one buffer again
        data = np.concatenate([d[int(batch.offsets[a]):int(batch.offsets[b - 1]) + int(batch.sizes[b - 1])]
                               for a, b, d in batch.sources()])
        offsets = np.cumsum(batch.sizes, dtype=np.int64) - batch.sizes
    records = binary_from(data, np.append(offsets, data.nbytes))
    names = pa.array(batch.topic_names, pa.string())
    topic = names.take(pa.array(batch.topic_index)) if n else pa.array([], pa.string())
    queue_offset = pa.array(batch.queue_offsets, pa.int64()) if batch.queue_offsets is not None \
        else pa.nulls(n, pa.int64())
    return pa.table({"record": records, "topic": topic, "queue_id": pa.array(batch.queue_ids, pa.int32()),
                     "sys_flag": pa.array(batch.sys_flags, pa.int32()),
                     "tags_code": pa.array(batch.tags_codes, pa.int64()),
                     "delay_level": pa.array(batch.delay_levels, pa.int32()), "queue_offset": queue_offset})


def encode_messages(messages: Sequence[Message], codec: CodecConfig) -> EncodedBatch:
    """An EncodedBatch of Message objects (the per-message path; tables go through
    encode_batch)."""
    records = [encode_message(m, codec) for m in messages]
    n = len(records)
    sizes = np.fromiter((len(r) for r in records), dtype=np.int64, count=n)
    offsets = np.cumsum(sizes) - sizes
    data = np.frombuffer(b"".join(records), dtype=np.uint8).copy()
    names: list[str] = []
    index: dict[str, int] = {}
    topic_index = np.empty(n, dtype=np.int32)
    tags = np.empty(n, dtype=np.int64)
    delays = np.empty(n, dtype=np.int32)
    for i, m in enumerate(messages):
        if m.topic not in index:
            index[m.topic] = len(names)
            names.append(m.topic)
        topic_index[i] = index[m.topic]
        props = string_to_properties(m.properties) if m.properties else {}
        tags[i] = tags_code(props.get(PROPERTY_TAGS))
        delays[i] = parse_delay_property(props.get(PROPERTY_DELAY))
    # The encoder ORs the IPv6 bits into SYSFLAG: read it back from the records.
    sys_flags = np.array([int.from_bytes(r[POS_SYSFLAG:POS_SYSFLAG + 4], "big", signed=True)
                          for r in records], dtype=np.int32)
    return EncodedBatch(data=data, offsets=offsets.astype(np.int64), sizes=sizes.astype(np.int32),
                        topic_names=names, topic_index=topic_index,
                        queue_ids=np.array([m.queue_id for m in messages], dtype=np.int32),
                        sys_flags=sys_flags, tags_codes=tags, delay_levels=delays,
                        queue_offsets=None)
