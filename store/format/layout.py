"""The one walk of a CommitLog message record (FORMAT.md §3): where its fields lie once SYSFLAG has
said how long its hosts are, and where its variable part lies (BODYLENGTH, BODY, TOPICLENGTH, TOPIC,
PROPERTIESLENGTH, PROPERTIES), for one record (``record_spans``) and for many at once
(``record_spans_many``).

Every Python reader of a record takes its positions from here, as RocketMQ's readers take theirs
from MessageDecoder; the C passes take theirs from ``record_spans`` in _layout.h. The walk says
where a record stops adding up (``RecordSpans.fault``) and leaves what that means to its reader: a
check reports it, the decoder refuses the record, the index leaves it out.
tests/store/format/test_record_spans.py holds both forms and the C one to an oracle there.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from store.format.constants import (
    BORNHOST_V6_FLAG,
    FIXED_PART_LENGTH,
    IPV4_HOST_LENGTH,
    IPV6_HOST_EXTRA_LENGTH,
    IPV6_HOST_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    POS_BODYLENGTH_V4,
    POS_BORNHOST,
    POS_SYSFLAG,
    STOREHOSTADDRESS_V6_FLAG,
)

# TOTALSIZE and MAGICCODE: what every walk from record to record reads first
TOTAL_AND_MAGIC = struct.Struct(">iI")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")

# the fields a walk can find not fitting in TOTALSIZE, in the order it reads them
FAULT_HOSTS, FAULT_BODY, FAULT_TOPIC, FAULT_PROPERTIES = "hosts", "body", "topic", "properties"


def message_version(magic_code: int) -> int:
    """1 or 2 for a message's MAGICCODE (V2: a two-byte TOPICLENGTH), 0 for anything else."""
    return 1 if magic_code == MESSAGE_MAGIC_CODE else 2 if magic_code == MESSAGE_MAGIC_CODE_V2 else 0


def host_lengths(sys_flag: int) -> tuple[int, int]:
    """The lengths of BORNHOST and STOREHOST: 8 bytes each, 20 for one SYSFLAG marks IPv6."""
    return (IPV6_HOST_LENGTH if sys_flag & BORNHOST_V6_FLAG else IPV4_HOST_LENGTH,
            IPV6_HOST_LENGTH if sys_flag & STOREHOSTADDRESS_V6_FLAG else IPV4_HOST_LENGTH)


def store_timestamp_pos(sys_flag: int) -> int:
    """Position of STORETIMESTAMP in a record: right after BORNHOST."""
    return POS_BORNHOST + host_lengths(sys_flag)[0]


def record_length(version: int, sys_flag: int, body_length: int, topic_length: int, properties_length: int) -> int:
    """MessageExtEncoder.calMsgLength: the TOTALSIZE these field lengths add up to."""
    born, store = host_lengths(sys_flag)
    return (FIXED_PART_LENGTH + body_length + topic_length + properties_length
            + born + store - 2 * IPV4_HOST_LENGTH + (1 if version == 2 else 0))


@dataclass(frozen=True, slots=True)
class RecordSpans:
    """Where the fields of one message record lie, as positions from the record's start. A length
    past the ``fault`` is -1: the walk did not get that far."""

    total_size: int
    version: int                 # 1 or 2: the width of TOPICLENGTH
    sys_flag: int
    born_host_length: int
    store_host_length: int
    body_length: int = -1
    topic_length: int = -1
    properties_length: int = -1  # as read, signed: RocketMQ reads a negative one as no properties
    fault: str | None = None     # FAULT_*: the first field that does not fit in TOTALSIZE
    detail: str = ""             # what does not fit, for a person

    @property
    def store_timestamp_pos(self) -> int:
        return POS_BORNHOST + self.born_host_length

    @property
    def store_host_pos(self) -> int:
        return self.store_timestamp_pos + 8

    @property
    def reconsume_times_pos(self) -> int:
        return self.store_host_pos + self.store_host_length

    @property
    def prepared_transaction_offset_pos(self) -> int:
        return self.reconsume_times_pos + 4

    @property
    def body_length_pos(self) -> int:
        return self.prepared_transaction_offset_pos + 8

    @property
    def body_pos(self) -> int:
        return self.body_length_pos + 4

    @property
    def topic_length_pos(self) -> int:
        return self.body_pos + self.body_length

    @property
    def topic_pos(self) -> int:
        return self.topic_length_pos + self.version

    @property
    def properties_length_pos(self) -> int:
        return self.topic_pos + self.topic_length

    @property
    def properties_pos(self) -> int:
        return self.properties_length_pos + 2

    @property
    def properties_end(self) -> int:
        return self.properties_pos + max(self.properties_length, 0)

    @property
    def computed_length(self) -> int:
        """What the lengths read add up to (calMsgLength); TOTALSIZE when the record is whole."""
        return record_length(self.version, self.sys_flag, self.body_length, self.topic_length,
                             max(self.properties_length, 0))


def record_spans(buf: memoryview, pos: int, total: int, version: int) -> RecordSpans:
    """Walk the message record at ``pos`` of ``buf`` whose TOTALSIZE ``total`` the caller has read
    and found within ``buf``, its MAGICCODE a message's (``version``, message_version). The walk
    stops at the first field that does not fit in ``total``: its hosts (the fixed fields up to
    BODYLENGTH), its body and the TOPICLENGTH after it, its topic and the PROPERTIESLENGTH after it,
    or a positive PROPERTIESLENGTH."""
    sys_flag = _I32.unpack_from(buf, pos + POS_SYSFLAG)[0]
    born, store = host_lengths(sys_flag)
    head = dict(total_size=total, version=version, sys_flag=sys_flag, born_host_length=born, store_host_length=store)
    body_length_pos = POS_BODYLENGTH_V4 + born + store - 2 * IPV4_HOST_LENGTH
    if body_length_pos + 4 > total:
        return RecordSpans(**head, fault=FAULT_HOSTS,
                           detail=f"TOTALSIZE {total} is too small for the hosts SYSFLAG {sys_flag:#x} says")
    body = _I32.unpack_from(buf, pos + body_length_pos)[0]
    at = body_length_pos + 4 + body          # TOPICLENGTH
    if body < 0 or at + version > total:
        return RecordSpans(**head, body_length=body, fault=FAULT_BODY,
                           detail=f"BODYLENGTH {body} runs past TOTALSIZE {total}")
    if version == 2:
        topic = _I16.unpack_from(buf, pos + at)[0]
    else:
        topic = buf[pos + at] - 256 if buf[pos + at] > 127 else buf[pos + at]     # Java reads a signed byte
    at += version + topic                    # PROPERTIESLENGTH
    if topic < 0 or at + 2 > total:
        return RecordSpans(**head, body_length=body, topic_length=topic, fault=FAULT_TOPIC,
                           detail=f"TOPICLENGTH {topic} runs past TOTALSIZE {total}")
    props = _I16.unpack_from(buf, pos + at)[0]
    if props > 0 and at + 2 + props > total:
        return RecordSpans(**head, body_length=body, topic_length=topic, properties_length=props,
                           fault=FAULT_PROPERTIES, detail=f"PROPERTIESLENGTH {props} runs past TOTALSIZE {total}")
    return RecordSpans(**head, body_length=body, topic_length=topic, properties_length=props)


@dataclass
class HostPositions:
    """The positions in each record (not in a buffer) of the fixed fields that its hosts move, for
    many records' SYSFLAGs."""

    born_host_length: np.ndarray
    store_host_length: np.ndarray
    store_timestamp_pos: np.ndarray
    store_host_pos: np.ndarray
    reconsume_times_pos: np.ndarray
    body_length_pos: np.ndarray


def host_positions(sys_flag: np.ndarray) -> HostPositions:
    """HostPositions of records with these SYSFLAGs (RecordSpans' positions, vectorized)."""
    sys_flag = np.asarray(sys_flag, dtype=np.int64)
    born = IPV4_HOST_LENGTH + IPV6_HOST_EXTRA_LENGTH * ((sys_flag & BORNHOST_V6_FLAG) != 0).astype(np.int64)
    store = IPV4_HOST_LENGTH + IPV6_HOST_EXTRA_LENGTH * ((sys_flag & STOREHOSTADDRESS_V6_FLAG) != 0).astype(np.int64)
    store_timestamp = POS_BORNHOST + born
    reconsume = store_timestamp + 8 + store
    return HostPositions(born, store, store_timestamp, store_timestamp + 8, reconsume, reconsume + 12)


def head_dtype(born_host_length: int = IPV4_HOST_LENGTH, store_host_length: int = IPV4_HOST_LENGTH) -> np.dtype:
    """TOTALSIZE .. BODYLENGTH, the fixed-width part before BODY, for one pair of host lengths (88
    bytes with IPv4 hosts; every record has at least 91)."""
    return np.dtype([("total", ">i4"), ("magic", ">u4"), ("body_crc", ">i4"), ("queue_id", ">i4"), ("flag", ">i4"),
                     ("queue_offset", ">i8"), ("physical_offset", ">i8"), ("sys_flag", ">i4"),
                     ("born_timestamp", ">i8"), ("born_host", f"V{born_host_length}"), ("store_timestamp", ">i8"),
                     ("store_host", f"V{store_host_length}"), ("reconsume_times", ">i4"),
                     ("prepared_transaction_offset", ">i8"), ("body_length", ">i4")])


HEAD_DTYPE = head_dtype()
# TOTALSIZE .. BORNTIMESTAMP, the fields before the first host, for one record at a time
HEAD_TO_BORNHOST = struct.Struct(">iIiiiqqiq")
_TAIL_WINDOW = 32        # bytes read from TOPICLENGTH on: covers PROPERTIESLENGTH of short topics
_DT = {1: np.dtype("i1"), 2: np.dtype(">i2"), 4: np.dtype(">i4"), 8: np.dtype(">i8")}


def gather(arr: np.ndarray, at: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The ``dtype`` value at each byte position ``at`` of a uint8 array: a 1-byte-strided array of
    ``dtype.itemsize``-byte void items, so fancy indexing copies each item in one go instead of
    gathering it byte by byte."""
    width = dtype.itemsize
    items = np.ndarray(shape=(max(len(arr) - width + 1, 0),), dtype=f"V{width}", buffer=arr, strides=(1,))
    return items[at].view(dtype)


def be_ints(arr: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """Signed big-endian integers of ``width`` bytes at byte positions ``at``."""
    if len(at) == 0:
        return np.zeros(0, dtype=np.int64)
    return gather(arr, at, _DT[width]).astype(np.int64)


def topic_lengths(arr: np.ndarray, at: np.ndarray, v2: np.ndarray) -> np.ndarray:
    """TOPICLENGTH at ``at`` as RocketMQ's MessageVersion reads it: a signed byte in V1 records, a
    signed short in V2 ones (``v2``); a negative length marks a corrupt record."""
    return np.where(v2, be_ints(arr, at, 2), be_ints(arr, at, 1)) if v2.any() else be_ints(arr, at, 1)


@dataclass
class SpanColumns:
    """record_spans for many records: positions in the buffer, not in the record. ``ok``: the
    record is a message whose fields fit in its size and add up to it (calMsgLength); the lengths
    of a record that is not ok mean nothing past its first fault."""

    heads: np.ndarray            # HEAD_DTYPE: TOTALSIZE .. BODYLENGTH as if both hosts were IPv4
    ok: np.ndarray
    v2: np.ndarray               # 1 for a V2 record (a two-byte TOPICLENGTH), else 0
    sys_flag: np.ndarray
    hosts_extra: np.ndarray      # what IPv6 hosts add before RECONSUMETIMES: 0, 12 or 24
    body_pos: np.ndarray
    body_len: np.ndarray
    topic_pos: np.ndarray
    topic_len: np.ndarray
    props_pos: np.ndarray
    props_len: np.ndarray        # signed, as read

    @property
    def hosts(self) -> HostPositions:
        return host_positions(self.sys_flag)


def record_spans_many(arr: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> SpanColumns:
    """record_spans for the records at ``starts`` of a uint8 array, each ``sizes`` long, and the
    check that their lengths add up to their sizes. Two gathers per record in the usual case: the
    head up to BODYLENGTH, and a window from TOPICLENGTH that holds PROPERTIESLENGTH for short
    topics."""
    n = len(starts)
    heads = gather(arr, starts, HEAD_DTYPE)
    magic = heads["magic"]
    is_v2 = magic == MESSAGE_MAGIC_CODE_V2
    ok = is_v2 | (magic == MESSAGE_MAGIC_CODE)
    sys_flag = heads["sys_flag"].astype(np.int64)
    hosts = (((sys_flag & BORNHOST_V6_FLAG) != 0).astype(np.int64)
             + ((sys_flag & STOREHOSTADDRESS_V6_FLAG) != 0)) * IPV6_HOST_EXTRA_LENGTH
    body_pos = starts + POS_BODYLENGTH_V4 + hosts
    body_len = heads["body_length"].astype(np.int64)
    rec_end = starts + sizes
    ok &= body_pos + 4 <= rec_end
    moved = np.flatnonzero((hosts != 0) & ok)
    if len(moved):
        body_len[moved] = be_ints(arr, body_pos[moved], 4)
    v2 = is_v2.astype(np.int64)
    ok &= (body_len >= 0) & (body_pos + 5 + body_len + v2 <= rec_end)
    tl_pos = np.where(ok, body_pos + 4 + body_len, starts)
    window_ok = tl_pos + _TAIL_WINDOW <= len(arr)
    tails = gather(arr, np.where(window_ok, tl_pos, 0), np.dtype(f"V{_TAIL_WINDOW}")).view(np.uint8).reshape(n, -1)
    rows = np.arange(n)
    topic_len = np.where(is_v2, (tails[:, 0].astype(np.int8).astype(np.int64) << 8) | tails[:, 1],
                         tails[:, 0].astype(np.int8))
    near_end = np.flatnonzero(~window_ok)          # the window would run past the buffer
    if len(near_end):
        topic_len[near_end] = topic_lengths(arr, tl_pos[near_end], is_v2[near_end])
    ok &= (topic_len >= 0) & (tl_pos + 3 + v2 + topic_len <= rec_end)
    pl_off = np.where(ok, 1 + v2 + topic_len, 0)
    at = np.minimum(pl_off, _TAIL_WINDOW - 2)
    props_len = (tails[rows, at].astype(np.int64) << 8) | tails[rows, at + 1]
    far = np.flatnonzero(~window_ok | (pl_off + 2 > _TAIL_WINDOW))
    if len(far):
        props_len[far] = be_ints(arr, tl_pos[far] + pl_off[far], 2) & 0xFFFF
    props_len = (props_len ^ 0x8000) - 0x8000          # int16
    ok &= (FIXED_PART_LENGTH + body_len + topic_len + np.maximum(props_len, 0) + hosts + v2) == sizes
    topic_pos = tl_pos + 1 + v2
    return SpanColumns(heads, ok, v2, sys_flag, hosts, body_pos + 4, body_len, topic_pos, topic_len,
                       topic_pos + topic_len + 2, props_len)
