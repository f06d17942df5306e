"""The store's exceptions. Each message says what was wrong and what the user can do."""

from __future__ import annotations

from enum import StrEnum


class StoreError(Exception):
    """Base class of every error the store raises."""


class DeadLetterReason(StrEnum):
    """Why a record became a dead letter, as a code: set where the record is refused, carried beside
    the reason text (which names sizes, fields and lines) to the dead-letter file and the metrics'
    ``reason`` label, so that the label has a few values, not one per record."""

    BODY_TOO_LARGE = "body_too_large"
    PROPERTIES_TOO_LARGE = "properties_too_large"
    RECORD_TOO_LARGE = "record_too_large"
    TOPIC_INVALID = "topic_invalid"
    ENVELOPE_INVALID = "envelope_invalid"
    HEADER_INVALID = "header_invalid"
    FILE_ROW_INVALID = "file_row_invalid"      # a replayed export's row that is not a Kafka record
    OTHER = "other"


# FieldLimitError.field -> its dead-letter reason ("record" is the store's own check of a whole
# record, "message" the codec's)
_FIELD_REASONS = {"body": DeadLetterReason.BODY_TOO_LARGE, "properties": DeadLetterReason.PROPERTIES_TOO_LARGE,
                  "topic": DeadLetterReason.TOPIC_INVALID, "message": DeadLetterReason.RECORD_TOO_LARGE,
                  "record": DeadLetterReason.RECORD_TOO_LARGE}


class FieldLimitError(StoreError, ValueError):
    """A message field is over its format limit; nothing was written."""

    def __init__(self, field: str, size: int, limit: int, detail: str = "") -> None:
        self.field, self.size, self.limit = field, size, limit
        self.reason = _FIELD_REASONS.get(field, DeadLetterReason.OTHER)
        msg = f"{field} is {size} bytes, over the limit of {limit}"
        super().__init__(f"{msg}: {detail}" if detail else msg)


class InvalidTopicError(StoreError, ValueError):
    """A topic name that cannot be a directory of the store (empty, '..', '/', NUL)."""


class CorruptRecordError(StoreError):
    """A record that fails validation (magic, CRC, length, physical offset)."""

    def __init__(self, offset: int, kind: str, detail: str, segment: str | None = None) -> None:
        self.offset, self.kind, self.detail, self.segment = offset, kind, detail, segment
        where = f" in segment {segment}" if segment else ""
        super().__init__(f"{kind} error at offset {offset}{where}: {detail}")


class CommittedDataCorruptError(CorruptRecordError):
    """Corruption below the commit point: committed data is damaged. Refuse to open unless asked
    to truncate there (``truncate_on_corruption=True``), which loses everything after it."""


class UnreadablePageError(CorruptRecordError):
    """A page of a mapped segment cannot be read: the file was truncated under the reader, or the
    disk answered EIO when the page was faulted in (SIGBUS, caught: the process goes on)."""

    def __init__(self, offset: int, segment: str, file_size: int | None = None) -> None:
        why = (f"the file is {file_size} bytes now (truncated under the reader)" if file_size is not None
               else "an I/O error reading the page (the disk's or the file system's)")
        super().__init__(offset, "unreadable", f"the bytes at this offset cannot be read: {why}", segment)


class ForeignTailError(StoreError):
    """Past the commit point lie records another writer (a RocketMQ broker) appended, and the open
    cannot keep them as asked (an unfinished batch of ours precedes them, or adopting was refused);
    nothing was changed. The message names the bytes, segments and topics, and the option."""


class SegmentSizeError(StoreError):
    """A segment file whose size is not the store's segment size."""


class StoreLockedError(StoreError):
    """Another writer holds the store's lock file."""

    def __init__(self, path: str, pid: int | None, holder: str | None = None) -> None:
        self.path, self.pid = path, pid
        holder = holder or (f"process {pid}" if pid else "another process")
        super().__init__(f"store {path} is locked by {holder}; one writer per store")


class StoreReadOnlyError(StoreError):
    """The store refuses writes (after a failed flush, or disk too full) until reopened."""


class FlushError(StoreError):
    """Flushing to disk failed (EIO, ENOSPC); the store now refuses writes until reopened."""


class DiskFullError(StoreReadOnlyError):
    """Disk usage is past the hard limit; writes are refused until space is back."""


class NotARecordStartError(StoreError, ValueError):
    """A physical offset that is not the start of a message record."""


class ConsumeQueueError(StoreError):
    """A consume-queue file that cannot be used as it is (wrong size, units out of order); the
    message names the file. Rebuild it from the commit log: delete the queue's directory and
    reopen the store, which redispatches the missing units."""


class ConsumeQueueGapError(ConsumeQueueError):
    """Units for a queue arrived with a queue offset past the queue's next one (a hole)."""


class InvalidMessageError(StoreError, ValueError):
    """A message whose fields contradict each other or do not fit their type (e.g. an int32 field
    out of range, a SYSFLAG IPv6 bit with an IPv4 host); nothing was written."""


class QueueOffsetMismatchError(StoreError, ValueError):
    """A batch carries queue offsets that do not continue its queue (engine); nothing was written."""

    def __init__(self, topic: str, queue_id: int, expected: int, got: int, row: int) -> None:
        self.topic, self.queue_id, self.expected, self.got, self.row = topic, queue_id, expected, got, row
        super().__init__(
            f"row {row}: queue offset {got} for {topic}/{queue_id} does not continue the queue, "
            f"whose next offset is {expected}; batch refused, nothing written (replaying an "
            f"already stored batch, or a gap?)")


class FileSpaceError(StoreError, OSError):
    """A store file could not get its disk blocks when it was created (a full disk, a quota, a file
    size limit): an OSError with the errno, whose message names the file and its size."""

    def __str__(self) -> str:
        return str(self.strerror)


class SegmentAllocationError(StoreError):
    """A new commit-log segment could not be created (disk full, file size limit); nothing of
    the batch was written (engine)."""


class CommitPointError(StoreError, ValueError):
    """commitpoint.json is unreadable; it is only ever replaced atomically, so this is damage
    from outside the store (engine)."""


class MessageNotFoundError(StoreError, LookupError):
    """No committed message at the given offset, msgId or queue position (commands)."""


class IndexFileError(StoreError):
    """index/ cannot be used as it is (files of another geometry, a damaged file); ``commitlog
    reindex`` rebuilds it from the commit log."""


class StoreIOError(StoreError, OSError):
    """A system call on a store file failed (EIO, ENOSPC, EDQUOT, EROFS) where no more particular
    error says so: an OSError with the errno, whose message names the step, the system call, the file
    (when it can be told) and the function that made the call (``call``: store.failed_call). The store refuses writes and skips the syncs of a
    clean close: the next open recovers from the disk as it is."""

    def __init__(self, cause: OSError, step: str, root: object) -> None:
        from store.failed_call import failed_call

        self.call = failed_call(cause)
        super().__init__(cause.errno, f"{step} of store {root} failed: {self.call.describe()}: {cause.strerror}; "
                                      f"the store refuses writes until reopened (it recovers from the last "
                                      f"commit point)")

    def __str__(self) -> str:
        return str(self.strerror)
