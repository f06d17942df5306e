"""The RocketMQ CommitLog store: public API (the sink and the commands use only this)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (CommitPointError, CommittedDataCorruptError, ConsumeQueueError,
                     ConsumeQueueGapError, CorruptRecordError, DiskFullError, FieldLimitError,
                     FlushError, InvalidMessageError, InvalidTopicError, MessageNotFoundError,
                     NotARecordStartError, QueueOffsetMismatchError, SegmentAllocationError,
                     SegmentSizeError, StoreError, StoreLockedError, StoreReadOnlyError)

if TYPE_CHECKING:
    from .batch_codec import EncodedBatch, encode_batch
    from .codec import CodecConfig, DecodedMessage, Message
    from .commit_point import CommitPoint
    from .config import StoreConfig
    from .hosts import HostAddress
    from .message_store import AppendResult, MessageStore
    from .reader import StoreReader

# Imported on first use (PEP 562): a command that only reads segments, such as
# `commitlog verify`, does not pay for pyarrow and the writer's modules at start.
_LAZY = {
    "EncodedBatch": ".batch_codec", "encode_batch": ".batch_codec", "CodecConfig": ".codec",
    "DecodedMessage": ".codec", "Message": ".codec", "CommitPoint": ".commit_point", "StoreConfig": ".config",
    "HostAddress": ".hosts", "AppendResult": ".message_store", "MessageStore": ".message_store",
    "StoreReader": ".reader",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "AppendResult", "CodecConfig", "CommitPoint", "DecodedMessage", "EncodedBatch", "HostAddress",
    "Message", "MessageStore", "StoreConfig", "StoreReader", "encode_batch",
    "CommitPointError", "CommittedDataCorruptError", "ConsumeQueueError", "ConsumeQueueGapError",
    "CorruptRecordError", "DiskFullError", "FieldLimitError", "FlushError", "InvalidMessageError",
    "InvalidTopicError", "MessageNotFoundError", "NotARecordStartError",
    "QueueOffsetMismatchError", "SegmentAllocationError", "SegmentSizeError", "StoreError",
    "StoreLockedError", "StoreReadOnlyError",
]
