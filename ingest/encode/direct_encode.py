"""Kafka record batches straight to encoded CommitLog records, one C pass per record: the mapping's
implementation for the records every real stream is made of.

``DirectEncoder`` (ingest/encode/_direct_encode.c, built by setup.py, which needs a C compiler)
walks the fetched bytes once and writes each record's head, body, topic and properties where they
belong, with the body CRC, under the mapping's default rules: UTF-8 keys and headers, null and empty
values. It hands back the other records, row by row: a key or header that is not UTF-8 text or holds
a property separator, a null, empty, reserved or repeated header (kept as KAFKA_HEADERS), the
born-host or DELAY header, a record over a limit (a dead letter). Those go the general way
(ingest.encode.prepare.map_and_encode: the per-row rules of ingest.encode.mapping, which know every
rule and every error message, then store.format's batch codec) and are put back in their place, so
the rows, their order and so their queue offsets are what the general path gives for the whole
fetch (tests/ingest/encode/test_direct_encode.py holds the two equal). A whole fetch goes the general way when a
batch does not parse, or for settings the kernel does not cover at all (the envelope mode, a target
topic RocketMQ refuses). With property CRCs the kernel leaves their 20 bytes after each record's
properties and the CRCs are written over them as the batch codec writes its own (apply_prop_crcs);
a header named like the CRC property is handed back (the codec drops such a property).

Kafka rows that are already Arrow columns (Spark's own Kafka source, a replayed export: what
ingest.encode.prepare.map_and_encode_batches is handed) take the same kernel through
``encode_rows``: it reads each row's key, value and headers from the columns' buffers instead of a
fetch's bytes, and writes the same records (tests/ingest/encode/test_direct_encode_rows.py).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.encode import _direct_encode as _kernel
from ingest.encode.mapping import (
    PROPERTY_KAFKA_OFFSET,
    PROPERTY_KAFKA_PARTITION,
    PROPERTY_KAFKA_TOPIC,
    PROBLEM,
    RESERVED_PROPERTIES,
    MappingConfig,
    topic_problem,
    uniq_key,
)
from ingest.kafka.decode import BatchSection
from ingest.kafka.fetch import ArrowChunk
from sink.handover.schema import ENCODED_SCHEMA, VALUE_KIND
from store import StoreError
from store.format import (
    CRC32_RESERVED_LEN,
    MAX_PROPERTIES_LENGTH,
    POS_BORNHOST,
    POS_SYSFLAG,
    PROPERTY_CRC32,
    PROPERTY_KAFKA_VALUE_EMPTY,
    PROPERTY_UNIQ_KEY,
    CodecConfig,
    HostAddress,
    Message,
    apply_prop_crcs,
    binary_from,
    binary_parts,
    encode_message,
    pooled_bytes,
)
from store.format import NAME_VALUE_SEPARATOR as SEP1
from store.format import PROPERTY_SEPARATOR as SEP2

log = logging.getLogger(__name__)

FALLBACK_REASONS = {1: "damaged batch", 2: "key not UTF-8 text", 3: "header name not UTF-8 text",
                    4: "header value null, empty or not UTF-8 text", 5: "born-host or DELAY header",
                    6: "record over a limit", 7: "output buffer too small", 8: "header name reserved or repeated",
                    9: "a row with a reason of its own or a null field"}
# TOTALSIZE .. BODYLENGTH without the two hosts: STORETIMESTAMP, RECONSUMETIMES, PREPARED_TRANSACTION_OFFSET and
# BODYLENGTH follow BORNTIMESTAMP's 8 bytes and the born host
_HEAD_FIXED = POS_BORNHOST + 8 + 4 + 8 + 4


def _reserved(prop_crc: bool) -> bytes:
    """The header names the kernel hands back, NUL-separated: the mapping's own properties, and the
    CRC property's name when the codec writes (and so first drops) one."""
    names = RESERVED_PROPERTIES | {PROPERTY_CRC32} if prop_crc else RESERVED_PROPERTIES
    return b"\0".join(name.encode() for name in sorted(names))


@dataclass
class DirectEncoder:
    """The constant parts of every record of one Kafka partition under one mapping and codec."""

    topic: str
    partition: int
    target_topic: str
    head: bytes                 # TOTALSIZE .. BODYLENGTH as store.format.codec encodes it, per-record fields zero
    topic_part: bytes           # TOPICLENGTH + TOPIC
    coords_prefix: bytes        # KAFKA_TOPIC, KAFKA_PARTITION and the name of KAFKA_OFFSET
    uniq_prefix: bytes          # the first 16 hex digits of UNIQ_KEY: crc32(topic) | partition
    born_header: bytes
    max_body: int
    max_record: int
    key_hash_queues: int        # 0: queueId = queue_id
    sys_flag: int
    queue_id: int               # the partition's queue (MappingConfig.partition_queue)
    reserved: bytes             # header names handed back (_reserved)
    crc_reserve: int            # CRC32_RESERVED_LEN with property CRCs, else 0
    fallbacks: Counter = field(default_factory=Counter)   # records that went the general way, by reason
    direct_records: int = 0                                # records the kernel encoded

    @classmethod
    def for_partition(cls, topic: str, partition: int, mapping: MappingConfig,
                      codec: CodecConfig) -> DirectEncoder | None:
        """The encoder of ``topic``-``partition``, or None when its records need the general path
        whatever they hold (envelope mode, a target topic RocketMQ refuses)."""
        if mapping.envelope:
            return None
        target = mapping.topic_map.get(topic, topic)
        if topic_problem(target):
            return None
        born, store = HostAddress.parse(mapping.born_host), HostAddress.parse(mapping.store_host)
        try:
            # without the CRC's reserved bytes, so that the template ends with an empty properties part
            template = encode_message(Message(topic=target, body=b"", queue_id=mapping.partition_queue(partition),
                                              born_host=born, store_host=store),
                                      dataclasses.replace(codec, enabled_append_prop_crc=False))
        except StoreError:
            return None
        head_len = _HEAD_FIXED + len(born.to_bytes()) + len(store.to_bytes())
        key_hash = mapping.queue_mode == "key-hash"
        return cls(
            topic=topic, partition=partition, target_topic=target, head=template[:head_len],
            topic_part=template[head_len:-2],
            coords_prefix=(f"{PROPERTY_KAFKA_TOPIC}{SEP1}{topic}{SEP2}{PROPERTY_KAFKA_PARTITION}{SEP1}{partition}"
                           f"{SEP2}{PROPERTY_KAFKA_OFFSET}{SEP1}").encode(),
            uniq_prefix=uniq_key(topic, partition, 0)[:16].encode(),   # the offset's 16 hex digits follow
            born_header=mapping.born_host_header.encode(),
            max_body=min(mapping.max_message_size, codec.max_message_size), max_record=codec.max_record_size,
            key_hash_queues=mapping.queue_count if key_hash else 0,
            sys_flag=int.from_bytes(template[POS_SYSFLAG:POS_SYSFLAG + 4], "big", signed=True),
            queue_id=mapping.partition_queue(partition), reserved=_reserved(codec.enabled_append_prop_crc),
            crc_reserve=CRC32_RESERVED_LEN if codec.enabled_append_prop_crc else 0)

    @property
    def _record_overhead(self) -> int:
        # the most a record's encoding adds to its key, value and header bytes in the fetch
        return (len(self.head) + len(self.topic_part) + 2 + len("KEYS") + 2 + len(self.coords_prefix) + 20
                + len(f"{SEP2}{PROPERTY_UNIQ_KEY}{SEP1}") + len(self.uniq_prefix) + 16 + 1
                + len(f"{PROPERTY_KAFKA_VALUE_EMPTY}{SEP1}true{SEP2}") + 1   # the longer mark, a 1-byte body
                + self.crc_reserve)

    def encode(self, chunk: ArrowChunk, until_offset: int,
               general: Callable[[ArrowChunk], pa.RecordBatch]) -> pa.RecordBatch | None:
        """The records of ``chunk`` in [its fetch offset, ``until_offset``) as ENCODED_SCHEMA rows
        (what ingest.encode.prepare.map_and_encode makes of them), or None: map and encode the whole
        fetch the general way. ``general`` maps and encodes the records handed back (a chunk of
        them): their live rows are put back in offset order, their dead letters follow."""
        if "columns" in chunk.__dict__:
            return None
        chunk.drop_from(until_offset)
        sections = chunk.sections
        rows = sum(s.count for s in sections)
        capacity = sum(len(s.records) for s in sections) + rows * self._record_overhead
        if capacity >= 2**31:
            return None     # one Arrow binary array; a fetch this size is the general path's to split
        fields = np.array([(s.count, s.base_offset, s.first_timestamp, s.max_timestamp, s.log_append_time,
                            len(s.records)) for s in sections], np.int64).reshape(-1, 6)
        records = sections[0].records if len(sections) == 1 else b"".join(s.records for s in sections)
        done = self._run(_kernel.encode_fetch, (records, fields, chunk.fetch_offset, until_offset), rows, capacity,
                         "a fetch goes")
        if done is None:
            return None
        direct, back = done
        if not len(back):
            return direct
        rest = ArrowChunk(chunk.offset, _sections_of(back, sections, records), chunk.fetch_offset)
        return merge_in_offset_order(direct, general(rest))

    def encode_rows(self, rows: pa.RecordBatch,
                    general: Callable[[pa.RecordBatch], pa.RecordBatch]) -> pa.RecordBatch | None:
        """Kafka rows of this partition (Spark's Kafka columns, rising offsets; an optional ``problem``
        column) as ENCODED_SCHEMA rows, what ingest.encode.prepare.map_and_encode makes of them, or None:
        map and encode them the general way. As ``encode``: the rows the kernel does not cover (and
        those with a problem, a null timestamp or null headers) are handed to ``general`` and put back in
        place."""
        n = rows.num_rows
        key, value = _binary_buffers(rows.column("key")), _binary_buffers(rows.column("value"))
        headers = _header_buffers(rows.column("headers"))
        offsets = rows.column("offset")
        if key is None or value is None or headers is None or offsets.null_count:
            return None
        raw_ts = rows.column("timestamp").cast(pa.timestamp("us")).cast(pa.int64())
        to_general = np.asarray(raw_ts.is_null()) | np.asarray(rows.column("headers").is_null())
        if PROBLEM in rows.schema.names:
            to_general = to_general | np.asarray(rows.column(PROBLEM).is_valid())
        kafka_offsets = np.asarray(offsets.cast(pa.int64()), np.int64)
        if n > 1 and not bool(np.all(kafka_offsets[1:] > kafka_offsets[:-1])):
            return None     # merge_in_offset_order puts handed-back rows back by offset
        capacity = key[3] + value[3] + headers[-1] + n * self._record_overhead
        if capacity >= 2**31:
            return None     # one Arrow binary array; the general path splits a batch this size
        ts_ms = np.asarray(pc.divide(raw_ts, 1000).fill_null(0), np.int64)     # as the mapping divides
        columns = (*key[:3], *value[:3], *headers[:-1], kafka_offsets, ts_ms,
                   np.asarray(raw_ts.fill_null(0), np.int64), to_general.astype(np.uint8))
        done = self._run(_kernel.encode_rows, columns, n, capacity, "rows go")
        if done is None:
            return None
        direct, back = done
        if not len(back):
            return direct
        return merge_in_offset_order(direct, general(rows.take(pa.array(back[:, 0]))))

    def _run(self, kernel: Callable[..., Any], inputs: tuple[Any, ...], rows: int, capacity: int,
             what: str) -> tuple[pa.RecordBatch, np.ndarray] | None:
        """``kernel(*inputs, the outputs for ``rows`` records in ``capacity`` bytes, this partition's
        constants)``: (the records it encoded, an entry per record it handed back), or None when it
        refused them all (counted as ``what`` the general way)."""
        out = pooled_bytes(capacity)
        starts, kafka_offsets = np.empty(rows, np.int64), np.empty(rows, np.int64)
        tags_codes, timestamps = np.empty(rows, np.int64), np.empty(rows, np.int64)
        queue_ids = np.empty(rows, np.int32)
        value_kinds = np.empty(rows, np.int8)
        back = np.empty((rows, 4), np.int64)
        done = kernel(
            *inputs, out, starts, queue_ids, tags_codes, kafka_offsets, timestamps, value_kinds, back, self.head,
            self.topic_part, self.coords_prefix, self.uniq_prefix, self.reserved, self.born_header, self.max_body,
            self.max_record, MAX_PROPERTIES_LENGTH, self.queue_id, self.key_hash_queues, self.crc_reserve)
        if isinstance(done, int):
            self._count(FALLBACK_REASONS.get(-done, str(done)), rows, what)
            return None
        pos, row, handed_back = done
        self.direct_records += row
        if self.crc_reserve and row:
            apply_prop_crcs(out, starts[:row], np.diff(starts[:row], append=pos))
        direct = self._batch(out[:pos], starts[:row], queue_ids[:row], tags_codes[:row], kafka_offsets[:row],
                             timestamps[:row], value_kinds[:row])
        back = back[:handed_back]
        for code, count in zip(*np.unique(back[:, 3], return_counts=True)):
            self._count(FALLBACK_REASONS.get(int(code), str(code)), int(count), "records go")
        return direct, back

    def _count(self, reason: str, records: int, what: str) -> None:
        if reason not in self.fallbacks:
            log.info("%s-%d: %s the general way (%s)", self.topic, self.partition, what, reason)
        self.fallbacks[reason] += records

    def _batch(self, data: np.ndarray, starts: np.ndarray, queue_ids: np.ndarray, tags_codes: np.ndarray,
               kafka_offsets: np.ndarray, timestamps: np.ndarray, value_kinds: np.ndarray) -> pa.RecordBatch:
        n = len(starts)
        cols = {
            "record": binary_from(data, np.append(starts, data.size)),
            "topic": pa.repeat(pa.scalar(self.target_topic, pa.string()), n),
            "queue_id": pa.array(queue_ids), "sys_flag": pa.array(np.full(n, self.sys_flag, np.int32)),
            "tags_code": pa.array(tags_codes), "delay_level": pa.array(np.zeros(n, np.int32)),
            "kafka_topic": pa.repeat(pa.scalar(self.topic, pa.string()), n),
            "kafka_partition": pa.array(np.full(n, self.partition, np.int32)),
            "kafka_offset": pa.array(kafka_offsets), "raw_timestamp": pa.array(timestamps),
            VALUE_KIND: pa.array(value_kinds),
        }
        return pa.RecordBatch.from_arrays([cols[f.name] if f.name in cols else pa.nulls(n, f.type)
                                           for f in ENCODED_SCHEMA], schema=ENCODED_SCHEMA)



def _binary_buffers(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
    """(offsets: int32 per value and one, the bytes, validity: a uint8 per value, how many bytes the
    values hold) of a binary or string column (Spark's large variable types too), or None for
    another type or over 2 GiB."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if not (pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t)
            or pa.types.is_large_string(t)):
        return None
    offsets, data = binary_parts(arr)
    if offsets[-1] >= 2**31:
        return None
    valid = np.asarray(arr.is_valid(), dtype=bool).view(np.uint8)
    return offsets.astype(np.int32), data, valid, int(offsets[-1] - offsets[0])


def _header_buffers(arr: pa.Array | pa.ChunkedArray) -> tuple[Any, ...] | None:
    """(list offsets, name offsets, name bytes, usable header: a uint8 per header (the element and its
    name not null), value offsets, value bytes, value validity, how many bytes a record's properties
    take for them at most) of a headers column, or None for a type the kernel does not read."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)) \
            or not pa.types.is_struct(arr.type.value_type) \
            or not {"key", "value"} <= {f.name for f in arr.type.value_type}:
        return None
    elements = arr.values
    name, value = _binary_buffers(elements.field("key")), _binary_buffers(elements.field("value"))
    if name is None or value is None:
        return None
    usable = (np.asarray(elements.is_valid(), dtype=bool) & name[2].view(bool)).view(np.uint8)
    # each header becomes name \x01 value \x02
    return (np.asarray(arr.offsets, np.int32), name[0], name[1], usable, *value[:3],
            name[3] + value[3] + 2 * len(elements))


def _sections_of(back: np.ndarray, sections: list[BatchSection], records: bytes) -> list[BatchSection]:
    """The handed-back records as sections of their own: each batch's handed-back records back to
    back under that batch's fields (a record's offset and time are deltas from them)."""
    out = []
    groups = np.flatnonzero(np.diff(back[:, 0], prepend=-1)) if len(back) else np.zeros(0, np.int64)
    view = memoryview(records)
    for g, end in zip(groups, [*groups[1:], len(back)]):
        sec = sections[int(back[g, 0])]
        part = b"".join(view[int(a):int(b)] for a, b in back[g:end, 1:3])
        out.append(BatchSection(records=part, count=int(end - g), base_offset=sec.base_offset,
                                first_timestamp=sec.first_timestamp, max_timestamp=sec.max_timestamp,
                                log_append_time=sec.log_append_time))
    return out


def merge_in_offset_order(direct: pa.RecordBatch, general: pa.RecordBatch) -> pa.RecordBatch:
    """``direct``'s rows with ``general``'s live rows put in Kafka offset order, then ``general``'s
    dead letters (map_and_encode puts its live rows first, in order)."""
    live_count = general.column("dead_reason").null_count
    live, dead = general.slice(0, live_count), general.slice(live_count)
    at = np.searchsorted(direct.column("kafka_offset").to_numpy(), live.column("kafka_offset").to_numpy())
    pieces, prev = [], 0
    for i, p in enumerate(at.tolist()):
        if p > prev:
            pieces.append(direct.slice(prev, p - prev))
            prev = p
        pieces.append(live.slice(i, 1))
    pieces.append(direct.slice(prev))
    pieces.append(dead)
    return pa.concat_batches([p for p in pieces if p.num_rows] or [direct])
