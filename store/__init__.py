"""The RocketMQ store engine, usable with no Spark: the message store (log/, queue/, index/), the
record format (format/), many records read at once (scan/), retention, reading, and the store commands
(tools/). Imports nothing from ingest or sink; this face is the public API that sink and ingest use
(ingest also uses store.format, and store.scan for the read-back).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from store.errors import (
    CommitPointError,
    CommittedDataCorruptError,
    ConsumeQueueError,
    ConsumeQueueGapError,
    CorruptRecordError,
    DeadLetterReason,
    DiskFullError,
    FieldLimitError,
    FlushError,
    ForeignTailError,
    InvalidMessageError,
    InvalidTopicError,
    MessageNotFoundError,
    NotARecordStartError,
    QueueOffsetMismatchError,
    SegmentAllocationError,
    SegmentSizeError,
    StoreError,
    StoreLockedError,
    StoreIOError,
    StoreReadOnlyError,
    UnreadablePageError,
)

if TYPE_CHECKING:
    from store.config import FOREIGN_TAIL_POLICIES, StoreConfig
    from store.format.batch_codec import INDEX_KEYS_COLUMN, EncodedBatch, encode_batch
    from store.format.codec import CodecConfig, DecodedMessage, Message
    from store.format.hosts import HostAddress
    from store.log.commit_point import CommitPoint, read_commit_point
    from store.failed_call import describe_failure
    from store.message_store import AppendResult, MessageStore
    from store.read.reader import StoreReader
    from store.index.service import IndexConfig
    from store.compaction.files import CompactionConfig
    from store.index.shipped import batch_index_keys
    from store.read.view import segment_size_on_disk
    from store.retention import RetentionConfig
    from store.scan.encoded_check import check_encoded
    from store.usage import OpenReport, StoreUsage

# Imported on first use (PEP 562): a command that only reads segments, such as
# `commitlog verify`, does not pay for pyarrow and the writer's modules at start.
_LAZY = {
    "EncodedBatch": "store.format.batch_codec", "encode_batch": "store.format.batch_codec",
    "INDEX_KEYS_COLUMN": "store.format.batch_codec",
    "CodecConfig": "store.format.codec", "DecodedMessage": "store.format.codec", "Message": "store.format.codec",
    "HostAddress": "store.format.hosts", "CommitPoint": "store.log.commit_point",
    "read_commit_point": "store.log.commit_point", "StoreConfig": "store.config",
    "FOREIGN_TAIL_POLICIES": "store.config",
    "RetentionConfig": "store.retention", "AppendResult": "store.message_store",
    "MessageStore": "store.message_store", "StoreReader": "store.read.reader", "IndexConfig": "store.index.service",
    "segment_size_on_disk": "store.read.view", "check_encoded": "store.scan.encoded_check",
    "OpenReport": "store.usage", "StoreUsage": "store.usage", "batch_index_keys": "store.index.shipped",
    "describe_failure": "store.failed_call", "CompactionConfig": "store.compaction.files",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "describe_failure",
    "AppendResult", "FOREIGN_TAIL_POLICIES", "CodecConfig", "INDEX_KEYS_COLUMN", "CommitPoint", "check_encoded", "DecodedMessage", "EncodedBatch", "HostAddress",
    "IndexConfig", "CompactionConfig", "Message", "batch_index_keys", "segment_size_on_disk", "MessageStore", "OpenReport", "StoreUsage", "RetentionConfig", "StoreConfig", "StoreReader", "encode_batch", "read_commit_point",
    "CommitPointError", "CommittedDataCorruptError", "ConsumeQueueError", "ConsumeQueueGapError",
    "CorruptRecordError", "DeadLetterReason", "DiskFullError", "FieldLimitError", "FlushError", "ForeignTailError",
    "InvalidMessageError",
    "InvalidTopicError", "MessageNotFoundError", "NotARecordStartError",
    "QueueOffsetMismatchError", "SegmentAllocationError", "SegmentSizeError", "StoreError",
    "StoreLockedError", "StoreIOError", "StoreReadOnlyError", "UnreadablePageError",
]
