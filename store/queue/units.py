"""Consume-queue units on disk (FORMAT.md §12): the 20-byte unit, file names, the delay rule.

Kept apart from consume_queue.py so the reading commands (verify, stat) can use the unit form
without the writer's state.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

import numpy as np

from store.errors import InvalidTopicError
from store.format.constants import (
    CQ_BLANK_UNIT,
    CQ_STORE_UNIT_SIZE,
    DEFAULT_MESSAGE_DELAY_LEVEL,
    FILE_NAME_DIGITS,
)

# commitLogOffset int64, size int32, tagsCode int64, big-endian, packed: exactly 20 bytes.
UNIT_DTYPE = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8")])
assert UNIT_DTYPE.itemsize == CQ_STORE_UNIT_SIZE

UNIT_STRUCT = struct.Struct(">qiq")
BLANK_PHYS, BLANK_SIZE, BLANK_TAGS = CQ_BLANK_UNIT
_FILE_NAME = re.compile(r"^\d{%d}$" % FILE_NAME_DIGITS)
_DELAY_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def file_name(byte_offset: int) -> str:
    """UtilAll.offset2FileName: the start offset, decimal, zero-padded to 20 digits."""
    return str(byte_offset).zfill(FILE_NAME_DIGITS)


def is_file_name(name: str) -> bool:
    return bool(_FILE_NAME.match(name))


def list_unit_files(queue_dir: Path) -> list[int]:
    """Start byte offsets of the unit files of one queue directory, ascending."""
    try:
        names = os.listdir(queue_dir)
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if is_file_name(n))


def units_from_bytes(data: bytes | bytearray | memoryview) -> np.ndarray:
    """The whole units in ``data`` as a structured array (a trailing partial unit is ignored)."""
    n = len(data) // CQ_STORE_UNIT_SIZE
    return np.frombuffer(data, dtype=UNIT_DTYPE, count=n)


def read_units(path: Path, first: int = 0, count: int | None = None) -> np.ndarray:
    """Units ``first .. first+count`` of one file, as stored (zero units included)."""
    with open(path, "rb") as f:
        f.seek(first * CQ_STORE_UNIT_SIZE)
        data = f.read() if count is None else f.read(count * CQ_STORE_UNIT_SIZE)
    return units_from_bytes(data)


def valid_count(units: np.ndarray) -> int:
    """How many leading units are written: ConsumeQueue.recover keeps a unit while
    ``offset >= 0 && size > 0``; zeroed space (a preallocated file's tail) ends the queue."""
    bad = (units["phys"] < 0) | (units["size"] <= 0)
    if not bad.any():
        return len(units)
    return int(np.argmax(bad))


# written_count reads this much first and twice as much each time after: a file of a few units
# costs a page, not its full length (6 MB by default) of zeros.
_FIRST_READ = 4096


def written_count(path: Path) -> int:
    """valid_count of the whole file, read only as far as its first unwritten unit."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size // CQ_STORE_UNIT_SIZE * CQ_STORE_UNIT_SIZE
        done, step = 0, _FIRST_READ // CQ_STORE_UNIT_SIZE * CQ_STORE_UNIT_SIZE
        while done < size:
            data = os.pread(fd, min(step, size - done), done)
            if not data:
                break
            units = units_from_bytes(data)
            n = valid_count(units)
            done += n * CQ_STORE_UNIT_SIZE
            if n < len(units) or len(data) % CQ_STORE_UNIT_SIZE:
                break
            step *= 2
        return done // CQ_STORE_UNIT_SIZE
    finally:
        os.close(fd)


def _unit_at(fd: int, i: int) -> tuple[int, int, int] | None:
    raw = os.pread(fd, CQ_STORE_UNIT_SIZE, i * CQ_STORE_UNIT_SIZE)
    return UNIT_STRUCT.unpack(raw) if len(raw) == CQ_STORE_UNIT_SIZE else None


def prefix_counts(path: Path, below: int = 0) -> tuple[int, int]:
    """(written units, leading units to skip) of one file by binary search: the skipped ones are
    the blank filler and units pointing below ``below`` (the commit log's first offset). A
    reader's view, relying on units written in order into a zeroed file (~60 reads, not the file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        n = os.fstat(fd).st_size // CQ_STORE_UNIT_SIZE
        head = units_from_bytes(os.pread(fd, _FIRST_READ // CQ_STORE_UNIT_SIZE * CQ_STORE_UNIT_SIZE, 0))
        written = valid_count(head)
        if written < len(head):
            # a file of few units (a wide store's usual one) is answered by its first page
            blank = (head["phys"] == BLANK_PHYS) & (head["size"] == BLANK_SIZE) & (head["tags"] == BLANK_TAGS)
            gone_mask = head["phys"] < below
            blanks = int(np.argmin(blank)) if not blank.all() else len(head)
            gone = (int(np.argmin(gone_mask)) if not gone_mask.all() else len(head)) if below > 0 else 0
            return written, min(max(blanks, gone), written)

        def first(pred) -> int:   # first index where pred fails, pred holding on a prefix
            lo, hi = 0, n
            while lo < hi:
                mid = (lo + hi) // 2
                u = _unit_at(fd, mid)
                if u is not None and pred(u):
                    lo = mid + 1
                else:
                    hi = mid
            return lo

        written = first(lambda u: u[0] >= 0 and u[1] > 0)
        blanks = first(lambda u: u == CQ_BLANK_UNIT)
        gone = first(lambda u: u[0] < below) if below > 0 else 0   # records deleted by retention
        return written, min(max(blanks, gone), written)
    finally:
        os.close(fd)


def first_at_or_after(path: Path, phys: int) -> int | None:
    """The smallest commitLogOffset >= ``phys`` among the written units of one file, by binary
    search (units are in commit-log order): a record start, or None if the file has none there."""
    fd = os.open(path, os.O_RDONLY)
    try:
        lo, hi = 0, os.fstat(fd).st_size // CQ_STORE_UNIT_SIZE
        while lo < hi:
            mid = (lo + hi) // 2
            u = _unit_at(fd, mid)
            if u is not None and u[0] >= 0 and u[1] > 0 and u[0] < phys:
                lo = mid + 1
            else:
                hi = mid
        u = _unit_at(fd, lo)
        return u[0] if u is not None and u[0] >= phys and u[1] > 0 and u != CQ_BLANK_UNIT else None
    finally:
        os.close(fd)


def blank_mask(units: np.ndarray) -> np.ndarray:
    """The (0, 2147483647, 0) filler written before a queue's first real unit."""
    return (units["phys"] == BLANK_PHYS) & (units["size"] == BLANK_SIZE) & (units["tags"] == BLANK_TAGS)


def make_units(phys: np.ndarray, sizes: np.ndarray, tags: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    units = np.empty(len(phys), dtype=UNIT_DTYPE) if out is None else out
    units["phys"] = phys
    units["size"] = sizes
    units["tags"] = tags
    return units


def blank_units(n: int) -> np.ndarray:
    units = np.empty(n, dtype=UNIT_DTYPE)
    units["phys"], units["size"], units["tags"] = BLANK_PHYS, BLANK_SIZE, BLANK_TAGS
    return units


def parse_delay_levels(spec: str = DEFAULT_MESSAGE_DELAY_LEVEL) -> np.ndarray:
    """messageDelayLevel ("1s 5s ... 2h") as milliseconds indexed by level (index 0 unused)."""
    table = [0]
    for item in spec.split():
        unit = item[-1]
        if unit not in _DELAY_UNITS_MS or not item[:-1].isdigit():
            raise ValueError(f"messageDelayLevel item {item!r} is not <number><s|m|h|d>")
        table.append(int(item[:-1]) * _DELAY_UNITS_MS[unit])
    return np.asarray(table, dtype=np.int64)


DEFAULT_DELAY_TABLE = parse_delay_levels()


def schedule_tags_codes(delay_levels: np.ndarray, store_timestamps: np.ndarray | int,
                        table: np.ndarray = DEFAULT_DELAY_TABLE) -> np.ndarray:
    """tagsCode of SCHEDULE_TOPIC_XXXX records: the deliver time, STORETIMESTAMP + delay of the
    level, the level capped to the highest one (CommitLog.checkMessageAndReturnSize)."""
    levels = np.minimum(np.asarray(delay_levels, dtype=np.int64), len(table) - 1)
    return np.asarray(store_timestamps, dtype=np.int64) + table[np.maximum(levels, 0)]


MAX_TOPIC_FILE_NAME_BYTES = 255   # NAME_MAX of common file systems


def check_topic_name(topic: str) -> None:
    """Refuse a topic that cannot be one directory below consumequeue/: it could leave the store
    ('..', '/'), is no file name ('', '.', NUL) or is too long for one (over 255 UTF-8 bytes)."""
    if not isinstance(topic, str):
        raise InvalidTopicError(f"topic must be a string, got {type(topic).__name__}")
    if topic in ("", ".", ".."):
        raise InvalidTopicError(f"topic {topic!r} is not a usable directory name; use a real topic name")
    if "/" in topic or "\x00" in topic:
        raise InvalidTopicError(f"topic {topic!r} contains '/' or NUL, which a file name cannot hold")
    try:
        n = len(topic.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise InvalidTopicError(f"topic {topic!r} is not valid Unicode (unpaired surrogate): {e}") from e
    if n > MAX_TOPIC_FILE_NAME_BYTES:
        raise InvalidTopicError(
            f"topic is {n} UTF-8 bytes, over the {MAX_TOPIC_FILE_NAME_BYTES}-byte file name limit: {topic[:40]!r}...")
