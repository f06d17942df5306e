"""The RocketMQ CommitLog store: public API (the sink and the commands use only this)."""

from __future__ import annotations

from .batch_codec import EncodedBatch, encode_batch
from .codec import CodecConfig, DecodedMessage, Message
from .commit_point import CommitPoint
from .config import StoreConfig
from .errors import (CommitPointError, CommittedDataCorruptError, ConsumeQueueError,
                     ConsumeQueueGapError, CorruptRecordError, DiskFullError, FieldLimitError,
                     FlushError, InvalidMessageError, InvalidTopicError, MessageNotFoundError,
                     NotARecordStartError, QueueOffsetMismatchError, SegmentAllocationError,
                     SegmentSizeError, StoreError, StoreLockedError, StoreReadOnlyError)
from .hosts import HostAddress
from .message_store import AppendResult, MessageStore
from .reader import StoreReader

__all__ = [
    "AppendResult", "CodecConfig", "CommitPoint", "DecodedMessage", "EncodedBatch", "HostAddress",
    "Message", "MessageStore", "StoreConfig", "StoreReader", "encode_batch",
    "CommitPointError", "CommittedDataCorruptError", "ConsumeQueueError", "ConsumeQueueGapError",
    "CorruptRecordError", "DiskFullError", "FieldLimitError", "FlushError", "InvalidMessageError",
    "InvalidTopicError", "MessageNotFoundError", "NotARecordStartError",
    "QueueOffsetMismatchError", "SegmentAllocationError", "SegmentSizeError", "StoreError",
    "StoreLockedError", "StoreReadOnlyError",
]
