"""The geometry index/ was built with (maxHashSlotNum, maxIndexNum), kept beside RocketMQ's own
config files as config/messageIndex.json: an IndexFile's size does not tell its slot and item
counts apart, and index/ itself may hold nothing but IndexFiles. ``complete`` is false once a
writer has appended with the index off: the files then miss messages until `commitlog reindex`.

A store RocketMQ's broker wrote has no such file (its geometry is in the broker's config): then the
files tell it themselves, see ``infer_index_settings``."""

from __future__ import annotations

import json
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from store.errors import IndexFileError
from store.format.constants import (CONFIG_DIR, INDEX_DIR, INDEX_HASH_SLOT_SIZE, INDEX_HEADER_SIZE, INDEX_ITEM_SIZE,
                                    INDEX_SETTINGS_FILE)
from store.index.file import IndexHeader, index_file_names
from store.index.service import IndexConfig
from store.log.segment import write_atomically


@dataclass(frozen=True)
class IndexSettings:
    max_hash_slot_num: int
    max_index_num: int
    complete: bool = True

    def config(self, enabled: bool = True) -> IndexConfig:
        return IndexConfig(enabled, self.max_hash_slot_num, self.max_index_num)


def settings_path(root: Path) -> Path:
    return Path(root) / CONFIG_DIR / INDEX_SETTINGS_FILE


def read_index_settings(root: Path) -> IndexSettings | None:
    """config/messageIndex.json, else what the index files show (None: neither says)."""
    path = settings_path(root)
    try:
        obj = json.loads(path.read_text())
        return IndexSettings(int(obj["maxHashSlotNum"]), int(obj["maxIndexNum"]), bool(obj.get("complete", True)))
    except FileNotFoundError:
        return infer_index_settings(Path(root) / INDEX_DIR)
    except (ValueError, KeyError, TypeError) as e:
        raise IndexFileError(f"{path} is not readable ({e}): remove it and run `commitlog reindex`") from e


def write_index_settings(root: Path, settings: IndexSettings) -> None:
    """Atomically (write, fsync, rename): a crash leaves the old file or the new one."""
    write_atomically(settings_path(root), json.dumps(
        {"maxHashSlotNum": settings.max_hash_slot_num, "maxIndexNum": settings.max_index_num,
         "complete": settings.complete}, indent=1).encode())


def infer_index_settings(directory: Path) -> IndexSettings | None:
    """The geometry of the IndexFiles in ``directory``, from the files alone (None: no file tells).

    A broker starts a new file only when the last one is full, and a full file's item count is
    maxIndexNum, which with the file size gives maxHashSlotNum. A lone file that is not full yet is
    read from where its last item lies: the item that holds the header's endPhyOffset, followed by an
    unwritten one, with the header's beginPhyOffset in item 1."""
    names = index_file_names(directory)
    for name in names:
        with open(directory / name, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size <= INDEX_HEADER_SIZE:
                continue
            header = IndexHeader.unpack(f.read(INDEX_HEADER_SIZE))
            if len(names) > 1:       # the first of several files is full
                slots = _slots_for(size, header.index_count)
                return IndexSettings(slots, header.index_count) if slots else None
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return _from_last_item(mm, size, header)
    return None


def _slots_for(size: int, items: int) -> int | None:
    room = size - INDEX_HEADER_SIZE - INDEX_ITEM_SIZE * items
    return room // INDEX_HASH_SLOT_SIZE if room > 0 and room % INDEX_HASH_SLOT_SIZE == 0 else None


def _from_last_item(mm: mmap.mmap, size: int, h: IndexHeader, tries: int = 10_000) -> IndexSettings | None:
    count = h.index_count
    if count <= 1:
        return None                       # no item: any geometry reads it
    end, begin = struct.pack(">q", h.end_phy_offset), struct.pack(">q", h.begin_phy_offset)
    at = size
    for _ in range(tries):
        at = mm.rfind(end, 0, at)
        if at < 0:
            return None
        items_at = at - 4 - INDEX_ITEM_SIZE * (count - 1)          # phyOffset is 4 bytes into an item
        slots, rest = divmod(items_at - INDEX_HEADER_SIZE, INDEX_HASH_SLOT_SIZE)
        if slots <= 0 or rest:
            continue
        items = (size - items_at) // INDEX_ITEM_SIZE
        if (size - items_at) % INDEX_ITEM_SIZE or items < count:
            continue
        first = items_at + INDEX_ITEM_SIZE + 4
        unwritten = items_at + INDEX_ITEM_SIZE * count
        if mm[first:first + 8] == begin and (items == count or not any(mm[unwritten:unwritten + INDEX_ITEM_SIZE])):
            return IndexSettings(slots, items)
    return None
