"""Encode a whole Arrow batch of messages into back-to-back CommitLog records, vectorized.

Fixed-width fields are packed as big-endian numpy structured rows, variable fields (body, topic,
properties) come straight from Arrow's contiguous value buffers, and Arrow's
``binary_join_element_wise`` lays the pieces out record after record. The only per-record Python
work is the body CRC (zlib over zero-copy slices) and, when enabled, the whole-record CRC.
Every record equals ``encode_message`` of the same row (store timestamp and physical offset 0,
patched by the store at append time). What it encodes to, EncodedBatch and its Arrow form, is
store.format.encoded_batch's.
"""

from __future__ import annotations

from collections.abc import Sequence

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
    fixed_binary,
    fixed_rows,
    int_column,
    limit_error,
    limit_mask,
    null_mask,
    plan_batch,
    pooled_bytes,
    rows_containing,
)
from store.format.codec import CodecConfig, Message, apply_prop_crcs, encode_message
from store.format.layout import head_dtype
from store.format.constants import (
    CRC32_RESERVED_LEN,
    IPV4_HOST_LENGTH,
    IPV6_HOST_EXTRA_LENGTH,
    IPV6_HOST_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    POS_SYSFLAG,
    PROPERTY_DELAY,
    PROPERTY_TAGS,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from store.format.crc import crc32_many
from store.format.encoded_batch import INDEX_KEYS_COLUMN, EncodedBatch, to_arrow
from store.format.properties import java_parse_int, parse_delay_property, string_to_properties, tags_code

__all__ = ["INDEX_KEYS_COLUMN", "MESSAGE_TABLE_SCHEMA", "OPTIONAL_COLUMNS", "EncodedBatch", "encode_batch",
           "encode_batch_to_arrow", "validate_batch"]


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
        return ok, reasons, codes, to_arrow(_encode_plan(plan, config, writable=False))
    return ok, reasons, codes, encode_batch_to_arrow(table.filter(pa.array(ok)), config)


# --- encoding ---------------------------------------------------------------------------------------

def _body_crcs(body: pa.Array) -> np.ndarray:
    """Masked CRC32 of every body: the one per-record Python step of the hot path."""
    offs, values = binary_parts(body)
    return crc32_many(values, offs[:-1], np.diff(offs))


def _heads(plan: BatchPlan, queue_offsets: np.ndarray) -> pa.Array:
    """The fixed-width part of every record as a binary column (one structured row per record)."""
    cols, n = plan.cols, plan.n
    born6 = plan.born_len == IPV6_HOST_LENGTH
    store6 = plan.store_len == IPV6_HOST_LENGTH
    widths = head_dtype().itemsize + (born6.astype(np.int64) + store6) * IPV6_HOST_EXTRA_LENGTH
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
            dt = head_dtype(bw, sw)
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
    return to_arrow(encode_batch(table, config))


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
